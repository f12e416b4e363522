"""Training the shortlist ranker (needs scikit-learn: the ``shortlist`` extra).

Protocol (docs/methods/shortlist.md): one row per step, standardised columns, and a
linear score per step trained *listwise*: the softmax over a trace's steps is fitted to put
its mass on the labelled decisive step(s) (a conditional logit, L2-regularised), which is
what the ranking and the step sets read. The older pointwise objective (a logistic
regression on step rows, each step judged alone) stays available as
``objective="pointwise"`` for comparison. Traces weigh by source
(:func:`source_weights`): Who&When's traces one each, every other source an equal share of
as much again, so the many short generated traces neither drown the benchmark nor vanish.
Cross-validation assigns whole
traces to folds (identical logs share a fold), so no trace is ever both trained on and
evaluated; the out-of-fold probabilities are the only scores the bench reports. The
shipped file (:func:`ship`) holds one held-out model per fold, trained without that fold
and without the fold that calibrates it (split conformal), plus a deploy model: the mean
of the fits that each leave one fold out (:func:`bagged`), its step sets calibrated on the
out-of-fold scores of every training trace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from faultfinder.shortlist import conformal, neardup
from faultfinder.shortlist.features import trace_features
from faultfinder.shortlist.model import ShortlistModel, averaged, softmax, trace_hash
from faultfinder.shortlist.shift import build_reference
from faultfinder.shortlist.weights import Weights
from faultfinder.traces.schema import Trace

SurprisalOf = Callable[[Trace], Sequence[tuple[float, float]]]

Objective = Literal["listwise", "pointwise"]
OBJECTIVE: Objective = "listwise"
"""How :func:`fit` trains. Listwise (issue 26) fits the softmax over a trace's steps that
the ranking and the step sets read; it cross-validates on Who&When at least as well as the
pointwise objective, and transfers no better to sources never trained on (bench/README.md,
"Transfer and paired tests")."""
LAMBDA = 10.0
"""L2 penalty of the listwise objective (on the weighted sum over traces of
-log P(decisive)). Chosen with the feature groups and ``OTHER_SHARE`` by one criterion
over the shipped training sources only (the demo team and the software team are not in
it): the mean of top-1 on Who&When's two subsets, cross-validated, and of top-1 on each
generated training source left out in turn; docs/methods/shortlist.md, "Ranker and
training protocol", and ``bench/transfer.py``'s table of it."""
MIN_SCALE = 1e-6
"""A column whose spread over the training rows is below this is constant: it scales by 1
(the file stores 8 decimals, so a spread of rounding noise would be stored as 0)."""
OTHER_SHARE = 1.0
"""Total training weight of the non-anchor sources, as a multiple of the anchor traces'
count (see :func:`source_weights`; chosen with ``LAMBDA``)."""
ANCHOR_SOURCES: tuple[str, ...] = ("Algorithm-Generated", "Hand-Crafted")
"""Sources whose traces weigh one each in training (Who&When's subsets, real failures of
real agents); see :func:`source_weights`."""
C = 0.5
"""Inverse L2 regularisation strength of the pointwise logistic regression."""
MIN_PER_SOURCE = 10
"""Calibration traces a source needs for thresholds of its own."""


@dataclass
class Table:
    """Feature rows of many traces, with where each trace's rows are."""

    traces: list[Trace]
    rows: list[list[float]]
    targets: list[int]
    spans: list[tuple[int, int]]
    """(start, end) of each trace's rows."""


def build_table(
    traces: Sequence[Trace], groups: Sequence[str], surprisal: SurprisalOf | None = None
) -> Table:
    rows: list[list[float]] = []
    targets: list[int] = []
    spans: list[tuple[int, int]] = []
    for trace in traces:
        assert trace.label is not None
        values = surprisal(trace) if surprisal is not None and "surprisal" in groups else None
        feats = trace_features(trace, groups, values)
        start = len(rows)
        rows += feats
        targets += [int(i in trace.label.acceptable_steps) for i in range(len(feats))]
        spans.append((start, len(rows)))
    return Table(list(traces), rows, targets, spans)


