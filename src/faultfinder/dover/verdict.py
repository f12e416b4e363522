"""DoVer's verdicts from repeated replays (Section 4.2), plus the cases the paper does
not meet.

With R repeats and t = ceil(2R/3) (2 of 3 in the paper), in this order:

- not_applied (added): the intervention changes nothing (its text is the original
  message's), or fewer than t replays reached the intervened step with the recorded
  history, so the edit was not served;
- validated (paper): at least t runs succeed;
- unverifiable (added): fewer than t runs could be judged for success (no reference
  answer and no checker, or the checker could not tell), so the failure may or may not
  be fixed;
- partially validated (paper): at least t runs both fulfil the intervention and make at
  least 20% more milestone progress (one of five milestones);
- refuted (paper): at least t runs fulfil the intervention, do not succeed and make less
  than 20% progress;
- inconclusive (paper): everything else (the intervention was mostly not carried out,
  or the judgements could not be made).

The flip rate (replays that succeed / replays judged) comes with a Wilson score interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from faultfinder.dover.models import RepeatResult, VerdictName

PROGRESS_STEP = 0.2
"""'Additional 20% progress': one milestone out of five."""

Z_95 = 1.959963984540054
"""Two-sided 95% normal quantile."""


def threshold(repeats: int) -> int:
    """Runs needed for a verdict: 2 of 3, in general ceil(2R/3)."""
    return max(1, math.ceil(2 * repeats / 3))


def wilson_interval(successes: int, trials: int, z: float = Z_95) -> tuple[float, float] | None:
    """Wilson score interval of a binomial proportion (None without trials)."""
    if trials <= 0:
        return None
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


def _made_progress(result: RepeatResult) -> bool:
    return result.progress is not None and result.progress >= PROGRESS_STEP - 1e-9


def classify(results: Sequence[RepeatResult], *, changed: bool = True) -> tuple[VerdictName, str]:
    """The verdict and a one-line reason (``changed``: the intervention differs from the
    original message)."""
    if not changed:
        return "not_applied", "the intervention is the original message: it changes nothing"
    if not results:
        return "inconclusive", "no replays"
    total = len(results)
    need = threshold(total)
    applied = [r for r in results if r.edit_applied]
    if len(applied) < need:
        return "not_applied", (
            f"the edit was served in {len(applied)}/{total} replays (the program did not "
            "reach the intervened step with the recorded history)"
        )
    successes = sum(1 for r in applied if r.success)
    if successes >= need:
        return "validated", f"{successes}/{total} runs succeeded"
    judged = sum(1 for r in applied if r.success is not None)
    if judged < need:
        return "unverifiable", (
            f"success could be judged in {judged}/{total} runs (no reference answer or "
            "checker verdict): the failure may or may not be fixed"
        )
    progressed = sum(1 for r in applied if r.fulfilled and _made_progress(r))
    if progressed >= need:
        return "partially_validated", (
            f"{successes}/{total} succeeded; {progressed}/{total} fulfilled the intervention "
            f"with >= {PROGRESS_STEP:.0%} more progress"
        )
    # Without milestones there is no progress to measure: a fulfilled, failed run counts
    # as no progress.
    stalled = sum(
        1 for r in applied if r.fulfilled and r.success is False and not _made_progress(r)
    )
    if stalled >= need:
        return "refuted", (
            f"{successes}/{total} succeeded; {stalled}/{total} fulfilled the intervention "
            "without reaching the task"
        )
    unjudged = sum(1 for r in applied if r.fulfilled is None)
    return "inconclusive", (
        f"{successes}/{total} succeeded; intervention fulfilled in "
        f"{sum(1 for r in applied if r.fulfilled)}/{total}"
        + (f" ({unjudged} unjudged)" if unjudged else "")
    )
