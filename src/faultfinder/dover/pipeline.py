"""DoVer end to end: trials -> hypotheses -> interventions -> replays -> verdicts.

``run_dover`` works on a recording made with ``faultfinder record``; interventions are
executed by replaying the program with the edited message (:class:`ReplayExecutor`), and
each trial becomes one :class:`~faultfinder.dover.models.DoverRow`, appended to a JSONL
file as soon as it is complete.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from faultfinder.dover import prompts
from faultfinder.dover.checker import Checker, ExactChecker
from faultfinder.dover.hypothesis import hypothesise
from faultfinder.dover.intervene import orchestrator_of, propose, target_step
from faultfinder.dover.judge import (
    evaluate_milestones,
    extract_milestones,
    judge_fulfilment,
)
from faultfinder.dover.models import (
    DoverRow,
    Hypothesis,
    Intervention,
    Milestone,
    RepeatResult,
    Trial,
)
from faultfinder.dover.segment import segment
from faultfinder.dover.verdict import classify, no_evidence, program_failure, trial_success
from faultfinder.errors import CaseBudgetExceededError, FaultfinderError
from faultfinder.judging.method import Method
from faultfinder.llm.client import LLM
from faultfinder.llm.scopes import track_usage
from faultfinder.replay.edits import Edit
from faultfinder.replay.recorder import build_trace, new_run_id
from faultfinder.replay.replayer import ReplayOptions
from faultfinder.replay.session import ReplayOutcome, SessionOptions, replay_run
from faultfinder.traces.schema import Trace
from faultfinder.usage import Usage


class DoverConfig(BaseModel):
    """DoVer's options; defaults follow the paper."""

    model_config = ConfigDict(extra="forbid")

    method: str = "all-at-once:refined"
    """Attribution method (name or name:preset) proposing one hypothesis per trial."""
    segment: str = "llm"
    """Trial segmentation: 'llm' (the paper), 'magentic-one', 'pattern:REGEX' (planning
    steps are those whose output matches) or 'none' (the whole log is one trial)."""
    repeats: int = Field(default=3, ge=1)
    """Replays per intervention (the paper runs three)."""
    orchestrator: str | None = None
    """The planning agent whose messages are rewritten (default: the agent of each
    trial's planning step)."""
    scope: Literal["orchestrator", "hypothesis"] = "orchestrator"
    """Rewrite the orchestrator's message at or before the failure step (the paper), or
    the hypothesised step itself whoever made it."""
    with_ground_truth: bool = True
    """Show the reference answer to the hypothesis method, the intervention recommender
    and the fulfilment judge (the paper's recommender uses it)."""
    max_trials: int | None = Field(default=None, ge=1)
    """Intervene on at most this many trials (the first ones)."""
    judge_window: int = Field(default=10, ge=1)
    """Steps after the intervention shown to the fulfilment judge."""
    milestones: bool = True
    """Measure milestone progress when the run has reference steps."""
    context_budget: int | None = Field(default=None, ge=256)
    """Max prompt tokens for DoVer's own prompts (logs truncated per step to fit)."""
    temperature: float = 0.0
    """Sampling temperature of DoVer's own calls."""
    live_temperature: float | None = 0.7
    """Temperature forced on the replayed program's live calls, so that repeats are
    independent samples (None: the program's own; at 0 the repeats are one run counted
    several times, which the row records as ``independent_repeats = False``)."""
    seed: int | None = 0
    """Repeat r sends ``seed + r`` with its live calls (distinct seeds; None: no seed)."""
    on_divergence: Literal["fail", "live"] = "fail"
    """What a replay does when the program diverges before the edit."""
    budget_tokens: int | None = Field(default=None, ge=1)
    """Token budget of each trial (``--budget-tokens``): its hypothesis, intervention and
    judge calls. A trial that would exceed it gets status 'budget-exceeded' and the next
    trial goes on. The shared segmentation and milestone calls are outside it."""


class Executor(Protocol):
    """Runs the program with an intervention applied.

    An executor may have a ``parallel`` attribute: how many replays it runs at once
    (default 1, one after another; the Ray executor runs one per worker CPU).
    """

    async def run(
        self, intervention: Intervention, branch_id: str, overrides: dict[str, Any]
    ) -> ReplayOutcome:
        """Replay with ``intervention`` and return the branch; ``overrides`` are request
        parameters forced on live calls (temperature, seed)."""
        ...


