"""The model's part of TraceElephant's dynamic check (:mod:`.dynamic`): proposing the
candidate decisive errors, and judging what a replay from a corrected candidate step did.

Both prompts, the shapes of their answers and the two calls live here; replaying the
program and re-ranking the candidates is :func:`.dynamic.dynamic_check`. Bump
``PROMPT_VERSION`` whenever a text here changes.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from faultfinder.judging.agent_names import match_agent, roster_of
from faultfinder.judging.method import Attribution, Method
from faultfinder.judging.reference import ground_truth_for
from faultfinder.judging.structured import json_parser, render_log, schema_constraint
from faultfinder.llm.client import LLM, ParseError
from faultfinder.traces.schema import Trace

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
) -> tuple[list[Candidate], str | None]:
    """Up to ``n`` candidates, the static attribution's step first when it names one, and
    why the model's answer could not be read (None when it was).

    Agent names are read as the navigator reads them (``match_agent``: case, spacing and
    a speaker's qualifier do not matter); an answer naming no agent of the log, or a
    step outside it, is unreadable: re-sampled, then left out (never guessed), and the
    reason returned.

    With ``shortlist`` (steps a method shortlisted, best first) the candidates are those
    steps: the model is asked about them only and gives each one's mistake and expected
    output (for the reviewer's note); a proposal outside them is dropped, and a
    shortlisted step it left out is still checked, with the static reason if it is the
    static step and an unspecified one otherwise."""
    roster = roster_of(trace)

    def check(answer: _CandidateList) -> None:
        for c in answer.candidates:
            if not 0 <= c.step < len(trace.steps):
                raise ParseError(f"candidate step {c.step} is outside the log")
            c.agent = match_agent(c.agent, roster)

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
    unreadable = None if reply.parsed else (reply.parse_error or "unreadable")
    if shortlist:
        return _within(found, shortlist, static, trace)[:n], unreadable
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
    return unique[:n], unreadable


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


async def judge_window(
    original: Trace,
    replayed: Trace,
    candidate: Candidate,
    llm: LLM,
    window: int,
    with_ground_truth: bool,
    budget: int | None,
) -> tuple[Observation | None, str | None]:
    """The judge's reading of the ``window`` steps from the candidate's step on, before
    and after the correction, and why its answer could not be read (None when it was)."""
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
    if reply.parsed is None:
        return None, reply.parse_error or "unreadable"
    return reply.parsed, None
