"""The one prompt fitter: a 400-step trace under a 4k-token budget, across methods.

Every prompt stays within the budget, cuts are visible, and the step a question is about
is shown whole (with its neighbours when they fit)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from faultfinder.judging.fitting import Piece, fit_pieces, fit_steps, fit_text
from faultfinder.judging.method import Attribution, run_method
from faultfinder.judging.render import ContextBudgetError, RenderOptions
from faultfinder.llm import LLM, ChatRequest, FunctionBackend
from faultfinder.llm.base import approx_token_count, messages_text
from faultfinder.registry import create_method
from faultfinder.traces.schema import Step, Trace

BUDGET = 4000
N_STEPS = 400
AGENTS = [f"Agent{i:02d}" for i in range(20)]
LONG_STEP = 150


def content(i: int) -> str:
    body = f"Step {i} work: " + " ".join(f"word{i}-{k}" for k in range(40))
    if i == LONG_STEP:
        body += "\n" + "the long tool output of this step, " * 90
    return body + f" END-OF-STEP-{i}"


def big_trace() -> Trace:
    steps = [
        Step(index=i, agent=AGENTS[i % len(AGENTS)], content=content(i)) for i in range(N_STEPS)
    ]
    return Trace(id="big", task="Find the number.", steps=steps)


def run(spec: str, answer: Any, **cfg: Any) -> tuple[Attribution, FunctionBackend]:
    backend = FunctionBackend(answer)
    method = create_method(spec, context_budget=BUDGET, **cfg)
    result = asyncio.run(run_method(method, big_trace(), LLM(backend, parse_retries=0)))
    return result, backend


def within_budget(backend: FunctionBackend) -> None:
    assert backend.requests
    for request in backend.requests:
        assert approx_token_count(messages_text(request.messages)) <= BUDGET


def judged_whole(prompt: str, step: int) -> bool:
    return content(step) in prompt


def test_the_trace_is_far_over_the_budget() -> None:
    text = "\n".join(content(i) for i in range(N_STEPS))
    assert approx_token_count(text) > 6 * BUDGET


def test_all_at_once_leaves_out_far_steps_visibly() -> None:
    def answer(request: ChatRequest) -> str:
        return "Agent Name: Agent00\nStep Number: 0\nReason for Mistake: wrong."

    result, backend = run("all-at-once", answer)
    within_budget(backend)
    prompt = backend.requests[0].messages[-1]["content"]
    assert result.status == "ok" and result.details["truncated"] is True
    # No step is judged alone: the middle of the log goes first; head and tail stay.
    assert "left out by faultfinder to fit the context budget" in prompt
    assert "Step 0 - Agent00" in prompt and f"Step {N_STEPS - 1} - " in prompt
    assert f"Step {N_STEPS // 2} - " not in prompt


def test_step_by_step_never_cuts_the_judged_step_or_drops_its_neighbours() -> None:
    target = LONG_STEP + 2
    agent = AGENTS[target % len(AGENTS)]

    def answer(request: ChatRequest) -> str:
        prompt = request.messages[-1]["content"]
        if "Agent Name: (Your prediction)" in prompt:
            return f"Agent Name: {agent}\nStep Number: 0\nReason for Mistake: wrong."
        last = int(re.findall(r"END-OF-STEP-(\d+)", prompt)[-1])
        return "1. Yes. 2. wrong." if last == target else "1. No. 2. fine."

    # Hybrid judges one agent's steps, each with the whole log before it.
    result, backend = run("hybrid", answer)
    within_budget(backend)
    assert result.status == "ok" and (result.agent, result.step) == (agent, target)
    assert len(backend.requests) == 1 + target // len(AGENTS) + 1
    for request in backend.requests[1:]:
        prompt = request.messages[-1]["content"]
        judged = int(re.findall(r"END-OF-STEP-(\d+)", prompt)[-1])
        assert judged_whole(prompt, judged)
        assert f"Step {judged - 1} - " in prompt


def test_step_by_step_shows_a_long_judged_step_whole() -> None:
    seen: list[str] = []

    def answer(request: ChatRequest) -> str:
        prompt = request.messages[-1]["content"]
        last = int(re.findall(r"END-OF-STEP-(\d+)", prompt)[-1])
        if last == LONG_STEP:
            seen.append(prompt)
            return "1. Yes. 2. wrong."
        return "1. No. 2. fine."

    result, backend = run("step-by-step", answer)
    within_budget(backend)
    assert result.step == LONG_STEP and judged_whole(seen[0], LONG_STEP)
    assert "left out by faultfinder" in seen[0]


def test_binary_search_keeps_the_boundary_between_the_halves() -> None:
    def answer(request: ChatRequest) -> str:
        return "lower half"

    result, backend = run("binary-search", answer)
    within_budget(backend)
    assert result.status == "ok" and result.step == N_STEPS - 1
    first = backend.requests[0].messages[-1]["content"]
    assert judged_whole(first, 199) and judged_whole(first, 200)


def test_echo_step_pass_shows_the_focus_steps_whole() -> None:
    def answer(request: ChatRequest) -> str:
        # The pass is named in the system prompt (paper layout) or the user message.
        step = 3 if "(step-level attribution)" in messages_text(request.messages) else None
        return (
            '{"primary_conclusion": {"type": "single_agent", "attribution": ["Agent03"], '
            f'"mistake_step": {"null" if step is None else step}, "confidence": 0.9, '
            '"reasoning": "r"}, "alternative_hypotheses": [], "analysis_summary": "s"}'
        )

    result, backend = run("echo", answer)
    within_budget(backend)
    step_prompts = [
        r.messages[-1]["content"]
        for r in backend.requests
        if "(step-level attribution)" in messages_text(r.messages)
    ]
    assert step_prompts
    for prompt in step_prompts:
        for focus in range(3, N_STEPS, len(AGENTS)):
            assert f"Step {focus} - Agent03" in prompt
    assert result.status == "ok"


@pytest.mark.parametrize("spec", ["chief", "agentic", "echo:I1", "echo:I3"])
def test_other_methods_never_send_a_prompt_over_the_budget(spec: str) -> None:
    def answer(request: ChatRequest) -> str:
        return "not a readable answer"

    result, backend = run(spec, answer)
    within_budget(backend)
    assert result.status in ("unparsed", "error", "no-error-found", "ok")


# --- the fitter itself -------------------------------------------------------------


def test_judged_steps_alone_over_the_budget_are_an_error_not_a_cut() -> None:
    trace = big_trace()
    with pytest.raises(ContextBudgetError, match="never cut"):
        fit_steps(trace, trace.steps, RenderOptions(), 200, judged=[LONG_STEP])


def test_neighbours_are_cut_only_after_everything_else_is_gone() -> None:
    trace = big_trace()
    steps = trace.steps[: LONG_STEP + 2]
    text, cut = fit_steps(trace, steps, RenderOptions(), 1200, judged=[LONG_STEP + 1])
    assert cut and approx_token_count(text) <= 1200
    assert content(LONG_STEP + 1) in text
    # The long neighbour is cut (with a marker) because nothing else is left to cut.
    assert "truncated by faultfinder" in text and "Steps 0-" in text


def test_markers_name_the_left_out_steps_and_speakers() -> None:
    pieces = [
        Piece(step=i, agent=f"A{i % 2}", role="other", render=lambda cap, i=i: "x" * 400, size=400)
        for i in range(10)
    ]
    text, cut = fit_pieces(pieces, 250, approx_token_count, what="test")
    assert cut and approx_token_count(text) <= 250
    assert re.search(r"\[Steps \d+-\d+ by A\d, A\d: left out by faultfinder", text)


def test_fit_text_is_never_over_the_budget() -> None:
    text = "y" * 5000
    out, cut = fit_text(
        lambda cap: text if cap is None else text[:cap],
        100,
        approx_token_count,
        size=5000,
        what="t",
    )
    assert cut and approx_token_count(out) <= 100
    with pytest.raises(ContextBudgetError):
        fit_text(lambda cap: text, 100, approx_token_count, size=5000, what="t")
