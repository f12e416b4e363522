"""The shortlist ranker at inference: learned weights from a small JSON, applied in Python.

Training (``shortlist/learner.py``, ``shortlist/train.py``) needs SciPy or scikit-learn;
applying a model does not. A model holds the feature groups, the standardisation (mean,
scale), the linear score's coefficients and intercept, the split-conformal thresholds and
its provenance. A weights file (``weights.py``) holds one model (format 1) or a deploy
model plus one held-out model per cross-validation fold (format 2, shipped).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from faultfinder.errors import ConfigError
from faultfinder.shortlist.features import feature_names
from faultfinder.traces.schema import Trace

FORMAT = "faultfinder-shortlist/1"
SHIPPED = "weights.json"
"""The weights file inside this package (format 2, see ``weights.py``)."""


def trace_hash(trace: Trace) -> str:
    """Content hash of a trace's log (speakers and outputs), 16 hex digits.

    Two files holding the same log (Who&When's duplicated logs) get the same hash, so
    cross-validation keeps them in one fold and the contamination check finds both.
    """
    payload = json.dumps(
        [[s.agent, s.content, [r.content for r in s.tool_results]] for s in trace.steps],
        ensure_ascii=False,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


@dataclass
class ShortlistModel:
    """A trained linear ranker over standardised step features."""

    groups: list[str]
    """Feature groups the model reads (``features.GROUPS`` subset)."""
    mean: list[float]
    """Per-column mean used to standardise."""
    scale: list[float]
    """Per-column scale used to standardise (never 0)."""
    coef: list[float]
    """Weight of each standardised column in a step's score."""
    intercept: float
    """Constant added to every step's score (it cancels in the softmax over a trace's
    steps: 0 for one listwise fit)."""
    conformal: dict[str, float] = field(default_factory=dict)
    """Coverage level ('0.9') -> threshold on cumulative softmax mass (see conformal.py)."""
    trained_on: dict[str, Any] = field(default_factory=dict)
    """Provenance: dataset name, trace count and ``hashes`` (trace_hash of each)."""

    def __post_init__(self) -> None:
        # ValueError: ``from_json`` says it with the file (and the model in it) it read.
        width = len(feature_names(self.groups))
        for name in ("mean", "scale", "coef"):
            if len(getattr(self, name)) != width:
                raise ValueError(
                    f"'{name}' has {len(getattr(self, name))} values, the feature groups "
                    f"{self.groups} have {width} columns"
                )
        for name, value in zip(feature_names(self.groups), self.scale, strict=True):
            if not value > 0 or value == float("inf"):
                raise ValueError(
                    f"column {name!r} has scale {value}, which must be a positive number; "
                    "rebuild the weights file (faultfinder calibrate --train)"
                )

    @property
    def names(self) -> list[str]:
        return feature_names(self.groups)

    def logits(self, rows: Sequence[Sequence[float]]) -> list[float]:
        """One score per step (higher: more likely the decisive step)."""
        return [
            self.intercept
            + sum(
                c * (x - m) / s
                for c, x, m, s in zip(self.coef, row, self.mean, self.scale, strict=True)
            )
            for row in rows
        ]

    def seen(self, trace: Trace) -> bool:
        """True when ``trace``'s log was in this model's training data."""
        return trace_hash(trace) in set(self.trained_on.get("hashes", []))

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "groups": self.groups,
            "features": self.names,
            "mean": [round(v, 8) for v in self.mean],
            "scale": [round(v, 8) for v in self.scale],
            "coef": [round(v, 8) for v in self.coef],
            "intercept": round(self.intercept, 8),
            "conformal": self.conformal,
            "trained_on": self.trained_on,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "shortlist model") -> ShortlistModel:
        if data.get("format") != FORMAT:
            raise ConfigError(f"{where}: field 'format' is {data.get('format')!r}, not {FORMAT!r}")
        try:
            if "features" in data:
                check_features(data["features"], list(data["groups"]), where)
            return cls(
                groups=list(data["groups"]),
                mean=[float(v) for v in data["mean"]],
                scale=[float(v) for v in data["scale"]],
                coef=[float(v) for v in data["coef"]],
                intercept=float(data["intercept"]),
                conformal={str(k): float(v) for k, v in data.get("conformal", {}).items()},
                trained_on=dict(data.get("trained_on", {})),
            )
        except KeyError as exc:
            raise ConfigError(f"{where}: missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: {exc}") from None


def check_features(features: Any, groups: list[str], where: str) -> None:
    """Refuse a file whose ``features`` (the column each of its numbers is for) are not
    the columns this faultfinder computes for its ``groups``, in this order: its weights
    would be applied to other features than they were fitted on, and the ranking would
    be wrong with no error (ConfigError naming the file and the first difference)."""
    if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
        raise ConfigError(f"{where}: field 'features' is not a list of column names")
    try:
        expected = feature_names(groups)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if features == expected:
        return
    missing = [f for f in expected if f not in features]
    extra = [f for f in features if f not in expected]
    parts = []
    if missing:
        parts.append(f"this faultfinder computes {missing} that the file has no weight for")
    if extra:
        parts.append(f"the file has weights for {extra} that this faultfinder does not compute")
    if not parts and len(features) != len(expected):
        parts.append(f"the file lists {len(features)} columns, this faultfinder {len(expected)}")
    if not parts:
        at = next(i for i, (a, b) in enumerate(zip(features, expected, strict=True)) if a != b)
        parts.append(
            f"the same columns in another order: column {at} is {features[at]!r} in the file "
            f"and {expected[at]!r} here"
        )
    what = "; ".join(parts)
    raise ConfigError(
        f"{where}: field 'features' does not match the features this faultfinder computes "
        f"for the groups {groups} ({what}), so its weights would rank steps by the wrong "
        "features. The file was written by another faultfinder version: use that version, "
        "or rebuild the file with this one (`faultfinder calibrate --train`, "
        "docs/step-sets.md)."
    )


def averaged(
    models: Sequence[ShortlistModel], mean: Sequence[float], scale: Sequence[float]
) -> ShortlistModel:
    """One model whose score of every step is the mean of ``models``' scores (a mean of
    linear scores is linear), its columns standardised by ``mean`` and ``scale``. Each
    model standardises by its own statistics, so each coefficient is carried over:
    ``c * (x - m) / s`` is ``c * S / s`` times ``(x - M) / S`` plus a constant."""
    first = models[0]
    coef = [0.0] * len(mean)
    intercept = 0.0
    for m in models:
        if m.groups != first.groups:
            raise ConfigError(f"cannot average models of groups {first.groups} and {m.groups}")
        intercept += m.intercept
        for j, (c, mu, s) in enumerate(zip(m.coef, m.mean, m.scale, strict=True)):
            coef[j] += c * scale[j] / s
            intercept += c * (mean[j] - mu) / s
    n = len(models)
    return ShortlistModel(
        groups=list(first.groups),
        mean=list(mean),
        scale=list(scale),
        coef=[c / n for c in coef],
        intercept=intercept / n,
    )


def softmax(logits: Sequence[float]) -> list[float]:
    """Probabilities over a trace's steps."""
    if not logits:
        return []
    top = max(logits)
    exps = [math.exp(v - top) for v in logits]
    total = sum(exps)
    return [e / total for e in exps]
