"""Parser audit: answers that hold two candidates, hedge or take themselves back are
unreadable (ParseError with a reason); the unambiguous forms a model writes still parse.

Defects: a step field with two numbers, a decimal or a hex literal read as its first
number (`parse_step_number`, ECHO's `_coerce_step`); a hedged or self-revised half read as
the half it names (`parse_half`); two different Yes/No answers read as the first
(`parse_yes_no`).
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from faultfinder.judging.answers import (
    Roster,
    parse_agent_step_reason,
    parse_step_number,
    parse_yes_no,
)
from faultfinder.llm.client import ParseError
from faultfinder.methods.echo.schema import Conclusion, Evaluation, parse_analysis, parse_judge
from faultfinder.methods.whowhen.common import parse_half, parse_judgement

AGENTS = Roster(["WebSurfer", "Orchestrator", "Coder"])

# --- 1. parse_step_number ---------------------------------------------------------------

TWO_STEPS = [
    "Step Number: 3 (or maybe 2)",
    "3 (or maybe 2)",
    "2|3",
    "7 vs 8",
    "7 (possibly 8)",
    "7, then 8",
    "Step 7; also step 8",
    "7,8",
    "step 7 (message 8)",
    "12 (1-indexed: 13)",
    "7 or 8",
    "7-8",
    "7或8",
]


@pytest.mark.parametrize("value", TWO_STEPS)
def test_a_step_field_with_two_numbers_is_unreadable(value: str) -> None:
    with pytest.raises(ParseError, match="several candidate steps"):
        parse_step_number(value)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("3.5", "not a whole step number"),
        ("Step 3.5", "not a whole step number"),
        ("step3.5", "not a whole step number"),
        ("0x7", "not a decimal step number"),
        ("Step 0x1F", "not a decimal step number"),
    ],
)
def test_a_decimal_or_hex_step_is_unreadable(value: str, reason: str) -> None:
    with pytest.raises(ParseError, match=reason):
        parse_step_number(value)


@pytest.mark.parametrize(
    "value",
    [
        "maybe 7",
        "7 (probably)",
        "7 (possibly)",
        "about step 7",
        "around 7",
        "~7",
        "7?",
        "7 or later",
        "7 or so",
        "not step 7",
        "at the latest 7",
        "7, not sure",
    ],
)
def test_a_hedged_step_is_unreadable(value: str) -> None:
    with pytest.raises(ParseError, match="hedged"):
        parse_step_number(value)


def test_a_float_step_must_be_whole() -> None:
    assert parse_step_number(7.0) == 7
    with pytest.raises(ParseError, match="not a whole step number"):
        parse_step_number(3.5)


@pytest.mark.parametrize(
    ("value", "step"),
    [
        ("3", 3),
        ("Step 3", 3),
        ("**3**", 3),
        ("3.", 3),
        ("#3", 3),
        ("step_3", 3),
        ("step3", 3),
        ("Step No. 3", 3),
        ("-1", -1),
        ("3 (the WebSurfer's reply)", 3),
        ("3 (0-based)", 3),
        ("3 (zero-based, counting from 0)", 3),
        ("3, i.e. its 4th message", 3),
        ("3 (Agent_2's search)", 3),
        ("The first mistake happens at step 3.", 3),
        ("It is 3", 3),
        ("Step 3 (step 3 is the search)", 3),
        ("3 - the wrong search", 3),
        ("The error is most likely at step 3.", 3),
        ("My best guess: 3", 3),
    ],
)
def test_one_clear_step_still_parses(value: str, step: int) -> None:
    assert parse_step_number(value) == step


def test_the_all_at_once_answer_rejects_two_steps_with_a_reason() -> None:
    reply = "Agent Name: WebSurfer\nStep Number: 3 (or maybe 2)\nReason for Mistake: x"
    with pytest.raises(ParseError, match=r"several candidate steps \(3, 2\)"):
        parse_agent_step_reason(reply, AGENTS)
    json_reply = '{"Agent Name": "WebSurfer", "Step Number": 3.0, "Reason for Mistake": "x"}'
    assert parse_agent_step_reason(json_reply, AGENTS).step == 3
    ok = "Agent Name: WebSurfer\nStep Number: 3 (the WebSurfer's reply)\nReason for Mistake: x"
    assert parse_agent_step_reason(ok, AGENTS).step == 3


# --- 2. ECHO's step fields follow the same rule ---------------------------------------


def _conclusion(step: object) -> Conclusion:
    return Conclusion.model_validate(
        {"type": "single_agent", "confidence": 0.5, "mistake_step": step}
    )


@pytest.mark.parametrize(
    ("step", "reason"),
    [
        ("2 or 3", "several candidate steps"),
        ("between 2 and 3", "several candidate steps"),
        ("steps 3-4", "several candidate steps"),
        ("3.5", "not a whole step number"),
        (3.5, "not a whole step number"),
        ("0x7", "not a decimal step number"),
        ("probably 3", "hedged"),
    ],
)
def test_echo_step_fields_reject_what_the_judge_parser_rejects(step: object, reason: str) -> None:
    with pytest.raises(ValidationError, match=reason):
        _conclusion(step)
    with pytest.raises(ValidationError, match=reason):
        Evaluation.model_validate(
            {"agent_name": "Coder", "error_likelihood": 0.5, "step_index": step}
        )
    with pytest.raises(ParseError, match=reason):
        parse_step_number(step if isinstance(step, float) else str(step))


@pytest.mark.parametrize(
    ("step", "expected"),
    [("Step 3", 3), ("3", 3), ("step_7", 7), (7, 7), (7.0, 7), ("none", None), ("", None)],
)
def test_echo_step_fields_still_read_one_step(step: object, expected: int | None) -> None:
    assert _conclusion(step).mistake_step == expected


def test_an_echo_analysis_with_two_primary_steps_is_unparsed_with_the_field_named() -> None:
    reply = (
        '{"primary_conclusion": {"type": "single_agent", "attribution": ["Coder"], '
        '"mistake_step": "2 or 3", "confidence": 0.8}}'
    )
    with pytest.raises(ParseError, match=r"primary_conclusion\.mistake_step.*several"):
        parse_analysis(reply, list(AGENTS))


def test_echo_judge_and_analysts_agree_on_two_steps() -> None:
    with pytest.raises(ParseError, match="several candidate steps"):
        parse_judge('{"mistake_agent": "Coder", "mistake_step": "3 or 6"}', list(AGENTS), 10)
    with pytest.raises(ValidationError, match="several candidate steps"):
        _conclusion("3 or 6")
    assert parse_judge('{"mistake_agent": "Coder", "mistake_step": "step 3"}', AGENTS, 10).step == 3


# --- 3. parse_half ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("I cannot determine whether it is the upper half.", "hedges"),
        ("I can't tell if it is the lower half.", "hedges"),
        ("The error is probably in the upper half.", "hedges"),
        ("Maybe the lower half.", "hedges"),
        ("It is impossible to say; perhaps the upper half.", "hedges"),
        ("Lower half? No, upper half.", "asks rather than answers"),
        ("Upper half?", "asks rather than answers"),
        ("lower half. Actually, upper half.", "takes its first half back"),
        ("Upper half, no wait, lower half.", "takes its first half back"),
        ("lower half - sorry, upper half", "takes its first half back"),
        ("It cannot be the upper half.", "negates"),
    ],
)
def test_a_hedged_negated_or_revised_half_is_unreadable(reply: str, reason: str) -> None:
    with pytest.raises(ParseError, match=reason):
        parse_half(reply)


@pytest.mark.parametrize(
    ("reply", "half"),
    [
        ("upper half", "upper"),
        ("**lower half**", "lower"),
        ("Upper half. The lower half only repeats the error.", "upper"),
        ("upper half. The mistake is probably at step 3.", "upper"),
        ("The error is more likely in the lower half.", "lower"),
        ("upper half or lower half? lower half", "lower"),
        ("Answer: upper half, no doubt.", "upper"),
    ],
)
def test_one_clear_half_still_parses(reply: str, half: str) -> None:
    assert parse_half(reply) == half


# --- 4. parse_yes_no --------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        "1. No. 2. fine.\n\nOn reflection, the figure is wrong.\nFinal Answer: Yes",
        "Answer: No\n\n1. Yes",
        "No.\nAnswer: Yes",
        "1. Yes. 2. wrong year.\nVerdict: No",
        "Yes/No: Yes\nReason: x\nFinal Answer: No",
    ],
)
def test_two_different_yes_no_answers_are_unreadable(reply: str) -> None:
    with pytest.raises(ParseError, match="twice, differently"):
        parse_yes_no(reply)
    with pytest.raises(ParseError, match="twice, differently"):
        parse_judgement(reply)


def test_a_repeated_answer_must_not_be_hedged() -> None:
    with pytest.raises(ParseError, match="hedges"):
        parse_yes_no("1. Yes. 2. wrong year.\nFinal Answer: Yes, probably")


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        ("1. Yes. 2. wrong year.\nFinal Answer: Yes", True),
        ("1. No. 2. fine\nAnswer: No", False),
        ("No.\nAnswer: No", False),
        ("**Yes/No:** **Yes**\n**Reason:** wrong file", True),
        ("Here is my judgment:\nNo. The agent's plan is reasonable.", False),
        ("1. No. 2. The step is fine.\nDecision: the plan stands.", False),
        ("Yes, there is no source for this claim.", True),
    ],
)
def test_one_answer_or_the_same_answer_repeated_still_parses(reply: str, answer: bool) -> None:
    assert parse_yes_no(reply) is answer
