"""How unlike the calibration data a trace is: the shift score behind every step set.

A step set's level is a coverage guarantee only for traces exchangeable with the
calibration traces. This module measures how far a trace is from them, with no model
and no label, so that a result can withdraw its coverage claim where the guarantee has no
ground.

A trace is described by a few numbers about its shape (:data:`DESCRIPTORS`: its length,
how long its steps are, how many agents speak and how often the speaker changes, how many
steps are tool steps or carry a failure signal). Each is standardised by the calibration
traces' mean and spread; the **shift score** is the distance from the trace to its
``k``-th nearest calibration trace in that space (root mean square over descriptors, so 1
is one standard deviation on every descriptor). A nearest-neighbour distance, unlike a
distance to the mean, respects a calibration set made of distinct kinds of run
(Who&When's short Algorithm-Generated and long Hand-Crafted logs).

The threshold is fitted out of sample (``shortlist/train.py``): each calibration trace is
scored against the traces of the other folds, and the threshold is the 95th percentile of
those scores, so about one in twenty traces like the calibration data is flagged. A trace
above it keeps its set, but the set's level is no longer claimed (``step_set_calibrated``
is False).

A trace that names a source the reference holds enough traces of (``MIN_PER_SOURCE``) is
compared with that source's traces alone, against that source's own threshold: its set
uses that source's conformal thresholds, so it must be like that source, not merely like
some calibration trace.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from faultfinder.traces.schema import Trace

DESCRIPTORS: tuple[str, ...] = (
    "log_steps",
    "log_chars_per_step",
    "log_agents",
    "speaker_change_share",
    "tool_share",
    "signal_share",
)
"""What the shift score compares, in this order."""
K = 3
"""The score is the distance to the K-th nearest calibration trace."""
FLAG_QUANTILE = 0.95
"""Share of held-out calibration traces whose score stays at or under the threshold."""
MIN_PER_SOURCE = 10
"""Traces a source needs in the reference for a threshold of its own."""

_SIGNAL = re.compile(
    r"traceback|\berror\b|\bexception\b|\bfailed\b|\bunable to\b|\bcould not\b|\bcannot\b",
    re.I,
)


def descriptors(trace: Trace) -> list[float]:
    """The :data:`DESCRIPTORS` of ``trace`` (a trace with steps)."""
    steps = trace.steps
    n = len(steps)
    texts = [s.content + "".join(r.content for r in s.tool_results) for s in steps]
    chars = sum(len(t) for t in texts)
    changes = sum(1 for i in range(1, n) if steps[i].agent != steps[i - 1].agent)
    tools = sum(1 for s in steps if s.kind == "tool" or s.tool_calls or s.tool_results)
    signals = sum(1 for t in texts if _SIGNAL.search(t))
    return [
        math.log(n),
        math.log1p(chars / n),
        math.log(len({s.agent for s in steps}) or 1),
        changes / max(n - 1, 1),
        tools / n,
        signals / n,
    ]


MIN_SPREAD = 1e-6
"""A descriptor's spread below this (all calibration traces alike on it, up to rounding
error) standardises by 1 instead, so it neither divides by zero nor, written to a weights
file with six decimals, comes back as 0."""


def _spread(value: float) -> float:
    return value if value >= MIN_SPREAD else 1.0


@dataclass
class ShiftReference:
    """The calibration traces' descriptors and the threshold on the shift score."""

    mean: list[float]
    scale: list[float]
    points: list[list[float]]
    """Standardised descriptors of every calibration trace."""
    folds: list[int] = field(default_factory=list)
    """Cross-validation fold of each point (empty: no folds)."""
    threshold: float = math.inf
    """Scores above it withdraw the coverage claim."""
    sources: list[str] = field(default_factory=list)
    """Source of each point (empty: not recorded)."""
    by_source: dict[str, float] = field(default_factory=dict)
    """Threshold of each source with at least ``MIN_PER_SOURCE`` points, for a trace
    compared with that source's points alone."""

    def threshold_for(self, source: str | None) -> float:
        """The threshold a trace of ``source`` is held to."""
        return self.by_source.get(source or "", self.threshold)

    def score(
        self, trace: Trace, exclude_fold: int | None = None, source: str | None = None
    ) -> float:
        """Distance from ``trace`` to its K-th nearest calibration trace (points of
        ``exclude_fold`` left out: a Who&When trace is not compared with its own fold;
        only the points of ``source`` when it has a threshold of its own)."""
        x = [(v - m) / s for v, m, s in zip(descriptors(trace), self.mean, self.scale, strict=True)]
        return self.score_point(x, exclude_fold, source)

    def score_point(
        self, x: Sequence[float], exclude_fold: int | None = None, source: str | None = None
    ) -> float:
        d = len(x)
        own = source is not None and source in self.by_source
        dists = sorted(
            math.sqrt(sum((a - b) ** 2 for a, b in zip(x, p, strict=True)) / d)
            for n, p in enumerate(self.points)
            if (exclude_fold is None or not self.folds or self.folds[n] != exclude_fold)
            and (not own or self.sources[n] == source)
        )
        if not dists:
            return math.inf
        return dists[min(K, len(dists)) - 1]

    def to_json(self) -> dict[str, Any]:
        return {
            "descriptors": list(DESCRIPTORS),
            "k": K,
            "threshold": round(self.threshold, 6),
            "mean": [round(v, 6) for v in self.mean],
            "scale": [round(v, 6) for v in self.scale],
            "points": [[round(v, 4) for v in p] for p in self.points],
            "folds": self.folds,
            **({"sources": self.sources, "by_source": self.by_source} if self.by_source else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ShiftReference:
        if list(data.get("descriptors", [])) != list(DESCRIPTORS):
            raise ValueError(
                f"shift descriptors are {data.get('descriptors')}, not {list(DESCRIPTORS)}"
            )
        sources = [str(s) for s in data.get("sources", [])]
        if data.get("by_source") and len(sources) != len(data["points"]):
            raise ValueError(
                f"shift 'sources' has {len(sources)} entries for {len(data['points'])} points"
            )
        return cls(
            mean=[float(v) for v in data["mean"]],
            scale=[_spread(float(v)) for v in data["scale"]],
            points=[[float(v) for v in p] for p in data["points"]],
            folds=[int(f) for f in data.get("folds", [])],
            threshold=float(data["threshold"]),
            sources=sources,
            by_source={str(k): float(v) for k, v in data.get("by_source", {}).items()},
        )


def build_reference(traces: Sequence[Trace], folds: Sequence[int] | None = None) -> ShiftReference:
    """A reference over ``traces`` whose threshold is fitted out of fold: each trace is
    scored against the other folds' traces (or, without folds, all the others); with two
    sources or more (``Trace.source.subset``), each source of ``MIN_PER_SOURCE`` traces
    also gets a threshold fitted the same way against its own traces."""
    raw = [descriptors(t) for t in traces]
    d = len(DESCRIPTORS)
    n = len(raw)
    mean = [sum(r[j] for r in raw) / n for j in range(d)]
    scale = [_spread(math.sqrt(sum((r[j] - mean[j]) ** 2 for r in raw) / n)) for j in range(d)]
    points = [[(r[j] - mean[j]) / scale[j] for j in range(d)] for r in raw]
    fold_list = list(folds) if folds is not None else list(range(n))
    ref = ShiftReference(mean, scale, points, fold_list)
    scores = sorted(ref.score_point(p, fold_list[i]) for i, p in enumerate(points))
    rank = min(n, math.ceil((n + 1) * FLAG_QUANTILE))
    ref.threshold = scores[rank - 1]
    labels = [t.source.subset or "" for t in traces]
    counts = {s: labels.count(s) for s in set(labels)}
    if len(counts) > 1:
        ref.sources = labels
        for source, count in sorted(counts.items()):
            if not source or count < MIN_PER_SOURCE:
                continue
            own = [i for i, s in enumerate(labels) if s == source]
            ref.by_source[source] = math.inf  # score_point restricts to this source
            scored = sorted(ref.score_point(points[i], fold_list[i], source) for i in own)
            ref.by_source[source] = round(
                scored[min(count, math.ceil((count + 1) * FLAG_QUANTILE)) - 1], 6
            )
    if folds is None:
        ref.folds = []
    return ref
