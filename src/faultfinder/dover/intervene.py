"""Intervention generation: a failure hypothesis becomes a concrete replacement message.

DoVer intervenes at the orchestrator level (Section 4.1): when the hypothesis blames a
sub-agent, the message rewritten is the orchestrator's latest message before the failure
step (its instruction or plan), so the sub-agent is steered, not edited.

An orchestrator whose step is a tool call (a handoff in LangGraph's supervisor or the
OpenAI Agents SDK) keeps its tool calls: the recommender is shown them and rewrites the
step's text, which is served with the recorded calls (ids kept), so the handoff still
happens. It may also redirect one call to another tool offered at that step that takes
the same arguments (another agent's handoff).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from faultfinder.dover import prompts
from faultfinder.dover.models import Hypothesis, Intervention, InterventionProposal, Trial
from faultfinder.judging.render import RenderOptions, render_steps
from faultfinder.judging.structured import MAX_STEP_CHARS, json_parser, schema_constraint
from faultfinder.llm.client import LLM, ParseError, Reply
from faultfinder.replay.outcome import normalise_text
from faultfinder.traces.schema import Step, ToolCall, Trace

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


def _offered(step: Step) -> dict[str, Any]:
    """The function tools offered at ``step``'s request: name -> parameters schema."""
    offered: dict[str, Any] = {}
    for tool in (step.request or {}).get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and function.get("name"):
            offered[str(function["name"])] = function.get("parameters")
    return offered


def redirect_choices(step: Step) -> dict[int, list[str]]:
    """For each tool call of ``step``: the other tools offered at its request that take
    the same parameters (a handoff to another agent), which it may call instead with its
    arguments kept. Calls with no such tool are left out."""
    offered = _offered(step)
    choices: dict[int, list[str]] = {}
    for number, call in enumerate(step.tool_calls):
        if call.name not in offered:
            continue
        same = [
            name
            for name, parameters in offered.items()
            if name != call.name and parameters == offered[call.name]
        ]
        if same:
            choices[number] = sorted(same)
    return choices


def _calls_text(step: Step, choices: dict[int, list[str]]) -> str:
    """The prompt's part naming the step's tool calls ("" when it makes none)."""
    if not step.tool_calls:
        return ""
    text = prompts.TOOL_CALLS.format(
        empty=" (empty here)" if not step.content.strip() else "",
        calls="\n".join(
            f"- call {n}: {c.name}({_clipped(c.arguments)})" for n, c in enumerate(step.tool_calls)
        ),
    )
    if choices:
        text += prompts.REDIRECTS.format(
            choices="\n".join(
                f"- call {n} could call instead: {', '.join(names)}"
                for n, names in sorted(choices.items())
            )
        )
    return text


def _clipped(arguments: str) -> str:
    """A call's arguments as the prompt shows them: long ones cut, the cut marked."""
    if len(arguments) <= MAX_STEP_CHARS:
        return arguments
    return f"{arguments[:MAX_STEP_CHARS]}... [{len(arguments) - MAX_STEP_CHARS} more characters]"


def _check_redirect(
    choices: dict[int, list[str]],
) -> Callable[[InterventionProposal], None]:
    """The parser's check that a proposal's redirect is one the step allows."""

    def check(proposal: InterventionProposal) -> None:
        redirect = proposal.redirect
        if redirect is None:
            return
        if redirect.to not in choices.get(redirect.call, []):
            allowed = "; ".join(f"call {n}: {', '.join(v)}" for n, v in sorted(choices.items()))
            raise ParseError(
                f"redirect: call {redirect.call} cannot call {redirect.to!r} instead "
                f"(allowed: {allowed or 'none'})"
            )

    return check


def served_calls(step: Step, proposal: InterventionProposal) -> list[ToolCall]:
    """The tool calls served with the replacement: the step's recorded ones (ids and
    arguments kept), one renamed by the proposal's redirect."""
    calls = [call.model_copy() for call in step.tool_calls]
    redirect = proposal.redirect
    if redirect is not None and redirect.call < len(calls):
        calls[redirect.call] = calls[redirect.call].model_copy(update={"name": redirect.to})
    return calls


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
    step = trace.steps[target]
    original = step.content
    choices = redirect_choices(step)
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
        calls=_calls_text(step, choices),
        replaces=prompts.REPLACES_TEXT if step.tool_calls else prompts.REPLACES_MESSAGE,
        redirect_field=prompts.REDIRECT_FIELD if choices else "",
    )
    reply = await llm.chat(
        prompt,
        parse=json_parser(InterventionProposal, _check_redirect(choices)),
        purpose=f"dover: intervention for trial {trial.index}",
        temperature=temperature,
        constraint=schema_constraint(prompts.intervene_schema(choices)),
        max_tokens=prompts.MAX_TOKENS["intervene"],
    )
    if reply.parsed is None:
        return None, reply
    proposal = reply.parsed
    return (
        Intervention(
            **proposal.model_dump(),
            step=target,
            agent=step.agent,
            original=original,
            original_tool_calls=step.tool_calls,
            tool_calls=served_calls(step, proposal),
            leaks_answer=leaks(proposal.replacement, trace.ground_truth),
        ),
        reply,
    )
