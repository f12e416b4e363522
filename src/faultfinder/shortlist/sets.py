"""Step sets for any method's answer: the shortlist's conformal set plus the method's step.

For a coverage level ``1 - alpha``, the set is the shortest prefix of the shortlist's
ranking whose softmax mass reaches the model's calibrated threshold (``conformal.py``),
with the method's own step added when it is not already there. Adding a step can only
make the set hold the decisive step more often, so the split-conformal guarantee of the
shortlist's set (at least ``1 - alpha`` marginally over traces exchangeable with the
calibration traces) holds for the union too; what the method adds is at most one step.

The model comes from the weights file's rule (``weights.py``): a Who&When trace gets the
held-out model of its fold, any other trace the deploy model. Ranking a trace takes about
20 ms of CPU and no model call; the last rankings are memoised per trace content
(``rank.ranked_by``), so a method's answer, its set and several methods on one trace rank
it once.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from faultfinder.errors import ConfigError
from faultfinder.shortlist import conformal
from faultfinder.shortlist.rank import content_key, ranked_by
from faultfinder.shortlist.weights import Weights, load_weights, shipped_weights
from faultfinder.traces.schema import Trace

LEVELS = conformal.LEVELS
UNSEEN_NOTE = " (calibrated on sources never trained on)"
"""How a step set's source ends when its thresholds are those for a source the weights
never trained on (every run of yours, until ``faultfinder calibrate``)."""
DEFAULT_LEVEL = 0.9
"""The level ``attribute`` and ``eval`` use unless told otherwise (``--step-set``)."""

_MEMO_SIZE = 512
_memo: OrderedDict[tuple[int, str, str | None], _Ranked] = OrderedDict()
"""Rankings by (weights, content, named source): the content picks the model and the
probabilities (``rank.content_key``), the named source the shift check
(``Weights.shift_threshold``)."""


@dataclass(frozen=True)
class _Ranked:
    weights: Weights
    probs: list[float]
    source: str
    thresholds: dict[str, float]
    shift: float | None
    limit: float | None
    calibrated: bool


@dataclass(frozen=True)
class StepSet:
    """A set of step indices that holds the decisive step with probability ``level``."""

    steps: list[int]
    """Sorted step indices."""
    level: float
    """Target coverage."""
    source: str
    """Which model ranked the steps, e.g. 'shipped:fold-2' or 'shipped:deploy'."""
    shift: float | None = None
    """How unlike the calibration traces the trace is (``shift.py``; None: not measured)."""
    calibrated: bool = True
    """False when the shift score passes the weights' threshold (or the ranking model
    trained on this trace, or the thresholds were calibrated on it): the set is still the
    ranking's, but ``level`` is not claimed."""
    limit: float | None = None
    """The shift score up to which ``level`` is claimed for this trace (its source's
    threshold, else the pooled one; None: the weights hold no shift reference)."""


def weights_at(path: str | None) -> Weights:
    """The weights file at ``path`` (None: the shipped one), read once per process and
    again when the file changes (a server that outlives a ``faultfinder calibrate``)."""
    if path is None:
        return shipped_weights()
    try:
        stat = Path(path).stat()
    except OSError:
        return load_weights(path)  # the clear error for a missing file
    return _weights_file(str(Path(path).resolve()), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=8)
def _weights_file(path: str, mtime_ns: int, size: int) -> Weights:
    """The file at ``path``; its modification time and size only key the cache."""
    return load_weights(path)


def check_level(level: float) -> float:
    """``level`` when the shipped thresholds cover it, else a ConfigError."""
    if not any(abs(level - a) < 1e-9 for a in LEVELS):
        raise ConfigError(
            f"step-set level {level} is not calibrated; choose one of "
            f"{', '.join(str(a) for a in LEVELS)}"
        )
    return next(a for a in LEVELS if abs(level - a) < 1e-9)


def _ranked(trace: Trace, weights: Weights) -> _Ranked:
    key = (id(weights), content_key(trace), trace.source.subset)
    hit = _memo.get(key)
    if hit is not None and hit.weights is weights:
        _memo.move_to_end(key)
        return hit
    if "surprisal" in weights.groups:
        raise ConfigError("step sets need a shortlist model without the 'surprisal' feature group")
    chosen, ranking = ranked_by(trace, weights)
    probs = ranking.probs
    shift = weights.shift_score(trace)
    limit = weights.shift_threshold(trace)
    # No shift reference (a one-model file, or one written before references existed):
    # nothing says the trace is like the calibration data, so the level is not claimed.
    unlike = shift is None or limit is None or shift > limit
    value = _Ranked(
        weights,
        probs,
        chosen.source,
        chosen.model.conformal,
        None if shift is None else round(shift, 3),
        None if limit is None else round(limit, 3),
        not unlike and not chosen.contaminated and not weights.calibrated_on(trace),
    )
    _memo[key] = value
    if len(_memo) > _MEMO_SIZE:
        _memo.popitem(last=False)
    return value


