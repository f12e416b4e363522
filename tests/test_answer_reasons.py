"""Every method records the reason its answer states, never a piece of the reply.

The Who&When methods run for real against scripted replies written as models write them:
JSON, fenced JSON, labelled fields in markdown bold, prose, the paper's item format.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from faultfinder.judging.answers import parse_agent_step_reason, stated_reason
from faultfinder.judging.method import Attribution, run_method
from faultfinder.llm import LLM, ParseError, ScriptedBackend
from faultfinder.methods.agentic.actions import parse_submission_text
from faultfinder.methods.echo.schema import parse_judge
from faultfinder.methods.whowhen.common import parse_reason
from faultfinder.registry import create_method
from faultfinder.traces.loader import load_trace

# Planner, Searcher, Coder, Planner, Coder
FIVE = Path(__file__).parent / "fixtures" / "baselines" / "five_steps.json"
AGENTS = ["Planner", "Searcher", "Coder"]


def run(spec: str, replies: list[str], **cfg: Any) -> Attribution:
    method = create_method(spec, **cfg)
    return asyncio.run(run_method(method, load_trace(FIVE), LLM(ScriptedBackend(replies))))


YES_ANSWERS = [
    ('{"answer": "Yes", "reason": "It searched 2019."}', "It searched 2019."),
    ('```json\n{"Yes/No": "Yes", "Reason": "It searched 2019."}\n```', "It searched 2019."),
    ("**Yes/No:** Yes\n**Reason:** It searched 2019.", "It searched 2019."),
    (
        "**Yes/No:** Yes\n**Reason:**\nIt searched 2019.\nThe task asks for 2020.",
        "It searched 2019.\nThe task asks for 2020.",
    ),
    ("1. Yes. 2. It searched 2019.", "It searched 2019."),
    ("1. **Yes**\n2. **Reason:** It searched 2019.", "It searched 2019."),
    ("1. Yes. 2. Reason: It searched 2019.", "It searched 2019."),
    # No reason stated apart from the answer: the whole answer, not what follows 'Yes'.
    ("Yes, it searched 2019, not 2020.", "Yes, it searched 2019, not 2020."),
    # The '2.' of 'step 2.' is not item 2.
    (
        "1. Yes. The value read at step 2. is from 2019.",
        "1. Yes. The value read at step 2. is from 2019.",
    ),
]


@pytest.mark.parametrize(("reply", "reason"), YES_ANSWERS)
def test_step_by_step_records_the_stated_reason(reply: str, reason: str) -> None:
    result = run("step-by-step", ['{"answer": "No", "reason": "The plan is fine."}', reply])
    assert (result.status, result.agent, result.step, result.reason) == (
        "ok",
        "Searcher",
        1,
        reason,
    )
    judged = result.details["judged"]
    assert [j["reason"] for j in judged] == ["The plan is fine.", reason]


@pytest.mark.parametrize(("reply", "reason"), YES_ANSWERS[:3])
def test_hybrid_records_the_stated_reason_of_its_step_judge(reply: str, reason: str) -> None:
    first = "Agent Name: Searcher\nStep Number: 1\nReason for Mistake: wrong year"
    result = run("hybrid", [first, reply])
    assert (result.agent, result.step, result.reason) == ("Searcher", 1, reason)


AGENT_STEP_ANSWERS = [
    (
        '{"Agent Name": "Searcher", "Step Number": 1, "Reason for Mistake": "wrong year"}',
        "wrong year",
    ),
    ('```json\n{"agent": "Searcher", "step": 1, "reason": "wrong year"}\n```', "wrong year"),
    (
        "**Agent Name:** Searcher\n**Step Number:** 1\n**Reason for Mistake:** It searched "
        "2019.\nThe task asks for 2020.",
        "It searched 2019.\nThe task asks for 2020.",
    ),
    (
        "### Reason for Mistake\nIt searched 2019.\n\n**Agent Name:** Searcher\n**Step Number:** 1",
        "It searched 2019.",
    ),
    # No reason at all: the whole answer.
    ("Agent Name: Searcher\nStep Number: 1", "Agent Name: Searcher\nStep Number: 1"),
]


@pytest.mark.parametrize(("reply", "reason"), AGENT_STEP_ANSWERS)
def test_all_at_once_records_the_stated_reason(reply: str, reason: str) -> None:
    result = run("all-at-once", [reply])
    assert (result.agent, result.step, result.reason) == ("Searcher", 1, reason)
    assert parse_agent_step_reason(reply, AGENTS).reason == reason


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("**Reason for Mistake:** It started from a wrong plan.", "It started from a wrong plan."),
        ('{"reason": "It started from a wrong plan."}', "It started from a wrong plan."),
        ("For this reason: the plan was wrong.", "For this reason: the plan was wrong."),
    ],
)
def test_binary_search_explanation_records_the_stated_reason(reply: str, reason: str) -> None:
    result = run("binary-search", ["upper half", "upper half", "upper half", reply], explain=True)
    assert (result.step, result.reason) == (0, reason)


@pytest.mark.parametrize("reply", ["Reason for Mistake:", "**Reason for Mistake:**  "])
def test_an_explanation_of_only_its_label_is_unreadable(reply: str) -> None:
    with pytest.raises(ParseError, match="empty reason"):
        parse_reason(reply)


def test_agentic_text_submission_records_every_line_of_its_reason() -> None:
    reply = (
        "**Agent Name:** Searcher\n**Step Number:** 1\n"
        "**Reason for Mistake:** It searched 2019.\nThe task asks for 2020."
    )
    assert parse_submission_text(reply)["reason"] == "It searched 2019.\nThe task asks for 2020."


def test_echo_judge_stating_no_reason_records_its_answer() -> None:
    reply = '{"mistake_agent": "Coder", "mistake_step": 2}'
    assert parse_judge(reply, AGENTS, 5).reason == reply
    stated = '{"mistake_agent": "Coder", "mistake_step": 2, "mistake_reason": "off by one"}'
    assert parse_judge(stated, AGENTS, 5).reason == "off by one"


def test_an_echoed_placeholder_is_not_the_reason() -> None:
    reply = (
        "Agent Name: (Your prediction)\nStep Number: (Your prediction)\n"
        "Reason for Mistake: (Your reason)\n\nAgent Name: Coder\nStep Number: 2\n"
        "Reason for Mistake: off by one"
    )
    assert stated_reason(reply) == "off by one"


def test_a_correction_after_the_fields_is_read_as_written_and_shown_in_the_reason() -> None:
    reply = (
        "Agent Name: Searcher\nStep Number: 1\nReason for Mistake: It searched 2019.\n"
        "Actually, it was step 3."
    )
    result = run("all-at-once", [reply])
    assert (result.agent, result.step) == ("Searcher", 1)
    assert result.reason == "It searched 2019.\nActually, it was step 3."
    judged = run("step-by-step", ["1. No. 2. fine", "1. Yes. 2. It searched 2019.\nActually, no."])
    assert (judged.step, judged.reason) == (1, "It searched 2019.\nActually, no.")


def test_json_quoted_in_a_reason_is_neither_the_answer_nor_its_reason() -> None:
    reply = '1. Yes. 2. Reason: the tool returned {"reason": "timeout"} and it went on.'
    result = run("step-by-step", ["1. No. 2. fine", reply])
    assert (result.step, result.reason) == (
        1,
        'the tool returned {"reason": "timeout"} and it went on.',
    )
    quoted = '1. No. 2. The tool returned {"answer": "Yes"} as asked.'
    judged = run("step-by-step", [quoted] * 5)
    assert judged.status == "no-error-found"
