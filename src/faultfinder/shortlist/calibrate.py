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

:func:`train_on` goes one step further (``faultfinder calibrate --train``, the
``shortlist`` extra): it trains the ranker on the labelled traces themselves, as the
shipped file is trained on its sources (held-out fold models, per-fold calibration, a
deploy model), for a framework whose runs the shipped ranker reads poorly.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from faultfinder.errors import ConfigError
from faultfinder.shortlist import conformal
from faultfinder.shortlist.model import ShortlistModel, trace_hash
from faultfinder.shortlist.rank import rank_trace
from faultfinder.shortlist.shift import build_reference
from faultfinder.shortlist.weights import CALIBRATED_ON, Weights
from faultfinder.shown import clip_name
from faultfinder.traces.schema import Trace

MIN_TRACES = 10
"""Labelled traces a calibration needs. With n traces the level-a threshold is the
``ceil((n + 1) a)``-th smallest score, so below 1/(1 - a) - 1 traces (9 at 90%, 19 at
95%) the set is the whole trace anyway."""
FOLDS = 5
"""Folds of the calibration traces for the shift threshold (scored out of fold), and of
the training traces with ``--train``."""
MIN_TRAIN = 20
"""Labelled traces ``--train`` needs: each of the five folds calibrates its held-out model
on about a fifth of them."""
TRAINED_ON_IT = "the weights trained on it"
"""Why a training trace of the weights is skipped."""
TRAINED_ON_NEAR_COPY = "the weights trained on a near-copy of it"
"""Why a near-copy of a training trace is skipped."""


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


def _check_source(source: str) -> None:
    if not source or source == conformal.UNSEEN:
        raise ConfigError(f"name the traces' source (not {source!r}), e.g. --source my-team")


def named_elsewhere(traces: Sequence[Trace], source: str, weights: Weights) -> str:
    """A warning when some of ``traces`` name a source other than ``source`` ('' when
    none does). A set uses the thresholds of the source its trace names, so neither
    those traces nor any other naming that source use the thresholds ``weights`` (the
    file written) holds for ``source``."""
    named = Counter(
        t.source.subset for t in traces if t.source.subset and t.source.subset != source
    )
    if not named:
        return ""
    shown = ", ".join(f"{n} × {name}" for name, n in named.most_common(3))
    more = f" and {len(named) - 3} more" if len(named) > 3 else ""
    held = weights.deploy.conformal

    def kept(name: str) -> str:
        if conformal.source_key(name, 0.9) in held:
            return "their own source's thresholds"
        if conformal.source_key(conformal.UNSEEN, 0.9) in held:
            return "the thresholds for a source never trained on"
        return "the file's pooled thresholds"

    keeps = " or ".join(sorted({kept(name) for name in named}, reverse=True))
    return (
        f"{sum(named.values())} of these traces name a source of their own ({shown}{more}): "
        f"their step sets, and those of any trace naming that source, keep {keeps}, not "
        f"{source}'s, which only a trace naming no source (or {source}) gets. Calibrate "
        "each named source on its own traces (drop --source when they all name one)."
    )


def _unlabelled(trace: Trace) -> str | None:
    """Why ``trace`` has no decisive step to learn from (None: it has one)."""
    if not trace.steps:
        return "no steps"
    if trace.label is None or not trace.label.acceptable_steps:
        return "no labelled decisive step"
    if any(not 0 <= s < len(trace.steps) for s in trace.label.acceptable_steps):
        return "its labelled step is outside the trace"
    return None


def _sorted_out(
    traces: Sequence[Trace], source: str, why: Callable[[Trace], str | None]
) -> tuple[list[Trace], Calibration]:
    """The traces ``why`` finds nothing against, and the report saying which were not."""
    report = Calibration(source)
    usable: list[Trace] = []
    for trace in traces:
        reason = why(trace)
        if reason is None:
            usable.append(trace)
            report.used.append(trace.id)
        else:
            report.skipped[trace.id] = reason
    return usable, report


def _usable(trace: Trace, weights: Weights) -> str | None:
    """Why ``trace`` cannot calibrate ``weights`` (None: it can)."""
    unlabelled = _unlabelled(trace)
    if unlabelled is not None:
        return unlabelled
    chosen = weights.choose(trace)
    if chosen.contaminated or chosen.model is not weights.deploy:
        # A training trace (or a near-copy of one) is ranked by a held-out fold model;
        # calibrating every model on it would reuse traces some of them trained on. The
        # reason names no fold, so the summary counts such traces under one or two lines.
        if chosen.near_copy is not None:
            return TRAINED_ON_NEAR_COPY
        return TRAINED_ON_IT
    return None


