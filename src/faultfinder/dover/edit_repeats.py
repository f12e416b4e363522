"""A given edit of one step, replayed N times and judged as `faultfinder debug` judges
DoVer's interventions: the same :class:`~faultfinder.dover.models.RepeatResult` per replay,
the same verdict rules (:func:`faultfinder.dover.verdict.classify`), the same Wilson
interval on the flip rate, written as the same :class:`~faultfinder.dover.models.DoverRow`.
`faultfinder verify-edit` and the UI's "Run N times" both run it.

Each replay is :func:`faultfinder.replay.session.replay_run` (what `faultfinder replay`
runs) with the edit at its step. The edited step is the hypothesis (method ``edit``) and
the edit the intervention: its ``replacement`` is the new text (output, instruction or
tool result) or, for a tool call, ``name(arguments)``; ``original`` the recorded
counterpart; for an edit of the reply, ``tool_calls`` are the calls it serves (a
``reply`` edit's; none for ``message``) and ``original_tool_calls`` the recorded ones.
Whether a replay carried the intervention out is DoVer's fulfilment judgement, made by a
judge model when one is given; without one it is not judged, so a failed edit comes out
``inconclusive`` rather than ``refuted``, and the reason says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from faultfinder.dover.checker import Checker, CheckResult, check_recorded
from faultfinder.dover.judge import judge_fulfilment
from faultfinder.dover.models import (
    DoverRow,
    Hypothesis,
    Intervention,
    RepeatResult,
    Trial,
    VerdictName,
)
from faultfinder.dover.replays import unread_text
from faultfinder.dover.verdict import classify, no_evidence, program_failure, trial_success
from faultfinder.errors import FaultfinderError
from faultfinder.llm import json_text
from faultfinder.llm.client import LLM
from faultfinder.llm.scopes import track_usage
from faultfinder.replay.edits import Edit
from faultfinder.replay.replayer import ReplayOptions
from faultfinder.replay.session import ReplayOutcome, SessionOptions, replay_run
from faultfinder.traces.schema import Step, ToolCall, Trace

REPEAT_TEMPERATURE = 0.7
"""Temperature forced on the live calls of a repeated edit (``debug``'s default), so the
repeats are samples rather than one run counted N times."""
LIVE_ORIGINS = ("live", "edited-input")
"""Origins of the calls (and steps) the upstream answered."""
REPLY_KINDS = ("message", "reply")
"""Edit kinds that replace the step's reply (text, and the tool calls served with it)."""
DOVER_DIR = "dover"
"""Where DoVer rows go in a run directory (as `faultfinder debug` puts them)."""


@dataclass(frozen=True)
class Program:
    """What a replay runs and contacts, all of it given by the user (never read from a
    run directory)."""

    command: tuple[str, ...]
    """The program, given after '--'."""
    upstream: str | None = None
    """Endpoint for live calls (--upstream)."""
    trust_run: bool = False
    """Send live calls to the upstream the recording names (--trust-run)."""
    api_key_env: str | None = None
    """Environment variable holding the upstream's key (default: the program's own)."""
    timeout: float | None = None
    """Stop each replay after this many seconds."""
    cwd: str | None = None
    """Directory the program runs in (default: the current one)."""
    upstreams: dict[str, str] = field(default_factory=dict)
    """Per-API endpoints for live calls by API name (--api-upstream API=URL); the other
    APIs' live calls go to ``upstream``."""


@dataclass
class Attempt:
    """One replay of an edit."""

    number: int
    branch_id: str
    branch_dir: Path
    command: str = ""
    """The equivalent `faultfinder replay` command line."""
    state: Literal["waiting", "running", "done", "failed", "cancelled"] = "waiting"
    replay_key: str | None = None
    trace: Trace | None = None
    """The branch's trace, once written."""
    answer: str | None = None
    success: bool | None = None
    edit_applied: bool | None = None
    at_reached: bool | None = None
    """The program reached the edited step with the recorded history."""
    edit_state: str | None = None
    """What became of the edit ('applied', or why not: the replay report's words)."""
    live_calls: int = 0
    divergences: int = 0
    exit_code: int | None = None
    program_failed: bool = False
    """The replayed program failed on its own (non-zero exit or timeout)."""
    error: str | None = None


async def run_attempt(
    attempt: Attempt,
    base_dir: Path,
    at: int | None,
    edit: Edit | None,
    program: Program,
    checker: Checker,
    *,
    temperature: float | None = None,
) -> ReplayOutcome | None:
    """Replay ``base_dir`` with ``edit`` at step ``at`` into ``attempt.branch_id``, filling
    ``attempt`` (None: the replay could not run; ``attempt.error`` says why)."""
    overrides: dict[str, Any] = {} if temperature is None else {"temperature": temperature}
    attempt.state = "running"
    try:
        outcome = await replay_run(
            base_dir,
            list(program.command),
            ReplayOptions(at=at, edit=edit, live_overrides=overrides),
            upstream=program.upstream,
            trust_run=program.trust_run,
            branch_id=attempt.branch_id,
            options=SessionOptions(
                echo=False,
                api_key_env=program.api_key_env,
                timeout=program.timeout,
                cwd=program.cwd,
                upstreams=dict(program.upstreams),
            ),
        )
    except FaultfinderError as exc:
        lines = str(exc).strip().splitlines()
        attempt.state, attempt.error = "failed", lines[0] if lines else type(exc).__name__
        return None
    trace = outcome.trace
    attempt.trace = trace
    attempt.answer = trace.final_answer
    if outcome.report.program_failed:
        # Its answer is whatever the last step that ran said: not a success, nor a failure.
        attempt.error = program_failure(outcome.report)
    else:
        branch = str(outcome.branch_dir)
        attempt.success = checker.check(
            trace.final_answer, trace.ground_truth, task=trace.task, run_dir=branch
        ).passed
    attempt.edit_applied = outcome.report.edit_applied if at is not None else None
    attempt.at_reached = outcome.report.at_reached if at is not None else None
    attempt.edit_state = outcome.report.edit_state() if at is not None else None
    attempt.live_calls = outcome.report.live_calls
    attempt.divergences = len(outcome.report.divergences)
    attempt.exit_code = outcome.child.exit_code
    attempt.program_failed = outcome.report.program_failed
    attempt.state = "done"
    return outcome


def verify_config(
    source: str, at: int, spec: dict[str, Any], repeats: int, temperature: float | None
) -> dict[str, Any]:
    """The ``config`` of a verification row (the same keys from the CLI and the UI)."""
    return {
        "source": source,
        "at": at,
        "edit": spec,
        "repeats": repeats,
        "live_temperature": temperature,
    }


def write_row(base_dir: Path, session: str, row: DoverRow) -> Path:
    """Append ``row`` to ``base_dir/dover/<session>.jsonl`` (where `debug` writes)."""
    path = base_dir / DOVER_DIR / f"{session}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(row.model_dump_json() + "\n")
    return path


@dataclass
class Verdict:
    row: DoverRow
    flip_rate: float | None
    """The row's trial success rate (:func:`~faultfinder.dover.verdict.trial_success`)."""
    interval: tuple[float, float] | None


def recorded_parts(step: Step) -> dict[str, Any]:
    """What the edit form is prefilled with: the step's recorded output, tool calls (with
    their ids, so an edit of its text can serve them unchanged), tool results (with the
    index of the call each answers) and the last user message of its request."""
    last_user = ""
    for message in reversed(step.input_messages or []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            last_user = str(content or "")
            break
    ids = [c.id for c in step.tool_calls]
    results = []
    for position, result in enumerate(step.tool_results):
        index = ids.index(result.call_id) if result.call_id in ids else position
        results.append({"index": index, "content": result.content, "call_id": result.call_id})
    return {
        "step": step.index,
        "agent": step.agent,
        "output": step.content,
        "tool_calls": [
            {"index": i, "id": c.id, "name": c.name, "arguments": c.arguments}
            for i, c in enumerate(step.tool_calls)
        ],
        "tool_results": results,
        "instruction": last_user,
    }


def original_text(step: Step, spec: dict[str, Any]) -> str:
    """The recorded counterpart of an edit."""
    kind = spec.get("kind")
    index = int(spec.get("index") or 0)
    if kind == "tool_call" and index < len(step.tool_calls):
        call = step.tool_calls[index]
        return f"{call.name}({call.arguments})"
    if kind == "tool_result":
        for result in recorded_parts(step)["tool_results"]:
            if result["index"] == index:
                return str(result["content"])
        return ""
    if kind == "input":
        return str(recorded_parts(step)["instruction"])
    return step.content


def replacement_text(spec: dict[str, Any]) -> str:
    """The edit as one text (DoVer's ``replacement``)."""
    kind = spec.get("kind")
    if kind in ("message", "input"):
        return str(spec.get("text") or "")
    if kind == "reply":
        return str(spec.get("content") or "")
    if kind == "tool_result":
        return str(spec.get("content") or "")
    if kind == "tool_call":
        arguments = spec.get("arguments", spec.get("set_arguments", ""))
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return f"{spec.get('name') or '(same tool)'}({text})"
    return json.dumps({k: v for k, v in spec.items() if k != "kind"}, ensure_ascii=False)


def given_intervention(original: Trace, at: int, spec: dict[str, Any]) -> Intervention:
    """The edit file ``spec`` at step ``at`` of ``original`` as the intervention DoVer's
    rules judge."""
    step = original.steps[at]
    return Intervention(
        category="modified_instruction",
        replacement=replacement_text(spec) or "(empty)",
        rationale="a given edit (faultfinder verify-edit, or the UI's Run N times)",
        step=at,
        agent=step.agent,
        original=original_text(step, spec),
        original_tool_calls=step.tool_calls if spec.get("kind") in REPLY_KINDS else [],
        tool_calls=edit_tool_calls(spec),
    )


async def judge_repeats(
    original: Trace,
    at: int,
    spec: dict[str, Any],
    attempts: list[Attempt],
    *,
    run_dir: Path,
    checker: Checker,
    judge: LLM | None,
    config: dict[str, Any],
    check: CheckResult | None = None,
) -> Verdict:
    """DoVer's row for ``attempts`` (replays of ``spec`` at step ``at`` of ``original``);
    ``check``: the recorded run's success check, when the caller already ran it (a
    checker command runs once per verification)."""
    intervention = given_intervention(original, at, spec)
    results: list[RepeatResult] = []
    with track_usage() as scope:
        for attempt in attempts:
            results.append(await _result(original, attempt, intervention, judge))
    if check is None:
        check = check_recorded(checker, original, str(run_dir))
    verdict: VerdictName | None
    if check.passed:
        # Nothing to flip: a success of the edited run is not a recovery (DoVer's rule).
        verdict, reason = None, why_not_replayed(check, original.steps[at], spec) or ""
    else:
        verdict, reason = classify(results, changed=edit_changes_step(original.steps[at], spec))
    if judge is None and verdict == "inconclusive":
        reason += "; no judge model (--model), so fulfilment was not judged"
    rate = trial_success(results)
    temperatures = [t for r in results for t in r.temperatures]
    row = DoverRow(
        run_dir=str(run_dir),
        trace_id=original.id,
        task=original.task,
        ground_truth=original.ground_truth,
        original_answer=original.final_answer,
        original_success=check.passed,
        checker=checker.name,
        n_steps=len(original.steps),
        trial=Trial(index=0, start=0, end=max(len(original.steps) - 1, 0)),
        segmentation="none",
        hypothesis=Hypothesis(
            trial=0, agent=intervention.agent, step=at, reason="the edited step", method="edit"
        ),
        intervention=intervention,
        repeats=results,
        successes=rate.successes,
        fulfilled=sum(1 for r in results if r.fulfilled),
        failed_replays=rate.failed_replays,
        trial_success_rate=None if check.passed else rate.rate,
        flip_rate=None if check.passed else rate.rate,
        flip_rate_ci=None if check.passed else rate.interval,
        status="already-succeeded" if check.passed else "ok",
        # No seeds are sent (the `replay` command has none): independence rests on sampling.
        independent_repeats=bool(temperatures) and all(t is None or t > 0 for t in temperatures),
        verdict=verdict,
        verdict_reason=reason,
        model=judge.name if judge is not None else "",
        config=config,
        usage=scope.usage,
    )
    if check.passed:
        return Verdict(row, None, None)
    return Verdict(row, rate.rate, rate.interval)


def edit_tool_calls(spec: dict[str, Any]) -> list[ToolCall]:
    """The tool calls a ``reply`` edit serves with its text (none for any other kind)."""
    if spec.get("kind") != "reply":
        return []
    calls = []
    for call in spec.get("tool_calls") or []:
        arguments = call.get("arguments", "")
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        calls.append(ToolCall(id=call.get("id"), name=str(call.get("name", "")), arguments=text))
    return calls


def _same_calls(served: list[ToolCall], recorded: list[ToolCall]) -> bool:
    """Same tools with the same arguments, in order (JSON arguments compared parsed)."""

    def key(call: ToolCall) -> tuple[str, Any]:
        try:
            return call.name, json_text.loads(call.arguments or "{}")
        except json_text.JSONTextError:
            return call.name, call.arguments

    return [key(c) for c in served] == [key(c) for c in recorded]


def edit_changes_step(step: Step, spec: dict[str, Any]) -> bool:
    """Whether the edit differs from what step ``step`` recorded (DoVer's rule 1: an
    intervention equal to the original changes nothing). Compared as text, blanks at the
    ends ignored, and for an edit of the reply (``message``, ``reply``) its tool calls
    too: a ``message`` edit drops the recorded ones; a kind with no recorded counterpart
    counts as a change."""
    kind = spec.get("kind")
    if kind not in ("message", "reply", "input", "tool_result"):
        return True
    if kind in ("message", "reply") and not _same_calls(edit_tool_calls(spec), step.tool_calls):
        return True
    return replacement_text(spec).strip() != original_text(step, spec).strip()


def why_not_replayed(check: CheckResult, step: Step, spec: dict[str, Any]) -> str | None:
    """Why replaying ``spec`` on ``step`` cannot tell anything, given the recorded run's
    ``check``: it already passes the success check, or the edit equals what the step
    recorded. None: replay it."""
    if check.passed:
        detail = f" ({check.detail})" if check.detail else ""
        return (
            "the recorded run already passes the success check: an edit has nothing to flip"
            + detail
        )
    if not edit_changes_step(step, spec):
        return "the edit is what the step recorded: it changes nothing"
    return None


async def _result(
    original: Trace, attempt: Attempt, intervention: Intervention, judge: LLM | None
) -> RepeatResult:
    result = RepeatResult(
        repeat=attempt.number,
        branch=str(attempt.branch_dir),
        final_answer=attempt.answer,
        success=attempt.success if attempt.edit_applied else None,
        edit_applied=bool(attempt.edit_applied),
        at_reached=attempt.at_reached,
        divergences=attempt.divergences,
        exit_code=attempt.exit_code,
        program_failed=attempt.program_failed,
        live_calls=attempt.live_calls,
        judge_status="skipped",
        ran=attempt.state != "failed",
        error=attempt.error,
    )
    replayed = attempt.trace
    if replayed is None:
        return result
    result.steps = len(replayed.steps)
    result.temperatures = [
        (s.request or {}).get("temperature")
        for s in replayed.steps
        if s.metadata.get("origin") in LIVE_ORIGINS
    ]
    if no_evidence(result) is not None:  # failed on its own: neither checked nor judged
        return result
    if not attempt.edit_applied:
        result.error = result.error or f"the edit was {attempt.edit_state or 'NOT applied'}"
        return result
    unread = unread_text(intervention, replayed)
    if unread is not None:  # a reply edit's new text, dropped by the program
        result.edit_applied, result.success, result.error = False, None, unread
        return result
    if judge is not None:
        fulfilment = await judge_fulfilment(original, replayed, intervention, judge)
        result.fulfilment = fulfilment
        result.fulfilled = None if fulfilment is None else fulfilment.is_intervention_fulfilled
        result.judge_status = "ok" if fulfilment is not None else "unparsed"
    return result
