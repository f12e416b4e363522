"""The parser tables fed end to end through the Who&When methods: every imperfect reply
ends as the verdict the table says, and the scores follow. A change in how a reply is read
changes a score here."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from faultfinder.eval.metrics import agent_correct, step_correct
from faultfinder.judging.method import Attribution, run_method
from faultfinder.llm import LLM, ChatRequest, FunctionBackend, ScriptedBackend
from faultfinder.registry import create_method
from faultfinder.testing.oracle import OracleJudge, question_of
from faultfinder.traces.loader import load_trace
from faultfinder.traces.schema import GoldLabel, Step, Trace
from parser_tables import agent_step, halves, yes_no

FIVE = Path(__file__).parent / "fixtures" / "baselines" / "five_steps.json"  # gold Searcher @ 1

# Speakers of a 20-step trace that makes every readable pair of the agent/step table
# consistent (Magentic-One roles included, so the aliases exist).
ROLES = [
    "Orchestrator (thought)", "ComputerTerminal", "FileSurfer", "Excel_Expert", "WebSurfer",
    "Orchestrator (thought)", "Orchestrator (-> WebSurfer)", "Coder", "Orchestrator (-> Coder)",
    "Verification_Expert", "DataAnalysis_Expert", "Coder", "WebSurfer",
    "Orchestrator (termination condition)", "WebSurfer", "Orchestrator (thought)", "Coder",
    "WebSurfer", "FileSurfer", "Orchestrator (thought)",
]  # fmt: skip


def roster_trace() -> Trace:
    steps = [
        Step(index=i, agent=role.split(" (")[0], role=role, content=f"message {i}")
        for i, role in enumerate(ROLES)
    ]
    return Trace(
        id="tables/roster", task="Find the answer.", steps=steps,
        label=GoldLabel(agent="WebSurfer", step=12),
    )  # fmt: skip


def run(spec: str, trace: Trace, backend: Any) -> Attribution:
    return asyncio.run(run_method(create_method(spec), trace, LLM(backend)))


def expected_pair(trace: Trace, reading: tuple[str, int] | None) -> tuple[str | None, int | None]:
    """What the one agent/step rule leaves of a reading."""
    if reading is None:
        return None, None
    agent, step = reading
    if 0 <= step < len(trace.steps) and trace.steps[step].agent == agent:
        return agent, step
    return agent, None


def test_all_at_once_reads_every_table_reply_as_the_table_says() -> None:
    trace = roster_trace()
    assert trace.label is not None
    hits = {"agent": 0, "step": 0}
    want = {"agent": 0, "step": 0}
    for reply, reading, note in agent_step.ROWS:
        result = run("all-at-once", trace, ScriptedBackend([reply] * 3))
        agent, step = expected_pair(trace, reading)
        assert (result.agent, result.step) == (agent, step), note
        assert result.status == ("ok" if step is not None else "unparsed"), note
        if reading is not None and step is None:
            assert "step_unparsed" in result.details, note
        hits["agent"] += agent_correct(result.agent, trace.label)
        hits["step"] += step_correct(result.step, trace.label)
        want["agent"] += agent == "WebSurfer"
        want["step"] += step == 12
    assert hits == want
    assert want["agent"] >= 20 and want["step"] >= 20  # the table exercises the score


def test_hybrid_keeps_the_agent_of_any_readable_first_answer() -> None:
    trace = roster_trace()
    for reply, reading, note in agent_step.ROWS[::3]:
        judge = OracleJudge(trace)

        def answer(request: ChatRequest, reply: str = reply, judge: OracleJudge = judge) -> str:
            question = question_of(request, trace)
            return reply if question.kind == "all-at-once" else str(judge.answer(question))

        result = run("hybrid", trace, FunctionBackend(answer))
        if reading is None:
            assert (result.status, result.agent) == ("unparsed", None), note
        elif reading[0] == "WebSurfer":
            assert (result.agent, result.step, result.status) == ("WebSurfer", 12, "ok"), note
        else:
            assert (result.agent, result.step, result.status) == (
                reading[0],
                None,
                "no-error-found",
            ), note


def test_step_by_step_reads_every_yes_no_reply_as_the_table_says() -> None:
    trace = load_trace(FIVE)
    found = 0
    for reply, reading, note in yes_no.ROWS:

        def answer(request: ChatRequest, reply: str = reply) -> str:
            return reply if question_of(request, trace).step == 1 else "1. No. 2. The step is fine."

        result = run("step-by-step", trace, FunctionBackend(answer))
        if reading is True:
            assert (result.status, result.agent, result.step) == ("ok", "Searcher", 1), note
            found += 1
        elif reading is False:
            assert (result.status, result.step) == ("no-error-found", None), note
        else:
            assert (result.status, result.step) == ("unparsed", None), note
    assert found == sum(1 for _, reading, _ in yes_no.ROWS if reading is True)


@pytest.mark.parametrize(("reply", "reading", "note"), halves.ROWS[::2])
def test_binary_search_reads_the_first_half_answer_as_the_table_says(
    reply: str, reading: str | None, note: str
) -> None:
    trace = load_trace(FIVE)  # [0, 4]: upper half 0-2 holds the gold step 1
    judge = OracleJudge(trace)

    def answer(request: ChatRequest) -> str:
        question = question_of(request, trace)
        # The whole log (and its re-asks) gets the table's reply; the oracle does the rest.
        return reply if question.upper == (0, 2) else str(judge.answer(question))

    result = run("binary-search", trace, FunctionBackend(answer))
    if reading is None:
        assert (result.status, result.step) == ("unparsed", None), note
    else:
        assert result.status == "ok", note
        assert (result.step == 1) is (reading == "upper"), note
