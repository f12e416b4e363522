"""Ranking one trace's steps: features, the model, probabilities (step sets: ``sets.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from faultfinder.errors import ConfigError
from faultfinder.shortlist import conformal
from faultfinder.shortlist.features import trace_features
from faultfinder.shortlist.model import ShortlistModel, softmax
from faultfinder.shortlist.surprisal import SurprisalScorer
from faultfinder.traces.schema import Trace


@dataclass(frozen=True)
class Ranking:
    """Every step of a trace with its score."""

    logits: list[float]
    """Model score per step."""
    probs: list[float]
    """Softmax of the scores over the trace's steps."""
    order: list[int]
    """Step indices, best first."""

    def top(self, k: int) -> list[int]:
        return self.order[:k]


def rank_trace(
    trace: Trace, model: ShortlistModel, scorer: SurprisalScorer | None = None
) -> Ranking:
    """Scores of every step of ``trace`` under ``model``."""
    values = None
    if "surprisal" in model.groups:
        if scorer is None:
            raise ConfigError(
                "this shortlist model reads token surprisal, which needs the embedded model "
                "(a surprisal scorer); use a model without the 'surprisal' group"
            )
        values = scorer.score(trace)
    rows = trace_features(trace, model.groups, values)
    logits = model.logits(rows)
    probs = softmax(logits)
    return Ranking(logits, probs, conformal.ranking(probs))
