"""``baseline``: floors that read only the log's shape, never its content, and call no model.

Each rule names an agent *and* a step, and the step is always one that agent took, so
the pair is consistent. Steps of kind ``human`` (the user who posed the task, e.g.
step 0 of every Magentic-One log in Who&When) are never candidates: they are not the
team's mistake. See docs/methods/baseline.md.

- ``first-speaker``: the first candidate step (step 0 unless it is the user's) and its agent.
- ``majority-agent``: the agent with the most candidate steps (ties: the one that speaks
  first), at its first step.
- ``position``: the candidate step at a fixed relative position of the log
  (``relative_position``, default 0.5: the middle) and its agent. The prior is a
  parameter chosen before looking at any benchmark, never fitted on the traces scored.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, ClassVar, Literal

from pydantic import Field

from faultfinder.judging.method import MethodBase, MethodConfig, Verdict
from faultfinder.llm.client import LLM
from faultfinder.shown import clip_name
from faultfinder.traces.schema import Step, Trace

BaselineRule = Literal["first-speaker", "majority-agent", "position"]

NOT_CANDIDATES = frozenset({"human"})
"""Step kinds a floor never blames."""


class BaselineConfig(MethodConfig):
    rule: BaselineRule = "first-speaker"
    """Which floor: 'first-speaker', 'majority-agent' or 'position' (also the presets)."""
    relative_position: float = Field(default=0.5, ge=0.0, le=1.0)
    """Rule 'position': where the guessed step sits among the agents' steps (0 = first,
    1 = last); 0.5, the middle, is fixed in advance, not fitted on any benchmark."""


def candidate_steps(trace: Trace) -> list[Step]:
    """The steps a floor may blame: every step not taken by the human user."""
    return [s for s in trace.steps if s.kind not in NOT_CANDIDATES]


def pick(trace: Trace, config: BaselineConfig) -> Step | None:
    """The step a rule names (its agent is the step's speaker), or None for an empty log."""
    steps = candidate_steps(trace)
    if not steps:
        return None
    if config.rule == "first-speaker":
        return steps[0]
    if config.rule == "majority-agent":
        counts = Counter(s.agent for s in steps)
        top = max(counts.values())
        return next(s for s in steps if counts[s.agent] == top)
    position = round(config.relative_position * (len(steps) - 1))
    return steps[position]


class BaselineMethod(MethodBase):
    """A floor computed from the log's shape alone; makes no model call."""

    name: ClassVar[str] = "baseline"
    summary: ClassVar[str] = (
        "Floors from the log's shape (no model): first speaker, majority agent, step position"
    )
    prompt_version: ClassVar[str] = "none"
    needs_model: ClassVar[bool] = False
    floor: ClassVar[bool] = True
    """A score other methods must beat: `report` lists it last, `--floors` computes it."""
    Config: ClassVar[type[MethodConfig]] = BaselineConfig
    presets: ClassVar[dict[str, dict[str, Any]]] = {
        "first-speaker": {"rule": "first-speaker"},
        "majority-agent": {"rule": "majority-agent"},
        "position": {"rule": "position"},
    }

    def __init__(self, config: BaselineConfig) -> None:
        self.config = config

    async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
        cfg = self.config
        assert isinstance(cfg, BaselineConfig)
        step = pick(trace, cfg)
        if step is None:
            return Verdict(status="no-error-found", reason="no step taken by an agent")
        return Verdict(
            agent=step.agent,
            step=step.index,
            reason=f"floor '{cfg.rule}': step {step.index}, taken by {clip_name(step.agent)}",
            details={"rule": cfg.rule},
        )
