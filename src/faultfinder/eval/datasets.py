"""Evaluation sets: the traces an ``eval`` run scores, loaded from any supported source.

A dataset is any path :func:`faultfinder.traces.loader.load_traces` understands (the
Who&When directory, a canonical ``.jsonl`` file, ...) or a directory of canonical trace
files. Traces are grouped by ``Trace.source.subset`` for filtering and reporting.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from faultfinder.errors import ConfigError, TraceFormatError
from faultfinder.traces.io import natural_key
from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import Trace

NO_SUBSET = "all"
"""Subset name given to traces whose source records none."""


class DatasetOptions(BaseModel):
    """Which traces of a dataset to evaluate."""

    subsets: list[str] = Field(default_factory=list)
    """Keep only these subsets (e.g. 'Hand-Crafted'); empty keeps every subset."""
    limit: int | None = Field(default=None, ge=1)
    """Keep the first N traces of each subset (in natural id order); None keeps all."""
    labelled_only: bool = True
    """Drop traces without a gold label (they cannot be scored)."""
    format: str | None = None
    """Source format name; None detects it."""
    strict: bool = False
    """Keys a reader does not know are errors, not warnings (``--strict``)."""


def subset_of(trace: Trace) -> str:
    """The subset a trace is reported under."""
    return trace.source.subset or NO_SUBSET


def load_dataset(path: str | Path, options: DatasetOptions | None = None) -> list[Trace]:
    """The traces at ``path`` after the subset filter, label filter and per-subset limit.

    Order: subsets alphabetically, traces within a subset by natural id order, so
    ``--limit`` always picks the same traces.
    """
    opts = options or DatasetOptions()
    traces = load_traces(Path(path), format=opts.format, strict=opts.strict)
    ids: set[str] = set()
    for trace in traces:
        if trace.id in ids:
            raise TraceFormatError(str(path), "id", f"two traces share the id '{trace.id}'")
        ids.add(trace.id)
    present = sorted({subset_of(t) for t in traces})
    if opts.subsets:
        unknown = [s for s in opts.subsets if s not in present]
        if unknown:
            raise ConfigError(
                f"Subset(s) {', '.join(unknown)} not in {path}. "
                f"Available: {', '.join(present) or '(none)'}."
            )
    wanted = opts.subsets or present
    chosen: list[Trace] = []
    for subset in sorted(wanted):
        members = [t for t in traces if subset_of(t) == subset]
        if opts.labelled_only:
            members = [t for t in members if t.label is not None]
        members.sort(key=lambda t: natural_key(t.id))
        chosen.extend(members[: opts.limit] if opts.limit else members)
    return chosen


def subsets(traces: Sequence[Trace]) -> dict[str, int]:
    """Number of traces per subset."""
    counts: dict[str, int] = {}
    for trace in traces:
        counts[subset_of(trace)] = counts.get(subset_of(trace), 0) + 1
    return dict(sorted(counts.items()))