class ReplayExecutor:
    """Executes interventions by replaying the recorded program through the proxy."""

    def __init__(
        self,
        run_dir: str | Path,
        command: list[str] | None = None,
        *,
        upstream: str | None = None,
        options: SessionOptions | None = None,
        on_divergence: Literal["fail", "live"] = "fail",
    ) -> None:
        self.run_dir = Path(run_dir)
        self.command = command
        self.upstream = upstream
        self.options = options or SessionOptions(echo=False)
        self.on_divergence = on_divergence

    async def run(
        self, intervention: Intervention, branch_id: str, overrides: dict[str, Any]
    ) -> ReplayOutcome:
        replay = ReplayOptions(
            at=intervention.step,
            edit=Edit(output=intervention.replacement),
            on_divergence=self.on_divergence,
            live_overrides=overrides,
        )
        return await replay_run(
            self.run_dir,
            self.command,
            replay,
            upstream=self.upstream,
            branch_id=branch_id,
            options=self.options,
        )


class _RunContext(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    trace: Trace
    milestones: list[Milestone] | None
    original_milestones: float | None
    shared_usage: Usage
    segmentation: str
    segmentation_status: str
    n_trials: int
    checker: Any


async def run_dover(
    run_dir: str | Path,
    llm: LLM,
    method: Method,
    executor: Executor,
    config: DoverConfig | None = None,
    *,
    out: str | Path | None = None,
    session: str | None = None,
    checker: Checker | None = None,
) -> list[DoverRow]:
    """Debug one recorded failure; rows are also appended to ``out`` when given.

    ``checker`` judges success (default: exact match after normalisation). A recording
    that already passes it is reported (one row, status ``already-succeeded``) and not
    debugged.
    """
    config = config or DoverConfig()
    checker = checker or ExactChecker()
    run_dir = Path(run_dir)
    trace = build_trace(run_dir)
    if not trace.steps:
        raise FaultfinderError(f"{run_dir}: the recording has no steps to debug.")
    session = session or new_run_id("dover-")
    original = checker.check(
        trace.final_answer, trace.ground_truth, task=trace.task, run_dir=str(run_dir)
    )
    if original.passed:
        row = _already_succeeded(trace, run_dir, llm, config, checker, original.detail)
        if out is not None:
            append_row(out, row)
        return [row]
    with track_usage() as shared:
        segmentation = await segment(
            trace, llm, config.segment, budget=config.context_budget, temperature=config.temperature
        )
        milestones = None
        original_score = None
        reference_steps = list(trace.metadata.get("reference_steps") or [])
        if config.milestones and reference_steps:
            milestones = await extract_milestones(
                trace, reference_steps, llm, temperature=config.temperature
            )
            if milestones:
                evaluation = await evaluate_milestones(
                    trace,
                    milestones,
                    llm,
                    budget=config.context_budget,
                    temperature=config.temperature,
                )
                original_score = evaluation.achieved(len(milestones)) if evaluation else None
    context = _RunContext(
        trace=trace,
        milestones=milestones,
        original_milestones=original_score,
        shared_usage=shared.usage,
        segmentation=segmentation.method,
        segmentation_status=segmentation.status,
        n_trials=len(segmentation.trials),
        checker=checker,
    )
    trials = segmentation.trials[: config.max_trials]
    if parallelism(executor) == 1:
        rows: list[DoverRow] = []
        for trial in trials:
            row = await debug_trial(context, trial, llm, method, executor, config, session, run_dir)
            rows.append(row)
            if out is not None:
                append_row(out, row)
        return rows

    # Replays run elsewhere, several at once: work on every trial together and write
    # each row as its trial finishes.
    async def one(trial: Trial) -> DoverRow:
        row = await debug_trial(context, trial, llm, method, executor, config, session, run_dir)
        if out is not None:
            append_row(out, row)
        return row

    return list(await asyncio.gather(*(one(trial) for trial in trials)))


def parallelism(executor: Executor) -> int:
    """How many replays ``executor`` runs at once (1 unless it says otherwise)."""
    return max(1, int(getattr(executor, "parallel", 1)))


def _already_succeeded(
    trace: Trace, run_dir: Path, llm: LLM, config: DoverConfig, checker: Checker, detail: str
) -> DoverRow:
    last = len(trace.steps) - 1
    return DoverRow(
        run_dir=str(run_dir),
        trace_id=trace.id,
        task=trace.task,
        ground_truth=trace.ground_truth,
        original_answer=trace.final_answer,
        original_success=True,
        n_steps=len(trace.steps),
        trial=Trial(index=0, start=0, end=last),
        segmentation="none",
        hypothesis=Hypothesis(trial=0, method=config.method, status="skipped"),
        status="already-succeeded",
        verdict_reason="the recorded run already passes the success check: nothing to debug"
        + (f" ({detail})" if detail else ""),
        model=llm.name,
        prompt_version=prompts.PROMPT_VERSION,
        config=config.model_dump(mode="json"),
        checker=checker.name,
    )


def append_row(path: str | Path, row: DoverRow) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a", encoding="utf-8") as handle:
        handle.write(row.model_dump_json(exclude_none=False) + "\n")


async def debug_trial(
    context: _RunContext,
    trial: Trial,
    llm: LLM,
    method: Method,
    executor: Executor,
    config: DoverConfig,
    session: str,
    run_dir: Path,
) -> DoverRow:
    """Hypothesis, intervention, replays and verdict for one trial."""
    trace = context.trace
    started = time.perf_counter()
    base: dict[str, Any] = {
        "run_dir": str(run_dir),
        "trace_id": trace.id,
        "task": trace.task,
        "ground_truth": trace.ground_truth,
        "original_answer": trace.final_answer,
        "original_success": context.checker.check(
            trace.final_answer, trace.ground_truth, task=trace.task, run_dir=str(run_dir)
        ).passed,
        "checker": context.checker.name,
        "n_steps": len(trace.steps),
        "trial": trial,
        "n_trials": context.n_trials,
        "segmentation": context.segmentation,
        "segmentation_status": context.segmentation_status,
        "milestones_total": len(context.milestones or []),
        "original_milestones": context.original_milestones,
        "model": llm.name,
        "prompt_version": prompts.PROMPT_VERSION,
        "config": config.model_dump(mode="json"),
        "shared_usage": context.shared_usage,
    }
    with track_usage(max_tokens=config.budget_tokens) as scope:
        try:
            row = await _debug_trial(context, trial, llm, method, executor, config, session, base)
        except CaseBudgetExceededError as exc:
            row = DoverRow(
                **base,
                hypothesis=Hypothesis(
                    trial=trial.index, method=config.method, status="budget-exceeded"
                ),
                status="budget-exceeded",
                error=str(exc),
            )
        except FaultfinderError as exc:
            row = DoverRow(
                **base,
                hypothesis=Hypothesis(trial=trial.index, method=config.method, status="error"),
                status="error",
                error=str(exc),
            )
    row.usage = scope.usage
    row.wall_time_s = round(time.perf_counter() - started, 3)
    return row


async def _debug_trial(
    context: _RunContext,
    trial: Trial,
    llm: LLM,
    method: Method,
    executor: Executor,
    config: DoverConfig,
    session: str,
    base: dict[str, Any],
) -> DoverRow:
    trace = context.trace
    hypothesis = await hypothesise(trace, trial, method, llm, config.method)
    if hypothesis.status == "budget-exceeded":
        return DoverRow(
            **base,
            hypothesis=hypothesis,
            status="budget-exceeded",
            error=str(hypothesis.details.get("error") or "the method ran out of budget"),
        )
    if hypothesis.step is None:
        return DoverRow(
            **base,
            hypothesis=hypothesis,
            status="no-hypothesis",
            verdict_reason=f"the method proposed no failure step ({hypothesis.status})",
        )
    orchestrator = orchestrator_of(trace, trial, config.orchestrator)
    target = target_step(trace, hypothesis, orchestrator, config.scope)
    intervention, reply = await propose(
        trace,
        trial,
        hypothesis,
        llm,
        orchestrator=trace.steps[target].agent,
        target=target,
        with_ground_truth=config.with_ground_truth,
        temperature=config.temperature,
    )
    if intervention is None:
        return DoverRow(
            **base,
            hypothesis=hypothesis,
            status="no-intervention",
            verdict_reason=f"unreadable intervention ({reply.parse_error})",
        )
    changed = _plain(intervention.replacement) != _plain(intervention.original)
    count = config.repeats if changed else 0

    async def repeat(number: int) -> RepeatResult:
        branch_id = f"{session}-t{trial.index}-r{number}"
        return await _execute(context, intervention, executor, branch_id, number, llm, config)

    if parallelism(executor) == 1:
        repeats = [await repeat(number) for number in range(count)]
    else:
        # The executor queues what it cannot run at once (Ray: one replay per worker CPU).
        repeats = list(await asyncio.gather(*(repeat(n) for n in range(count))))
    verdict, reason = classify(repeats, changed=changed)
    rate = trial_success(repeats)
    progress = [r.progress for r in repeats if r.progress is not None]
    independent = (
        all(t is None or t > 0 for r in repeats for t in r.temperatures)
        and len({r.seed for r in repeats}) == len(repeats)
        if repeats
        else None
    )
    if independent is False:
        reason += "; repeats were not independent samples (temperature 0 or equal seeds)"
    return DoverRow(
        **base,
        hypothesis=hypothesis,
        intervention=intervention,
        repeats=repeats,
        successes=rate.successes,
        fulfilled=sum(1 for r in repeats if r.fulfilled),
        failed_replays=rate.failed_replays,
        trial_success_rate=rate.rate,
        flip_rate=rate.rate,
        flip_rate_ci=rate.interval,
        independent_repeats=independent,
        progress_made=(sum(progress) / len(progress)) if progress else None,
        verdict=verdict,
        verdict_reason=reason,
    )


def _plain(text: str) -> str:
    return " ".join(text.split())


async def _execute(
    context: _RunContext,
    intervention: Intervention,
    executor: Executor,
    branch_id: str,
    number: int,
    llm: LLM,
    config: DoverConfig,
) -> RepeatResult:
    trace = context.trace
    overrides: dict[str, Any] = {}
    if config.live_temperature is not None:
        overrides["temperature"] = config.live_temperature
    seed = None if config.seed is None else config.seed + number
    if seed is not None:
        overrides["seed"] = seed
    try:
        outcome = await executor.run(intervention, branch_id, overrides)
    except FaultfinderError as exc:
        # The replay never ran the program (a command that does not exist...): no evidence.
        return RepeatResult(
            repeat=number,
            branch=branch_id,
            judge_status="skipped",
            ran=False,
            error=f"the replay could not run: {exc}",
            seed=seed,
        )
    replayed = outcome.trace
    report = outcome.report
    result = RepeatResult(
        repeat=number,
        branch=str(outcome.branch_dir),
        final_answer=replayed.final_answer,
        edit_applied=report.edit_applied,
        divergences=len(report.divergences),
        exit_code=outcome.child.exit_code,
        program_failed=report.program_failed,
        live_calls=report.live_calls,
        steps=len(replayed.steps),
        seed=seed,
        temperatures=[
            (s.request or {}).get("temperature")
            for s in replayed.steps
            if s.metadata.get("origin") in ("live", "edited-input")
        ],
    )
    if no_evidence(result) is not None:
        # The program failed on its own (a live call answered with an error, a crash, the
        # timeout): its answer is whatever the last step that ran said, so it is neither
        # checked nor judged.
        result.error = program_failure(report)
        result.judge_status = "skipped"
        return result
    if not report.edit_applied:
        # The program never reached the intervened step with the recorded history: this
        # replay tests nothing about the hypothesis.
        result.error = (
            f"the edit was not applied ({len(report.divergences)} divergences before step "
            f"{intervention.step})"
        )
        result.judge_status = "skipped"
        return result
    check = context.checker.check(
        replayed.final_answer, trace.ground_truth, task=trace.task, run_dir=result.branch
    )
    result.success, result.check_detail = check.passed, check.detail
    fulfilment = await judge_fulfilment(
        trace,
        replayed,
        intervention,
        llm,
        window=config.judge_window,
        with_ground_truth=config.with_ground_truth,
        budget=config.context_budget,
        temperature=config.temperature,
    )
    result.fulfilment = fulfilment
    result.fulfilled = None if fulfilment is None else fulfilment.is_intervention_fulfilled
    result.judge_status = "ok" if fulfilment is not None else "unparsed"
    if context.milestones and context.original_milestones is not None:
        evaluation = await evaluate_milestones(
            replayed,
            context.milestones,
            llm,
            budget=config.context_budget,
            temperature=config.temperature,
        )
        result.milestones = evaluation
        if evaluation is not None:
            total = len(context.milestones)
            result.progress = (evaluation.achieved(total) - context.original_milestones) / total
    return result