def source_weights(traces: Sequence[Trace], share: float = OTHER_SHARE) -> list[float]:
    """Training weight of each trace. A trace of an ``ANCHOR_SOURCES`` source weighs 1;
    the other sources share, equally, a total weight of ``share`` times the number of
    anchor traces (each of their traces weighs its source's part over its source's count).
    With no anchor trace, or no other source, every trace weighs 1: a user's own traces
    train as they are."""
    counts: dict[str, int] = {}
    for t in traces:
        counts[subset_of(t)] = counts.get(subset_of(t), 0) + 1
    anchors = sum(n for s, n in counts.items() if s in ANCHOR_SOURCES)
    others = [s for s in counts if s not in ANCHOR_SOURCES]
    if not anchors or not others:
        return [1.0] * len(traces)
    part = share * anchors / len(others)
    return [1.0 if subset_of(t) in ANCHOR_SOURCES else part / counts[subset_of(t)] for t in traces]


def fit(
    table: Table,
    groups: Sequence[str],
    indices: Sequence[int],
    objective: Objective = OBJECTIVE,
    penalty: float = 0.0,
    share: float = OTHER_SHARE,
) -> ShortlistModel:
    """A model trained on the traces at ``indices`` of ``table`` (``penalty``: the
    listwise L2 penalty, ``LAMBDA`` when 0), each weighing as :func:`source_weights`
    says with ``share``."""
    import numpy as np

    picks = [r for i in indices for r in range(*table.spans[i])]
    x = np.asarray([table.rows[r] for r in picks], dtype=float)
    mean, scale = _standardisation(x)
    z = (x - mean) / scale
    sizes = [table.spans[i][1] - table.spans[i][0] for i in indices]
    weight = np.repeat(source_weights([table.traces[i] for i in indices], share), sizes)
    if objective == "pointwise":
        targets = np.asarray([table.targets[r] for r in picks])
        coef, intercept = _pointwise(z, targets, weight)
    else:
        gold = np.asarray([table.targets[r] for r in picks], dtype=bool)
        coef, intercept = _listwise(z, gold, sizes, weight, penalty or LAMBDA), 0.0
    return ShortlistModel(
        groups=list(groups),
        mean=mean.tolist(),
        scale=scale.tolist(),
        coef=coef,
        intercept=intercept,
    )


def _standardisation(x: Any) -> tuple[Any, Any]:
    """Per-column mean and scale of the step rows ``x`` (a constant column scales by 1;
    constant up to rounding too: a spread of 1e-15 would be written to the file as 0)."""
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < MIN_SCALE] = 1.0
    return mean, scale


def bagged(
    table: Table,
    groups: Sequence[str],
    indices: Sequence[int],
    folds: Sequence[int],
    penalty: float = 0.0,
    share: float = OTHER_SHARE,
) -> tuple[ShortlistModel, dict[int, list[float]]]:
    """The deploy fit: for each fold, a model trained on the traces at ``indices`` outside
    it (``folds``: the fold of each), and their mean as one linear model; with each trace's
    out-of-fold probabilities (from the model that left its fold out), which calibrate the
    mean's step sets. Averaging the folds' fits steadies a ranking that one fit on part of
    the data leaves to chance (docs/methods/shortlist.md, "Which model ranks your trace")."""
    import numpy as np

    if len(set(folds)) < 2:
        raise ValueError("bagging over folds needs at least two folds")
    members: list[ShortlistModel] = []
    out_of_fold: dict[int, list[float]] = {}
    for fold in sorted(set(folds)):
        inside = [i for i, f in zip(indices, folds, strict=True) if f != fold]
        member = fit(table, groups, inside, OBJECTIVE, penalty, share)
        members.append(member)
        for i, f in zip(indices, folds, strict=True):
            if f == fold:
                out_of_fold[i] = softmax(member.logits(table.rows[slice(*table.spans[i])]))
    x = np.asarray([table.rows[r] for i in indices for r in range(*table.spans[i])], dtype=float)
    mean, scale = _standardisation(x)
    return averaged(members, mean.tolist(), scale.tolist()), out_of_fold


