"""Table 3 of ``bench/transfer.py`` (helper): the 90% step sets a source never trained
on gets, with weights built as shipped from the other sources only."""

from __future__ import annotations

from collections.abc import Sequence

from _stats import cell

from faultfinder.eval.datasets import subset_of
from faultfinder.shortlist import sets
from faultfinder.shortlist.train import build_table, ship
from faultfinder.traces.schema import Trace


def loso_sets(
    traces: list[Trace], groups: Sequence[str], folds: int, trained: Sequence[str]
) -> list[str]:
    """Step sets at 90% on a source never trained on: for each source, weights are built as
    they are shipped (held-out models, per-fold calibration, the shift reference, the
    thresholds for a source never trained on) from the other sources only — trained on the
    ``trained`` ones, the rest for calibration only — and each left-out trace gets the set
    ``attribute`` would give it (its source is unknown to those weights)."""
    out = [
        "",
        "### 90% step sets on a source never trained on",
        "",
        "For each source, weights built exactly as shipped (`bench/shortlist.py --ship`) "
        "from the other sources only: trained on "
        + ", ".join(trained)
        + " (less the left-out one), any other source for calibration only; each "
        "of its traces gets the set `attribute` would give it (thresholds for a source never "
        "trained on). Claimed: the shift score is under the weights' threshold, so the 90% "
        "is stated; otherwise the set is shown without a coverage claim.",
        "",
        "| left-out source | traces | covers % | set size / length | claimed | "
        "covers where claimed % | covers where not claimed % |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for source in sorted({subset_of(t) for t in traces}):
        rest = [t for t in traces if subset_of(t) != source]
        test = [t for t in traces if subset_of(t) == source]
        apart = sorted({subset_of(t) for t in rest} - set(trained))
        weights = ship(build_table(rest, groups), groups, k=folds, calibrate_only=apart)
        covered = claimed = claimed_cov = 0
        rel = 0.0
        for t in test:
            found = sets.step_set(t, 0.9, weights=weights)
            assert found is not None
            hit = any(g in found.steps for g in t.label.acceptable_steps)  # type: ignore[union-attr]
            covered += hit
            rel += len(found.steps) / len(t.steps)
            if found.calibrated:
                claimed += 1
                claimed_cov += hit
        n = len(test)
        unclaimed = n - claimed
        out.append(
            f"| {source} | {n} | {cell(covered, n)} | {100 * rel / n:.0f}% | {claimed}/{n} | "
            f"{cell(claimed_cov, claimed) if claimed else '-'} | "
            f"{cell(covered - claimed_cov, unclaimed) if unclaimed else '-'} |"
        )
    return out
