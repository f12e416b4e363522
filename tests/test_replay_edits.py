"""Edits of every kind of step (message text, a tool call's name and arguments, a tool
result, the orchestrator's plan as a tool call), on a team whose orchestrator acts only
through tool calls (tests/fixtures/replay/tool_team.py, plain openai SDK, unmodified)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main as cli
from faultfinder.errors import ConfigError
from faultfinder.replay.edits import Edit, ToolCallChange, parse_edit_file, read_edit_file
from faultfinder.replay.httpserver import ServerThread
from faultfinder.replay.proxy import ProxyConfig, RecordingProxy
from faultfinder.replay.recorder import RunMeta, RunStore, build_trace, load_calls
from faultfinder.replay.replayer import ReplayOptions, ReplayPlan
from faultfinder.replay.report import ReplayReport
from faultfinder.replay.session import SessionOptions, record_run
from faultfinder.testing import FakeOpenAIServer

TEAM = Path(__file__).parent / "fixtures" / "replay" / "tool_team.py"
TASK = "What was the population of Avalon in 2020?"
RIGHT = "Look up the population of Avalon in 2020"


def first_number(text: str) -> str:
    found = re.findall(r"\d[\d,]*", text)
    return found[0] if found else "unknown"


def scripted(body: dict[str, Any]) -> Any:
    """The Orchestrator delegates the wrong year (2019) and reports the first number of
    the Researcher's report; the Researcher looks up what it is told and repeats it."""
    messages = body["messages"]
    system = str(messages[0]["content"])
    last = messages[-1]
    # Call ids are unique, as the API's are.
    call_id = f"call_{system.split()[3].strip('.')}_{len(messages)}"
    if "Orchestrator" in system:
        if last["role"] == "tool":
            answer = first_number(str(last["content"]))
            arguments = json.dumps({"answer": answer})
            return {"tool_calls": [{"id": call_id, "name": "finish", "arguments": arguments}]}
        instruction = {
            "worker": "Researcher",
            "instruction": "Look up the population of Avalon in 2019",
        }
        return {
            "tool_calls": [
                {"id": call_id, "name": "delegate", "arguments": json.dumps(instruction)}
            ]
        }
    if last["role"] == "tool":
        return f"Found: {last['content']}"
    query = str(last["content"]).removeprefix("Look up the ")
    return {
        "tool_calls": [{"id": call_id, "name": "lookup", "arguments": json.dumps({"query": query})}]
    }


