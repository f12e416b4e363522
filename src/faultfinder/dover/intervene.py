"""Intervention generation: a failure hypothesis becomes a concrete replacement message.

DoVer intervenes at the orchestrator level (Section 4.1): when the hypothesis blames a
sub-agent, the message rewritten is the orchestrator's latest message before the failure
step (its instruction or plan), so the sub-agent is steered, not edited.
"""

from __future__ import annotations

from typing import Literal

from faultfinder.dover import prompts
from faultfinder.dover.models import Hypothesis, Intervention, InterventionProposal, Trial
from faultfinder.judging.render import RenderOptions, render_steps
from faultfinder.judging.structured import MAX_STEP_CHARS, json_parser, schema_constraint
from faultfinder.llm.client import LLM, Reply
from faultfinder.replay.outcome import normalise_text
from faultfinder.traces.schema import Trace

Scope = Literal["orchestrator", "hypothesis"]


def orchestrator_of(trace: Trace, trial: Trial, named: str | None) -> str:
    """The planning agent: as named, else the agent of the trial's planning step."""
    if named:
        return named
    return trace.steps[
        trial.planning_step if trial.planning_step is not None else trial.start
    ].agent


def target_step(trace: Trace, hypothesis: Hypothesis, orchestrator: str, scope: Scope) -> int:
    """The step to rewrite for ``hypothesis``."""
    assert hypothesis.step is not None
    if scope == "hypothesis" or trace.steps[hypothesis.step].agent == orchestrator:
        return hypothesis.step
    for index in range(hypothesis.step - 1, -1, -1):
        if trace.steps[index].agent == orchestrator:
            return index
    return hypothesis.step


def leaks(replacement: str, answer: str | None) -> bool:
    """The reference answer appears in the replacement text."""
    if not answer or not normalise_text(answer):
        return False
    return f" {normalise_text(answer)} " in f" {normalise_text(replacement)} "


async def propose(
    trace: Trace,
    trial: Trial,
    hypothesis: Hypothesis,
    llm: LLM,
    *,
    orchestrator: str,
    target: int,
    with_ground_truth: bool,
    temperature: float = 0.0,
) -> tuple[Intervention | None, Reply[InterventionProposal]]:
    """Ask for the intervention; None (with the reply) when its answer is unreadable."""
    assert hypothesis.step is not None
    first = max(trial.start, hypothesis.step - 2)
    context_steps = trace.steps[first : hypothesis.step + 1]
    options = RenderOptions(
        observability="outputs", step_indices=True, max_step_chars=MAX_STEP_CHARS
    )
    original = trace.steps[target].content
    prompt = prompts.INTERVENE.format(
        orchestrator=orchestrator,
        task=trace.task,
        reference=prompts.reference_line(trace.ground_truth if with_ground_truth else None),
        agent=hypothesis.agent or "(unknown)",
        step=hypothesis.step,
        reason=hypothesis.reason or "(none given)",
        context=render_steps(trace, context_steps, options),
        target=target,
        original=original,
    )
    reply = await llm.chat(
        prompt,
        parse=json_parser(InterventionProposal),
        purpose=f"dover: intervention for trial {trial.index}",
        temperature=temperature,
        constraint=schema_constraint(prompts.SCHEMAS["intervene"]),
        max_tokens=prompts.MAX_TOKENS["intervene"],
    )
    if reply.parsed is None:
        return None, reply
    proposal = reply.parsed
    return (
        Intervention(
            **proposal.model_dump(),
            step=target,
            agent=trace.steps[target].agent,
            original=original,
            leaks_answer=leaks(proposal.replacement, trace.ground_truth),
        ),
        reply,
    )
