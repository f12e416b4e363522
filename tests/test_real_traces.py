"""Traces of real instrumented programs (tests/fixtures/otel/programs), not hand-written ones.

Two layers:
- the committed fixtures (OTLP/JSON lines as the collector received them from the real
  OTLP exporter; AG2's own SQLite database and file log) are imported and checked, and a
  method runs on each — always, with no framework installed;
- when the `dev` extra's frameworks are installed, the programs are run again, offline,
  against the loopback scripted upstream and the collector, and the traces the collector
  writes are checked the same way (the collector end to end with a real exporter).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.judging.method import run_method
from faultfinder.llm import LLM, ScriptedBackend
from faultfinder.registry import create_method
from faultfinder.traces.io import trace_from_dict
from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import Trace
from otel_programs import QUESTION, Run, ag2_upstream, agents_upstream, run_program

FIXTURES = Path(__file__).parent / "fixtures" / "otel"


def check_agents_team(trace: Trace, *, llm_calls: int = 3) -> None:
    """Triage hands off; the tutor calls add (wrongly) and reports: 3 LLM calls."""
    assert [s.agent for s in trace.steps] == ["Triage", "Math tutor", "Math tutor"]
    assert len(trace.steps) == llm_calls and all(s.kind == "llm" for s in trace.steps)
    assert [a.name for a in trace.agents] == ["Triage", "Math tutor"]
    triage, call, answer = trace.steps
    assert [c.name for c in triage.tool_calls] == ["transfer_to_math_tutor"]
    assert [(c.name, json.loads(c.arguments)) for c in call.tool_calls] == [
        ("add", {"a": 2, "b": 4})
    ]
    assert [(r.name, r.content) for r in call.tool_results] == [("add", "6")]
    assert answer.content == "The answer is 6."
    assert trace.final_answer == "The answer is 6."  # OpenInference: from the last reply
    assert trace.task == QUESTION
    assert all(s.input_messages and s.usage and s.usage.calls == 1 for s in trace.steps)
    (handoff,) = trace.metadata["handoffs"]
    assert (handoff["from"], handoff["to"]) == ("Triage", "Math tutor")
    assert all("enclosing agent span" in s.metadata["inferred"]["agent"] for s in trace.steps)


def check_ag2(trace: Trace) -> None:
    """Planner, Solver (add with a wrong operand, run by the Executor), Planner, Solver."""
    assert [s.agent for s in trace.steps] == ["Planner", "Solver", "Planner", "Solver"]
    assert all(s.kind == "llm" for s in trace.steps)
    solver_call = trace.steps[1]
    assert [(c.name, json.loads(c.arguments)) for c in solver_call.tool_calls] == [
        ("add", {"a": 2, "b": 4})
    ]
    assert [(r.name, r.content) for r in solver_call.tool_results] == [("add", "6")]
    assert trace.steps[3].content == "The answer is 6. TERMINATE"
    # AG2's chat result (ChatResult.summary, summary_method "last_msg"): the last message,
    # "TERMINATE" removed; the group chat manager then ended the chat.
    assert trace.final_answer == "The answer is 6."
    assert trace.metadata["final_answer_from"].startswith("last message of the chat, from 'Solver'")
    assert trace.metadata["final_answer_from"].endswith(
        "'chat_manager' then sent no reply (run_chat)"
    )
    assert trace.task == QUESTION and trace.system == "ag2"
    names = [a.name for a in trace.agents]
    assert {"Planner", "Solver", "Executor"} <= set(names)
    assert all(s.input_messages for s in trace.steps)


def attribute_all_at_once(trace: Trace, agent: str, step: int) -> None:
    """A method runs on the imported trace: all-at-once with a scripted model."""
    reply = f"Agent Name: {agent}\nStep Number: {step}\nReason for Mistake: added 4 instead of 3."
    backend = ScriptedBackend([reply])
    result = asyncio.run(run_method(create_method("all-at-once"), trace, LLM(backend)))
    assert (result.status, result.agent, result.step) == ("ok", agent, step)
    prompt = str(backend.requests[0].messages[-1]["content"])
    assert agent in prompt and QUESTION in prompt


@pytest.mark.parametrize("kind", ["openinference", "genai"])
def test_openai_agents_fixture(kind: str) -> None:
    path = FIXTURES / f"openai-agents-{kind}.otlp.jsonl"
    (trace,) = load_traces(path)  # detected by content as OTLP
    assert trace.source.format == "otlp"
    check_agents_team(trace)
    attribute_all_at_once(trace, "Math tutor", 1)


@pytest.mark.parametrize("name", ["ag2-groupchat.db", "ag2-groupchat.runtime.log"])
def test_ag2_fixture(name: str) -> None:
    (trace,) = load_traces(FIXTURES / name)  # detected by content
    assert trace.source.format == "ag2"
    check_ag2(trace)
    attribute_all_at_once(trace, "Solver", 1)


def check_crewai(trace: Trace) -> None:
    """Researcher calls add (wrongly) and answers; the Writer reports: 3 LLM calls."""
    assert [s.agent for s in trace.steps] == ["Researcher", "Researcher", "Writer"]
    assert all(s.kind == "llm" for s in trace.steps)
    assert [a.name for a in trace.agents] == ["Researcher", "Writer"]
    call = trace.steps[0]
    assert [(c.name, json.loads(c.arguments)) for c in call.tool_calls] == [
        ("add", {"a": 2, "b": 4})
    ]
    assert [(r.name, r.content) for r in call.tool_results] == [("add", "6")]
    assert "The answer is 6." in trace.steps[2].content
    assert trace.task.startswith(QUESTION + "\n")  # CrewAI's "\nCurrent Task: " removed
    assert trace.metadata["task_unwrapped"]["before"] == "\nCurrent Task: "


def test_crewai_fixture() -> None:
    """A CrewAI crew traced by OpenInference (crewai 1.15.30, its instrumentation 1.1.21 and
    openinference-instrumentation-openai 0.1.66), generated with
    `python tests/otel_programs.py --crewai-python PATH` (CrewAI's pins conflict with the
    dev environment, so it is not re-run by the suite)."""
    (trace,) = load_traces(FIXTURES / "crewai-openinference.otlp.jsonl")
    check_crewai(trace)
    attribute_all_at_once(trace, "Researcher", 0)


def test_cli_import_and_attribute_on_a_real_trace(tmp_path: Path) -> None:
    source = FIXTURES / "openai-agents-openinference.otlp.jsonl"
    out = tmp_path / "t.json"
    result = CliRunner().invoke(main, ["import", str(source), "--out", str(out)])
    assert result.exit_code == 0, result.output
    replies = tmp_path / "replies.json"
    replies.write_text(
        json.dumps(["Agent Name: Math tutor\nStep Number: 1\nReason for Mistake: 4 is not 3."])
    )
    result = CliRunner().invoke(
        main,
        [
            "attribute",
            str(out),
            "--method",
            "all-at-once",
            "--model",
            f"scripted:{replies}",
            "--cache",
            "none",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "Math tutor" in result.output


# --- the programs themselves ------------------------------------------------------------


def _have(*modules: str) -> bool:
    return all(_installed(m) for m in modules)


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported. ``find_spec`` of a dotted name imports its parent
    package first and raises when that is missing (no ``opentelemetry`` at all): missing too."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


AGENTS = (
    "agents",
    "opentelemetry.sdk",
    "opentelemetry.exporter.otlp.proto.http",
    "opentelemetry.proto",
)
LIVE: dict[str, tuple[list[str], Callable[[dict[str, Any]], Any], bool, tuple[str, ...]]] = {
    "openinference": (
        ["agents_team.py", "openinference", QUESTION],
        agents_upstream,
        True,
        (*AGENTS, "openinference.instrumentation.openai_agents"),
    ),
    "genai": (
        ["agents_team.py", "genai", QUESTION],
        agents_upstream,
        True,
        (*AGENTS, "opentelemetry.instrumentation.openai_agents"),
    ),
    "ag2-sqlite": (["ag2_groupchat.py", "sqlite", QUESTION], ag2_upstream, False, ("autogen",)),
    "ag2-file": (["ag2_groupchat.py", "file", QUESTION], ag2_upstream, False, ("autogen",)),
}


@pytest.fixture(scope="module")
def live_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run | str]:
    """Every program that can run here, run once, concurrently (they are independent)."""
    base = tmp_path_factory.mktemp("programs")

    def one(name: str) -> Run | str:
        args, upstream, collect, needs = LIVE[name]
        if not _have(*needs):
            missing = ", ".join(m for m in needs if not _have(m))
            return f"not installed: {missing} (pip install -e '.[dev]')"
        return run_program(args, upstream, base / name, collect=collect)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(LIVE, pool.map(one, LIVE), strict=True))


def _run(live_runs: dict[str, Run | str], name: str) -> Run:
    run = live_runs[name]
    if isinstance(run, str):
        pytest.skip(run)
    return run


@pytest.mark.parametrize("kind", ["openinference", "genai"])
def test_openai_agents_live_through_the_collector(
    live_runs: dict[str, Run | str], kind: str
) -> None:
    run = _run(live_runs, kind)
    assert "FINAL ANSWER: The answer is 6." in run.stdout
    # the collector saw the trace finish (root span in, then quiet) before shutdown
    assert len(run.finished) == 1 and run.traces == run.finished
    trace = trace_from_dict(json.loads(run.finished[0].read_text()))
    assert trace.source.format == "otlp-collector" and trace.metadata["complete"] is True
    check_agents_team(trace, llm_calls=run.llm_requests)
    attribute_all_at_once(trace, "Math tutor", 1)
    # the raw export the collector kept reads back to the same steps
    (again,) = load_traces(run.raw)
    assert [s.model_dump() for s in again.steps] == [s.model_dump() for s in trace.steps]


@pytest.mark.parametrize(
    ("kind", "log"), [("ag2-sqlite", "runtime.db"), ("ag2-file", "autogen_logs/runtime.log")]
)
def test_ag2_groupchat_live(live_runs: dict[str, Run | str], kind: str, log: str) -> None:
    run = _run(live_runs, kind)
    assert "FINAL ANSWER: The answer is 6. TERMINATE" in run.stdout
    (trace,) = load_traces(run.raw.parent / log)
    check_ag2(trace)
    assert len(trace.steps) == run.llm_requests


@pytest.mark.parametrize(
    "source",
    [
        "importers/langfuse/observations-page.json",
        "importers/phoenix/rest-spans.json",
        "importers/phoenix/spans.jsonl",
        "importers/otlp/genai.json",
    ],
)
def test_attribute_runs_on_every_span_source(tmp_path: Path, source: str) -> None:
    """`faultfinder attribute` reads each format directly (detected) and runs a method."""
    (trace,) = load_traces(Path(__file__).parent / "fixtures" / source)
    agent, step = trace.steps[-1].agent, len(trace.steps) - 1
    replies = tmp_path / "replies.json"
    replies.write_text(
        json.dumps([f"Agent Name: {agent}\nStep Number: {step}\nReason for Mistake: x"])
    )
    result = CliRunner().invoke(
        main,
        [
            "attribute",
            str(Path(__file__).parent / "fixtures" / source),
            "--method",
            "all-at-once",
            "--model",
            f"scripted:{replies}",
            "--cache",
            "none",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.output[result.output.index("{") :])
    assert (verdict["agent"], verdict["step"]) == (agent, step)
