"""DoVer's four verdicts from repeated replays (Section 4.2).

With R repeats and t = ceil(2R/3) (2 of 3 in the paper):

- validated: at least t runs succeed;
- partially validated: fewer succeed, and at least t runs both fulfil the intervention
  and make at least 20% more milestone progress (one of five milestones);
- refuted: as partially validated, but progress stays below 20%;
- inconclusive: everything else (the intervention was mostly not carried out, or the
  judgements could not be made).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from faultfinder.dover.models import RepeatResult, VerdictName

PROGRESS_STEP = 0.2
"""'Additional 20% progress': one milestone out of five."""


def threshold(repeats: int) -> int:
    """Runs needed for a verdict: 2 of 3, in general ceil(2R/3)."""
    return max(1, math.ceil(2 * repeats / 3))


def classify(results: Sequence[RepeatResult]) -> tuple[VerdictName, str]:
    """The verdict and a one-line reason."""
    if not results:
        return "inconclusive", "no replays"
    need = threshold(len(results))
    total = len(results)
    successes = sum(1 for r in results if r.success)
    if successes >= need:
        return "validated", f"{successes}/{total} runs succeeded"
    progressed = sum(
        1
        for r in results
        if r.fulfilled and r.progress is not None and r.progress >= PROGRESS_STEP - 1e-9
    )
    if progressed >= need:
        return "partially_validated", (
            f"{successes}/{total} succeeded; {progressed}/{total} fulfilled the intervention "
            f"with >= {PROGRESS_STEP:.0%} more progress"
        )
    # Without milestones there is no progress to measure: a fulfilled, failed run counts
    # as no progress.
    stalled = sum(
        1
        for r in results
        if r.fulfilled
        and not r.success
        and (r.progress is None or r.progress < PROGRESS_STEP - 1e-9)
    )
    if stalled >= need:
        return "refuted", (
            f"{successes}/{total} succeeded; {stalled}/{total} fulfilled the intervention "
            "without reaching the task"
        )
    unjudged = sum(1 for r in results if r.fulfilled is None)
    return "inconclusive", (
        f"{successes}/{total} succeeded; intervention fulfilled in "
        f"{sum(1 for r in results if r.fulfilled)}/{total}"
        + (f" ({unjudged} unjudged)" if unjudged else "")
    )
