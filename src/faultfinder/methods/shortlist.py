"""``shortlist``: every step ranked from offline evidence, without any model call.

Per-step features (position, speaker, error signals, optionally token surprisal from the
embedded model) go through a small logistic ranker whose weights ship with the package
(``faultfinder/shortlist/weights.json``). The top step and its agent are the answer; every
step's score, the top-k shortlist and a split-conformal step set are in ``details``.
See docs/methods/shortlist.md.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from pydantic import Field

from faultfinder.errors import ConfigError
from faultfinder.llm.client import LLM
from faultfinder.methods.base import MethodConfig, Verdict
from faultfinder.methods.registry import register
from faultfinder.shortlist.conformal import LEVELS
from faultfinder.shortlist.model import ShortlistModel, load_model
from faultfinder.shortlist.rank import Ranking, rank_trace
from faultfinder.shortlist.surprisal import CachedSurprisal, LlamaSurprisal, SurprisalScorer
from faultfinder.traces.schema import Trace

logger = logging.getLogger("faultfinder")


class ShortlistConfig(MethodConfig):
    """Options of the offline ranker."""

    model_path: str | None = None
    """A ranker weights file (JSON, format 'faultfinder-shortlist/1'); None: the shipped
    one, trained on all of Who&When."""
    top_k: int = Field(default=5, ge=1)
    """How many best-ranked steps ``details['shortlist']`` lists."""
    coverage: float = 0.9
    """Coverage level of the conformal step set in ``details['step_set']``: one of the
    levels the weights file calibrated (0.8, 0.9, 0.95)."""


def load_configured_model(path: str | None) -> ShortlistModel:
    """The weights file of a config (shared with ``compose``)."""
    return load_model(path)


def surprisal_scorer(model: ShortlistModel) -> SurprisalScorer | None:
    """A cached embedded-model scorer when the model reads surprisal, else None."""
    return CachedSurprisal(LlamaSurprisal()) if "surprisal" in model.groups else None


def ranking_details(
    trace: Trace, model: ShortlistModel, ranking: Ranking, top_k: int, coverage: float
) -> dict[str, Any]:
    """What a shortlist verdict records: the scores of every step, the shortlist, the
    conformal set, and whether the weights were trained on this very trace."""
    seen = model.seen(trace)
    if seen:
        logger.warning(
            "warning: the shortlist weights were trained on trace '%s' (Who&When); its score "
            "is contaminated (details.trained_on_this_trace). Use bench/shortlist.py for "
            "cross-validated figures.",
            trace.id,
        )
    return {
        "scores": [
            {
                "step": i,
                "agent": trace.steps[i].agent,
                "score": round(ranking.logits[i], 4),
                "prob": round(ranking.probs[i], 4),
            }
            for i in range(len(trace.steps))
        ],
        "shortlist": ranking.top(top_k),
        "step_set": ranking.step_set(model, coverage),
        "coverage": coverage,
        "features": model.groups,
        "trained_on": model.trained_on.get("dataset"),
        "trained_on_this_trace": seen,
    }


@register
class ShortlistMethod:
    """Offline learned step ranker; no API call."""

    name: ClassVar[str] = "shortlist"
    summary: ClassVar[str] = "Offline ranker over per-step evidence: every step scored, no API call"
    prompt_version: ClassVar[str] = "none"
    Config: ClassVar[type[MethodConfig]] = ShortlistConfig
    presets: ClassVar[dict[str, dict[str, Any]]] = {}
    makes_model_calls: ClassVar[bool] = False
    """`attribute` runs it even when the default embedded model is not installed."""

    def __init__(self, config: ShortlistConfig) -> None:
        if str(config.coverage) not in {str(a) for a in LEVELS}:
            levels = ", ".join(str(a) for a in LEVELS)
            raise ConfigError(f"Method 'shortlist': option 'coverage' must be one of {levels}")
        self.config = config
        self.model = load_configured_model(config.model_path)
        self.scorer = surprisal_scorer(self.model)

    async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
        cfg = self.config
        assert isinstance(cfg, ShortlistConfig)
        if not trace.steps:
            return Verdict(status="no-error-found", reason="empty trace")
        ranking = rank_trace(trace, self.model, self.scorer)
        best = ranking.order[0]
        return Verdict(
            agent=trace.steps[best].agent,
            step=best,
            reason="highest-ranked step of the offline shortlist (no model call)",
            confidence=round(ranking.probs[best], 4),
            details=ranking_details(trace, self.model, ranking, cfg.top_k, cfg.coverage),
        )
