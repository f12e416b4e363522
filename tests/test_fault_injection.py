"""bench/fault_injection.py: a fault injected into a successful demo run and replayed
forward is a labelled failure whose decisive step is the injected one."""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from faultfinder.eval.datasets import load_dataset
from faultfinder.traces.schema import GoldLabel, Trace

BENCH = Path(__file__).resolve().parent.parent / "bench" / "fault_injection.py"


def _bench() -> ModuleType:
    if str(BENCH.parent) not in sys.path:
        sys.path.insert(0, str(BENCH.parent))  # its helper modules, as when run as a script
    spec = importlib.util.spec_from_file_location("fault_injection", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fault_injection"] = module
    spec.loader.exec_module(module)
    return module


def _generated(tmp_path: Path, program: str, faults: list[str]) -> tuple[ModuleType, list[Trace]]:
    """The bench module and the labelled traces of one base run of ``program`` (the task
    'both-2020') with ``faults`` replayed forward, checked for what every program shares:
    the run kept, one trace per fault kind, the source, and the label at the injected step
    on that step's agent."""
    bench = _bench()
    counts = asyncio.run(
        bench.generate(tmp_path, seed=0, only=["both-2020"], faults=faults, program=program)
    )
    assert counts["successful base runs"] == 1, counts
    traces = load_dataset(tmp_path)
    assert {t.metadata["fault"] for t in traces} == set(faults)
    for trace in traces:
        check_label(trace, program)
    return bench, traces


def each_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, program: str, base: str, seed: int
) -> tuple[ModuleType, Any, dict[str, Trace]]:
    """One base run ``base`` of the bench source ``program`` (bench/_fault_<program>.py)
    with one site of each fault kind (the generator draws up to three), to keep the test
    short, replayed forward: the bench module, the program and its traces by fault kind,
    checked for the run kept and every kind there."""
    bench = _bench()
    source = importlib.import_module("_fault_" + program.replace("-", "_"))
    monkeypatch.setattr(source, "PER_KIND", 1)
    counts = asyncio.run(bench.generate(tmp_path, seed=seed, only=[base], program=program))
    assert counts["successful base runs"] == 1, counts
    traces = {t.metadata["fault"]: t for t in load_dataset(tmp_path)}
    assert set(traces) == set(bench.PROGRAMS[program].faults), counts
    return bench, bench.PROGRAMS[program], traces


def check_label(trace: Trace, program: str) -> GoldLabel:
    """What every generated trace of ``program`` shares: its source, and its label at the
    injected step, on that step's agent."""
    label = trace.label
    assert label is not None and label.step is not None
    assert trace.source.subset == f"generated:{program}"
    assert label.step == trace.metadata["injected_step"]
    assert label.agent == trace.steps[label.step].agent
    return label


def _own_env(module: ModuleType, what: str) -> None:
    """Skip unless the framework's environment exists or can be built (the tests' cache)."""
    from framework_env import framework_python

    try:
        framework_python(module.ENV_NAME, module.REQUIREMENTS)
    except RuntimeError as exc:  # no registry to build it from
        pytest.skip(f"the {what} environment cannot be built: {exc}")


@pytest.mark.slow
def test_injected_faults_become_labelled_failures(tmp_path: Path) -> None:
    bench = _bench()
    faults = ["corrupted-number", "premature-stop", "wrong-tool-result"]
    counts = asyncio.run(bench.generate(tmp_path, seed=0, only=["round-trip"], faults=faults))
    assert counts["successful base runs"] == 1
    traces = load_dataset(tmp_path)
    assert {t.metadata["fault"] for t in traces} == set(faults)
    for trace in traces:
        label = check_label(trace, "demo-team")
        assert label.step is not None
        # The symptom comes later: the final answer, after the injected step, is wrong.
        final = bench.final_answer(trace)
        assert not bench.is_right(final, "684"), (trace.id, final)
        assert any("FINAL" in s.content for s in trace.steps[label.step :])
    corrupted = next(t for t in traces if t.metadata["fault"] == "corrupted-number")
    step = corrupted.label.step  # type: ignore[union-attr]
    assert corrupted.steps[step].agent != "Orchestrator"
    assert "342" not in corrupted.steps[step].content  # the reported distance was changed
    # The Orchestrator carried the wrong number forward on its own: a replayed consequence.
    later = " ".join(s.content for s in corrupted.steps[step + 1 :])
    assert "Calculator" in later or "FINAL" in later


