"""``hybrid`` (Who&When Section 4.7): all-at-once picks the agent, then step-by-step judges
only that agent's steps.

Each judged step is shown with the full log up to it (other agents' steps included, as
context); only the chosen agent's steps are asked about. Composed from
``all_at_once.locate_all_at_once`` and ``step_by_step.judge_steps``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from faultfinder.judging.method import MethodBase, MethodConfig, Verdict
from faultfinder.llm.client import LLM
from faultfinder.methods.whowhen import common as ww
from faultfinder.methods.whowhen.all_at_once import locate_all_at_once
from faultfinder.methods.whowhen.step_by_step import StepByStepConfig, judge_steps
from faultfinder.traces.schema import Trace


class HybridConfig(StepByStepConfig):
    """Hybrid uses the step-by-step options; ``fallback_last_step`` then names the chosen
    agent's last step."""


async def hybrid(trace: Trace, llm: LLM, config: HybridConfig) -> Verdict:
    """All-at-once for the agent, step-by-step over that agent's steps for the step."""
    first = await locate_all_at_once(trace, llm, config)
    stage_one: dict[str, Any] = {
        "agent": first.agent,
        "step": first.step,
        "reason": first.reason,
        "status": first.status,
        **first.details,
    }
    if first.status != "ok" or first.agent is None:
        return Verdict(status=first.status, reason=first.reason, details={"all_at_once": stage_one})
    candidates = [s.index for s in trace.steps_of(first.agent)]
    second = await judge_steps(trace, llm, config, candidates)
    details = {"all_at_once": stage_one, "step_by_step": second.details}
    if second.status == "no-error-found":
        # The agent is still the all-at-once answer; only the step is missing.
        return Verdict(
            agent=first.agent,
            status="no-error-found",
            reason=f"all-at-once chose {first.agent}; none of its steps was judged erroneous",
            details=details,
        )
    return second.model_copy(update={"details": details})


class HybridMethod(MethodBase):
    """Who&When's hybrid of all-at-once and step-by-step, with DoVer's refinements."""

    name: ClassVar[str] = "hybrid"
    summary: ClassVar[str] = "Who&When: all-at-once picks the agent, step-by-step its step"
    Config: ClassVar[type[MethodConfig]] = HybridConfig
    presets: ClassVar[dict[str, dict[str, Any]]] = dict(ww.PRESETS)

    def __init__(self, config: HybridConfig) -> None:
        self.config = config

    async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
        assert isinstance(self.config, HybridConfig)
        if not trace.steps:
            return Verdict(status="no-error-found", reason="empty trace")
        return await hybrid(trace, llm, self.config)
