"""The objective analyst panel (paper §3.2): who sits on it, and asking each analyst.

Each analyst answers with a structured :class:`~faultfinder.methods.echo.schema.Analysis`.
A reply that stays unparseable after the LLM layer's retries is recorded as such and
takes no part in the vote.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from faultfinder.llm.base import OutputConstraint
from faultfinder.llm.client import LLM
from faultfinder.methods.echo.prompts import ROLES, AnalystRole, PassKind
from faultfinder.methods.echo.schema import Analysis, Conclusion, parse_analysis
from faultfinder.methods.echo.voting import AgentEvaluation, Ballot


@dataclass(frozen=True)
class Analyst:
    """One seat on the panel."""

    role: AnalystRole
    """Its specialisation."""
    temperature: float
    """Its sampling temperature."""
    position: int
    """Its seat number (also the sample index of its calls)."""

    @property
    def label(self) -> str:
        return f"{self.role}@{self.temperature:.2f}"


def spread_temperatures(count: int, low: float, high: float) -> list[float]:
    """``count`` temperatures evenly spaced from ``low`` to ``high`` (one: the midpoint)."""
    if count == 1:
        return [round((low + high) / 2, 4)]
    step = (high - low) / (count - 1)
    return [round(low + i * step, 4) for i in range(count)]


def sample_panel(
    trace_id: str,
    *,
    size: int,
    roles: Sequence[AnalystRole] | None = None,
    temperature_min: float = 0.3,
    temperature_max: float = 0.9,
    seed: int = 0,
    run: int = 0,
) -> list[Analyst]:
    """The analysts for one trace: ``roles`` as given, or ``size`` roles drawn without
    replacement; temperatures spread over the range and dealt in draw order. The draw
    depends only on (seed, run, trace id), so a run is reproducible."""
    digest = hashlib.sha256(f"echo:{seed}:{run}:{trace_id}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    chosen = list(roles) if roles else rng.sample(list(ROLES), size)
    temperatures = spread_temperatures(len(chosen), temperature_min, temperature_max)
    rng.shuffle(temperatures)
    return [
        Analyst(role=role, temperature=t, position=i)
        for i, (role, t) in enumerate(zip(chosen, temperatures, strict=True))
    ]


class AnalystResult(BaseModel):
    """What one analyst returned in one pass."""

    analyst: str
    """Label, e.g. 'skeptical@0.60'."""
    role: str
    """Role."""
    temperature: float
    """Temperature used."""
    status: Literal["ok", "unparsed"]
    """'unparsed' when the reply could not be read after the LLM layer's retries."""
    analysis: Analysis | None = None
    """The structured analysis (None when unparsed)."""
    parse_error: str | None = None
    """Why the last reply could not be read."""
    attempts: int = 1
    """Replies requested (1 + parse retries)."""
    dropped_names: list[str] = []
    """Unknown agent names left out of evaluations and alternatives."""

    def summary(self) -> dict[str, Any]:
        """A compact, JSON-ready record for Verdict.details."""
        record: dict[str, Any] = {
            "analyst": self.analyst,
            "status": self.status,
            "attempts": self.attempts,
        }
        if self.analysis is not None:
            record["conclusion"] = self.analysis.primary_conclusion.model_dump()
            record["summary"] = self.analysis.analysis_summary
        if self.parse_error:
            record["parse_error"] = self.parse_error
        if self.dropped_names:
            record["dropped_names"] = self.dropped_names
        return record


async def run_pass(
    llm: LLM,
    panel: Sequence[Analyst],
    kind: PassKind,
    messages: Callable[[Analyst], list[dict[str, Any]]],
    agents: Sequence[str],
    *,
    json_schema: dict[str, Any],
    max_tokens: int,
    seed: int,
    top_p: float | None = None,
    warm_first: bool = False,
) -> list[AnalystResult]:
    """Ask every analyst (``messages(analyst)``: its prompt) and collect their analyses:
    all at once, or, with ``warm_first``, the first analyst alone and then the others at
    once, so that a server with prefix caching has the prompt they share in its cache."""

    def parser(text: str) -> Analysis:
        return parse_analysis(text, agents)

    async def ask(analyst: Analyst) -> AnalystResult:
        reply = await llm.chat(
            messages(analyst),
            parse=parser,
            purpose=f"echo {kind} analysis: {analyst.label}",
            temperature=analyst.temperature,
            top_p=top_p,
            max_tokens=max_tokens,
            seed=seed,
            constraint=OutputConstraint(json_schema=json_schema),
            sample=analyst.position,
        )
        common: dict[str, Any] = {
            "analyst": analyst.label,
            "role": analyst.role,
            "temperature": analyst.temperature,
            "attempts": reply.attempts,
        }
        if reply.parsed is None:
            return AnalystResult(status="unparsed", parse_error=reply.parse_error, **common)
        return AnalystResult(
            status="ok",
            analysis=reply.parsed,
            dropped_names=reply.parsed.dropped_names,
            **common,
        )

    if warm_first and len(panel) > 1:
        first = await ask(panel[0])
        return [first, *await asyncio.gather(*(ask(a) for a in panel[1:]))]
    return list(await asyncio.gather(*(ask(a) for a in panel)))


def _ballot(analyst: str, c: Conclusion) -> Ballot:
    return Ballot(
        analyst=analyst,
        type=c.type,
        attribution=c.attribution or [],
        mistake_step=c.mistake_step,
        confidence=c.confidence,
        reasoning=c.reasoning,
    )


def ballots(results: Sequence[AnalystResult]) -> list[Ballot]:
    """The primary conclusions of the parsed analyses."""
    out: list[Ballot] = []
    for result in results:
        if result.analysis is None:
            continue
        out.append(_ballot(result.analyst, result.analysis.primary_conclusion))
    return out


def alternatives(results: Sequence[AnalystResult]) -> list[Ballot]:
    """Every analyst's alternative hypotheses."""
    out: list[Ballot] = []
    for result in results:
        if result.analysis is None:
            continue
        out.extend(_ballot(result.analyst, c) for c in result.analysis.alternative_hypotheses)
    return out


def evaluations(results: Sequence[AnalystResult]) -> list[AgentEvaluation]:
    """Every analyst's per-agent error likelihoods."""
    return [
        AgentEvaluation(analyst=r.analyst, agent=e.agent_name, error_likelihood=e.error_likelihood)
        for r in results
        if r.analysis is not None
        for e in r.analysis.agent_evaluations
    ]
