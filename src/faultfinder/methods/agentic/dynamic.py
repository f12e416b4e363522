"""TraceElephant's dynamic agentic check (Appendix A.6.3): verify candidate attributions by
re-running the system from each candidate step with the step corrected.

For up to N candidate (agent, step, reason, expected output) hypotheses, derived from a
static method's attribution plus a candidate-proposal call, the program is replayed up to
the candidate step; there, the step's request is edited through the proxy (a reviewer's
note appended, naming the mistake and the expected output) and the next k = 5 steps run
live at temperature 0.3, then the program is stopped. A judge reads those steps: do they
satisfy the expected output, does the observed failure recur, does the agent leave the
task? Candidates are re-ranked by what the replays showed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from faultfinder.errors import CaseBudgetExceededError, FaultfinderError
from faultfinder.judging.method import Attribution, Method, run_method
from faultfinder.judging.reference import ground_truth_for
from faultfinder.judging.structured import json_parser, render_log, schema_constraint
from faultfinder.llm.client import LLM, ParseError
from faultfinder.llm.scopes import track_usage
from faultfinder.replay.edits import Edit
from faultfinder.replay.recorder import build_trace, new_run_id
from faultfinder.replay.replayer import ReplayOptions
from faultfinder.replay.session import SessionOptions, replay_run
from faultfinder.traces.schema import Trace
from faultfinder.usage import Usage

PROMPT_VERSION = "dynamic-check-v1"
SHORTLIST_PROMPT_VERSION = "dynamic-check-v1+shortlist"
"""The candidates prompt with the method's shortlisted steps named (``SHORTLISTED``)."""

CANDIDATES = """You are analysing the execution log of a failed multi-agent run to find the
decisive error: the step whose mistake, if corrected, would have let the run succeed.

Task: {task}
{reference}
Execution log (Step N - agent: message):
{log}

A static attribution method suggested: agent {agent}, step {step}, reason: {reason}

{shortlist}
Propose up to {n} candidate decisive errors, most likely first (the suggestion above may be
one of them). For each, give the agent, the step, the mistake, and the expected output of
that step had the mistake not been made.
Answer with JSON only:
{{"candidates": [
  {{"agent": "<agent>", "step": <step index>, "reason": "<the mistake>",
    "expected_output": "<what the step should have produced>"}}
]}}"""

SHORTLISTED = """
A ranking of the steps shortlisted these candidates for the decisive error: {steps}.
Propose candidates among these steps only."""
"""Added to ``CANDIDATES`` when the method shortlisted the steps to verify (``compose``)."""

NOTE = (
    "Note from a reviewer of this run: a previous attempt at this step went wrong: {reason} "
    "Avoid that mistake. Expected output of this step: {expected}"
)
"""The reviewer's note appended to the candidate step's request (the intervention)."""

JUDGE = """A multi-agent run failed. To test a candidate explanation, the run was replayed up to
step {step} and that step's request was corrected with a note; the {k} steps that followed
are shown below.

Task: {task}
{reference}
Candidate: agent {agent}, step {step}, mistake: {reason}
Expected output of step {step}: {expected}

Original steps from step {step} on:
{before}

Replayed steps from step {step} on (after the correction):
{after}

Answer three questions: do the replayed steps satisfy the expected output
(satisfies_expected)? Does the failure observed in the original steps recur in them
(failure_recurs)? Do they deviate from the task objective (deviates)?
Answer with JSON only:
{{"satisfies_expected": true or false, "failure_recurs": true or false,
 "deviates": true or false, "evidence": "<short>"}}"""

_CANDIDATES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "candidates": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "agent": {"type": "string"},
                    "step": {"type": "integer"},
                    "reason": {"type": "string"},
                    "expected_output": {"type": "string"},
                },
                "required": ["agent", "step", "reason", "expected_output"],
            },
        }
    },
    "required": ["candidates"],
}
_JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "satisfies_expected": {"type": "boolean"},
        "failure_recurs": {"type": "boolean"},
        "deviates": {"type": "boolean"},
        "evidence": {"type": "string"},
    },
    "required": ["satisfies_expected", "failure_recurs", "deviates", "evidence"],
}


class Candidate(BaseModel):
    """A candidate attribution with its expected oracle."""

    agent: str
    step: int
    reason: str = ""
    expected_output: str = ""
    """What the step should have produced (inferred by the model, not from labels)."""


class Observation(BaseModel):
    """The judge's reading of the replayed window."""

    satisfies_expected: bool
    failure_recurs: bool
    deviates: bool
    evidence: str = ""


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
    up, or a timeout): its window is no evidence, so it is not judged and scores 0."""
    exit_code: int | None = None
    """The replayed program's exit status (None: it did not run)."""
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
    stopped: str | None = None
    """Why the check stopped before judging every candidate (its token budget ran out)."""
    usage: Usage = Field(default_factory=Usage)
    wall_time_s: float = 0.0


class _CandidateList(BaseModel):
    candidates: list[Candidate] = Field(default_factory=list)


def score(observation: Observation | None) -> int:
    if observation is None:
        return 0
    good = int(observation.satisfies_expected and not observation.deviates)
    return good + int(not observation.failure_recurs)