def test_every_fault_kind_finds_a_step_in_a_successful_run() -> None:
    bench = _bench()
    from faultfinder.traces.schema import Step, ToolResult, Trace

    steps = [
        Step(
            index=0,
            agent="Orchestrator",
            content="PLAN:\n1. Researcher: Look up x\n"
            "2. Calculator: Compute [result of step 1] * 2",
        ),
        Step(index=1, agent="Orchestrator", content="NEXT: Researcher | Look up x"),
        Step(
            index=2,
            agent="Researcher",
            content="",
            tool_calls=[{"name": "lookup", "arguments": "{}"}],
            tool_results=[ToolResult(content="x: 342")],
        ),
        Step(index=3, agent="Researcher", content="The fact book says: x: 342"),
        Step(index=4, agent="Orchestrator", content="FINAL: 684"),
    ]
    trace = Trace(id="t", task="x", steps=steps)
    import random

    for name, inject in bench.FAULTS.items():
        found = inject(trace, random.Random(0))
        assert found, name
        for step, edit in found:
            assert 0 <= step < len(steps) and edit.kind in ("output", "tool_result"), name


@pytest.mark.slow
def test_a_langgraph_program_gets_injected_faults_replayed_forward(tmp_path: Path) -> None:
    pytest.importorskip("langgraph_supervisor", reason="needs the frameworks extra")
    faults = ["wrong-handoff", "wrong-tool-result", "wrong-tool-argument"]
    bench, traces = _generated(tmp_path, "langgraph", faults)
    program = bench.PROGRAMS["langgraph"]
    for trace in traces:
        label = trace.label
        assert label is not None and label.step is not None
        # The unmodified program ran on from the fault: a wrong answer, given later.
        answer = program.final_answer(trace)
        assert answer is not None and not bench.is_right(answer, "164630"), (trace.id, answer)
        assert trace.steps[-1].agent == "Supervisor" and len(trace.steps) > label.step + 1
    result = next(t for t in traces if t.metadata["fault"] == "wrong-tool-result")
    step = result.steps[result.label.step]  # type: ignore[union-attr]
    assert step.agent == "Researcher" and any(c.name == "lookup" for c in step.tool_calls)
    # The Calculator added the wrong number it was told, after the Researcher reported it.
    later = [s for s in result.steps[result.label.step + 1 :] if s.agent == "Calculator"]  # type: ignore[union-attr]
    assert later and "164630" not in " ".join(s.content for s in later)


@pytest.mark.slow
@pytest.mark.frameworks_env
def test_a_crewai_crew_gets_injected_faults_replayed_forward(tmp_path: Path) -> None:
    _bench()
    import _fault_crewai

    _own_env(_fault_crewai, "CrewAI")
    faults = ["wrong-tool-result", "corrupted-number", "premature-stop"]
    bench, traces = _generated(tmp_path, "crewai", faults)
    program = bench.PROGRAMS["crewai"]
    for trace in traces:
        label = trace.label
        assert label is not None and label.step is not None
        assert label.agent == trace.steps[label.step].agent == "Researcher"
        assert {s.agent for s in trace.steps} == {"Researcher", "Writer"}
        # The unmodified crew ran on from the fault: the Writer's wrong answer, given later.
        answer = program.final_answer(trace)
        assert answer is not None and not bench.is_right(answer, "164630"), (trace.id, answer)
        assert trace.steps[-1].agent == "Writer" and len(trace.steps) > label.step + 1
    result = next(t for t in traces if t.metadata["fault"] == "wrong-tool-result")
    step = result.steps[result.label.step]  # type: ignore[union-attr]
    assert any(c.name == "lookup" for c in step.tool_calls)
    wrong = step.tool_results[0].content
    # The Researcher reported the wrong result it was given; CrewAI passed the report on.
    report = result.steps[-2]
    assert report.agent == "Researcher" and wrong in report.content
    corrupted = next(t for t in traces if t.metadata["fault"] == "corrupted-number")
    step = corrupted.steps[corrupted.label.step]  # type: ignore[union-attr]
    assert not step.tool_calls and step.content.startswith("Final Answer:")
    assert "144,630" not in step.content or "20,000" not in step.content
    stopped = [t for t in traces if t.metadata["fault"] == "premature-stop"]
    # A stop at the first lookup leaves only the report and the Writer: two steps.
    assert min(len(t.steps) for t in stopped) == 2


