"""Training the shortlist ranker (needs scikit-learn: the ``shortlist`` extra).

One fit (the table of step rows, the listwise and pointwise objectives, how sources
weigh, the mean of fold fits) is :mod:`faultfinder.shortlist.learner`; every name there is
re-exported here. This module decides which traces each fit sees and which calibrate it
(docs/methods/shortlist.md). Cross-validation assigns whole traces to folds (identical
logs share a fold), so no trace is ever both trained on and evaluated; the out-of-fold
probabilities are the only scores the bench reports. The shipped file (:func:`ship`)
holds one held-out model per fold, trained without that fold and without the fold that
calibrates it (split conformal), plus a deploy model: the mean of the fits that each leave
one fold out (:func:`bagged`), its step sets calibrated on the out-of-fold scores of every
training trace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from faultfinder.shortlist import conformal, neardup
from faultfinder.shortlist.learner import (
    ANCHOR_SOURCES,
    LAMBDA,
    MIN_SCALE,
    OBJECTIVE,
    OTHER_SHARE,
    C,
    Objective,
    SurprisalOf,
    Table,
    _listwise,
    _pointwise,
    _standardisation,
    bagged,
    build_table,
    fit,
    source_weights,
    subset_of,
    subtable,
)
from faultfinder.shortlist.model import ShortlistModel, softmax, trace_hash
from faultfinder.shortlist.shift import build_reference
from faultfinder.shortlist.weights import Weights
from faultfinder.traces.schema import Trace

__all__ = [
    "ANCHOR_SOURCES",
    "LAMBDA",
    "MIN_PER_SOURCE",
    "MIN_SCALE",
    "MIN_SOURCES_FOR_UNSEEN",
    "OBJECTIVE",
    "OTHER_SHARE",
    "C",
    "CrossValidation",
    "HeldOut",
    "Objective",
    "SurprisalOf",
    "Table",
    "_listwise",
    "_pointwise",
    "_standardisation",
    "assign_folds",
    "bagged",
    "build_table",
    "calibrated",
    "calibration_fold",
    "content_groups",
    "cross_validate",
    "deploy_fit",
    "fit",
    "held_out_models",
    "ship",
    "source_weights",
    "sources_of",
    "subset_of",
    "subtable",
    "unseen_thresholds",
]

MIN_PER_SOURCE = 10
"""Calibration traces a source needs for thresholds of its own."""


def content_groups(traces: Sequence[Trace]) -> list[str]:
    """A group key per trace: near-duplicate logs (``neardup.NEAR`` or more similar,
    transitively; identical logs included) share one, the smallest content hash among
    them."""
    hashes = [trace_hash(t) for t in traces]
    roots = neardup.clusters(neardup.sketch(t) for t in traces)
    smallest: dict[int, str] = {}
    for root, h in zip(roots, hashes, strict=True):
        smallest[root] = min(smallest.get(root, h), h)
    return [smallest[r] for r in roots]


def assign_folds(
    traces: Sequence[Trace], k: int, seed: int = 0, by: Sequence[str] | None = None
) -> list[int]:
    """Fold of each trace: by group (default: by content, near-duplicate logs together;
    ``by``: a group key per trace), balanced per subset (a group goes with the subset of
    its first trace)."""
    import random

    groups = content_groups(traces) if by is None else list(by)
    fold_of_group: dict[str, int] = {}
    for subset in sorted({subset_of(t) for t in traces}):
        keys = sorted({g for g, t in zip(groups, traces, strict=True) if subset_of(t) == subset})
        keys = [g for g in keys if g not in fold_of_group]
        random.Random(f"{seed}:{subset}").shuffle(keys)
        for n, g in enumerate(keys):
            fold_of_group[g] = n % k
    return [fold_of_group[g] for g in groups]


def deploy_fit(
    table: Table, groups: Sequence[str], indices: Sequence[int], k: int = 5, seed: int = 0
) -> ShortlistModel:
    """The deploy model's ranking trained on the traces at ``indices`` (:func:`bagged` over
    ``k`` folds by content), without thresholds: what ranks a trace of a source outside
    them (``bench/transfer.py``)."""
    folds = assign_folds([table.traces[i] for i in indices], k, seed)
    return bagged(table, groups, indices, folds)[0]


@dataclass
class CrossValidation:
    """Out-of-fold probabilities of every trace (for recall: each trace scored by the model
    trained on the other folds)."""

    folds: list[int]
    probs: list[list[float]]
    """Per trace, per step: probability from the model that never saw the trace."""
    models: list[ShortlistModel]
    """The model of each fold (trained on the other folds)."""


def cross_validate(
    table: Table,
    groups: Sequence[str],
    k: int = 5,
    seed: int = 0,
    objective: Objective = OBJECTIVE,
) -> CrossValidation:
    folds = assign_folds(table.traces, k, seed)
    probs: list[list[float]] = [[] for _ in table.traces]
    models: list[ShortlistModel] = []
    for fold in range(k):
        train = [i for i, f in enumerate(folds) if f != fold]
        model = fit(table, groups, train, objective)
        models.append(model)
        for i, f in enumerate(folds):
            if f == fold:
                start, end = table.spans[i]
                probs[i] = softmax(model.logits(table.rows[start:end]))
    return CrossValidation(folds, probs, models)


def calibration_fold(fold: int, k: int) -> int:
    """The fold whose scores calibrate the held-out model of ``fold``."""
    return (fold + 1) % k


def calibrated(
    table: Table, groups: Sequence[str], train: Sequence[int], calibrate: Sequence[int]
) -> ShortlistModel:
    """A model trained on the traces at ``train`` whose conformal thresholds come from its
    own scores of the traces at ``calibrate`` (split conformal: disjoint from ``train``)."""
    assert not set(train) & set(calibrate), "calibration traces must not be trained on"
    model = fit(table, groups, train)
    probs = {i: softmax(model.logits(table.rows[slice(*table.spans[i])])) for i in calibrate}
    _calibrate(model, table, probs)
    return model


def _calibrate(model: ShortlistModel, table: Table, probs: dict[int, list[float]]) -> None:
    """Set ``model``'s conformal thresholds from the traces at the keys of ``probs``, each
    with its probabilities from a model that never trained on it."""
    scores: list[float] = []
    by_source: dict[str, list[float]] = {}
    for i, p in probs.items():
        label = table.traces[i].label
        score = conformal.nonconformity(p, label.acceptable_steps if label else [])
        scores.append(score)
        by_source.setdefault(subset_of(table.traces[i]), []).append(score)
    model.conformal = {str(a): round(conformal.threshold(scores, a), 6) for a in conformal.LEVELS}
    if len(by_source) > 1:
        # Per-source thresholds where the source is known (``Trace.source.subset``): the
        # guarantee then holds per source, not only pooled over them.
        for source, values in sorted(by_source.items()):
            if len(values) >= MIN_PER_SOURCE:
                for a in conformal.LEVELS:
                    key = conformal.source_key(source, a)
                    model.conformal[key] = round(conformal.threshold(values, a), 6)


@dataclass
class HeldOut:
    """One held-out model per fold: fold ``f``'s model was trained on neither fold ``f`` nor
    its calibration fold, and calibrated on the latter. A trace of fold ``f`` is scored and
    given a step set by that model only."""

    folds: list[int]
    """Fold of each trace of the table."""
    models: list[ShortlistModel]
    """Held-out model of each fold."""
    deploy: ShortlistModel
    """For traces outside the table: the mean of the fits that each leave one fold out,
    calibrated on every trace's out-of-fold scores (:func:`bagged`)."""


