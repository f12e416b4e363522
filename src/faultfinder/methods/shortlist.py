"""``shortlist``: every step ranked from offline evidence, without any model call.

Per-step features (position, speaker, error signals, optionally token surprisal from the
embedded model) go through a small logistic ranker whose weights ship with the package
(``faultfinder/shortlist/weights.json``). The top step and its agent are the answer; every
step's score and the top-k shortlist are in ``details``. A Who&When trace is ranked by the
held-out model of its cross-validation fold (``shortlist/weights.py``), never by a model
that saw it. The conformal step set every result carries comes from ``run_method``
(``shortlist/sets.py``). See docs/methods/shortlist.md.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from pydantic import Field

from faultfinder.judging.method import MethodBase, MethodConfig, Verdict
from faultfinder.llm.client import LLM
from faultfinder.shortlist.rank import Ranking, ranked_by
from faultfinder.shortlist.sets import weights_at
from faultfinder.shortlist.surprisal import CachedSurprisal, LlamaSurprisal, SurprisalScorer
from faultfinder.shortlist.weights import Chosen, Weights
from faultfinder.traces.schema import Trace

logger = logging.getLogger("faultfinder")


class ShortlistConfig(MethodConfig):
    """Options of the offline ranker."""

    model_path: str | None = None
    """A ranker weights file (JSON, format 'faultfinder-shortlist/2' or '/1'); None: the
    shipped one (a held-out model per Who&When fold and a deploy model)."""
    top_k: int = Field(default=5, ge=1)
    """How many best-ranked steps ``details['shortlist']`` lists."""


def load_configured_model(path: str | None) -> Weights:
    """The weights file of a config (shared with ``compose``), read once per process: the
    same object the step sets use, so both share one ranking of a trace."""
    return weights_at(path)


def surprisal_scorer(weights: Weights) -> SurprisalScorer | None:
    """A cached embedded-model scorer when the models read surprisal, else None."""
    return CachedSurprisal(LlamaSurprisal()) if "surprisal" in weights.groups else None


def rank_with(
    trace: Trace, weights: Weights, scorer: SurprisalScorer | None
) -> tuple[Chosen, Ranking]:
    """The model of ``weights`` that answers for ``trace`` and its ranking."""
    return ranked_by(trace, weights, scorer)


def ranking_details(trace: Trace, chosen: Chosen, ranking: Ranking, top_k: int) -> dict[str, Any]:
    """What a shortlist verdict records: the scores of every step, the shortlist, which
    model ranked them, and whether that model was trained on this very trace."""
    if chosen.contaminated:
        trained_on = (
            f"a trace {chosen.near_copy:.0%} similar to trace '{trace.id}' (a near-copy of "
            "it, or its original)"
            if chosen.near_copy is not None
            else f"trace '{trace.id}'"
        )
        logger.warning(
            "warning: the shortlist weights were trained on %s; its score is contaminated "
            "(details.trained_on_this_trace).",
            trained_on,
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
        "features": chosen.model.groups,
        "shortlist_model": chosen.source,
        "trained_on_this_trace": chosen.contaminated,
        "near_copy_similarity": chosen.near_copy,
    }


class ShortlistMethod(MethodBase):
    """Offline learned step ranker; no API call."""

    name: ClassVar[str] = "shortlist"
    summary: ClassVar[str] = "Offline ranker over per-step evidence: every step scored, no API call"
    Config: ClassVar[type[MethodConfig]] = ShortlistConfig
    presets: ClassVar[dict[str, dict[str, Any]]] = {}
    needs_model: ClassVar[bool] = False
    """It ranks offline: the commands build no model for it (rows say ``model: none``).
    The surprisal feature, when its weights use it, loads the embedded model itself."""

    def __init__(self, config: ShortlistConfig) -> None:
        self.config = config
        self.weights = load_configured_model(config.model_path)
        self.scorer = surprisal_scorer(self.weights)

    async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
        cfg = self.config
        assert isinstance(cfg, ShortlistConfig)
        if not trace.steps:
            return Verdict(status="no-error-found", reason="empty trace")
        chosen, ranking = rank_with(trace, self.weights, self.scorer)
        best = ranking.order[0]
        return Verdict(
            agent=trace.steps[best].agent,
            step=best,
            reason="highest-ranked step of the offline shortlist (no model call)",
            confidence=round(ranking.probs[best], 4),
            details=ranking_details(trace, chosen, ranking, cfg.top_k),
        )