async def propose_candidates(
    trace: Trace,
    llm: LLM,
    static: dict[str, Any],
    n: int,
    *,
    with_ground_truth: bool = True,
    budget: int | None = None,
    shortlist: list[int] | None = None,
) -> list[Candidate]:
    """Up to ``n`` candidates, the static attribution's step first when it names one.

    With ``shortlist`` (steps a method shortlisted, best first) the candidates are those
    steps: the model is asked about them only and gives each one's mistake and expected
    output (for the reviewer's note); a proposal outside them is dropped, and a
    shortlisted step it left out is still checked, with the static reason if it is the
    static step and an unspecified one otherwise."""
    agents = set(trace.agent_names())

    def check(answer: _CandidateList) -> None:
        for c in answer.candidates:
            if not 0 <= c.step < len(trace.steps):
                raise ParseError(f"candidate step {c.step} is outside the log")
            if c.agent not in agents:
                raise ParseError(f"candidate agent {c.agent!r} is not in the log")

    gold = ground_truth_for(trace, with_ground_truth)
    reference = f"Reference answer: {gold}\n" if gold else ""
    fields = {
        "task": trace.task,
        "reference": reference,
        "agent": static.get("agent") or "(none)",
        "step": static.get("step") if static.get("step") is not None else "(none)",
        "reason": static.get("reason") or "(none)",
        "n": n,
        "shortlist": (
            SHORTLISTED.format(
                steps=", ".join(f"step {i} ({trace.steps[i].agent})" for i in shortlist)
            )
            if shortlist
            else ""
        ),
    }
    overhead = llm.count_tokens(CANDIDATES.format(**fields, log=""))
    log = render_log(
        trace, trace.steps, budget=budget, count_tokens=llm.count_tokens, reserved=overhead + 800
    )
    reply = await llm.chat(
        CANDIDATES.format(**fields, log=log),
        parse=json_parser(_CandidateList, check),
        purpose="dynamic check: candidates",
        constraint=schema_constraint(_CANDIDATES_SCHEMA),
        max_tokens=768,
    )
    found = list(reply.parsed.candidates) if reply.parsed else []
    if shortlist:
        return _within(found, shortlist, static, trace)[:n]
    if static.get("step") is not None and all(c.step != static["step"] for c in found):
        found.insert(
            0,
            Candidate(
                agent=str(static.get("agent") or trace.steps[static["step"]].agent),
                step=static["step"],
                reason=str(static.get("reason") or ""),
            ),
        )
    seen: set[int] = set()
    unique = []
    for candidate in found:
        if candidate.step not in seen:
            seen.add(candidate.step)
            unique.append(candidate)
    return unique[:n]


def _within(
    found: list[Candidate], shortlist: list[int], static: dict[str, Any], trace: Trace
) -> list[Candidate]:
    """The shortlisted steps in order, each with the model's proposal for it if any."""
    proposed: dict[int, Candidate] = {}
    for candidate in found:
        proposed.setdefault(candidate.step, candidate)
    out = []
    for step in shortlist:
        if step in proposed:
            out.append(proposed[step])
        elif step == static.get("step"):
            agent = str(static.get("agent") or trace.steps[step].agent)
            out.append(Candidate(agent=agent, step=step, reason=str(static.get("reason") or "")))
        else:
            out.append(Candidate(agent=trace.steps[step].agent, step=step))
    return out


def shortlisted_steps(method: Method, attribution: Attribution) -> list[int] | None:
    """The steps a method shortlisted as worth verifying (``proposes_candidates``), its
    chosen step first; None for methods that do not shortlist."""
    steps = attribution.details.get("candidates")
    if not method.proposes_candidates or not steps:
        return None
    chosen = [attribution.step] if attribution.step in steps else []
    return chosen + [s for s in steps if s not in chosen]


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
        try:
            proposed = await propose_candidates(
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
                    options=options or SessionOptions(echo=False),
                )
            except FaultfinderError as exc:
                item.error = str(exc)
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
                item.error = (
                    "the replayed program failed on its own (exit status "
                    f"{report.program_exit_code}): not judged"
                )
                checked.append(item)
                continue
            if not report.edit_applied:
                item.error = "the replay never reached the candidate step"
                checked.append(item)
                continue
            try:
                item.observation = await _judge(
                    trace, outcome.trace, candidate, llm, window, with_ground_truth, budget
                )
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


async def _judge(
    original: Trace,
    replayed: Trace,
    candidate: Candidate,
    llm: LLM,
    window: int,
    with_ground_truth: bool,
    budget: int | None,
) -> Observation | None:
    k = candidate.step
    before = render_log(
        original,
        original.steps[k : k + window],
        budget=None if budget is None else budget // 3,
        count_tokens=llm.count_tokens,
    )
    after = render_log(
        replayed,
        replayed.steps[k : k + window],
        budget=None if budget is None else budget // 3,
        count_tokens=llm.count_tokens,
    )
    gold = ground_truth_for(original, with_ground_truth)
    reference = f"Reference answer: {gold}\n" if gold else ""
    reply = await llm.chat(
        JUDGE.format(
            step=k,
            k=window,
            task=original.task,
            reference=reference,
            agent=candidate.agent,
            reason=candidate.reason or "(unspecified)",
            expected=candidate.expected_output or "(unspecified)",
            before=before,
            after=after,
        ),
        parse=json_parser(Observation),
        purpose=f"dynamic check: judge step {k}",
        constraint=schema_constraint(_JUDGE_SCHEMA),
        max_tokens=384,
    )
    return reply.parsed
