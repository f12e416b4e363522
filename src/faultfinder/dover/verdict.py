"""DoVer's verdicts from repeated replays (Section 4.2), plus the cases the paper does
not meet.

A replay whose program failed on its own (a non-zero exit, e.g. after a live call answered
with an error, or the timeout) or that could not run at all is no evidence either way: the
paper's failures are runs that end with a wrong answer, not crashes, so such a replay
counts neither as a success nor as a failure (:func:`no_evidence`).

With R repeats and t = ceil(2R/3) (2 of 3 in the paper), in this order:

- not_applied (added): the intervention changes nothing (its text is the original
  message's);
- inconclusive (paper, "all other cases"): fewer than t replays are evidence (the others
  failed on their own or could not run), so none of the paper's other verdicts can hold;
- not_applied (added): fewer than t replays reached the intervened step with the recorded
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

The trial success rate, also the flip rate (replays that succeed / replays judged, the
failed ones set apart: :func:`trial_success`), comes with a Wilson score interval.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from faultfinder.dover.models import RepeatResult, VerdictName
from faultfinder.replay.report import ReplayReport

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


def no_evidence(result: RepeatResult) -> str | None:
    """Why ``result`` says nothing about the hypothesis (None: it is evidence).

    A replay that could not run, or whose program failed on its own after it got the edit
    (or before the edit without diverging from the recording), is no evidence: its answer
    is whatever the last step that ran said. A program that failed after diverging before
    the edit was refused a call it had not made in the recording: that is an edit not
    applied, not a failure of the program.
    """
    if not result.ran:
        return result.error or "the replay could not run"
    if result.program_failed and (result.edit_applied or not result.divergences):
        return result.error or f"the program failed on its own (exit status {result.exit_code})"
    return None


@dataclass(frozen=True)
class TrialSuccess:
    """DoVer's trial success rate over a set of replays (Table 2), the one definition every
    row, verdict line and report uses (:func:`trial_success`)."""

    successes: int
    """Replays that succeeded."""
    judged: int
    """Replays that are evidence, got the edit and whose success the checker could tell:
    the denominator."""
    failed_replays: int
    """Replays that are no evidence (failed on their own or could not run): set apart, in
    neither count."""

    @property
    def rate(self) -> float | None:
        """``successes / judged`` (None when no replay could be judged)."""
        return self.successes / self.judged if self.judged else None

    @property
    def interval(self) -> tuple[float, float] | None:
        """95% Wilson score interval of :attr:`rate`."""
        return wilson_interval(self.successes, self.judged)


def trial_success(results: Iterable[RepeatResult]) -> TrialSuccess:
    """Successful replays / replays judged, failed replays set apart.

    The paper's rate is "the ratio of trial runs that successfully complete the task after
    intervention", and its runs are runs that execute without interruption: a replay that
    is :func:`no_evidence` (it crashed, got an error from its endpoint, timed out, never
    started) is counted in ``failed_replays`` and in neither count, even when a row written
    before such replays were set apart rated it a success. Of the others, a replay that
    never got the edit is no trial run after the intervention, and one whose success the
    checker could not tell (no reference) is neither a success nor a failure; both are left
    out too. Since only failed runs are debugged, this is also the flip rate.
    """
    successes = judged = failed = 0
    for result in results:
        if no_evidence(result) is not None:
            failed += 1
        elif result.edit_applied and result.success is not None:
            judged += 1
            successes += result.success
    return TrialSuccess(successes=successes, judged=judged, failed_replays=failed)


def program_failure(report: ReplayReport) -> str:
    """What a replayed program that failed on its own did, for a replay's ``error``."""
    how = (
        "it ran past the timeout"
        if report.program_timed_out
        else f"exit status {report.program_exit_code}"
    )
    calls = dict.fromkeys(
        f"{call.method} {call.path} -> {call.status or 'no answer'}"
        for call in report.live
        if call.status is None or call.status >= 400
    )
    said = f"; live calls answered with an error: {', '.join(calls)}" if calls else ""
    return f"the program failed on its own ({how}{said})"


def _failures(results: Sequence[RepeatResult]) -> str:
    """'2/3 replays are no evidence either way (the commonest reason, x2)'."""
    reasons = Counter(why for r in results if (why := no_evidence(r)) is not None)
    (top, count), others = reasons.most_common(1)[0], len(reasons) - 1
    return (
        f"{reasons.total()}/{len(results)} replays are no evidence either way ({top}"
        + (f", x{count}" if count > 1 else "")
        + (f"; {others} other reason(s) in the rows" if others else "")
        + ")"
    )


def classify(results: Sequence[RepeatResult], *, changed: bool = True) -> tuple[VerdictName, str]:
    """The verdict and a one-line reason (``changed``: the intervention differs from the
    original message). Replays that are :func:`no_evidence` count for nothing."""
    if not changed:
        return "not_applied", "the intervention is the original message: it changes nothing"
    if not results:
        return "inconclusive", "no replays"
    verdict, reason = _classify(results)
    if verdict != "inconclusive" and any(no_evidence(r) is not None for r in results):
        reason += f"; {_failures(results)}"
    return verdict, reason


def _not_served(results: Sequence[RepeatResult]) -> str:
    """Why the replays in ``results`` that did not get the edit did not: the program took
    another path before the step, or it reached the step and the edit never went out (or
    went out and no agent read it: each such replay's ``error`` says how)."""
    missed = [r for r in results if not r.edit_applied]
    reached = [r for r in missed if r.at_reached]
    other = "the program did not reach the intervened step with the recorded history"
    if not reached:
        return other
    said = (
        f"{len(reached)} reached the intervened step, but the edit never went out or no "
        "agent read it: each replay's error says why"
    )
    if len(reached) == len(missed):
        return said
    return f"{said}; in {len(missed) - len(reached)}, {other}"


def _classify(results: Sequence[RepeatResult]) -> tuple[VerdictName, str]:
    total = len(results)
    need = threshold(total)
    usable = [r for r in results if no_evidence(r) is None]
    if len(usable) < need:
        return "inconclusive", (
            f"{_failures(results)}: {len(usable)} left, fewer than the {need} a verdict needs"
        )
    applied = [r for r in usable if r.edit_applied]
    if len(applied) < need:
        return "not_applied", (
            f"the edit was applied in {len(applied)}/{total} replays ({_not_served(usable)})"
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
    failed = len(results) - len(usable)
    return "inconclusive", (
        f"{successes}/{total} succeeded; intervention fulfilled in "
        f"{sum(1 for r in applied if r.fulfilled)}/{total}"
        + (f" ({unjudged} unjudged)" if unjudged else "")
        + (f"; {_failures(results)}" if failed else "")
    )