def skip_summary(skipped: dict[str, str]) -> str:
    """'58 × the weights trained on it (e.g. 1)': the skipped traces counted per reason,
    most frequent first, with one trace id as an example ('' when none was skipped)."""
    if not skipped:
        return ""
    reasons = Counter(skipped.values())
    first = next(iter(skipped))
    return (
        f"skipped {len(skipped)}: "
        + "; ".join(f"{n} × {why}" for why, n in reasons.most_common())
        + f" (e.g. {clip_name(first)})"
    )


def _too_few(usable: int, total: int, need: str, report: Calibration) -> ConfigError:
    """The error for too few usable traces, with why the others were skipped."""
    message = f"{usable} usable labelled trace(s) of {total}; {need}."
    if report.skipped:
        summary = skip_summary(report.skipped)
        message += f" {summary[:1].upper()}{summary[1:]}."
    if any(why in (TRAINED_ON_IT, TRAINED_ON_NEAR_COPY) for why in report.skipped.values()):
        message += (
            " A trace the weights trained on cannot calibrate them (its score would be "
            "too good): calibrate on other labelled runs of your framework, or pass --train "
            "to fit the ranker on these traces alone."
        )
    return ConfigError(message)


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
    _check_source(source)
    if "surprisal" in weights.groups:
        raise ConfigError("step sets need a shortlist model without the 'surprisal' group")
    usable, report = _sorted_out(traces, source, lambda t: _usable(t, weights))
    if len(usable) < MIN_TRACES:
        raise _too_few(
            len(usable),
            len(traces),
            f"calibrating step sets needs at least {MIN_TRACES} (a decisive step in each "
            "trace's label, and a trace the weights did not train on)",
            report,
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
    # The traces' hashes, so a set on one of them does not claim a level its own score
    # helped set (``Weights.calibrated_on``); those of an earlier calibration are kept.
    earlier = provenance.get(CALIBRATED_ON)
    hashes = {trace_hash(t) for t in usable}
    if isinstance(earlier, dict) and isinstance(earlier.get("hashes"), list):
        hashes.update(str(h) for h in earlier["hashes"])
    provenance[CALIBRATED_ON] = {
        "source": source,
        "traces": len(usable),
        "hashes": sorted(hashes),
    }
    out = replace(
        weights,
        deploy=models[0],
        folds=models[1:],
        trained_on=provenance,
        shift=build_reference(usable, folds),
        default_source=source,
    )
    return out, report


def train_on(
    traces: Sequence[Trace], source: str, groups: Sequence[str]
) -> tuple[Weights, Calibration]:
    """Weights trained and calibrated on ``traces`` alone (labelled failures of one
    source), built as the shipped file is (``train.ship``: a held-out model per fold,
    each calibrated on a fold it did not train on, and a deploy model). Needs the
    ``shortlist`` extra; ConfigError with fewer than :data:`MIN_TRAIN` labelled traces."""
    _check_source(source)
    usable, report = _sorted_out(traces, source, _unlabelled)
    if len(usable) < MIN_TRAIN:
        raise _too_few(
            len(usable),
            len(traces),
            f"training the ranker needs at least {MIN_TRAIN} (without --train, calibrating "
            f"needs {MIN_TRACES})",
            report,
        )
    try:
        import numpy  # noqa: F401
        import scipy  # noqa: F401
    except ImportError:
        raise ConfigError(
            "training the ranker needs the shortlist extra: pip install 'faultfinder[shortlist]'"
        ) from None
    from faultfinder.shortlist.train import build_table, ship

    # Folds by task: one program's runs are near-copies of each other, so folds by content
    # would put nearly all of them in one. With too few tasks, each trace is its own group.
    tasks = {t.task for t in usable}
    key: Callable[[Trace], str] = (
        (lambda t: t.task) if len(tasks) >= 2 * FOLDS else (lambda t: t.id)
    )
    weights = ship(build_table(usable, groups), groups, k=FOLDS, fold_key=key)
    for model in [weights.deploy, *weights.folds]:
        # Each model's own calibration fold is of this source: say so in the results.
        for a in conformal.LEVELS:
            model.conformal[conformal.source_key(source, a)] = model.conformal[str(a)]
    provenance = dict(weights.trained_on)
    provenance["dataset"] = f"{len(usable)} labelled traces of {source} (faultfinder calibrate)"
    provenance["sources"] = {source: len(usable)}
    report.thresholds = {a: weights.deploy.conformal[str(a)] for a in conformal.LEVELS}
    return replace(weights, trained_on=provenance, default_source=source), report
