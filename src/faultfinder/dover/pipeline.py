"""DoVer end to end: trials -> hypotheses -> interventions -> replays -> verdicts.

``run_dover`` works on a recording made with ``faultfinder record``; interventions are
executed by replaying the program with the edited message (an
:class:`~faultfinder.dover.replays.Executor`, by default
:class:`~faultfinder.dover.replays.ReplayExecutor`; each replay run and judged by
:func:`~faultfinder.dover.replays.execute`), and each trial becomes one
:class:`~faultfinder.dover.models.DoverRow`, appended to a JSONL file as soon as it is
complete. Its options are :class:`~faultfinder.dover.models.DoverConfig`.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from faultfinder.dover import prompts
from faultfinder.dover.checker import Checker, ExactChecker, check_recorded
from faultfinder.dover.hypothesis import hypothesise
from faultfinder.dover.intervene import orchestrator_of, propose, target_step
from faultfinder.dover.judge import evaluate_milestones, extract_milestones
from faultfinder.dover.models import DoverConfig, DoverRow, Hypothesis, RepeatResult, Trial
from faultfinder.dover.replays import Executor, RunContext, execute, parallelism
from faultfinder.dover.segment import segment
from faultfinder.dover.verdict import classify, trial_success
from faultfinder.errors import CaseBudgetExceededError, FaultfinderError
from faultfinder.judging.method import Method
from faultfinder.llm.client import LLM
from faultfinder.llm.scopes import track_usage
from faultfinder.replay.recorder import build_trace, new_run_id
from faultfinder.traces.schema import Trace


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
    original = check_recorded(checker, trace, str(run_dir))
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
    context = RunContext(
        trace=trace,
        milestones=milestones,
        original_milestones=original_score,
        shared_usage=shared.usage,
        segmentation=segmentation.method,
        segmentation_status=segmentation.status,
        n_trials=len(segmentation.trials),
        checker=checker,
        original_success=original.passed,
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
    context: RunContext,
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
        "original_success": context.original_success,
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
    context: RunContext,
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
    changed = intervention.changes_step()
    count = config.repeats if changed else 0

    async def repeat(number: int) -> RepeatResult:
        branch_id = f"{session}-t{trial.index}-r{number}"
        return await execute(context, intervention, executor, branch_id, number, llm, config)

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
