"""``random``: the chance floor. Uniform over the log's distinct agents and over its steps."""

from __future__ import annotations

import hashlib
import random as _random
from typing import Any, ClassVar

from pydantic import Field

from faultfinder.judging.method import MethodBase, MethodConfig, Verdict
from faultfinder.llm.client import LLM
from faultfinder.traces.schema import Trace


class RandomConfig(MethodConfig):
    seed: int = 0
    """Seed; combined with the trace id so each trace gets its own reproducible draw."""
    run: int = Field(default=0, ge=0)
    """Repeat index, set by the harness so repeated runs draw differently."""


class RandomMethod(MethodBase):
    """Agent and step drawn independently and uniformly; makes no model call."""

    name: ClassVar[str] = "random"
    summary: ClassVar[str] = "Chance floor: uniform over the log's distinct agents and its steps"
    needs_model: ClassVar[bool] = False
    floor: ClassVar[bool] = True
    """A score other methods must beat: `report` lists it last, `--floors` computes it."""
    Config: ClassVar[type[MethodConfig]] = RandomConfig
    presets: ClassVar[dict[str, dict[str, Any]]] = {}
    pairs_agent_and_step: ClassVar[bool] = False
    """The agent and the step are independent draws (a floor for each field), so the
    agent/step rule of ``judging/pairing.py`` checks only that the step is in the trace."""

    def __init__(self, config: RandomConfig) -> None:
        self.config = config

    async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
        cfg = self.config
        assert isinstance(cfg, RandomConfig)
        digest = hashlib.sha256(f"{cfg.seed}:{cfg.run}:{trace.id}".encode()).digest()
        rng = _random.Random(int.from_bytes(digest[:8], "big"))
        agents = trace.agent_names()
        if not agents:
            return Verdict(status="no-error-found", reason="empty trace")
        return Verdict(
            agent=rng.choice(agents),
            step=rng.randrange(len(trace.steps)),
            reason="uniform random draw",
            details={"seed": cfg.seed, "run": cfg.run},
        )
