"""Training the shortlist ranker (needs scikit-learn: the ``shortlist`` extra).

Protocol (docs/methods/shortlist.md): one row per step, target 1 for the labelled
decisive step(s), a standardised logistic regression. Cross-validation assigns whole
traces to folds (identical logs share a fold), so no trace is ever both trained on and
evaluated; the out-of-fold probabilities are the only scores the bench reports.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from faultfinder.shortlist import conformal
from faultfinder.shortlist.features import trace_features
from faultfinder.shortlist.model import ShortlistModel, softmax, trace_hash
from faultfinder.traces.schema import Trace

SurprisalOf = Callable[[Trace], Sequence[tuple[float, float]]]

C = 0.5
"""Inverse L2 regularisation strength of the logistic regression."""


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


def fit(table: Table, groups: Sequence[str], indices: Sequence[int]) -> ShortlistModel:
    """A model trained on the traces at ``indices`` of ``table``."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    picks = [r for i in indices for r in range(*table.spans[i])]
    x = np.asarray([table.rows[r] for r in picks], dtype=float)
    y = np.asarray([table.targets[r] for r in picks])
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0
    clf = LogisticRegression(C=C, class_weight="balanced", max_iter=5000)
    clf.fit((x - mean) / scale, y)
    return ShortlistModel(
        groups=list(groups),
        mean=mean.tolist(),
        scale=scale.tolist(),
        coef=clf.coef_[0].tolist(),
        intercept=float(clf.intercept_[0]),
    )


def subset_of(trace: Trace) -> str:
    """The benchmark subset folds are balanced over (the shortlist sits below eval/)."""
    return trace.source.subset or "all"


def assign_folds(traces: Sequence[Trace], k: int, seed: int = 0) -> list[int]:
    """Fold of each trace: by content hash (identical logs together), balanced per subset."""
    import random

    fold_of_hash: dict[str, int] = {}
    for subset in sorted({subset_of(t) for t in traces}):
        hashes = sorted({trace_hash(t) for t in traces if subset_of(t) == subset})
        hashes = [h for h in hashes if h not in fold_of_hash]
        random.Random(f"{seed}:{subset}").shuffle(hashes)
        for n, h in enumerate(hashes):
            fold_of_hash[h] = n % k
    return [fold_of_hash[trace_hash(t)] for t in traces]


@dataclass
class CrossValidation:
    """Out-of-fold probabilities of every trace and the conformal thresholds each fold
    would use (calibrated on the other folds' out-of-fold scores)."""

    folds: list[int]
    probs: list[list[float]]
    """Per trace, per step: probability from the model that never saw the trace."""
    thresholds: list[dict[str, float]]
    """Per trace: coverage level -> threshold calibrated without the trace's fold."""
    models: list[ShortlistModel]
    """The model of each fold (trained on the other folds)."""


def cross_validate(
    table: Table, groups: Sequence[str], k: int = 5, seed: int = 0
) -> CrossValidation:
    folds = assign_folds(table.traces, k, seed)
    probs: list[list[float]] = [[] for _ in table.traces]
    models: list[ShortlistModel] = []
    for fold in range(k):
        train = [i for i, f in enumerate(folds) if f != fold]
        model = fit(table, groups, train)
        models.append(model)
        for i, f in enumerate(folds):
            if f == fold:
                start, end = table.spans[i]
                probs[i] = softmax(model.logits(table.rows[start:end]))
    scores = [
        conformal.nonconformity(p, t.label.acceptable_steps if t.label else [])
        for p, t in zip(probs, table.traces, strict=True)
    ]
    per_fold: list[dict[str, float]] = []
    for fold in range(k):
        calib = [s for s, f in zip(scores, folds, strict=True) if f != fold]
        per_fold.append({str(a): conformal.threshold(calib, a) for a in conformal.LEVELS})
    return CrossValidation(folds, probs, [per_fold[f] for f in folds], models)


def ship(table: Table, groups: Sequence[str], cv: CrossValidation) -> dict[str, Any]:
    """The model trained on every trace, with thresholds from all out-of-fold scores."""
    model = fit(table, groups, range(len(table.traces)))
    scores = [
        conformal.nonconformity(p, t.label.acceptable_steps if t.label else [])
        for p, t in zip(cv.probs, table.traces, strict=True)
    ]
    model.conformal = {str(a): round(conformal.threshold(scores, a), 6) for a in conformal.LEVELS}
    model.trained_on = {
        "dataset": "Who&When (Algorithm-Generated + Hand-Crafted, authors' repository)",
        "traces": len(table.traces),
        "note": "Scores of these traces are contaminated: evaluate with bench/shortlist.py "
        "(cross-validated), not with these weights.",
        "hashes": sorted({trace_hash(t) for t in table.traces}),
    }
    return model.to_json()