def step_set(
    trace: Trace, level: float, *, include: int | None = None, weights: Weights | None = None
) -> StepSet | None:
    """The step set of ``trace`` at ``level`` with step ``include`` added (a method's
    answer; ignored when outside the trace). None for a trace without steps."""
    if not trace.steps:
        return None
    level = check_level(level)
    ranked = _ranked(trace, weights or shipped_weights())
    source = ranked.source
    # A trace that names no source is of the one the weights were calibrated for, if any.
    subset = trace.source.subset or ranked.weights.default_source
    tau = ranked.thresholds.get(conformal.source_key(subset, level)) if subset else None
    unseen = ranked.thresholds.get(conformal.source_key(conformal.UNSEEN, level))
    if tau is not None:
        source += f" (calibrated on {subset})"
    elif unseen is not None:
        # A source these weights have no thresholds of: calibrated as the ranker meets a
        # source it never trained on (``train.unseen_thresholds``).
        tau = unseen
        source += UNSEEN_NOTE
    else:
        tau = ranked.thresholds.get(str(level))
    if tau is None:
        raise ConfigError(f"the shortlist weights ({ranked.source}) have no threshold for {level}")
    steps = set(conformal.prediction_set(ranked.probs, tau))
    if include is not None and 0 <= include < len(trace.steps):
        steps.add(include)
    return StepSet(sorted(steps), level, source, ranked.shift, ranked.calibrated, ranked.limit)


def step_ranges(steps: list[int]) -> str:
    """'1-4, 6, 9-10': sorted steps with consecutive runs of three or more as ranges."""
    parts: list[str] = []
    i = 0
    while i < len(steps):
        j = i
        while j + 1 < len(steps) and steps[j + 1] == steps[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{steps[i]}-{steps[j]}")
        else:
            parts.extend(str(s) for s in steps[i : j + 1])
        i = j + 1
    return ", ".join(parts)


def withdrawn_because(shift: float | None, limit: float | None) -> str:
    """Why a set's level is not claimed, in words: 'trace unlike the calibration data,
    shift 0.97 over the limit 0.50', 'the ranking model trained on this trace ... or the
    step sets were calibrated on it', or that
    the weights hold no shift reference to check the trace against."""
    if shift is None:
        return "the weights hold no shift reference to check this trace against"
    if limit is not None and shift <= limit:
        # Within the limit, so the shift is not the reason: the others are weights that
        # saw the trace (``Weights.choose``: a near-copy of training;
        # ``Weights.calibrated_on``: a trace whose own score set the thresholds).
        return (
            "the ranking model trained on this trace or a near-copy of it, or the step "
            "sets were calibrated on it"
        )
    why = f"trace unlike the calibration data, shift {shift:.2f}"
    if limit is not None:
        why += f" over the limit {limit:.2f}"
    return why


def describe(
    steps: list[int],
    level: float,
    n_steps: int | None = None,
    source: str | None = None,
    calibrated: bool | None = True,
    shift: float | None = None,
    limit: float | None = None,
) -> str:
    """'{2-4, 7} at 90%: 4 of 12 steps (33% of the trace); ranked by shipped:deploy', or,
    when the coverage claim is withdrawn, '{2-4, 7} — 90% NOT claimed (...): ...'.

    ``limit`` is the shift score up to which the level is claimed; with it the reason
    says how far past it the trace is, or, when the score is within it, that the claim
    was withdrawn because the ranking model trained on the trace."""
    text = "{" + step_ranges(steps) + "}"
    if calibrated is False:
        text += f" — {100 * level:g}% NOT claimed ({withdrawn_because(shift, limit)})"
    else:
        text += f" at {100 * level:g}%"
    if n_steps:
        share = 100 * len(steps) / n_steps
        text += f": {len(steps)} of {n_steps} steps ({share:.0f}% of the trace)"
    if source:
        text += f"; ranked by {source}"
    return text
