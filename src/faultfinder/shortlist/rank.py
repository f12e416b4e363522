"""Ranking one trace's steps: features, the model, probabilities (step sets: ``sets.py``)."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

from faultfinder.errors import ConfigError
from faultfinder.shortlist import conformal
from faultfinder.shortlist.features import trace_features
from faultfinder.shortlist.model import ShortlistModel, softmax
from faultfinder.shortlist.surprisal import SurprisalScorer
from faultfinder.shortlist.weights import Chosen, Weights
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


_MEMO_SIZE = 64
_memo: OrderedDict[
    tuple[int, int, str], tuple[Weights, SurprisalScorer | None, Chosen, Ranking]
] = OrderedDict()
"""The last rankings, by (weights, surprisal scorer, the trace's whole content); each
entry holds its weights and scorer, so neither identity can be reused while it is here."""


def content_key(trace: Trace) -> str:
    """A hash of everything in ``trace`` (every field a feature or the model choice can
    read, tool-call arguments and step kinds included): two traces with the same key rank
    alike."""
    return hashlib.sha256(trace.model_dump_json().encode("utf-8")).hexdigest()


def ranked_by(
    trace: Trace, weights: Weights, scorer: SurprisalScorer | None = None
) -> tuple[Chosen, Ranking]:
    """The model of ``weights`` that answers for ``trace`` (``Weights.choose``) and its
    ranking. The last rankings are memoised, so a method's answer and its step set (or
    several methods on one trace) compute the features and the model choice once: on a
    trace of thousands of steps that is most of the time ``attribute`` takes."""
    key = (id(weights), id(scorer), content_key(trace))
    hit = _memo.get(key)
    if hit is not None and hit[0] is weights and hit[1] is scorer:
        _memo.move_to_end(key)
        return hit[2], hit[3]
    chosen = weights.choose(trace)
    ranking = rank_trace(trace, chosen.model, scorer)
    _memo[key] = (weights, scorer, chosen, ranking)
    if len(_memo) > _MEMO_SIZE:
        _memo.popitem(last=False)
    return chosen, ranking