@pytest.fixture(scope="module")
def team() -> Any:
    spec = importlib.util.spec_from_file_location("tool_team_fixture", TEAM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(reply=scripted) as server:
        yield server


def run(team: Any, upstream: str, run_dir: Path, plan: ReplayPlan | None, monkeypatch: Any) -> str:
    store = RunStore(run_dir)

    async def factory() -> RecordingProxy:
        return await RecordingProxy(ProxyConfig(upstream=upstream), store, plan).start()

    with ServerThread(factory) as proxy:
        monkeypatch.setenv("OPENAI_BASE_URL", proxy.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "unused-key")
        return str(team.main(TASK))


@pytest.fixture(scope="module")
def recording(
    team: Any, upstream: FakeOpenAIServer, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    run_dir = tmp_path_factory.mktemp("tool-team") / "run"
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert run(team, upstream.base_url, run_dir, None, monkeypatch) == "140,210"
    trace = build_trace(run_dir, RunMeta(run_id="run"))
    assert [(s.agent, [c.name for c in s.tool_calls]) for s in trace.steps] == [
        ("Orchestrator", ["delegate"]),
        ("Researcher", ["lookup"]),
        ("Researcher", []),
        ("Orchestrator", ["finish"]),
    ]
    return run_dir


Replay = Callable[[int | None, Edit | None], tuple[str, ReplayReport, list[str]]]
"""Replays the recording (from a step, with an edit) into ``tmp_path/branch``: the team's
answer, the replay's report and each replayed step's origin."""


@pytest.fixture
def replay(
    team: Any,
    upstream: FakeOpenAIServer,
    recording: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Replay:
    def replay_at(at: int | None, edit: Edit | None) -> tuple[str, ReplayReport, list[str]]:
        plan = ReplayPlan(load_calls(recording), ReplayOptions(at=at, edit=edit))
        answer = run(team, upstream.base_url, tmp_path / "branch", plan, monkeypatch)
        origins = [s.metadata["origin"] for s in build_trace(tmp_path / "branch").steps]
        return answer, plan.finish(), origins

    return replay_at


def test_no_edit_replay_is_faithful(upstream: FakeOpenAIServer, replay: Replay) -> None:
    before = len(upstream.chat_requests)
    answer, report, origins = replay(None, None)
    assert answer == "140,210" and report.faithful and report.reproduced == 4
    assert origins == ["cached"] * 4 and len(upstream.chat_requests) == before


def test_the_orchestrators_plan_as_a_tool_call_is_edited(replay: Replay, tmp_path: Path) -> None:
    edit = Edit(tool_call_changes=[ToolCallChange(set_arguments={"instruction": RIGHT})])
    answer, report, origins = replay(0, edit)
    assert answer == "144,630" and report.edit_applied
    assert origins == ["edited", "live", "live", "live"]
    served = build_trace(tmp_path / "branch").steps[0].tool_calls[0]
    assert served.name == "delegate"
    assert json.loads(str(served.arguments)) == {"worker": "Researcher", "instruction": RIGHT}


def test_a_tool_calls_name_and_arguments_are_edited(replay: Replay) -> None:
    change = ToolCallChange(name="finish", arguments={"answer": "144,630"})
    answer, _report, origins = replay(0, Edit(tool_call_changes=[change]))
    assert answer == "144,630" and origins == ["edited"]


def test_a_tool_result_the_program_sends_back_is_edited(replay: Replay, tmp_path: Path) -> None:
    edit = parse_edit_file(
        {"kind": "tool_result", "content": "Avalon had 144,630 inhabitants in 2020."}
    )
    answer, report, origins = replay(1, Edit.from_file(edit))
    assert answer == "144,630" and report.edit_applied
    # Step 1 (the lookup call) is the recorded one; the request carrying its result is edited.
    assert origins == ["cached", "cached", "edited-input", "live"]
    sent = build_trace(tmp_path / "branch").steps[2].input_messages
    assert sent is not None and sent[-1]["content"] == "Avalon had 144,630 inhabitants in 2020."


def test_an_orchestrators_tool_result_is_edited_in_later_requests(replay: Replay) -> None:
    # The delegate call of step 0 returns the Researcher's report; edit what the
    # Orchestrator sees, whatever the Researcher says.
    edit = Edit.from_file(parse_edit_file({"kind": "tool_result", "content": "Found: 150,000"}))
    answer, report, origins = replay(0, edit)
    assert answer == "150,000" and report.edit_applied
    assert origins == ["cached", "live", "live", "edited-input"]


def test_message_text_is_edited(replay: Replay) -> None:
    edit = Edit.from_file(parse_edit_file({"kind": "message", "text": "Found: 144,630 in 2020."}))
    answer, _report, origins = replay(2, edit)
    assert answer == "144,630" and origins == ["cached", "cached", "edited", "live"]


def test_edit_file_schema_errors_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'kind' is one of message, reply, tool_call"):
        parse_edit_file({"text": "x"})
    with pytest.raises(ConfigError, match="field text: Field required"):
        parse_edit_file({"kind": "message"})
    with pytest.raises(ConfigError, match="needs name, arguments or set_arguments"):
        parse_edit_file({"kind": "tool_call", "index": 0})
    bad = tmp_path / "edit.json"
    bad.write_text('{"kind": "message",\n "text": }', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"edit.json: not an edit: not valid JSON: .*\(line 2,"):
        read_edit_file(bad)
    reply = tmp_path / "reply.json"
    reply.write_text(
        json.dumps(
            {"kind": "reply", "content": "", "tool_calls": [{"name": "f", "arguments": {"a": 1}}]}
        ),
        encoding="utf-8",
    )
    edit = read_edit_file(reply)
    assert edit.kind == "output" and edit.tool_calls == [{"name": "f", "arguments": {"a": 1}}]
    with pytest.raises(ValueError, match="an edit changes one thing"):
        Edit(output="x", tool_result={"content": "y"})  # type: ignore[arg-type]


def test_cli_replay_with_an_edit_file(
    upstream: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    recorded = asyncio.run(
        record_run(
            [sys.executable, str(TEAM), TASK],
            upstream.base_url,
            tmp_path,
            run_id="run",
            ground_truth="144630",
            options=SessionOptions(echo=False),
        )
    )
    assert recorded.trace.final_answer == "140,210"
    edit = tmp_path / "plan.json"
    edit.write_text(
        json.dumps({"kind": "tool_call", "set_arguments": {"instruction": RIGHT}}), encoding="utf-8"
    )
    result = CliRunner().invoke(
        cli,
        [
            "replay",
            str(recorded.run_dir),
            "--at",
            "0",
            "--edit-file",
            str(edit),
            "--quiet",
            "--json",
            "--upstream",
            upstream.base_url,
            "--",
            sys.executable,
            str(TEAM),
            TASK,
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{") :])
    assert report["edit_applied"] and report["edit"]["tool_call_changes"][0]["set_arguments"]
    branch = build_trace(next((recorded.run_dir / "branches").iterdir()))
    assert branch.final_answer == "144,630" and branch.metadata["outcome"] == "success"
