"""One meaning for every switch: --with-ground-truth, --observability, speaker names."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from faultfinder.judging.answers import match_agent, roster_of
from faultfinder.judging.method import run_method
from faultfinder.judging.render import RenderOptions, render_steps
from faultfinder.llm import LLM, ChatRequest
from faultfinder.llm.doubles import FunctionBackend
from faultfinder.methods.echo import prompts as echo_prompts
from faultfinder.registry import create_method, methods
from faultfinder.testing.oracle import ORACLE_METHODS, OracleJudge
from faultfinder.traces.loader import load_trace
from faultfinder.traces.schema import Step, Trace

SRC = Path(__file__).parent.parent / "src" / "faultfinder"
FIVE = Path(__file__).parent / "fixtures" / "baselines" / "five_steps.json"


def test_every_method_has_the_same_observability_default() -> None:
    defaults = {name: cls.Config().observability for name, cls in methods().items()}
    assert set(defaults.values()) == {"outputs"}, defaults


def test_only_judging_reference_reads_the_reference_answer() -> None:
    readers = [
        str(p.relative_to(SRC))
        for p in [*(SRC / "methods").rglob("*.py"), *(SRC / "judging").rglob("*.py")]
        if re.search(r"\.ground_truth\b(?!_)", p.read_text(encoding="utf-8"))
        and p.name != "reference.py"
    ]
    assert readers == []


@pytest.mark.parametrize("method", ORACLE_METHODS)
def test_with_ground_truth_and_no_reference_answer_is_the_same_everywhere(method: str) -> None:
    trace = load_trace(FIVE)
    reference = trace.ground_truth
    assert reference
    seen: list[str] = []
    judge = OracleJudge(trace)

    def answer(request: ChatRequest) -> str | dict:
        seen.extend(str(m.get("content")) for m in request.messages)
        return judge(request)

    shown = asyncio.run(
        run_method(
            create_method(method, with_ground_truth=True), trace, LLM(FunctionBackend(answer))
        )
    )
    assert shown.ground_truth == "shown" and any(reference in text for text in seen)
    seen.clear()
    bare = trace.model_copy(update={"ground_truth": None})
    result = asyncio.run(
        run_method(
            create_method(method, with_ground_truth=True), bare, LLM(FunctionBackend(answer))
        )
    )
    assert (result.status, result.ground_truth, result.step) == ("ok", "unavailable", 1)
    assert not any(reference in text for text in seen)


def test_echo_header_omits_an_unavailable_reference_answer() -> None:
    trace = load_trace(FIVE)
    assert "Ground Truth:" in echo_prompts.header(trace, True)
    bare = trace.model_copy(update={"ground_truth": None})
    assert "Ground Truth:" not in echo_prompts.header(bare, True)


def magentic() -> Trace:
    roles = ["human", "Orchestrator (thought)", "Orchestrator (-> WebSurfer)", "WebSurfer"]
    steps = [
        Step(index=i, agent=r.split(" (")[0], role=r, content=f"m{i}") for i, r in enumerate(roles)
    ]
    return Trace(id="m1", task="t", steps=steps)


def test_magentic_qualifiers_survive_rendering_and_resolve_to_the_scored_agent() -> None:
    trace = magentic()
    text = render_steps(trace, trace.steps, RenderOptions())
    assert "Step 1 - Orchestrator (thought): m1" in text
    assert "Step 2 - Orchestrator (-> WebSurfer): m2" in text
    assert "Step 3 - WebSurfer: m3" in text
    roster = roster_of(trace)
    assert list(roster) == ["human", "Orchestrator", "WebSurfer"]
    assert match_agent("Orchestrator (-> WebSurfer)", roster) == "Orchestrator"
    # Without the trace's roster the same answer names two agents: ambiguous.
    with pytest.raises(Exception, match="several agents"):
        match_agent("Orchestrator (-> WebSurfer)", ["Orchestrator", "WebSurfer"])


def test_ag2_roles_are_not_shown_as_qualifiers() -> None:
    step = Step(index=0, agent="Excel_Expert", role="assistant", content="x")
    assert step.speaker == "Excel_Expert"


def test_chief_reads_qualified_speakers_through_the_trace_roster() -> None:
    from faultfinder.methods.chief.graph import Subtask
    from faultfinder.methods.chief.otar import parse_otar

    sub = Subtask(id="S1", name="all", start=0, end=3, agents=["Orchestrator", "WebSurfer"])
    data = {"subtasks": [{"subtask": "S1", "agents": [{"agent": "Orchestrator (-> WebSurfer)"}]}]}
    aliases = roster_of(magentic()).aliases
    assert list(parse_otar(data, [sub], aliases).otar) == ["S1:Orchestrator"]
    with pytest.raises(Exception, match="no OTAR entry"):
        parse_otar(data, [sub])  # without the roster: two agents named, dropped
