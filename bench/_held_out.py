"""Traces no held-out model can rank, set aside so a bench's figures stay out-of-sample.

A trace that is a near-copy of training traces in several folds (``Weights.choose``
returns ``contaminated``) would be ranked by a model that may have trained on its
original. `attribute` flags such a result (``details.trained_on_this_trace``); a bench
leaves it out and says so.
"""

from __future__ import annotations

from collections.abc import Sequence

from faultfinder.eval.datasets import subset_of
from faultfinder.shortlist.weights import Weights
from faultfinder.traces.schema import Trace


def split_unrankable(traces: Sequence[Trace], *weights: Weights) -> tuple[list[Trace], list[Trace]]:
    """(kept, left out): a trace is left out when any of ``weights`` would rank it with a
    model that may have trained on it."""
    kept: list[Trace] = []
    out: list[Trace] = []
    for t in traces:
        (out if any(w.choose(t).contaminated for w in weights) else kept).append(t)
    return kept, out


def left_out_note(left_out: Sequence[Trace]) -> str:
    """One sentence naming the traces :func:`split_unrankable` set aside ('' for none)."""
    if not left_out:
        return ""
    names = ", ".join(f"{subset_of(t)} {t.id}" for t in left_out[:5])
    more = f" and {len(left_out) - 5} more" if len(left_out) > 5 else ""
    return (
        f"{len(left_out)} trace(s) left out: near-copies of training traces in several "
        "folds, which no held-out model can rank (a model that may have trained on their "
        f"original would; `attribute` flags such a result `trained_on_this_trace`): "
        f"{names}{more}."
    )
