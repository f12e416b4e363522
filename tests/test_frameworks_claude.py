"""Claude programs, unmodified, recorded and replayed through the proxy over the Anthropic
Messages API against the loopback fake upstream:

- the Anthropic SDK: a Researcher with a tool-use loop and a Writer, with
  ``messages.create`` and with ``messages.stream``;
- LangGraph's supervisor team on ChatAnthropic (langchain-anthropic, LangChain's official
  Anthropic integration), parallel tool calls included.

For each: a no-edit replay reproduces every step and the final answer with 0 live calls;
an edit at a tool call and one at a message change the outcome; a mutated program is
refused with 0 live calls; ``debug`` runs. Only ANTHROPIC_BASE_URL (set by the recorder)
points the programs at the proxy.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import claude_scripts
import frameworks_scripts as scripts
from faultfinder.cli import main as cli
from faultfinder.demo_team import mock_debugger
from faultfinder.llm import base
from faultfinder.replay.edits import Edit, ToolCallChange
from faultfinder.replay.replayer import ReplayOptions
from faultfinder.replay.session import SessionOptions, record_run, replay_run
from faultfinder.testing import FakeOpenAIServer

PROGRAMS = Path(__file__).parent / "fixtures" / "frameworks"
QUIET = {
    "OTEL_SDK_DISABLED": "true",
    "LANGCHAIN_TRACING_V2": "false",
    "LANGSMITH_TRACING": "false",
}


def needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[frameworks]')")


@dataclass
class Case:
    args: list[str]
    script: Callable[[dict[str, Any]], Any]
    module: str
    task: str
    agents: list[str]
    wrong: str
    at: int
    tool_edit: Edit
    right: str
    message_edit: Edit
    """An edit of the text at ``at`` (or of the step the message edit names)."""
    message_at: int
    message_right: str


def set_query(query: str, index: int = 0) -> Edit:
    return Edit(tool_call_changes=[ToolCallChange(index=index, set_arguments={"query": query})])


ANTHROPIC_SDK = Case(
    args=["anthropic_sdk_team.py"],
    script=claude_scripts.anthropic_sdk,
    module="anthropic",
    task=scripts.TASK,
    agents=["Researcher", "Researcher", "Writer"],
    wrong=scripts.WRONG,
    at=0,
    tool_edit=set_query("population of Avalon in 2020"),
    right=scripts.ANSWER,
    message_edit=Edit(output="Found: Avalon had 99,999 inhabitants in 2020."),
    message_at=1,
    message_right="99,999",
)
CASES = {
    "anthropic-sdk": ANTHROPIC_SDK,
    # The same program and run, its calls streamed.
    "anthropic-sdk-stream": replace(ANTHROPIC_SDK, args=[*ANTHROPIC_SDK.args, "--stream"]),
    "langgraph-claude": Case(
        args=["langgraph_claude_team.py"],
        script=scripts.langgraph,
        module="langchain_anthropic",
        task=scripts.TWO_CITIES,
        agents=[
            "Supervisor",
            "Researcher",
            "Researcher",
            "Supervisor",
            "Calculator",
            "Calculator",
            "Supervisor",
        ],
        wrong="164130",
        at=1,
        tool_edit=set_query("population of Brigadoon in 2020", index=1),
        right="164630",
        message_edit=Edit(output="Sum: 200000"),
        message_at=5,
        message_right="200000",
    ),
}


@pytest.fixture
def quiet(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key, value in QUIET.items():
        monkeypatch.setenv(key, value)
    for key in ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    yield


def command(case: Case, task: str | None = None) -> list[str]:
    return [sys.executable, str(PROGRAMS / case.args[0]), task or case.task, *case.args[1:]]


def messages_calls(upstream: FakeOpenAIServer) -> int:
    return len(upstream.requests_of("messages"))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_claude_program_is_recorded_and_replayed(name: str, tmp_path: Path, quiet: None) -> None:
    case = CASES[name]
    needs(case.module)
    if name == "langgraph-claude":
        needs("langgraph_supervisor")
    options = SessionOptions(echo=False, timeout=240)
    run = command(case)
    with FakeOpenAIServer(reply=case.script) as upstream:
        recorded = asyncio.run(
            record_run(run, upstream.base_url, tmp_path, run_id="run", options=options)
        )
        assert recorded.child.exit_code == 0, (tmp_path / "run" / "stderr.txt").read_text()
        trace = recorded.trace
        assert [s.agent for s in trace.steps] == case.agents
        assert trace.final_answer == case.wrong
        steps = [json.loads(line) for line in (tmp_path / "run" / "steps.jsonl").open()]
        assert all(s["path"].endswith("/v1/messages") for s in steps)
        assert any(s["stream"] for s in steps) == ("--stream" in case.args)
        # The tool calls are steps' tool calls, with the tool results attached.
        assert trace.steps[case.at].tool_calls

        def replay(options_: ReplayOptions, program: list[str] = run) -> Any:
            return asyncio.run(
                replay_run(
                    recorded.run_dir, program, options_, upstream=upstream.base_url,
                    options=options,
                )
            )  # fmt: skip

        # No edit: every step from the recording, no upstream call, same answer.
        asked = messages_calls(upstream)
        same = replay(ReplayOptions())
        report = same.report
        assert report.faithful and report.fidelity == 1.0, [
            d.difference for d in report.divergences
        ]
        assert report.reproduced == len(case.agents) and report.live_calls == 0
        assert messages_calls(upstream) == asked
        assert [s.agent for s in same.trace.steps] == case.agents
        assert same.trace.final_answer == case.wrong and same.child.exit_code == 0

        # An edit at a tool call changes the outcome.
        edited = replay(ReplayOptions(at=case.at, edit=case.tool_edit))
        diverged = [d.difference for d in edited.report.divergences]
        assert edited.report.edit_applied and not diverged, (diverged, edited.child.stderr)
        assert edited.report.reproduced == case.at
        assert edited.trace.final_answer == case.right

        # An edit at a message changes it too.
        said = replay(ReplayOptions(at=case.message_at, edit=case.message_edit))
        assert said.report.edit_applied, said.child.stderr
        assert said.trace.final_answer == case.message_right

        # A mutated program (another task) is refused before anything goes live.
        asked = messages_calls(upstream)
        mutated = replay(ReplayOptions(), command(case, "What was the population of Zembla?"))
        assert mutated.report.divergences and mutated.report.live_calls == 0
        assert messages_calls(upstream) == asked
        assert mutated.child.exit_code != 0


FIXED_NOTE = "Found: Avalon had 144,630 inhabitants in 2020."


def program_or_debugger(body: dict[str, Any]) -> Any:
    """The fake upstream behind both the Claude program and DoVer's judge: the program's
    agents get the scripted team; DoVer's judge blames the Researcher's note (step 1) and
    rewrites it with the 2020 figure; the demo's scripted debugger answers the rest."""
    system = " ".join(str(m.get("content")) for m in body["messages"] if m["role"] == "system")
    if "You are the Researcher" in system or "You are the Writer" in system:
        return claude_scripts.anthropic_sdk(body)
    prompt = str(body["messages"][-1].get("content") or "")
    if "Agent Name: (Your prediction)" in prompt:
        return "Agent Name: Researcher\nStep Number: 1\nReason for Mistake: it reports 2019."
    if "Intervention categories:" in prompt:
        return json.dumps(
            {"category": "modified_instruction", "replacement": FIXED_NOTE, "rationale": "2020"}
        )
    return mock_debugger.reply(body)