def held_out_models(
    table: Table,
    groups: Sequence[str],
    k: int = 5,
    seed: int = 0,
    by: Sequence[str] | None = None,
) -> HeldOut:
    folds = assign_folds(table.traces, k, seed, by)
    members = [[i for i, f in enumerate(folds) if f == fold] for fold in range(k)]
    models: list[ShortlistModel] = []
    for fold in range(k):
        calib = calibration_fold(fold, k)
        train = [i for i, f in enumerate(folds) if f not in (fold, calib)]
        model = calibrated(table, groups, train, members[calib])
        model.trained_on = {
            "held_out_fold": fold,
            "calibrated_on_fold": calib,
            "trained_on_folds": sorted(set(range(k)) - {fold, calib}),
        }
        models.append(model)
    deploy, out_of_fold = bagged(table, groups, range(len(table.traces)), folds)
    _calibrate(deploy, table, out_of_fold)
    deploy.trained_on = {
        "trained_on_folds": sorted(set(folds)),
        "bagged": "the mean of the fits that each leave one fold out",
        "calibrated_on": "every trace's out-of-fold scores (cross-fit)",
    }
    return HeldOut(folds, models, deploy)


MIN_SOURCES_FOR_UNSEEN = 3
"""Sources a table needs before thresholds for a source never trained on are fitted."""


