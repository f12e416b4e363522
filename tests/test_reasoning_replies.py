"""Replies of reasoning models (DeepSeek-R1, Qwen3, QwQ served without a reasoning parser):
the reasoning comes first, in ``<think>...</think>``, and tries out answers in the very
format the prompt asks for. The answer is what follows the block, in every method.

The judge below is a perfect judge whose every text reply opens with a reasoning block
holding the *wrong* judge's answer to the same question: a method that reads the
reasoning scores below 100%, or ends unparsed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from faultfinder.eval.metrics import agent_correct, step_correct
from faultfinder.judging.answers import answer_part, parse_agent_step_reason, parse_yes_no
from faultfinder.judging.method import run_method
from faultfinder.judging.structured import json_parser
from faultfinder.llm import LLM, ChatRequest, FunctionBackend
from faultfinder.llm.client import ParseError
from faultfinder.methods.agentic.actions import parse_action, parse_submission_text
from faultfinder.methods.echo.schema import parse_judge, parse_sections
from faultfinder.methods.whowhen.common import parse_half, parse_judgement, parse_reason
from faultfinder.registry import create_method
from faultfinder.testing.oracle import (
    ORACLE_METHODS,
    OracleJudge,
    label_consistent,
    question_of,
)
from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import Trace

FIXTURES = Path(__file__).parent / "fixtures" / "oracle"
AGENTS = ["WebSurfer", "Orchestrator", "Coder"]


def with_reasoning(opening: str) -> Callable[[str, str], str]:
    """A reply writer: ``reasoning`` in a think block (``opening`` '' leaves the opening tag
    to the chat template, as the R1 distills' templates do), then the answer."""

    def write(reasoning: str, answer: str) -> str:
        return (
            f"{opening}\n{reasoning}\nWait, that is not right. Let me check.\n</think>\n\n{answer}"
        )

    return write


STYLES = {"tagged": with_reasoning("<think>"), "template-opened": with_reasoning("")}


def reasoning_judge(trace: Trace, write: Callable[[str, str], str]) -> FunctionBackend:
    right = OracleJudge(trace)
    wrong = OracleJudge(trace, wrong=True)

    def answer(request: ChatRequest) -> str | dict[str, Any]:
        reply = right(request)
        if not isinstance(reply, str):
            return reply  # a tool call: no text to read
        draft = wrong.answer(question_of(request, trace), tools=bool(request.tools))
        return write(draft if isinstance(draft, str) else "ACTION: submit {}", reply)

    return FunctionBackend(answer, model=f"reasoning-oracle:{trace.id}")


@pytest.fixture(scope="module")
def consistent() -> list[Trace]:
    traces = [t for t in load_traces(FIXTURES) if label_consistent(t)]
    assert len(traces) == 18
    return traces


@pytest.mark.parametrize("style", sorted(STYLES))
@pytest.mark.parametrize("method", [*ORACLE_METHODS, "agentic:text"])
def test_a_perfect_reasoning_judge_scores_100_through_every_method(
    consistent: list[Trace], method: str, style: str
) -> None:
    missed = []
    for trace in consistent:
        llm = LLM(reasoning_judge(trace, STYLES[style]))
        result = asyncio.run(run_method(create_method(method), trace, llm))
        assert trace.label is not None
        if not (
            agent_correct(result.agent, trace.label) and step_correct(result.step, trace.label)
        ):
            missed.append((trace.id, result.status, result.agent, result.step))
    assert missed == []


def test_the_answer_follows_the_reasoning_block() -> None:
    assert answer_part("<think>Step Number: 3?</think>\nStep Number: 12") == "\nStep Number: 12"
    assert answer_part("<think>a</think>\n<think>b</think> upper half") == " upper half"
    assert answer_part("  <Thinking>a</Thinking>lower half") == "lower half"
    assert answer_part("drafts...\n</think>\nlower half") == "\nlower half"
    # No reasoning block: the reply is the answer, a quoted pair of tags included.
    quoted = "Reason for Mistake: step 3 printed <think>x</think> and no answer"
    assert answer_part(quoted) == quoted
    assert answer_part("upper half") == "upper half"


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        ("<think>\nAgent Name: Coder\nStep Number: 3\n", "never closes"),
        ("<think>Agent Name: Coder</think>\n  \n", "nothing follows"),
        ("Agent Name: Coder, surely.\n</think>", "nothing follows"),
    ],
)
def test_reasoning_without_an_answer_is_unparsed_with_its_reason(reply: str, error: str) -> None:
    for parse in (
        lambda text: parse_agent_step_reason(text, AGENTS),
        parse_yes_no,
        parse_half,
        parse_reason,
    ):
        with pytest.raises(ParseError, match=error):
            parse(reply)


THINK = (
    "<think>\nThe user wants the agent and step. Agent Name: Coder, Step Number: 3? "
    'Or as JSON {"Agent Name": "Coder", "Step Number": 3}. 1. No. lower half? upper half? '
    'ACTION: read_step_output {"step": 3}\n## Errors: none\nHmm, no.\n</think>\n\n'
)


def test_each_parser_reads_the_answer_after_the_reasoning() -> None:
    answer = parse_agent_step_reason(
        THINK + "Agent Name: WebSurfer\nStep Number: 12\nReason for Mistake: x", AGENTS
    )
    assert (answer.agent, answer.step) == ("WebSurfer", 12)
    answer = parse_agent_step_reason(
        THINK + '{"Agent Name": "WebSurfer", "Step Number": 12, "Reason for Mistake": "x"}',
        AGENTS,
    )
    assert (answer.agent, answer.step) == ("WebSurfer", 12)
    assert parse_judgement(THINK + "1. Yes. 2. It used the wrong value.").erroneous is True
    assert parse_half(THINK + "upper half") == "upper"
    assert parse_reason(THINK + "Reason for Mistake: it searched the wrong site.") == (
        "it searched the wrong site."
    )
    judged = parse_judge(
        THINK + '```json\n{"mistake_agent": "WebSurfer", "mistake_step": 12}\n```', AGENTS, 20
    )
    assert (judged.agent, judged.step) == ("WebSurfer", 12)
    assert parse_sections(THINK + "## Errors:\nThe search was wrong.")["Errors"] == (
        "The search was wrong."
    )
    action = parse_action(THINK + 'ACTION: submit {"agent": "WebSurfer", "step": 12}', ["submit"])
    assert action.arguments == {"agent": "WebSurfer", "step": 12}
    from pydantic import BaseModel

    class Pick(BaseModel):
        step: int

    assert json_parser(Pick)(THINK + '{"step": 12}').step == 12


# An answer after a reasoning block that quotes a lone close tag (a step printed one).
QUOTED_CLOSE = "<think>Step 3 looks wrong.</think>\n"


def test_an_answer_quoting_a_close_tag_is_read_once_by_each_parser() -> None:
    # answer_part read the text again, now without its block, and took the quoted tag for
    # the end of reasoning: "1. Yes" was dropped and the judgement unparsed.
    judged = parse_judgement(
        QUOTED_CLOSE + "1. Yes\n2. The agent printed '</think>' into its answer and stopped."
    )
    assert judged.erroneous is True
    assert judged.reason == "The agent printed '</think>' into its answer and stopped."
    submitted = parse_submission_text(
        QUOTED_CLOSE + 'ACTION: submit {"agent": "WebSurfer", "step": 12, '
        '"reason": "it typed </think> into the search box"}'
    )
    assert submitted == {
        "agent": "WebSurfer",
        "step": 12,
        "reason": "it typed </think> into the search box",
    }
