"""Fitting the shortlist ranker (needs scikit-learn: the ``shortlist`` extra).

One fit (docs/methods/shortlist.md): one row per step, standardised columns, and a linear
score per step trained *listwise*: the softmax over a trace's steps is fitted to put its
mass on the labelled decisive step(s) (a conditional logit, L2-regularised), which is
what the ranking and the step sets read. The older pointwise objective (a logistic
regression on step rows, each step judged alone) stays available as
``objective="pointwise"`` for comparison. Traces weigh by source
(:func:`source_weights`): Who&When's traces one each, every other source an equal share of
as much again, so the many short generated traces neither drown the benchmark nor vanish.
The deploy model is the mean of the fits that each leave one fold out (:func:`bagged`),
given the folds.

Which traces a fit sees, and which calibrate it (folds, cross-validation, split conformal,
the shipped file), is :mod:`faultfinder.shortlist.train`, which re-exports every name here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from faultfinder.errors import ConfigError
from faultfinder.shortlist.features import trace_features
from faultfinder.shortlist.model import ShortlistModel, averaged, softmax
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


def subset_of(trace: Trace) -> str:
    """The source a trace weighs, is calibrated and is balanced over folds as: its
    benchmark subset (the shortlist sits below eval/)."""
    return trace.source.subset or "all"


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

    require_training_rows(table, indices)

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


def require_training_rows(table: Table, indices: Sequence[int]) -> None:
    """Refuse a fit on no step (ConfigError): with no training trace, or only traces with
    no step, there is nothing to standardise or weigh. A caller that holds sources or
    folds out reaches it when nothing is left to train on (two sources, one of them the
    only training source, and that one held out)."""
    if any(table.spans[i][1] > table.spans[i][0] for i in indices):
        return
    held = f"its {len(indices)} trace(s) have no step" if indices else "it holds no trace"
    raise ConfigError(
        f"cannot fit the shortlist ranker: the training set is empty ({held}; "
        f"{len(table.traces)} trace(s) given in all). Every trace given was held out or "
        "left out of training: give labelled traces of at least one source that is "
        "trained on and not the one held out (bench: another DATA or `--also DIR`)."
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

    require_training_rows(table, indices)
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