def deploy_fit(
    table: Table, groups: Sequence[str], indices: Sequence[int], k: int = 5, seed: int = 0
) -> ShortlistModel:
    """The deploy model's ranking trained on the traces at ``indices`` (:func:`bagged` over
    ``k`` folds by content), without thresholds: what ranks a trace of a source outside
    them (``bench/transfer.py``)."""
    folds = assign_folds([table.traces[i] for i in indices], k, seed)
    return bagged(table, groups, indices, folds)[0]


def _pointwise(z: Any, y: Any, weight: Any) -> tuple[list[float], float]:
    """A class-balanced logistic regression on step rows (each step judged alone, weighing
    as its trace)."""
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(C=C, class_weight="balanced", max_iter=5000)
    clf.fit(z, y, sample_weight=weight)
    return clf.coef_[0].tolist(), float(clf.intercept_[0])


def _listwise(z: Any, gold: Any, sizes: Sequence[int], weight: Any, penalty: float) -> list[float]:
    """Coefficients of a conditional logit: per trace, the softmax of ``z @ w`` over its
    steps; minimises the sum over traces of the trace's weight (``weight``: one per row,
    the same on every row of a trace) times -log(mass on the decisive steps), plus
    ``penalty / 2 * |w|^2`` (L-BFGS; a trace with no decisive step is skipped)."""
    import numpy as np
    from scipy.optimize import minimize

    starts = np.cumsum([0, *sizes[:-1]])
    keep = np.add.reduceat(gold.astype(float), starts) > 0
    trace_of = np.repeat(np.arange(len(sizes)), sizes)
    row_keep = keep[trace_of]
    z, gold, trace_of, weight = z[row_keep], gold[row_keep], trace_of[row_keep], weight[row_keep]
    _, trace_of = np.unique(trace_of, return_inverse=True)
    n = int(trace_of.max()) + 1 if len(trace_of) else 0
    if n == 0:
        return [0.0] * z.shape[1]
    per_trace = np.zeros(n)
    per_trace[trace_of] = weight

    def loss(w: Any) -> tuple[float, Any]:
        s = z @ w
        top = np.full(n, -np.inf)
        np.maximum.at(top, trace_of, s)
        e = np.exp(s - top[trace_of])
        total = np.bincount(trace_of, weights=e, minlength=n)
        on_gold = np.bincount(trace_of, weights=e * gold, minlength=n)
        p = e / total[trace_of]
        q = np.where(gold, e, 0.0) / on_gold[trace_of]
        value = float(-(per_trace * np.log(on_gold / total)).sum() + penalty / 2 * w @ w)
        grad = ((p - q) * weight) @ z + penalty * w
        return value, grad

    found = minimize(loss, np.zeros(z.shape[1]), jac=True, method="L-BFGS-B")
    return [float(v) for v in found.x]


def subset_of(trace: Trace) -> str:
    """The benchmark subset folds are balanced over (the shortlist sits below eval/)."""
    return trace.source.subset or "all"


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


def subtable(table: Table, indices: Sequence[int]) -> Table:
    """The rows of the traces at ``indices`` only."""
    rows: list[list[float]] = []
    targets: list[int] = []
    spans: list[tuple[int, int]] = []
    for i in indices:
        start, end = table.spans[i]
        spans.append((len(rows), len(rows) + end - start))
        rows += table.rows[start:end]
        targets += table.targets[start:end]
    return Table([table.traces[i] for i in indices], rows, targets, spans)


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
