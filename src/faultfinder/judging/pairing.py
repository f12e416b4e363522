"""The one rule for a step that cannot stand as the named agent's mistake.

Every method answers with an agent and a step. Two things can make the step unusable
while the agent is still a readable answer:

* the step lies **outside the trace** ("Step Number: 57" in a 40-step log);
* the step was **taken by another agent** than the one(s) named: the prompts ask "in
  which step the mistake agent made the mistake", so a step spoken by someone else does
  not answer that question.

In both cases the agent is kept, the step becomes ``None``, the verdict's status becomes
``unparsed`` and ``details['step_unparsed']`` says why in words (``details['rejected_step']``
keeps the value; ``details['out_of_range_step']`` too when it was outside the trace).
:func:`faultfinder.judging.method.run_method` applies this to every method's verdict, and
ECHO's vote applies :func:`check_step` to each ballot before it counts (a ballot whose
pair disagrees votes for its agent, not for its step). Documented in ``docs/eval.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from faultfinder.traces.schema import Trace


def check_step(speakers: Sequence[str], named: Sequence[str], step: int | None) -> str | None:
    """Why ``step`` cannot be the mistake of the ``named`` agents (None: it can).

    ``speakers[i]`` is the agent of step i. With no agent named, only the range counts.
    """
    if step is None:
        return None
    if not 0 <= step < len(speakers):
        return f"step {step} is outside the trace (0..{len(speakers) - 1})"
    if named and speakers[step] not in named:
        who = " or ".join(named)
        return f"step {step} was taken by {speakers[step]}, not by the named agent {who}"
    return None


def named_agents(agent: str | None, details: dict[str, Any]) -> list[str]:
    """The agents a verdict names: ``details['agents']`` for a multi-agent conclusion
    (ECHO), else its ``agent``."""
    several = details.get("agents")
    if isinstance(several, list) and all(isinstance(a, str) for a in several) and several:
        return list(several)
    return [agent] if agent else []


def apply_step_rule(
    trace: Trace, agent: str | None, step: int | None, status: str, details: dict[str, Any]
) -> tuple[int | None, str, dict[str, Any]] | None:
    """(step, status, details) after the rule, or None when the step stands."""
    speakers = [s.agent for s in trace.steps]
    problem = check_step(speakers, named_agents(agent, details), step)
    if problem is None:
        return None
    extra: dict[str, Any] = {"step_unparsed": problem, "rejected_step": step}
    if step is not None and not 0 <= step < len(speakers):
        extra["out_of_range_step"] = step
    new_status = "unparsed" if status == "ok" else status
    return None, new_status, {**details, **extra}
