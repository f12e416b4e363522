"""Split-conformal step sets over the shortlist's per-trace probabilities.

The score of a calibration trace is the softmax mass of its steps ranked at or above
the decisive step (adaptive prediction sets): small when the ranker puts the decisive
step first with confidence, close to 1 when it ranks it low. For a coverage level
``1 - alpha`` the threshold is the ``ceil((n + 1)(1 - alpha))``-th smallest of the ``n``
calibration scores; a new trace's set is the shortest prefix of its ranking whose mass
reaches the threshold. When calibration and test traces are exchangeable, the set holds
the decisive step with probability at least ``1 - alpha`` (marginally, over traces).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

LEVELS: tuple[float, ...] = (0.8, 0.9, 0.95)
"""Coverage levels reported and shipped."""


def ranking(probs: Sequence[float]) -> list[int]:
    """Step indices by decreasing probability (earlier step first on ties)."""
    return sorted(range(len(probs)), key=lambda i: (-probs[i], i))


def nonconformity(probs: Sequence[float], acceptable: Sequence[int]) -> float:
    """Mass of the ranking down to the best-ranked acceptable step (inclusive)."""
    mass = 0.0
    wanted = set(acceptable)
    for i in ranking(probs):
        mass += probs[i]
        if i in wanted:
            return min(mass, 1.0)
    return 1.0


def threshold(scores: Sequence[float], level: float) -> float:
    """The conformal quantile of calibration ``scores`` for coverage ``level``."""
    n = len(scores)
    if n == 0:
        return 1.0
    rank = math.ceil((n + 1) * level)
    if rank > n:
        return 1.0
    return sorted(scores)[rank - 1]


def prediction_set(probs: Sequence[float], tau: float) -> list[int]:
    """The shortest prefix of the ranking whose mass reaches ``tau`` (at least one step)."""
    chosen: list[int] = []
    mass = 0.0
    for i in ranking(probs):
        chosen.append(i)
        mass += probs[i]
        if mass >= tau - 1e-12:
            break
    return chosen


UNSEEN = "unseen"
"""The pseudo-source whose thresholds serve a trace of a source the weights never trained
on (see :func:`weighted_threshold` and ``train.ship``)."""


def weighted_threshold(scores: Sequence[float], weights: Sequence[float], level: float) -> float:
    """The smallest score whose weighted share of ``scores`` at or below it reaches
    ``level`` (no finite-sample correction: an empirical quantile)."""
    total = sum(weights)
    if not scores or total <= 0:
        return 1.0
    mass = 0.0
    for score, weight in sorted(zip(scores, weights, strict=True)):
        mass += weight
        if mass >= level * total - 1e-12:
            return score
    return 1.0


def source_key(source: str, level: float) -> str:
    """The key of a per-source threshold in a model's ``conformal`` map ('Hand-Crafted:0.9';
    the pooled threshold's key is the level alone, '0.9')."""
    return f"{source}:{level}"
