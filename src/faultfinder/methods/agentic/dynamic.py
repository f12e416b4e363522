"""TraceElephant's dynamic agentic check (Appendix A.6.3): verify candidate attributions by
re-running the system from each candidate step with the step corrected.

For up to N candidate (agent, step, reason, expected output) hypotheses, derived from a
static method's attribution plus a candidate-proposal call, the program is replayed up to
the candidate step; there, the step's request is edited through the proxy (a reviewer's
note appended, naming the mistake and the expected output) and the next k = 5 steps run
live at temperature 0.3, then the program is stopped. A judge reads those steps: do they
satisfy the expected output, does the observed failure recur, does the agent leave the
task? Candidates are re-ranked by what the replays showed.

This module replays and re-ranks; the two model calls (proposing candidates, judging a
replayed window) and their prompts are in :mod:`.dynamic_candidates`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from faultfinder.errors import CaseBudgetExceededError, FaultfinderError
from faultfinder.judging.method import Attribution, Method, run_method
from faultfinder.llm.client import LLM
from faultfinder.llm.scopes import track_usage
from faultfinder.methods.agentic.dynamic_candidates import (
    PROMPT_VERSION,
    SHORTLIST_PROMPT_VERSION,
    Candidate,
    Observation,
    judge_window,
    propose_candidates,
    score,
    shortlisted_steps,
)
from faultfinder.replay.edits import Edit
from faultfinder.replay.recorder import build_trace, new_run_id
from faultfinder.replay.replayer import ReplayOptions
from faultfinder.replay.session import SessionOptions, replay_run
from faultfinder.usage import Usage

NOTE = (
    "Note from a reviewer of this run: a previous attempt at this step went wrong: {reason} "
    "Avoid that mistake. Expected output of this step: {expected}"
)
"""The reviewer's note appended to the candidate step's request (the intervention). It is
part of the check's prompts: a change bumps ``dynamic_candidates.PROMPT_VERSION``."""


class CheckedCandidate(Candidate):
    """A candidate after its replay."""

    rank: int
    """Position before the check (0 = the static method's first choice)."""
    branch: str | None = None
    live_calls: int = 0
    """Requests of the replay that reached the upstream, every path (its report's
    ``live_calls``; 0 when it did not replay)."""
    program_failed: bool = False
    """The replayed program failed on its own (a non-zero exit before the window was used
    up, or the replay timeout): its window is no evidence, so it is not judged and scores 0."""
    exit_code: int | None = None
    """The replayed program's exit status (None: it did not run)."""
    ran: bool = True
    """False when the candidate's replay could not start (a command that does not exist,
    no upstream for its live calls...): ``error`` says why. A candidate left unchecked by
    the token budget has not failed to run."""
    observation: Observation | None = None
    """None when the replay failed or the judge's answer was unreadable."""
    score: int = 0
    """2: expected output and no recurrence; 1: one of the two; 0: neither (or unjudged)."""
    error: str | None = None


class CheckResult(BaseModel):
    """A self-describing row: the re-ranked candidates of one recording."""

    kind: Literal["dynamic-check"] = "dynamic-check"
    run_dir: str
    trace_id: str
    method: str
    static: dict[str, Any]
    """The static method's attribution (agent, step, reason, status)."""
    candidates: list[CheckedCandidate] = Field(default_factory=list)
    """Candidates in their new order (best first)."""
    agent: str | None = None
    """Top candidate after re-ranking."""
    step: int | None = None
    window: int = 5
    live_temperature: float = 0.3
    model: str = ""
    prompt_version: str = PROMPT_VERSION
    confidence: float | None = None
    """The static method's confidence, when it states one."""
    check_below: float | None = None
    """Replay only when the static confidence is below this (``--check-below``); None:
    always replay."""
    replayed: bool = True
    """False when the confidence was high enough: ``agent``/``step`` are the method's."""
    why: str = ""
    """Why the candidates were or were not replayed, and where they came from."""
    shortlist: list[int] | None = None
    """The steps the method shortlisted as candidates (its chosen step first), when it
    shortlists (``compose``); None: the candidates were proposed by a model call."""
    budget_tokens: int | None = None
    """The check's token budget (``--budget-tokens``): every model call of this check,
    the static method's included (replayed program calls go to the upstream, not here)."""
    replay_timeout: float | None = None
    """Seconds each candidate's replay may run (``--replay-timeout``; None: no limit). A
    replay stopped by it failed: it is not judged."""
    stopped: str | None = None
    """Why the check stopped before judging every candidate (its token budget ran out)."""
    usage: Usage = Field(default_factory=Usage)
    wall_time_s: float = 0.0


