"""JSON from outside that ``json.loads`` refuses without a ``JSONDecodeError`` (an integer
over 4,300 digits, nesting past the recursion limit, bytes in no JSON encoding), in the
readers that caught only ``JSONDecodeError``: a program's request body at the recording
proxy and at serve-local, an edit file, a recording's tool-call arguments, a weights
file, DoVer rows, an upstream's reply. Each now says why through ``llm/json_text.py``;
before, each was a traceback, or a 500 that the program's SDK retried."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.demo_team import Team, TeamConfig
from faultfinder.dover.edit_repeats import edit_changes_step
from faultfinder.errors import ConfigError
from faultfinder.llm import LLM, FunctionBackend
from faultfinder.redact import Redactor
from faultfinder.replay.apis.base import SSEEvent
from faultfinder.replay.apis.messages import MessagesAdapter
from faultfinder.replay.apis.messages_stream import MessageBuilder
from faultfinder.replay.edits import ToolCallChange, changed_tool_calls, read_edit_file
from faultfinder.replay.local_server import LocalModelServer
from faultfinder.replay.proxy import ProxyConfig, RecordingProxy
from faultfinder.replay.proxy_upstream import upstream_error_text
from faultfinder.replay.recorder import RunStore
from faultfinder.replay.run_scrub import scrub_steps
from faultfinder.shortlist.weights import load_weights
from faultfinder.testing import FakeOpenAIServer
from faultfinder.traces.schema import Step, ToolCall

BIG = "1" * 5000
DEEP = "[" * 100_000 + "]" * 100_000
BODIES = {
    "huge integer": (f'{{"model": "m", "n": {BIG}}}'.encode(), "integer longer than 4,300"),
    "deep nesting": (DEEP.encode(), "nested too deeply"),
    "not text": (b'{"model": "\xff"}', "byte 11 is not UTF-8"),
}


async def _post_all(url: str) -> dict[str, httpx.Response]:
    async with httpx.AsyncClient(timeout=30) as client:
        return {
            name: await client.post(url, content=body, headers={"content-type": "application/json"})
            for name, (body, _) in BODIES.items()
        }


def test_the_recording_proxy_answers_an_unreadable_body_with_a_400_saying_why(
    tmp_path: Path,
) -> None:
    async def scenario() -> dict[str, httpx.Response]:
        with FakeOpenAIServer("hi") as upstream:
            config = ProxyConfig(upstream=upstream.base_url)
            async with RecordingProxy(config, RunStore(tmp_path / "run")) as proxy:
                return await _post_all(proxy.base_url + "/chat/completions")

    # Before: 500 "internal error: ValueError ...", which an SDK retries as a server fault.
    for name, response in asyncio.run(scenario()).items():
        assert response.status_code == 400, (name, response.text)
        message = response.json()["error"]["message"]
        assert "request body is unreadable" in message and BODIES[name][1] in message


def test_serve_local_answers_an_unreadable_body_with_a_400_saying_why() -> None:
    async def scenario() -> dict[str, httpx.Response]:
        async with LocalModelServer(LLM(FunctionBackend(lambda r: "ok"))) as server:
            return await _post_all(server.base_url + "/chat/completions")

    for name, response in asyncio.run(scenario()).items():
        assert response.status_code == 400, (name, response.text)
        assert BODIES[name][1] in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("text", "why"), [(f'{{"kind": "message", "text": {BIG}}}', "4,300"), (DEEP, "too deeply")]
)
def test_an_edit_file_holding_unreadable_json_is_a_config_error(
    tmp_path: Path, text: str, why: str
) -> None:
    edit = tmp_path / "edit.json"
    edit.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"edit\.json: not an edit: .*{why}"):
        read_edit_file(edit)


def test_set_arguments_on_unreadable_recorded_arguments_is_refused_with_the_fix() -> None:
    recorded = [{"id": "c", "function": {"name": "f", "arguments": f'{{"a": {BIG}}}'}}]
    with pytest.raises(ConfigError, match="give the complete 'arguments' instead"):
        changed_tool_calls(recorded, [ToolCallChange(set_arguments={"a": 1})])


def test_a_reply_edit_against_unreadable_recorded_arguments_compares_them_as_text() -> None:
    arguments = f'{{"a": {BIG}}}'
    step = Step(
        index=0, agent="A", output="", tool_calls=[ToolCall(id="c", name="f", arguments=arguments)]
    )
    same = {"kind": "reply", "content": "", "tool_calls": [{"name": "f", "arguments": arguments}]}
    other = {"kind": "reply", "content": "", "tool_calls": [{"name": "f", "arguments": "{}"}]}
    assert not edit_changes_step(step, same) and edit_changes_step(step, other)


def test_a_weights_file_holding_a_huge_integer_is_exit_1_naming_the_file(tmp_path: Path) -> None:
    weights = tmp_path / "w.weights.json"
    weights.write_text(f'{{"format": {BIG}}}', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"w\.weights\.json: not a shortlist weights file: "):
        load_weights(weights)
    trace = Path(__file__).parent / "fixtures" / "core" / "tiny_trace.json"
    result = CliRunner().invoke(
        main,
        ["attribute", str(trace), "--method", "shortlist", "--no-save", "--shortlist-weights",
         str(weights)],
    )  # fmt: skip
    assert result.exit_code == 1 and "4,300 digits" in result.output, result.output


def test_debug_report_names_the_row_holding_a_huge_integer(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(f'{{"kind": "dover", "n": {BIG}}}\n', encoding="utf-8")
    result = CliRunner().invoke(main, ["debug-report", str(rows)])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert f"{rows}:1: not a DoVer row: it holds an integer longer than" in result.output


def test_upstream_and_recorded_text_that_is_not_readable_json_is_kept_as_text() -> None:
    assert upstream_error_text(BIG.encode()) == "upstream error: " + BIG[:300]
    assert SSEEvent.parse(b"data: " + BIG.encode()).data == BIG
    line = json.dumps({"a": "sk-secret-value"})
    redactor = Redactor(["sk-secret-value"])
    assert scrub_steps(DEEP + "\n" + line, redactor).split("\n")[0] == DEEP


def test_the_demo_team_treats_unreadable_tool_arguments_as_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def reply(body: dict[str, Any]) -> Any:
        system = str(body["messages"][0]["content"])
        last = body["messages"][-1]
        if "tools" not in body:
            done = "Calculator (asked" in str(last["content"])  # the ledger has its answer
            return "FINAL: 7" if done else "NEXT: Calculator | 3+4"
        if last["role"] == "tool":
            return f"The tool said: {last['content']}"
        assert "calculat" in system.lower()
        return {"tool_calls": [{"name": "calculate", "arguments": f'{{"expression": {BIG}}}'}]}

    with FakeOpenAIServer(reply=reply) as upstream:
        monkeypatch.setenv("OPENAI_BASE_URL", upstream.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "unused")
        outcome = Team(TeamConfig(verbose=False, max_replans=0)).run("What is 3+4?")
    # Before: json.loads's ValueError stopped the team ("[team] stopped: ValueError").
    assert outcome.answer == "7" and "Calculator" in outcome.ledger[0]


def test_messages_replies_keep_unreadable_tool_input_instead_of_crashing() -> None:
    builder = MessageBuilder()
    builder.add_data({"type": "message_start", "message": {"role": "assistant"}})
    builder.add_data({"type": "content_block_start", "index": 0, "content_block": {}})
    delta = {"type": "input_json_delta", "partial_json": f'{{"a": {BIG}}}'}
    builder.add_data({"type": "content_block_delta", "index": 0, "delta": delta})
    assert builder.reply()["content"][0]["input"] == {}
    call = {"id": "t", "function": {"name": "f", "arguments": DEEP}}
    edited = MessagesAdapter().with_reply({}, {"content": "", "tool_calls": [call]})
    assert edited["content"][-1]["input"] == {"arguments": DEEP}