@pytest.mark.slow
@pytest.mark.frameworks_env
def test_an_ag2_groupchat_gets_injected_faults_replayed_forward(tmp_path: Path) -> None:
    _bench()
    import _fault_ag2

    _own_env(_fault_ag2, "AG2 0.14")
    faults = ["wrong-speaker", "wrong-tool-result", "corrupted-number"]
    bench, traces = _generated(tmp_path, "ag2", faults)
    program = bench.PROGRAMS["ag2"]
    for trace in traces:
        label = trace.label
        assert label is not None and label.step is not None
        # Speaker selections are the manager's (the proxy names them speaker-selector).
        for s in trace.steps:
            chose = _fault_ag2.is_selection(s.input_messages or [])
            assert (s.agent == "chat_manager") == chose, (trace.id, s.index, s.agent)
        assert {s.agent for s in trace.steps} <= {"chat_manager", "Planner", "Researcher", "Writer"}
        # The unmodified GroupChat ran on from the fault: a wrong answer or none, later.
        assert not bench.is_right(program.final_answer(trace), "164630"), trace.id
        assert len(trace.steps) > label.step + 1
    for trace in (t for t in traces if t.metadata["fault"] == "wrong-speaker"):
        step = trace.steps[trace.label.step]  # type: ignore[union-attr]
        assert step.agent == "chat_manager"
        # AG2 gave the turn to the role the edited selection named.
        assert trace.steps[step.index + 1].agent == step.content.strip()
    result = next(t for t in traces if t.metadata["fault"] == "wrong-tool-result")
    step = result.steps[result.label.step]  # type: ignore[union-attr]
    assert step.agent == "Researcher" and any(c.name == "lookup" for c in step.tool_calls)
    right = {"Avalon had 144,630 inhabitants in 2020.", "Brigadoon had 20,000 inhabitants in 2020."}
    wrong = [r.content for r in step.tool_results if r.content not in right]
    assert len(wrong) == 1 and len(step.tool_results) == 2
    # The Researcher reported the wrong result it was given, the Writer added it.
    report = next(s for s in result.steps[step.index + 1 :] if s.agent == "Researcher")
    assert wrong[0] in report.content and result.steps[-1].agent == "Writer"
    corrupted = next(t for t in traces if t.metadata["fault"] == "corrupted-number")
    step = corrupted.steps[corrupted.label.step]  # type: ignore[union-attr]
    assert step.agent == "Researcher" and not step.tool_calls
    assert "144,630" not in step.content or "20,000" not in step.content
    assert corrupted.steps[-1].agent == "Writer"


@pytest.mark.slow
def test_an_agents_sdk_program_gets_injected_faults_replayed_forward(tmp_path: Path) -> None:
    pytest.importorskip("agents", reason="needs the frameworks extra")
    faults = ["corrupted-number", "wrong-tool-result", "wrong-tool-argument"]
    bench, traces = _generated(tmp_path, "agents-sdk", faults)
    program = bench.PROGRAMS["agents-sdk"]
    for trace in traces:
        label = trace.label
        assert label is not None and label.step is not None
        # The SDK's own agent names, from the unmodified program's instructions.
        assert trace.steps[0].agent == "Triage"
        assert {s.agent for s in trace.steps[1:]} == {"Researcher"} == {label.agent}
        # The program ran on from the fault: a wrong answer, given later.
        answer = program.final_answer(trace)
        assert answer is not None and not bench.is_right(answer, "164630"), (trace.id, answer)
        assert len(trace.steps) > label.step + 1 and not trace.steps[-1].tool_calls
    noted = next(t for t in traces if t.metadata["fault"] == "corrupted-number")
    step = noted.steps[noted.label.step]  # type: ignore[union-attr]
    assert step.content.startswith("Avalon in 2020: ") and "144,630" not in step.content
    assert [c.name for c in step.tool_calls] == ["lookup"]  # the call kept beside the note
    # The Researcher added its own wrong note to Brigadoon's 20,000 in its answer.
    wrong = float(step.content.split(": ")[1].replace(",", ""))
    assert bench.is_right(program.final_answer(noted), str(wrong + 20_000))
    for result in (t for t in traces if t.metadata["fault"] == "wrong-tool-result"):
        at = result.label.step  # type: ignore[union-attr]
        assert [c.name for c in result.steps[at].tool_calls] == ["lookup"]
        # The Researcher added up the results as it was given them, the changed one too.
        results = [r.content for s in result.steps[1:] for r in s.tool_results]
        seen = [r.split(" had ")[1].split()[0] for r in results]
        total = sum(float(n.replace(",", "")) for n in seen)
        assert total != 164_630 and bench.is_right(program.final_answer(result), str(total))
