"""Answers read as written: the ``<json>`` block ECHO asks for is the answer even when
prose before it quotes JSON (a tool call's arguments); the conclusion type in the prompt's
own words; a step number with a note on how steps are counted; an answer wrapped in
``<answer>`` tags."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from faultfinder.judging.answers import extract_json, parse_agent_step_reason
from faultfinder.judging.method import run_method
from faultfinder.llm import LLM, ChatRequest, FunctionBackend
from faultfinder.llm.client import ParseError
from faultfinder.methods.echo.schema import parse_analysis, parse_judge
from faultfinder.methods.whowhen.common import parse_judgement
from faultfinder.registry import create_method
from faultfinder.testing.oracle import OracleJudge, label_consistent
from faultfinder.traces.loader import load_traces

ORACLE = Path(__file__).parent / "fixtures" / "oracle"

AGENTS = ["user", "Planner", "Calculator"]


def analysis(kind: str = "single_agent") -> dict[str, object]:
    return {
        "analysis_summary": "x",
        "agent_evaluations": [
            {
                "agent_name": "Calculator",
                "step_index": 2,
                "error_likelihood": 0.9,
                "reasoning": "r",
                "evidence": "e",
            }
        ],
        "primary_conclusion": {
            "type": kind,
            "attribution": ["Calculator"],
            "mistake_step": 2,
            "confidence": 0.9,
            "reasoning": "step 2",
        },
        "alternative_hypotheses": [],
    }


@pytest.mark.parametrize(
    "prose",
    [
        'The Calculator called multiply({"a": 17, "b": 3}) and reported 55.\n',
        "The Calculator's call began multiply({ and never closed it.\n",  # unclosed brace
    ],
)
def test_the_tagged_block_is_the_answer_whatever_json_the_prose_quotes(prose: str) -> None:
    reply = prose + "<json>\n" + json.dumps(analysis(), indent=2) + "\n</json>"
    found = parse_analysis(reply, AGENTS)
    assert found.primary_conclusion.attribution == ["Calculator"]
    assert found.primary_conclusion.mistake_step == 2


def test_a_tagged_block_cut_off_is_named_as_such() -> None:
    with pytest.raises(ParseError, match="<json> block is cut off"):
        parse_analysis('Reasoning first.\n<json>\n{"analysis_summary": "x", ', AGENTS)


def test_the_judge_reads_its_tagged_answer_after_quoted_json() -> None:
    answer = {"mistake_agent": "Calculator", "mistake_step": 2, "mistake_reason": "r"}
    reply = 'Step 2 sent {"a": 17}.\n<json>' + json.dumps(answer) + "</json>"
    verdict = parse_judge(reply, AGENTS, 3)
    assert (verdict.agent, verdict.step) == ("Calculator", 2)


def test_extract_json_takes_the_last_tagged_block() -> None:
    assert extract_json('see {"q": 1}\n<json>{"a": [1, 2,]}</json>') == {"a": [1, 2]}
    assert extract_json('<json>{"a": 1}</json> then <json>{"b": 2}</json>') == {"b": 2}
    assert extract_json('{"whole": true}') == {"whole": True}


@pytest.mark.parametrize(
    ("written", "kind"),
    [("Single agent error", "single_agent"), ("Multi-agent error", "multi_agent")],
)
def test_the_conclusion_type_in_the_prompts_words(written: str, kind: str) -> None:
    found = parse_analysis(json.dumps(analysis(written)), AGENTS)
    assert found.primary_conclusion.type == kind


@pytest.mark.parametrize(
    "note", ["step indices start at 0", "indices begin at 0", "numbering starts from 0"]
)
def test_a_step_with_a_note_on_counting_is_one_step(note: str) -> None:
    text = f"Agent Name: Calculator\nStep Number: 2 ({note})\nReason for Mistake: x"
    assert parse_agent_step_reason(text, AGENTS).step == 2


def test_two_steps_are_still_refused() -> None:
    with pytest.raises(ParseError, match="several candidate steps"):
        parse_agent_step_reason("Agent Name: Calculator\nStep Number: 2 or 0\nReason: x", AGENTS)


@pytest.mark.parametrize(
    ("reply", "erroneous"),
    [
        ("<answer>Yes</answer>\nThe step used the wrong value.", True),
        ("<answer>1. No. 2. The step is fine.</answer>", False),
        ("<ANSWER>\n1. Yes. 2. Wrong value.\n</ANSWER>", True),
        ("<final_answer>No</final_answer>", False),
    ],
)
def test_an_answer_in_answer_tags_is_read_without_them(reply: str, erroneous: bool) -> None:
    judgement = parse_judgement(reply)
    assert judgement.erroneous is erroneous
    assert "answer>" not in judgement.reason.lower()


def test_an_agent_step_answer_opening_on_its_answer_tag_line() -> None:
    reply = "<answer>Agent Name: Calculator\nStep Number: 2\nReason for Mistake: x</answer>"
    found = parse_agent_step_reason(reply, AGENTS)
    assert (found.agent, found.step, found.reason) == ("Calculator", 2, "x")


def test_an_answer_tag_quoted_inside_a_line_is_text() -> None:
    # Step 1's output, quoted in the reason: not a second answer.
    reply = (
        "Agent Name: Calculator\nStep Number: 2\nReason for Mistake: it said <answer>9</answer> too"
    )
    assert parse_agent_step_reason(reply, AGENTS).reason.endswith("<answer>9</answer> too")


@pytest.mark.parametrize("method", ["all-at-once", "step-by-step", "hybrid", "chief:M1"])
def test_a_perfect_judge_answering_in_answer_tags_scores_100(method: str) -> None:
    traces = [t for t in load_traces(ORACLE) if label_consistent(t)]
    for trace in traces:
        judge = OracleJudge(trace)

        def tagged(request: ChatRequest, judge: OracleJudge = judge) -> str | dict[str, Any]:
            reply = judge(request)
            return f"<answer>{reply}</answer>" if isinstance(reply, str) else reply

        llm = LLM(FunctionBackend(tagged))
        result = asyncio.run(run_method(create_method(method), trace, llm))
        assert (result.agent, result.step) == (trace.label.agent, trace.label.step), trace.id
