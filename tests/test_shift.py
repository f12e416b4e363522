"""The shift score: a trace unlike the calibration data gets a set without a coverage claim."""

from __future__ import annotations

import math
import random

import pytest

from faultfinder.shortlist import sets
from faultfinder.shortlist.shift import DESCRIPTORS, ShiftReference, build_reference, descriptors
from faultfinder.shortlist.weights import from_json, shipped_weights
from faultfinder.traces.schema import Step, Trace


def _trace(rng: random.Random, n: int, chars: int, agents: int, name: str = "t") -> Trace:
    steps = []
    for i in range(n):
        text = " ".join("word" for _ in range(max(1, int(rng.gauss(chars, chars / 5)) // 5)))
        if rng.random() < 0.2:
            text += " Error: failed"
        steps.append(Step(index=i, agent=f"agent{rng.randrange(agents)}", content=text))
    return Trace(id=name, task="t", steps=steps)


def _calibration(seed: int = 0) -> list[Trace]:
    """Two kinds of run, like Who&When: short logs of long steps, long logs of short ones."""
    rng = random.Random(seed)
    short = [_trace(rng, rng.randint(5, 10), 600, 3, f"s{i}") for i in range(40)]
    long = [_trace(rng, rng.randint(40, 60), 150, 5, f"l{i}") for i in range(40)]
    return short + long


def test_descriptors_are_named_and_finite() -> None:
    values = descriptors(_calibration()[0])
    assert len(values) == len(DESCRIPTORS) and all(math.isfinite(v) for v in values)


def test_threshold_flags_about_one_in_twenty_held_out_calibration_traces() -> None:
    traces = _calibration()
    folds = [i % 5 for i in range(len(traces))]
    ref = build_reference(traces, folds)
    flagged = sum(ref.score(t, f) > ref.threshold for t, f in zip(traces, folds, strict=True))
    assert flagged <= 0.1 * len(traces)
    # New traces of either kind stay under it; a run of another shape does not.
    rng = random.Random(99)
    like = [_trace(rng, 8, 600, 3), _trace(rng, 50, 150, 5)]
    assert all(ref.score(t) <= ref.threshold for t in like)
    unlike = _trace(rng, 200, 20, 1)
    assert ref.score(unlike) > ref.threshold


def test_reference_round_trips_and_a_bad_one_is_refused() -> None:
    ref = build_reference(_calibration(), [i % 5 for i in range(80)])
    again = ShiftReference.from_json(ref.to_json())
    trace = _calibration(1)[3]
    assert again.score(trace) == pytest.approx(ref.score(trace), abs=1e-3)
    bad = ref.to_json() | {"descriptors": ["log_steps"]}
    with pytest.raises(ValueError, match="descriptors"):
        ShiftReference.from_json(bad)


def test_a_step_set_withdraws_its_claim_past_the_threshold() -> None:
    traces = _calibration()
    custom = from_json(shipped_weights().to_json(), "custom.json", "custom")
    custom.fold_of, custom.sketches = {}, {}
    custom.shift = build_reference(traces, [i % 5 for i in range(len(traces))])
    rng = random.Random(7)
    like = sets.step_set(_trace(rng, 8, 600, 3), 0.9, weights=custom)
    unlike = sets.step_set(_trace(rng, 200, 20, 1), 0.9, weights=custom)
    assert like is not None and like.calibrated and like.shift is not None
    assert unlike is not None and not unlike.calibrated
    assert unlike.shift is not None and unlike.shift > custom.shift.threshold
    text = sets.describe(unlike.steps, 0.9, 200, unlike.source, unlike.calibrated, unlike.shift)
    assert "90% NOT claimed (trace unlike the calibration data, shift" in text
    assert " at 90%" in sets.describe(like.steps, 0.9, 8, like.source, like.calibrated, like.shift)
    # Without a reference nothing says the trace is like the calibration data (a weights
    # file written before shift scores), so the level is not claimed either.
    custom.shift = None
    old = sets.step_set(_trace(rng, 200, 20, 1, "other"), 0.9, weights=custom)
    assert old is not None and not old.calibrated and old.shift is None


def test_shipped_weights_carry_a_reference_fitted_out_of_fold() -> None:
    weights = shipped_weights()
    assert weights.shift is not None and math.isfinite(weights.shift.threshold)
    # One point per training trace (Who&When's two duplicated logs counted twice).
    assert len(weights.shift.points) == len(weights.shift.folds) >= len(weights.fold_of)
    assert set(weights.shift.folds) == set(weights.fold_of.values())


def _named(trace: Trace, subset: str) -> Trace:
    return trace.model_copy(update={"source": trace.source.model_copy(update={"subset": subset})})


def test_a_trace_naming_a_source_must_be_like_that_source() -> None:
    traces = _calibration()
    named = [_named(t, "short" if t.id.startswith("s") else "long") for t in traces]
    folds = [i % 5 for i in range(len(named))]
    ref = build_reference(named, folds)
    assert set(ref.by_source) == {"short", "long"}
    flagged = sum(
        ref.score(t, f, t.source.subset) > ref.threshold_for(t.source.subset)
        for t, f in zip(named, folds, strict=True)
    )
    assert flagged <= 0.1 * len(named)
    rng = random.Random(7)
    long_run = _trace(rng, 50, 150, 5)
    # Like the calibration data as a whole, and like the long runs...
    assert ref.score(long_run) <= ref.threshold
    assert ref.score(long_run, source="long") <= ref.threshold_for("long")
    # ...but not like the short runs it claims to be one of.
    assert ref.score(long_run, source="short") > ref.threshold_for("short")
    # A source with too few traces, or none named, is held to the pooled threshold.
    assert ref.threshold_for("elsewhere") == ref.threshold == ref.threshold_for(None)
    again = ShiftReference.from_json(ref.to_json())
    assert again.by_source == ref.by_source
    assert again.score(long_run, source="short") == pytest.approx(
        ref.score(long_run, source="short"), abs=1e-3
    )


def test_a_reference_whose_sources_do_not_match_its_points_is_refused() -> None:
    traces = [_named(t, "short" if t.id.startswith("s") else "long") for t in _calibration()]
    data = build_reference(traces, [i % 5 for i in range(len(traces))]).to_json()
    data["sources"] = data["sources"][:-1]
    with pytest.raises(ValueError, match="sources"):
        ShiftReference.from_json(data)


def test_the_same_log_named_and_unnamed_is_checked_against_its_own_source() -> None:
    """The claim depends on the named source, so a ranking remembered for one naming is
    not reused for another (the unnamed run first, then the named one, and back)."""
    traces = [_named(t, "short" if t.id.startswith("s") else "long") for t in _calibration()]
    custom = from_json(shipped_weights().to_json(), "custom.json", "custom")
    custom.fold_of, custom.sketches = {}, {}
    custom.shift = build_reference(traces, [i % 5 for i in range(len(traces))])
    run = _trace(random.Random(3), 50, 150, 5, "fresh")
    claims = []
    for subset in (None, "short", None, "long", "short"):
        found = sets.step_set(_named(run, subset) if subset else run, 0.9, weights=custom)
        assert found is not None
        claims.append(found.calibrated)
    # Like the long runs (and the whole reference), unlike the short ones it names.
    assert claims == [True, False, True, True, False]
