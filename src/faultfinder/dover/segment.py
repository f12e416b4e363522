"""Trial segmentation: cut a log into plan-execution trials (DoVer Section 4.1).

The default asks the model for the planning steps (DoVer's prompt-based segmenter); a
deterministic alternative matches a known marker in step outputs, e.g. Magentic-One's
"We are working to address the following user request".
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

from faultfinder.dover import prompts
from faultfinder.dover.models import PlanningStep, Segmentation, Trial
from faultfinder.judging.structured import json_parser, render_log, schema_constraint
from faultfinder.llm.client import LLM, ParseError
from faultfinder.traces.schema import Trace

MAGENTIC_ONE_MARKER = "We are working to address the following user request"
PRESETS = {"magentic-one": f"pattern:{re.escape(MAGENTIC_ONE_MARKER)}"}
"""Named deterministic segmenters (``--segment magentic-one``)."""


class _Answer(BaseModel):
    planning_steps: list[PlanningStep] = Field(default_factory=list)


def trials_from(planning: list[PlanningStep], n_steps: int) -> list[Trial]:
    """Trials opened by ``planning`` steps; steps before the first plan join trial 0."""
    marks = sorted(
        {p.step: p for p in planning if 0 <= p.step < n_steps}.values(), key=lambda p: p.step
    )
    if not marks or n_steps == 0:
        return [Trial(index=0, start=0, end=max(n_steps - 1, 0))]
    trials = []
    for i, mark in enumerate(marks):
        start = 0 if i == 0 else mark.step
        end = marks[i + 1].step - 1 if i + 1 < len(marks) else n_steps - 1
        kind: Literal["initial", "update"] = "initial" if i == 0 else "update"
        trials.append(
            Trial(
                index=i,
                start=start,
                end=end,
                planning_step=mark.step,
                kind=kind,
                criterion=mark.criterion,
            )
        )
    return trials


def segment_by_pattern(trace: Trace, pattern: str) -> Segmentation:
    """Planning steps are those whose output matches ``pattern`` (a regex)."""
    regex = re.compile(pattern, re.MULTILINE)
    planning = [
        PlanningStep(step=s.index, type="update", criterion=f"output matches {pattern!r}")
        for s in trace.steps
        if regex.search(s.content)
    ]
    if planning:
        planning[0].type = "initial"
    return Segmentation(
        method=f"pattern:{pattern}",
        status="ok" if planning else "no-planning-steps",
        planning_steps=planning,
        trials=trials_from(planning, len(trace.steps)),
    )


async def segment_by_llm(
    trace: Trace, llm: LLM, *, budget: int | None = None, temperature: float = 0.0
) -> Segmentation:
    """Ask the model for the planning steps."""
    n = len(trace.steps)

    def check(answer: _Answer) -> None:
        bad = [p.step for p in answer.planning_steps if not 0 <= p.step < n]
        if bad:
            raise ParseError(f"planning steps {bad} are outside the log (0..{n - 1})")

    overhead = llm.count_tokens(prompts.SEGMENT.format(task=trace.task, log=""))
    log = render_log(
        trace, trace.steps, budget=budget, count_tokens=llm.count_tokens, reserved=overhead + 400
    )
    reply = await llm.chat(
        prompts.SEGMENT.format(task=trace.task, log=log),
        parse=json_parser(_Answer, check),
        purpose="dover: trial segmentation",
        temperature=temperature,
        constraint=schema_constraint(prompts.SCHEMAS["segment"]),
        max_tokens=prompts.MAX_TOKENS["segment"],
    )
    if reply.parsed is None:
        return Segmentation(
            method="llm",
            status="unparsed",
            trials=trials_from([], n),
            detail=f"unreadable answer ({reply.parse_error}); the whole log is one trial",
        )
    planning = sorted(reply.parsed.planning_steps, key=lambda p: p.step)
    return Segmentation(
        method="llm",
        status="ok" if planning else "no-planning-steps",
        planning_steps=planning,
        trials=trials_from(planning, n),
    )


async def segment(
    trace: Trace,
    llm: LLM,
    method: str = "llm",
    *,
    budget: int | None = None,
    temperature: float = 0.0,
) -> Segmentation:
    """Segment with 'llm', 'none', a preset name, or 'pattern:<regex>'."""
    method = PRESETS.get(method, method)
    if method == "llm":
        return await segment_by_llm(trace, llm, budget=budget, temperature=temperature)
    if method == "none":
        return Segmentation(method="none", trials=trials_from([], len(trace.steps)))
    if method.startswith("pattern:"):
        return segment_by_pattern(trace, method.removeprefix("pattern:"))
    raise ValueError(
        f"unknown segmentation {method!r}: use llm, none, magentic-one or pattern:REGEX"
    )