def sources_of(table: Table) -> dict[str, list[int]]:
    """Each source's trace indices in ``table``."""
    by_source: dict[str, list[int]] = {}
    for i, t in enumerate(table.traces):
        by_source.setdefault(subset_of(t), []).append(i)
    return by_source


def unseen_thresholds(
    table: Table, groups: Sequence[str], trained: Sequence[str] | None = None
) -> dict[str, float]:
    """Thresholds for a trace of a source the weights never trained on, fitted the way
    such a trace meets the ranker: each source's traces scored by a model trained on the
    ``trained`` sources (default: every source of the table) *other than* that one (one
    fit, at a fifth of the cost of the deploy model's mean of fold fits: left out in turn,
    the shipped training sources get the same top-1 from both but for one trace;
    ``bench/transfer.py``, "How the deploy fit was chosen"),
    every source weighing the same, the empirical quantile per level. A source used for
    calibration only is thus scored by a model of every trained source. Empty with fewer
    than ``MIN_SOURCES_FOR_UNSEEN`` sources."""
    by_source = sources_of(table)
    trained = sorted(by_source) if trained is None else list(trained)
    if len(by_source) < MIN_SOURCES_FOR_UNSEEN:
        return {}
    scores: list[float] = []
    weights: list[float] = []
    for source, members in sorted(by_source.items()):
        others = [i for s in trained if s != source for i in by_source.get(s, [])]
        if not others:
            continue
        model = fit(table, groups, others)
        for i in members:
            start, end = table.spans[i]
            label = table.traces[i].label
            probs = softmax(model.logits(table.rows[start:end]))
            scores.append(conformal.nonconformity(probs, label.acceptable_steps if label else []))
            weights.append(1.0 / len(members))
    return {
        conformal.source_key(conformal.UNSEEN, a): round(
            conformal.weighted_threshold(scores, weights, a), 6
        )
        for a in conformal.LEVELS
    }


def ship(
    table: Table,
    groups: Sequence[str],
    k: int = 5,
    seed: int = 0,
    calibrate_only: Sequence[str] = (),
    fold_key: Callable[[Trace], str] | None = None,
) -> Weights:
    """The format-2 weights file: the deploy model, the held-out model of every fold, and
    the fold of every training trace (by content hash), trained on every source of
    ``table`` but those in ``calibrate_only``. With three sources or more, every model
    also gets the thresholds of :func:`unseen_thresholds` (never below its own pooled
    ones); the ``calibrate_only`` sources serve there, as sources never trained on.
    ``fold_key`` groups traces into folds (default: by content)."""
    by_source = sources_of(table)
    trained = [s for s in sorted(by_source) if s not in calibrate_only]
    unseen = unseen_thresholds(table, groups, trained)
    table = subtable(table, [i for s in trained for i in by_source[s]])
    by = None if fold_key is None else [fold_key(t) for t in table.traces]
    held = held_out_models(table, groups, k, seed, by)
    for model in [held.deploy, *held.models]:
        for a in conformal.LEVELS:
            key = conformal.source_key(conformal.UNSEEN, a)
            if key in unseen:
                model.conformal[key] = max(unseen[key], model.conformal.get(str(a), 0.0))
    fold_of = {trace_hash(t): f for t, f in zip(table.traces, held.folds, strict=True)}
    provenance = {
        "dataset": "labelled traces by source (Who&When's subsets; generated:* from "
        "bench/fault_injection.py)",
        "sources": {s: len(by_source[s]) for s in trained},
        "calibrated_only_on": {
            s: len(by_source[s]) for s in sorted(calibrate_only) if s in by_source
        },
        "objective": OBJECTIVE,
        "penalty": LAMBDA,
        "traces": len(table.traces),
        "folds": k,
        "seed": seed,
        "note": "A trace listed in fold_of is answered by the held-out model of its fold, "
        "which neither trained nor calibrated on it.",
    }
    sketches = {trace_hash(t): neardup.sketch(t) for t in table.traces}
    reference = build_reference(table.traces, held.folds)
    return Weights(
        held.deploy,
        held.models,
        fold_of,
        trained_on=provenance,
        sketches=sketches,
        shift=reference,
    )