async def dynamic_check(
    run_dir: str | Path,
    llm: LLM,
    method: Method,
    *,
    method_label: str,
    command: list[str] | None = None,
    upstream: str | None = None,
    candidates: int = 3,
    window: int = 5,
    live_temperature: float = 0.3,
    with_ground_truth: bool = True,
    budget: int | None = None,
    options: SessionOptions | None = None,
    check_below: float | None = None,
    budget_tokens: int | None = None,
) -> CheckResult:
    """Check and re-rank candidate attributions of a recording by replay.

    With ``check_below``, the replays run only when the static method's confidence is
    below it, or when the method states none (nothing says it is sure). With
    ``budget_tokens``, every model call of the check shares that budget; when it runs
    out, the check stops with the candidates judged so far (``stopped`` says so).
    """
    run_dir = Path(run_dir)
    trace = build_trace(run_dir)
    session = new_run_id("check-")
    started = time.perf_counter()
    options = options or SessionOptions(echo=False)
    stopped: str | None = None
    checked: list[CheckedCandidate] = []
    with track_usage(max_tokens=budget_tokens) as scope:
        attribution = await run_method(method, trace, llm, label=method_label)
        static = {
            "agent": attribution.agent,
            "step": attribution.step,
            "reason": attribution.reason,
            "status": attribution.status,
        }
        confidence = attribution.confidence
        base: dict[str, Any] = {
            "run_dir": str(run_dir),
            "trace_id": trace.id,
            "method": method_label,
            "static": static,
            "window": window,
            "live_temperature": live_temperature,
            "model": llm.name,
            "confidence": confidence,
            "check_below": check_below,
            "budget_tokens": budget_tokens,
            "replay_timeout": options.timeout,
        }
        why = _why(attribution, check_below)
        if check_below is not None and confidence is not None and confidence >= check_below:
            return CheckResult(
                **base,
                agent=attribution.agent,
                step=attribution.step,
                replayed=False,
                why=why,
                usage=scope.usage,
                wall_time_s=round(time.perf_counter() - started, 3),
            )
        shortlist = shortlisted_steps(method, attribution)
        if shortlist:
            why += (
                f"; candidates: the {len(shortlist[:candidates])} steps {method_label} shortlisted"
            )
        unreadable: str | None = None
        try:
            proposed, unreadable = await propose_candidates(
                trace,
                llm,
                static,
                candidates,
                with_ground_truth=with_ground_truth,
                budget=budget,
                shortlist=shortlist,
            )
        except CaseBudgetExceededError as exc:
            proposed, stopped = [], f"no candidates proposed: {exc}"
        if unreadable is not None:
            why += f"; the proposal of candidates could not be read ({unreadable}): none of "
            why += "its candidates is checked"
        for rank, candidate in enumerate(proposed):
            if stopped is not None:
                checked.append(
                    CheckedCandidate(
                        **candidate.model_dump(), rank=rank, error="not checked: " + stopped
                    )
                )
                continue
            item = CheckedCandidate(**candidate.model_dump(), rank=rank)
            note = NOTE.format(
                reason=(candidate.reason or "(unspecified)").rstrip(". ") + ".",
                expected=candidate.expected_output or "(unspecified)",
            )
            replay = ReplayOptions(
                at=candidate.step,
                edit=Edit(input=note, input_mode="append-user"),
                stop_after_live=window,
                live_overrides={"temperature": live_temperature},
            )
            try:
                outcome = await replay_run(
                    run_dir,
                    command,
                    replay,
                    upstream=upstream,
                    branch_id=f"{session}-c{rank}",
                    options=options,
                )
            except FaultfinderError as exc:
                item.ran, item.error = False, f"the replay could not run: {exc}"
                checked.append(item)
                continue
            report = outcome.report
            item.branch = str(outcome.branch_dir)
            item.live_calls = report.live_calls
            item.program_failed = report.program_failed
            item.exit_code = report.program_exit_code
            if report.program_failed:
                # A window cut short by a crash or an error answer shows neither the
                # expected output nor the failure: judging it would rank a crash.
                how = (
                    f"it ran past the replay timeout of {options.timeout:g} s"
                    if report.program_timed_out
                    else f"exit status {report.program_exit_code}"
                )
                item.error = f"the replayed program failed on its own ({how}): not judged"
                checked.append(item)
                continue
            if not report.edit_applied:
                item.error = "the replay never reached the candidate step"
                checked.append(item)
                continue
            try:
                item.observation, unjudged = await judge_window(
                    trace, outcome.trace, candidate, llm, window, with_ground_truth, budget
                )
                if unjudged is not None:
                    item.error = f"not judged: the judge's answer could not be read ({unjudged})"
            except CaseBudgetExceededError as exc:
                stopped = str(exc)
                item.error = "not judged: " + stopped
            item.score = score(item.observation)
            checked.append(item)
    checked.sort(key=lambda c: (-c.score, c.rank))
    top = checked[0] if checked else None
    return CheckResult(
        **base,
        prompt_version=SHORTLIST_PROMPT_VERSION if shortlist else PROMPT_VERSION,
        shortlist=shortlist,
        candidates=checked,
        agent=top.agent if top else attribution.agent,
        step=top.step if top else attribution.step,
        why=why,
        stopped=stopped,
        usage=scope.usage,
        wall_time_s=round(time.perf_counter() - started, 3),
    )


def _why(attribution: Attribution, check_below: float | None) -> str:
    """Why the replays do (or do not) run, in words."""
    if check_below is None:
        return "replayed: no --check-below given"
    if attribution.confidence is None:
        return (
            f"replayed: {attribution.method} states no confidence (status "
            f"{attribution.status}), so nothing says it is at least {check_below:g} sure"
        )
    if attribution.confidence >= check_below:
        return f"not replayed: confidence {attribution.confidence:.2f} >= {check_below:g}"
    return f"replayed: confidence {attribution.confidence:.2f} < {check_below:g}"
