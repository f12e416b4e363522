"""JSON that ``json.loads`` refuses without a ``JSONDecodeError``: an integer over the
4,300 digits Python converts (a plain ``ValueError``) and nesting deeper than the
recursion limit (``RecursionError``). Every reader routes them through
``llm/json_text.py`` and says why, as it does for invalid text; before, the agentic
navigator, CHIEF's loop finder and knowledge base, the Anthropic request builder, the
scripted-replies file and ``--set`` crashed with a traceback."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main as cli
from faultfinder.errors import ConfigError
from faultfinder.judging.method import run_method
from faultfinder.llm import LLM, ChatRequest, ScriptedBackend, make_backend
from faultfinder.llm.anthropic_messages import AnthropicBackend, messages_body
from faultfinder.llm.json_text import JSONTextError, loads
from faultfinder.methods.agentic.actions import parse_action
from faultfinder.methods.chief.cache import StageCache
from faultfinder.methods.chief.knowledge import load_knowledge_base
from faultfinder.methods.chief.loops import message_tokens
from faultfinder.registry import create_method
from faultfinder.testing import FakeOpenAIServer
from faultfinder.traces.io import read_json, trace_from_dict

BIG = "1" * 5000
DEEP = "[" * 100_000 + "]" * 100_000
ZENTAR = Path(__file__).parent / "fixtures" / "agentic" / "zentar_trace.json"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (f'{{"step": {BIG}}}', "an integer longer than 4,300 digits"),
        (DEEP, "nested too deeply"),
        ('{"step": 1,', "not valid JSON: Expecting"),
    ],
)
def test_every_failure_of_json_loads_is_one_error_saying_why(text: str, why: str) -> None:
    with pytest.raises(JSONTextError, match=why):
        loads(text)


def test_a_huge_integer_in_a_text_action_is_unreadable_with_its_reason() -> None:
    with pytest.raises(ValueError, match="integer longer than 4,300 digits"):
        parse_action(f'ACTION: submit {{"agent": "WebSurfer", "step": {BIG}}}', ["submit"])
    with pytest.raises(ValueError, match="nested too deeply"):
        parse_action(f'ACTION: submit {{"agent": "WebSurfer", "x": {DEEP}}}', ["submit"])


@pytest.mark.usefixtures("loopback_requests")
@pytest.mark.parametrize("arguments", [f'{{"step": {BIG}}}', f'{{"step": {DEEP}}}'])
def test_navigator_refuses_unreadable_tool_arguments_and_goes_on(arguments: str) -> None:
    # The OpenAI SDK against the loopback fake: the arguments string arrives as the model
    # wrote it, and the navigator answers the call with an error instead of crashing.
    submit = {"name": "submit", "arguments": {"agent": "WebSurfer", "step": 2, "reason": "r"}}
    replies: list[Any] = [
        {"text": "", "tool_calls": [{"name": "read_step_output", "arguments": arguments}]},
        {"text": "", "tool_calls": [submit]},
    ]
    trace = trace_from_dict(read_json(ZENTAR), ZENTAR)
    with FakeOpenAIServer(reply=lambda body: replies.pop(0)) as server:
        backend = make_backend("openai:gpt-4o", base_url=server.base_url, api_key="sk-test")
        result = asyncio.run(run_method(create_method("agentic"), trace, LLM(backend)))
    assert (result.status, result.agent, result.step) == ("ok", "WebSurfer", 2)
    refused = next(e for e in result.details["transcript"] if e["type"] == "tool")
    assert not refused["ok"] and "the arguments are unreadable" in refused["result"]


@pytest.mark.usefixtures("loopback_requests")
def test_anthropic_request_keeps_unreadable_tool_arguments_as_text() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Find x."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "function": {"name": "lookup", "arguments": f'{{"q": {BIG}}}'}},
                {"id": "c2", "function": {"name": "lookup", "arguments": DEEP}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "x=1"},
        {"role": "tool", "tool_call_id": "c2", "content": "x=2"},
    ]
    request = ChatRequest(messages=messages, max_tokens=20)
    inputs = [
        b["input"]
        for b in messages_body(request, "claude-test")["messages"][1]["content"]
        if b["type"] == "tool_use"
    ]
    assert inputs == [{"arguments": f'{{"q": {BIG}}}'}, {"arguments": DEEP}]
    with FakeOpenAIServer("Done.") as server:
        backend = AnthropicBackend("claude-test", base_url=server.base_url, api_key="sk-ant-k")
        assert asyncio.run(backend.complete(request)).text == "Done."


def test_chief_reads_a_step_holding_unreadable_json_as_text() -> None:
    assert "status" in message_tokens(f'Result: {{"status": "ok", "id": {BIG}}}')
    assert "status" in message_tokens('status {"a": ' + DEEP + "}")


def test_chief_knowledge_base_line_with_a_huge_integer_is_a_config_error(
    tmp_path: Path,
) -> None:
    kb = tmp_path / "kb.jsonl"
    kb.write_text(
        json.dumps({"task": "t", "steps": ["a"]}) + f'\n{{"task": "t", "n": {BIG}}}\n', "utf-8"
    )
    with pytest.raises(ConfigError, match=r"kb\.jsonl:2: invalid JSON: .*4,300 digits"):
        load_knowledge_base(str(kb))


def test_a_damaged_chief_stage_cache_entry_is_a_miss(tmp_path: Path) -> None:
    cache = StageCache(tmp_path)
    cache.put("graph", "k" * 64, {"n": 1})
    (entry,) = tmp_path.iterdir()
    entry.write_text(f'{{"key": "{"k" * 64}", "payload": {{"n": {BIG}}}}}', "utf-8")
    assert cache.get("graph", "k" * 64) is None


def test_scripted_replies_file_with_a_huge_integer_is_a_config_error(tmp_path: Path) -> None:
    replies = tmp_path / "replies.json"
    replies.write_text(f'["ok", {BIG}]', "utf-8")
    with pytest.raises(ConfigError, match=r"invalid JSON for scripted replies: .*4,300 digits"):
        ScriptedBackend.from_file(replies)


def test_set_value_too_long_for_json_is_text_the_option_refuses() -> None:
    demo = Path(__file__).parent.parent / "src" / "faultfinder" / "data" / "demo_trace.json"
    outcome = CliRunner().invoke(
        cli,
        ["attribute", str(demo), "--method", "random", "--cache", "none", "--set", f"seed={BIG}"],
    )
    # Bad configuration (docs/exit-codes.md): 1 with one line naming the option; before,
    # the JSON reader's ValueError escaped as a traceback.
    assert isinstance(outcome.exception, SystemExit) and outcome.exit_code == 1
    assert "Error: Method 'random': option 'seed':" in outcome.output
