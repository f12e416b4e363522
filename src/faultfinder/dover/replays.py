"""DoVer's replays: executing an intervention and judging the replay.

An :class:`Executor` runs the program with an intervention applied
(:class:`ReplayExecutor` replays it through the proxy; ``faultfinder.scale.ray_debug``
runs it on a Ray worker); :func:`execute` runs one repeat on an executor and judges it
into a :class:`~faultfinder.dover.models.RepeatResult`. The pipeline
(:mod:`faultfinder.dover.pipeline`) calls it for every repeat of every trial.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from faultfinder.dover.judge import evaluate_milestones, judge_fulfilment
from faultfinder.dover.models import DoverConfig, Intervention, Milestone, RepeatResult
from faultfinder.dover.verdict import no_evidence, program_failure
from faultfinder.errors import FaultfinderError
from faultfinder.llm.client import LLM
from faultfinder.replay.edits import Edit
from faultfinder.replay.replayer import ReplayOptions
from faultfinder.replay.session import ReplayOutcome, SessionOptions, replay_run
from faultfinder.traces.schema import Trace
from faultfinder.usage import Usage


class Executor(Protocol):
    """Runs the program with an intervention applied.

    An executor may have a ``parallel`` attribute: how many replays it runs at once
    (default 1, one after another; the Ray executor runs one per worker CPU).
    """

    async def run(
        self, intervention: Intervention, branch_id: str, overrides: dict[str, Any]
    ) -> ReplayOutcome:
        """Replay with ``intervention`` and return the branch; ``overrides`` are request
        parameters forced on live calls (temperature, seed). Raise a ``FaultfinderError``
        when the replay cannot run: its message becomes the replay's ``error``."""
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
            edit=intervention_edit(intervention),
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


def intervention_edit(intervention: Intervention) -> Edit:
    """The replay edit of ``intervention``: its text as the step's reply, with the tool
    calls it keeps (ids, names and arguments as served), so a handoff or a tool call of
    the step is still made and its result still matches its call."""
    calls = [
        {"id": c.id, "name": c.name, "arguments": c.arguments} for c in intervention.tool_calls
    ]
    return Edit(output=intervention.replacement, tool_calls=calls or None)


def unread_text(intervention: Intervention, replayed: Trace) -> str | None:
    """Why the new text of an intervention that keeps the step's tool calls reached no
    agent (None: a later request carried it, or the step has no tool calls, or its text
    is unchanged). Some frameworks (CrewAI) drop the text of a reply that makes tool calls
    from the history they send next: the calls are made, the text is never read, and the
    replay would be judged as if the instruction had been ignored."""
    new = _plain(intervention.replacement)
    if not intervention.tool_calls or not new or new == _plain(intervention.original):
        return None
    if intervention.tool_calls != intervention.original_tool_calls:
        return None  # changed calls (a redirect) are themselves a change the program made
    for step in replayed.steps[intervention.step + 1 :]:
        if new in _plain(" ".join(_strings(step.input_messages or []))):
            return None
    return (
        f"the new text of step {intervention.step} was served with its tool calls, but no "
        "later request carried it (the program drops the text of a reply that makes tool "
        "calls): no agent read the intervention"
    )


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _plain(text: str) -> str:
    return " ".join(text.split())


def parallelism(executor: Executor) -> int:
    """How many replays ``executor`` runs at once (1 unless it says otherwise)."""
    return max(1, int(getattr(executor, "parallel", 1)))


class RunContext(BaseModel):
    """What every trial of a run shares: the recording, its milestones and checker."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    trace: Trace
    milestones: list[Milestone] | None
    original_milestones: float | None
    shared_usage: Usage
    segmentation: str
    segmentation_status: str
    n_trials: int
    checker: Any
    original_success: bool | None = None
    """The recording's success check, made once for every trial (a checker command may be
    slow or paid for)."""


async def execute(
    context: RunContext,
    intervention: Intervention,
    executor: Executor,
    branch_id: str,
    number: int,
    llm: LLM,
    config: DoverConfig,
) -> RepeatResult:
    """Replay ``intervention`` once (repeat ``number``, into ``branch_id``) and judge the
    replay: success, fulfilment and milestone progress; a replay that failed on its own,
    could not run or never got the edit is kept unjudged with its reason."""
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
        at_reached=report.at_reached,
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
        # The program never got the edit (it did not reach the intervened step with the
        # recorded history, or the edited call was never answered): this replay tests
        # nothing about the hypothesis.
        result.error = f"the edit was {report.edit_state()}" + (
            ""
            if report.at_reached
            else f" ({len(report.divergences)} divergences before step {intervention.step})"
        )
        result.judge_status = "skipped"
        return result
    unread = unread_text(intervention, replayed)
    if unread is not None:
        # Served, but no agent ever read it: the replay tests nothing about the hypothesis.
        result.edit_applied = False
        result.error = unread
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
