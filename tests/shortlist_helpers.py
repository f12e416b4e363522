"""Training-side helpers for the shortlist tests."""

from __future__ import annotations

import random
from pathlib import Path

from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import Trace

FIXTURES = Path(__file__).parent / "fixtures" / "oracle"


def distinct(traces: list[Trace]) -> list[Trace]:
    """The traces with a seeded phrase of made-up words appended to every step.

    The oracle fixtures are written from one template, so by content they are
    near-duplicates of each other, and cross-validation by content (near-duplicates share a
    fold) would put each subset in one fold. Made-up words make each trace its own log.
    """
    out = []
    for trace in traces:
        rng = random.Random(trace.id)
        steps = []
        for s in trace.steps:
            words = " ".join(
                "".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(3))
                for _ in range(12)
            )
            steps.append(s.model_copy(update={"content": f"{s.content} {words}"}))
        out.append(trace.model_copy(update={"steps": steps}))
    return out


def labelled_fixtures() -> list[Trace]:
    """The labelled oracle fixtures, made distinct by content (:func:`distinct`)."""
    return distinct([t for t in load_traces(FIXTURES) if t.label is not None])
