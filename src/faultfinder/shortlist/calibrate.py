"""Calibrating a weights file's step sets on labelled traces of your own framework.

The shipped thresholds hold for Who&When's subsets. A trace of any other source gets the
thresholds for "a source never trained on", which at 90% are the whole trace
(docs/step-sets.md). With a few dozen labelled failures of your own framework the sets
can be both honest and useful: :func:`calibrate` scores each labelled trace under the
model the weights choose for it. Those models never saw these traces, so the scores are
split-conformal calibration scores. It then stores, for every model, the conformal
quantile per level as the thresholds of the named source.

The source becomes the file's ``default_source``: a trace that names no source of its
own (``Trace.source.subset`` unset, as every imported run) is taken to be of it. The
file's shift reference is rebuilt from the calibration traces, so a trace unlike them
still has its coverage claim withdrawn. Nothing is trained: the ranker is unchanged, and
no extra is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from faultfinder.errors import ConfigError
from faultfinder.shortlist import conformal
from faultfinder.shortlist.model import ShortlistModel
from faultfinder.shortlist.rank import rank_trace
from faultfinder.shortlist.shift import build_reference
from faultfinder.shortlist.weights import Weights
from faultfinder.traces.schema import Trace

MIN_TRACES = 10
"""Labelled traces a calibration needs. With n traces the level-a threshold is the
``ceil((n + 1) a)``-th smallest score, so below 1/(1 - a) - 1 traces (9 at 90%, 19 at
95%) the set is the whole trace anyway."""
FOLDS = 5
"""Folds of the calibration traces for the shift threshold (scored out of fold)."""


@dataclass
class Calibration:
    """What :func:`calibrate` did, for the command's report."""

    source: str
    used: list[str] = field(default_factory=list)
    """Ids of the traces that calibrated."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Trace id -> why it could not calibrate."""
    thresholds: dict[float, float] = field(default_factory=dict)
    """The deploy model's threshold per level."""


def _usable(trace: Trace, weights: Weights) -> str | None:
    """Why ``trace`` cannot calibrate ``weights`` (None: it can)."""
    if not trace.steps:
        return "no steps"
    if trace.label is None or not trace.label.acceptable_steps:
        return "no labelled decisive step"
    if any(not 0 <= s < len(trace.steps) for s in trace.label.acceptable_steps):
        return "its labelled step is outside the trace"
    chosen = weights.choose(trace)
    if chosen.contaminated or chosen.model is not weights.deploy:
        # A training trace (or a near-copy of one) is ranked by a held-out fold model;
        # calibrating every model on it would reuse traces some of them trained on.
        return f"the weights trained on it or on a near-copy ({chosen.source})"
    return None


def _thresholds(model: ShortlistModel, traces: Sequence[Trace]) -> dict[float, float]:
    scores = []
    for trace in traces:
        assert trace.label is not None
        probs = rank_trace(trace, model).probs
        scores.append(conformal.nonconformity(probs, trace.label.acceptable_steps))
    return {a: round(conformal.threshold(scores, a), 6) for a in conformal.LEVELS}


def calibrate(
    weights: Weights, traces: Sequence[Trace], source: str
) -> tuple[Weights, Calibration]:
    """A copy of ``weights`` whose step sets are calibrated on ``traces`` (labelled
    failures of one source, ``source``), and what was used. ConfigError with fewer than
    :data:`MIN_TRACES` usable traces."""
    if not source or source == conformal.UNSEEN:
        raise ConfigError(f"name the traces' source (not {source!r}), e.g. --source my-team")
    if "surprisal" in weights.groups:
        raise ConfigError("step sets need a shortlist model without the 'surprisal' group")
    report = Calibration(source)
    usable: list[Trace] = []
    for trace in traces:
        why = _usable(trace, weights)
        if why is None:
            usable.append(trace)
            report.used.append(trace.id)
        else:
            report.skipped[trace.id] = why
    if len(usable) < MIN_TRACES:
        raise ConfigError(
            f"{len(usable)} usable labelled trace(s) of {len(traces)}; calibrating step sets "
            f"needs at least {MIN_TRACES} (a decisive step in each trace's label)"
        )
    models = []
    for model in [weights.deploy, *weights.folds]:
        copy = replace(model, conformal=dict(model.conformal))
        for level, tau in _thresholds(model, usable).items():
            copy.conformal[conformal.source_key(source, level)] = tau
        models.append(copy)
    report.thresholds = {
        a: models[0].conformal[conformal.source_key(source, a)] for a in conformal.LEVELS
    }
    folds = [i % FOLDS for i in range(len(usable))]
    provenance = dict(weights.trained_on)
    provenance["step_sets_calibrated_on"] = {"source": source, "traces": len(usable)}
    out = replace(
        weights,
        deploy=models[0],
        folds=models[1:],
        trained_on=provenance,
        shift=build_reference(usable, folds),
        default_source=source,
    )
    return out, report
