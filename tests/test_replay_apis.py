"""Record, replay and debug real programs on the OpenAI Responses API and on a mix of
APIs, unmodified, against the loopback fake upstream:

- the OpenAI Agents SDK with its default settings (Responses API; a Triage agent hands
  off to a Researcher with a function tool), with ``Runner.run`` and ``Runner.run_streamed``;
- ``client.responses.create`` chaining turns with ``previous_response_id``, plain and
  streamed (``client.responses.stream``);
- a team mixing Chat Completions, the Responses API and (when the Messages adapter and
  fake endpoint are present) Anthropic's Messages API.

For each: a no-edit replay reproduces every step and the final answer with no request
reaching the upstream; an edit at a tool call and one at a message change the outcome; a
mutated program is refused (exit 3) with no request reaching the upstream; ``debug`` runs.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import frameworks_scripts as scripts
from dover_cli import debug_once
from faultfinder.cli.replay_cmd import replay_exit
from faultfinder.replay.apis import adapter_for
from faultfinder.replay.edits import Edit, ToolCallChange, ToolResultChange
from faultfinder.replay.recorder import load_calls
from faultfinder.replay.replayer import ReplayOptions
from faultfinder.replay.session import RunOutcome, SessionOptions, record_run, replay_run
from faultfinder.testing import FakeOpenAIServer

FIXTURES = Path(__file__).parent / "fixtures"
QUIET = SessionOptions(echo=False, timeout=180)
NO_TELEMETRY = {"OPENAI_AGENTS_DISABLE_TRACING": "1", "OTEL_SDK_DISABLED": "true"}
HAS_MESSAGES = adapter_for("POST", "/v1/messages") is not None and (
    importlib.util.find_spec("faultfinder.testing.fake_messages") is not None
)


def set_query(query: str) -> Edit:
    return Edit(tool_call_changes=[ToolCallChange(index=0, set_arguments={"query": query})])


@dataclass
class Program:
    argv: list[str]
    script: Callable[[dict[str, Any]], Any]
    agents: list[str]
    apis: list[str]
    tool_edit_at: int
    message_edit_at: int
    message: str
    """Text served at message_edit_at that fixes the answer."""
    wrong: str = scripts.WRONG
    right: str = scripts.ANSWER
    needs: list[str] = field(default_factory=list)

    def command(self, task: str = scripts.TASK) -> list[str]:
        return [sys.executable, *[a.replace("{task}", task) for a in self.argv]]


AGENTS_SDK = [str(FIXTURES / "frameworks" / "agents_sdk_default.py"), "{task}"]
CHAIN = [str(FIXTURES / "apis" / "responses_chain.py"), "{task}"]
MIXED = [str(FIXTURES / "apis" / "mixed_apis.py"), "{task}"]


def chain(*flags: str) -> Program:
    """The Agents SDK's two-turn Responses program, run with ``flags`` (streamed, reading
    its reply back, in background mode)."""
    return Program(
        [*CHAIN, *flags],
        scripts.agents_sdk,
        ["Researcher", "Researcher"],
        ["responses"] * 2,
        tool_edit_at=0,
        message_edit_at=1,
        message="144,630",
    )


PROGRAMS = {
    "agents-sdk-run": Program(
        AGENTS_SDK,
        scripts.agents_sdk,
        ["Triage", "Researcher", "Researcher"],
        ["responses"] * 3,
        tool_edit_at=1,
        message_edit_at=2,
        message="144,630",
        needs=["agents"],
    ),
    "agents-sdk-run-streamed": Program(
        [*AGENTS_SDK, "--stream"],
        scripts.agents_sdk,
        ["Triage", "Researcher", "Researcher"],
        ["responses"] * 3,
        tool_edit_at=1,
        message_edit_at=2,
        message="144,630",
        needs=["agents"],
    ),
    "responses-chain": chain(),
    "responses-chain-streamed": chain("--stream"),
    "responses-chain-retrieve": chain("--retrieve"),
    "responses-chain-background": chain("--background"),
    "mixed-chat-responses": Program(
        MIXED,
        scripts.mixed,
        ["Planner", "Researcher", "Researcher"],
        ["chat", "responses", "responses"],
        tool_edit_at=1,
        message_edit_at=0,
        message="population of Avalon in 2020",
        wrong="140,210",
        right="144,630",
    ),
}
if HAS_MESSAGES:
    PROGRAMS["mixed-chat-responses-messages"] = Program(
        [*MIXED, "--messages"],
        scripts.mixed,
        ["Planner", "Researcher", "Researcher", "Writer"],
        ["chat", "responses", "responses", "messages"],
        tool_edit_at=1,
        message_edit_at=0,
        message="population of Avalon in 2020",
        wrong="140,210",
        right="144,630",
        needs=["anthropic"],
    )


@pytest.fixture
def quiet_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key, value in NO_TELEMETRY.items():
        monkeypatch.setenv(key, value)
    for key in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    yield


def record(
    program: Program, upstream: FakeOpenAIServer, out: Path, ground_truth: str | None = None
) -> RunOutcome:
    for module in program.needs:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install -e '.[dev]')")
    outcome = asyncio.run(
        record_run(
            program.command(),
            upstream.base_url,
            out,
            run_id="run",
            ground_truth=ground_truth,
            options=QUIET,
        )
    )
    assert outcome.child.exit_code == 0, outcome.child.stderr[-3000:]
    return outcome


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_program_records_replays_and_is_edited(name: str, tmp_path: Path, quiet_env: None) -> None:
    program = PROGRAMS[name]
    with FakeOpenAIServer(reply=program.script) as upstream:
        recorded = record(program, upstream, tmp_path)
        trace = recorded.trace
        assert [s.agent for s in trace.steps] == program.agents
        assert [s.metadata["api"] for s in trace.steps] == program.apis
        assert trace.final_answer == program.wrong
        assert any(c.name == "lookup" for s in trace.steps for c in s.tool_calls)
        assert any(r.content for s in trace.steps for r in s.tool_results)

        # No edit: every step from the recording, nothing reaches the upstream.
        asked = len(upstream.requests)
        same = asyncio.run(
            replay_run(recorded.run_dir, program.command(), ReplayOptions(), options=QUIET)
        )
        report = same.report
        assert report.faithful and report.reproduced == len(program.agents), [
            d.difference for d in report.divergences
        ]
        assert report.live_calls == 0 and len(upstream.requests) == asked
        assert same.trace.final_answer == program.wrong and same.child.exit_code == 0
        assert replay_exit(report, "fail") == 0
        assert same.child.stdout == recorded.child.stdout  # streamed programs count deltas

        # An edit at a tool call, at the tool's result, and at a message fix the answer.
        fixed_result = ToolResultChange(content="Avalon had 144,630 inhabitants in 2020.")
        for at, edit in (
            (program.tool_edit_at, set_query("population of Avalon in 2020")),
            (program.tool_edit_at, Edit(tool_result=fixed_result)),
            (program.message_edit_at, Edit(output=program.message)),
        ):
            edited = asyncio.run(
                replay_run(
                    recorded.run_dir,
                    program.command(),
                    ReplayOptions(at=at, edit=edit),
                    upstream=upstream.base_url,
                    options=QUIET,
                )
            )
            assert edited.report.edit_applied and not edited.report.divergences, (
                at,
                edited.child.stderr[-2000:],
            )
            assert edited.report.reproduced == at
            assert edited.trace.final_answer == program.right, (at, edited.child.stderr[-2000:])
            assert edited.report.live_calls == len(edited.report.live)
            # A background call's polls (GETs) go live too, as parts of that call.
            posts = [live for live in edited.report.live if live.method == "POST"]
            assert all(live.api in program.apis for live in posts)

        # A mutated program (another task) is refused before anything goes live.
        asked = len(upstream.requests)
        mutated = asyncio.run(
            replay_run(
                recorded.run_dir,
                program.command("What was the population of Brigadoon in 2020?"),
                ReplayOptions(),
                upstream=upstream.base_url,
                options=QUIET,
            )
        )
        assert mutated.report.divergences and mutated.report.refused_calls >= 1
        assert mutated.report.live_calls == 0 and len(upstream.requests) == asked
        assert replay_exit(mutated.report, "fail") == 3
        assert mutated.child.exit_code != 0


def test_streams_are_replayed_event_for_event(tmp_path: Path, quiet_env: None) -> None:
    program = PROGRAMS["responses-chain-streamed"]
    with FakeOpenAIServer(reply=program.script) as upstream:
        recorded = record(program, upstream, tmp_path)
        calls = load_calls(recorded.run_dir)
        assert all(c.stream and c.events and c.writes for c in calls)
        same = asyncio.run(
            replay_run(recorded.run_dir, program.command(), ReplayOptions(), options=QUIET)
        )
    replayed = load_calls(same.branch_dir)
    assert [c.events for c in replayed] == [c.events for c in calls]
    for call in calls:
        kinds = [json.loads(e.split("data: ", 1)[1])["type"] for e in call.events or []]
        numbers = [
            json.loads(e.split("data: ", 1)[1])["sequence_number"] for e in call.events or []
        ]
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        assert numbers == list(range(len(numbers)))


DEBUGGED = [n for n in PROGRAMS if n in ("agents-sdk-run", "responses-chain") or "mixed" in n]


@pytest.mark.slow
@pytest.mark.parametrize("name", DEBUGGED)
def test_debug_runs(name: str, tmp_path: Path, quiet_env: None) -> None:
    program = PROGRAMS[name]
    with FakeOpenAIServer(reply=program.script) as upstream:
        recorded = record(program, upstream, tmp_path, ground_truth=scripts.ANSWER)
        rows, output = debug_once(
            recorded.run_dir, upstream.base_url, program.command(), tmp_path / "dover.jsonl"
        )
    repeats = [r for row in rows for r in row["repeats"]]
    assert repeats and all(r["edit_applied"] and not r["program_failed"] for r in repeats)
    if name == "agents-sdk-run":
        # The intervention is Triage's handoff with new text (the handoff kept): the
        # Researcher follows it and answers; the replacement is not the answer.
        assert all(r["final_answer"] == scripts.ANSWER and r["steps"] == 3 for r in repeats)
        assert "-> validated" in output
    if name == "responses-chain":
        # The step hypothesised is the Researcher's lookup of the wrong year: its text is
        # rewritten and the lookup kept, so the answer comes from the lookup, as recorded
        # (DoVer's interventions rewrite messages, not a tool call's arguments).
        (row,) = rows
        assert row["intervention"]["tool_calls"] == row["intervention"]["original_tool_calls"]
        assert all(r["final_answer"] == scripts.WRONG for r in repeats)
        assert "-> validated" not in output


@pytest.mark.parametrize(
    "recorded,replayed",
    [
        ("responses-chain", "responses-chain-streamed"),
        ("responses-chain-streamed", "responses-chain"),
    ],
)
def test_streamed_and_plain_calls_match_each_other(
    recorded: str, replayed: str, tmp_path: Path, quiet_env: None
) -> None:
    with FakeOpenAIServer(reply=PROGRAMS[recorded].script) as upstream:
        run = record(PROGRAMS[recorded], upstream, tmp_path)
        asked = len(upstream.requests)
        same = asyncio.run(
            replay_run(run.run_dir, PROGRAMS[replayed].command(), ReplayOptions(), options=QUIET)
        )
        assert len(upstream.requests) == asked
    assert same.report.faithful and same.report.live_calls == 0
    assert same.trace.final_answer == scripts.WRONG and same.child.exit_code == 0