def test_debug_runs_on_a_claude_program_with_a_claude_judge(
    tmp_path: Path, quiet: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`faultfinder debug` on a recorded Anthropic SDK run, its judge on the Messages API
    too (--model anthropic:...): hypothesis, intervention, replay and verdict."""
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)  # the judge is the loopback fake
    needs("anthropic")
    case = CASES["anthropic-sdk"]
    run = command(case)
    runner = CliRunner()
    with FakeOpenAIServer(reply=program_or_debugger) as upstream:
        recorded = runner.invoke(
            cli,
            ["record", "--upstream", upstream.base_url, "--out", str(tmp_path / "runs"),
             "--run-id", "claude", "--ground-truth", scripts.ANSWER, "--quiet", "--", *run],
        )  # fmt: skip
        assert recorded.exit_code == 0, recorded.output
        assert "recorded 3 steps from 2 agents" in recorded.output
        out = tmp_path / "dover.jsonl"
        debugged = runner.invoke(
            cli,
            ["debug", str(tmp_path / "runs" / "claude"), "--repeats", "1", "--segment", "none",
             "--scope", "hypothesis",
             "--out", str(out), "--upstream", upstream.base_url,
             "--model", "anthropic:claude-judge", "--base-url", upstream.base_url,
             "--cache", "none", "--", *run],
        )  # fmt: skip
        judged = [
            r for r in upstream.requests_of("messages")
            if (r.body or {}).get("model") == "claude-judge"
        ]  # fmt: skip
    assert debugged.exit_code == 0, debugged.output
    assert "-> validated (1/1 runs succeeded)" in debugged.output
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["verdict"] == "validated", row
    assert judged, "DoVer's judge made no Messages call"
