"""Answers written as Python literals (single quotes, True/None), as Python-minded models
write them, are read as written by the one JSON-answer reader; nothing is evaluated."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from faultfinder.judging.answer_json import MAX_LITERAL_CHARS, MAX_LITERAL_DEPTH, extract_json
from faultfinder.judging.answers import parse_agent_step_reason, parse_yes_no
from faultfinder.judging.method import Attribution, run_method
from faultfinder.llm import LLM, ParseError, ScriptedBackend
from faultfinder.methods.echo.schema import parse_judge
from faultfinder.methods.whowhen.common import parse_judgement
from faultfinder.registry import create_method
from faultfinder.traces.loader import load_trace

# Planner, Searcher, Coder, Planner, Coder
FIVE = Path(__file__).parent / "fixtures" / "baselines" / "five_steps.json"
AGENTS = ["Planner", "Searcher", "Coder"]
PAPER = "{'Agent Name': 'Searcher', 'Step Number': 1, 'Reason for Mistake': \"It didn't scroll\"}"


def run(spec: str, replies: list[str]) -> Attribution:
    method = create_method(spec)
    return asyncio.run(run_method(method, load_trace(FIVE), LLM(ScriptedBackend(replies))))


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (PAPER, {"Agent Name": "Searcher", "Step Number": 1,
                 "Reason for Mistake": "It didn't scroll"}),
        ("{'a': 'He said \"no\" }', 'b': None, 'c': [True, False, -2, 1.5]}",
         {"a": 'He said "no" }', "b": None, "c": [True, False, -2, 1.5]}),
        ("Here is my answer:\n{'step': 3, 'ok': True}\nHope it helps.", {"step": 3, "ok": True}),
        ("```python\n{\n    'agent': 'Coder',\n    'step': 2,\n}\n```",
         {"agent": "Coder", "step": 2}),
        ("<json>{'step': 3}</json>", {"step": 3}),
        ("[{'step': 1}, {'step': 2}]", [{"step": 1}, {"step": 2}]),
    ],
)  # fmt: skip
def test_a_python_literal_is_read_as_written(reply: str, expected: Any) -> None:
    assert extract_json(reply) == expected


def test_json_still_wins_and_is_read_as_before() -> None:
    assert extract_json('{"step": 3, "why": "it\'s wrong"}') == {"step": 3, "why": "it's wrong"}


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("{'a', 'b'}", "values JSON cannot"),
        ("{'a': (1, 2)}", "values JSON cannot"),
        ("{1: 'a'}", "values JSON cannot"),
        ("{'a': b'x'}", "values JSON cannot"),
        ("{'a': 1+2j}", "values JSON cannot"),
        ("{'ok': true}", "'true' mixes JSON into it"),
        ("{'a': x.y}", "'x.y' is not a value"),
        ("{'a': 'x',, }", "not Python syntax"),
        ("\n\n{'a': " + "9" * 5000 + "}", "line 3 is neither valid JSON nor a Python literal"),
        ("{'a': '" + "x" * MAX_LITERAL_CHARS + "'}", "too large"),
        ("[" * (MAX_LITERAL_DEPTH + 1) + "'x'" + "]" * (MAX_LITERAL_DEPTH + 1), "too large"),
    ],
)
def test_anything_else_is_unreadable_and_the_error_says_why(reply: str, problem: str) -> None:
    with pytest.raises(ParseError, match=problem):
        extract_json(reply)


def test_nothing_in_an_answer_is_evaluated(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    reply = f"{{'agent': __import__('pathlib').Path({str(marker)!r}).touch()}}"
    with pytest.raises(ParseError, match="is not a value"):
        extract_json(reply)
    assert not marker.exists()


def test_an_object_quoted_inside_a_sentence_is_not_the_answer() -> None:
    with pytest.raises(ParseError, match="no valid JSON object"):
        extract_json("The tool returned {'answer': 'Yes'} twice.")
    assert parse_yes_no("1. No. 2. The tool returned {'answer': 'Yes'} twice.") is False
    labelled = "Agent Name: Coder\nStep Number: 2\nReason: it printed {'status': 'ok'} only"
    found = parse_agent_step_reason(labelled, AGENTS)
    assert (found.agent, found.step, found.reason) == (
        "Coder",
        2,
        "it printed {'status': 'ok'} only",
    )


def test_all_at_once_reads_a_python_literal_answer() -> None:
    result = run("all-at-once", [PAPER])
    assert (result.status, result.agent, result.step, result.reason) == (
        "ok",
        "Searcher",
        1,
        "It didn't scroll",
    )


def test_step_by_step_reads_a_python_literal_judgement() -> None:
    judgement = parse_judgement("{'answer': 'Yes', 'reason': \"It didn't scroll\"}")
    assert (judgement.erroneous, judgement.reason) == (True, "It didn't scroll")
    result = run("step-by-step", ["{'answer': 'No', 'reason': 'fine'}", "{'answer': True}"])
    assert (result.status, result.step) == ("ok", 1)


def test_echo_judge_reads_a_python_literal_answer() -> None:
    reply = "{'mistake_agent': 'Coder', 'mistake_step': 2, 'mistake_reason': 'off by one'}"
    assert parse_judge(reply, AGENTS, 5).model_dump() == {
        "agent": "Coder",
        "step": 2,
        "reason": "off by one",
    }


def test_an_unreadable_literal_answer_is_unparsed_saying_why() -> None:
    reply = "{'Agent Name': 'Searcher', 'Step Number': 1, 'Confident': true}"
    result = run("all-at-once", [reply] * 3)
    assert result.status == "unparsed"
    assert "'true' mixes JSON into it" in result.details["parse_error"]
    assert "no 'Agent Name:' line" in result.details["parse_error"]


DIGITS = "9" * 5_000
"""An integer longer than Python converts (4,300 digits): ``json`` refuses it with a plain
ValueError, and a hex literal that long parses but cannot be written back."""


@pytest.mark.parametrize(
    "reply",
    [
        f"[{DIGITS}]",
        f'{{"Agent Name": "Coder", "Step Number": {DIGITS}}}',
        "{'Agent Name': 'Coder', 'Step Number': 0x" + "f" * 5_000 + "}",
    ],
)
def test_an_integer_too_long_to_write_is_a_parse_error_not_a_crash(reply: str) -> None:
    with pytest.raises(ParseError):  # not the ValueError that escaped the reader
        extract_json(reply)
    with pytest.raises(ParseError):
        parse_agent_step_reason(reply, AGENTS, 5)


def test_fields_are_read_beside_an_object_holding_a_huge_integer() -> None:
    # The answer's own fields, and a quoted object Python's json refuses: the refusal
    # escaped stated_json, so a readable answer came back unparsed.
    reply = f'Step 2 printed {{"sum": {DIGITS}}}.\nAgent Name: Coder\nStep Number: 2\nReason: bad'
    answer = parse_agent_step_reason(reply, AGENTS, 5)
    assert (answer.agent, answer.step, answer.reason) == ("Coder", 2, "bad")
    assert run("all-at-once", [reply]).status == "ok"
