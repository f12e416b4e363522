"""TraceElephant's dynamic agentic check: candidates replayed with a corrected request for
k steps, then re-ranked."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, ClassVar

from click.testing import CliRunner

from demo_recording import demo_command, record_demo
from faultfinder.cli import main
from faultfinder.demo_team import mock_debugger, mock_model
from faultfinder.judging.method import MethodBase, MethodConfig, Verdict
from faultfinder.llm.base import ChatRequest
from faultfinder.llm.client import LLM
from faultfinder.llm.doubles import FunctionBackend, ScriptedBackend
from faultfinder.methods.agentic.dynamic import dynamic_check
from faultfinder.methods.agentic.dynamic_candidates import (
    Candidate,
    Observation,
    judge_window,
    propose_candidates,
    score,
)
from faultfinder.replay.recorder import load_calls
from faultfinder.testing import FakeOpenAIServer
from faultfinder.traces.schema import Trace


class BlameStep(MethodBase):
    """A static 'method' that always blames one step (unregistered; tests only)."""

    name: ClassVar[str] = "blame-step"
    summary: ClassVar[str] = "test double"
    Config: ClassVar[type[MethodConfig]] = MethodConfig
    presets: ClassVar[dict[str, dict[str, Any]]] = {}

    def __init__(self, step: int) -> None:
        self.config = MethodConfig()
        self.step = step

    async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
        return Verdict(agent=trace.steps[self.step].agent, step=self.step, reason="looks wrong")


def test_score_prefers_expected_output_without_recurrence() -> None:
    assert score(Observation(satisfies_expected=True, failure_recurs=False, deviates=False)) == 2
    assert score(Observation(satisfies_expected=True, failure_recurs=True, deviates=False)) == 1
    assert score(Observation(satisfies_expected=True, failure_recurs=False, deviates=True)) == 1
    assert score(Observation(satisfies_expected=False, failure_recurs=True, deviates=False)) == 0
    assert score(None) == 0


def test_dynamic_check_reranks_candidates_by_their_replays(tmp_path: Path) -> None:
    command = demo_command()
    with FakeOpenAIServer(reply=mock_model.reply) as upstream:
        recorded = record_demo(tmp_path, upstream.base_url)
        before = len(upstream.chat_requests)
        result = asyncio.run(
            dynamic_check(
                recorded.run_dir,
                LLM(FunctionBackend(mock_debugger.respond)),
                BlameStep(3),  # the Researcher's report: a symptom, not the cause
                method_label="blame-step",
                command=command,
                upstream=upstream.base_url,
                candidates=3,
                window=5,
            )
        )
        live = upstream.chat_requests[before:]
    assert result.static == {
        "agent": "Researcher",
        "step": 3,
        "reason": "looks wrong",
        "status": "ok",
    }
    ranked = [(c.step, c.rank, c.score) for c in result.candidates]
    # Correcting the plan (step 0) or the instruction (step 1) fixes the run, so both
    # move above the static method's pick, whose correction changes nothing.
    assert ranked == [(0, 1, 2), (1, 2, 2), (3, 0, 1)]
    assert (result.agent, result.step) == ("Orchestrator", 0)
    # Replays stop after the window: k live calls each, at temperature 0.3.
    for candidate in result.candidates:
        assert candidate.branch is not None
        branch_calls = load_calls(candidate.branch)
        assert sum(c.origin != "cached" for c in branch_calls) == 5
    assert live and all(r.body is not None and r.body["temperature"] == 0.3 for r in live)
    assert any("Note from a reviewer" in str(r.body) for r in live)


def _zentar() -> Trace:
    from faultfinder.traces.io import read_json, trace_from_dict

    path = Path(__file__).parent / "fixtures" / "agentic" / "zentar_trace.json"
    return trace_from_dict(read_json(path), path)


def _candidates_reply(agent: str, step: int) -> str:
    entry = {"agent": agent, "step": step, "reason": "wrong", "expected_output": "right"}
    return json.dumps({"candidates": [entry]})


def test_candidates_are_read_as_written_agent_names_as_the_navigator_reads_them() -> None:
    trace = _zentar()
    static = {"agent": "Orchestrator", "step": 0, "reason": "r"}
    # 'websurfer' and 'Web Surfer' name the WebSurfer, as they do in the navigator's submit.
    for written in ("websurfer", "Web Surfer", "WebSurfer"):
        backend = ScriptedBackend([_candidates_reply(written, 2)])
        found, unreadable = asyncio.run(propose_candidates(trace, LLM(backend), static, 3))
        assert unreadable is None
        assert [(c.agent, c.step) for c in found] == [("Orchestrator", 0), ("WebSurfer", 2)]


def test_an_unreadable_candidates_answer_is_left_out_with_its_reason() -> None:
    trace = _zentar()
    static = {"agent": "Orchestrator", "step": 0, "reason": "r"}
    backend = ScriptedBackend([_candidates_reply("Nobody", 2)] * 3)
    llm = LLM(backend, parse_retries=2)
    found, unreadable = asyncio.run(propose_candidates(trace, llm, static, 3))
    assert [(c.agent, c.step) for c in found] == [("Orchestrator", 0)]
    assert unreadable is not None and "Nobody" in unreadable


def test_an_unreadable_judgement_is_recorded_not_scored_silently() -> None:
    trace = _zentar()
    candidate = Candidate(agent="WebSurfer", step=2, reason="wrong", expected_output="right")
    llm = LLM(ScriptedBackend(["they look fine to me"] * 3), parse_retries=2)
    observation, unreadable = asyncio.run(
        judge_window(trace, trace, candidate, llm, 5, with_ground_truth=False, budget=None)
    )
    assert observation is None and unreadable


SEEN_TOOLS: list[list[str]] = []


def sure_navigator(request: ChatRequest) -> dict[str, Any]:
    """A navigator reply for ``check``'s static method: submits step 0, 90% sure, and
    notes which tools it was offered (read with --model function:test_dover_dynamic:...)."""
    SEEN_TOOLS.append([t["function"]["name"] for t in request.tools or []])
    verdict = {"agent": "Orchestrator", "step": 0, "reason": "r", "confidence": 0.9}
    return {"text": "", "tool_calls": [{"name": "submit", "arguments": verdict}]}


def test_check_runs_static_agentic_on_the_whole_trace_by_default(tmp_path: Path) -> None:
    """TraceElephant's Dynamic Agentic builds on Static Agentic, which reads the complete
    trace (inputs and metadata too): check's default method must see them."""
    with FakeOpenAIServer(reply=mock_model.reply) as upstream:
        recorded = record_demo(tmp_path, upstream.base_url)
    SEEN_TOOLS.clear()
    model = ["--model", "function:test_dover_dynamic:sure_navigator", "--cache", "none"]
    args = ["check", str(recorded.run_dir), "--check-below", "0.5", "--json", *model]
    result = CliRunner().invoke(main, [*args, "--", *demo_command()])
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout[result.stdout.index("{") :])
    assert row["method"] == "agentic:paper" and row["replayed"] is False
    assert SEEN_TOOLS and "read_step_input" in SEEN_TOOLS[0]
