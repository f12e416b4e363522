"""The trace page's data: lanes of the timeline, step rows, and every method's answer.

Everything here returns plain values; the templates escape them (autoescape is on and no
template marks trace content safe).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from faultfinder.eval.metrics import agent_correct, step_correct
from faultfinder.shortlist.sets import describe as describe_step_set
from faultfinder.traces.schema import Step, Trace
from faultfinder.ui.catalog import AttributionEntry

CONTENT_LIMIT = 20_000
"""Characters of a step's output shown inline; the step page shows everything."""
LANE_HEIGHT = 22
LABEL_WIDTH = 140


@dataclass
class Mark:
    """A step some answer points at."""

    step: int
    labels: list[str] = field(default_factory=list)
    gold: bool = False
    selected: bool = False
    in_set: bool = False
    """In the step set of the selected answer."""


@dataclass
class TimelineRect:
    step: int
    x: float
    y: float
    width: float
    css: str
    title: str


@dataclass
class Timeline:
    width: float
    height: float
    lanes: list[tuple[str, float]]
    rects: list[TimelineRect]


def step_width(n_steps: int) -> float:
    """Pixels per step: wide for short traces, at least 3 px for very long ones."""
    return max(3.0, min(28.0, 1100.0 / max(n_steps, 1)))


def timeline(trace: Trace, marks: dict[int, Mark]) -> Timeline:
    """One lane per agent (order of first appearance), one box per step at its index."""
    agents = trace.agent_names()
    lane_of = {name: i for i, name in enumerate(agents)}
    w = step_width(len(trace.steps))
    rects: list[TimelineRect] = []
    for step in trace.steps:
        mark = marks.get(step.index)
        css = "tl-step"
        if mark is not None:
            css += " tl-marked" if mark.labels else ""
            css += " tl-gold" if mark.gold else ""
            css += " tl-selected" if mark.selected else ""
        rects.append(
            TimelineRect(
                step=step.index,
                x=LABEL_WIDTH + step.index * w,
                y=lane_of[step.agent] * LANE_HEIGHT + 3,
                width=max(w - 1, 2),
                css=css,
                title=f"step {step.index} · {step.agent}",
            )
        )
    lanes = [(name, i * LANE_HEIGHT + LANE_HEIGHT * 0.7) for i, name in enumerate(agents)]
    return Timeline(
        width=LABEL_WIDTH + len(trace.steps) * w + 10,
        height=max(len(agents), 1) * LANE_HEIGHT + 4,
        lanes=lanes,
        rects=rects,
    )


@dataclass
class StepRow:
    step: Step
    content: str
    truncated: bool
    tokens: str
    latency: str
    inputs: int


def latency_of(step: Step) -> float | None:
    value = step.metadata.get("latency_s")
    if isinstance(value, int | float):
        return float(value)
    if step.started_at is not None and step.ended_at is not None:
        return (step.ended_at - step.started_at).total_seconds()
    return None


def step_rows(trace: Trace) -> list[StepRow]:
    rows: list[StepRow] = []
    for step in trace.steps:
        text = step.content
        usage = step.usage
        tokens = f"{usage.prompt_tokens} + {usage.completion_tokens}" if usage else ""
        latency = latency_of(step)
        rows.append(
            StepRow(
                step=step,
                content=text[:CONTENT_LIMIT],
                truncated=len(text) > CONTENT_LIMIT,
                tokens=tokens,
                latency="" if latency is None else f"{latency:.2f} s",
                inputs=len(step.input_messages or []),
            )
        )
    return rows


@dataclass
class AnswerRow:
    """One method's answer on this trace, scored against the gold label when there is one."""

    index: int
    method: str
    model: str
    origin: str
    source: str
    agent: str | None
    step: int | None
    status: str
    reason: str
    agent_ok: bool | None
    step_ok: bool | None
    details: dict[str, Any]
    confidence: float | None = None
    step_set: list[int] | None = None
    step_set_text: str | None = None
    """The step set as `attribute` prints it ('{2-4, 7} at 90%: 4 of 12 steps ...')."""


def answer_rows(trace: Trace, entries: Sequence[AttributionEntry]) -> list[AnswerRow]:
    gold = trace.label
    rows: list[AnswerRow] = []
    for i, entry in enumerate(entries):
        a = entry.attribution
        method = a.method + (f" (run {entry.row.run})" if entry.row is not None else "")
        rows.append(
            AnswerRow(
                index=i,
                method=method,
                model=a.model,
                origin=entry.origin,
                source=entry.path.name,
                agent=a.agent,
                step=a.step,
                status=a.status,
                reason=a.reason or a.error or "",
                agent_ok=None if gold is None else agent_correct(a.agent, gold),
                step_ok=None if gold is None else step_correct(a.step, gold),
                details=a.details,
                confidence=a.confidence,
                step_set=a.step_set,
                step_set_text=(
                    None
                    if a.step_set is None or a.step_set_level is None
                    else describe_step_set(
                        a.step_set,
                        a.step_set_level,
                        len(trace.steps),
                        a.step_set_source,
                        a.step_set_calibrated,
                        a.step_set_shift,
                    )
                ),
            )
        )
    return rows


def marks_for(trace: Trace, answers: Sequence[AnswerRow], selected: int | None) -> dict[int, Mark]:
    marks: dict[int, Mark] = {}
    for row in answers:
        if row.step is not None and 0 <= row.step < len(trace.steps):
            mark = marks.setdefault(row.step, Mark(row.step))
            mark.labels.append(row.method)
            mark.selected = mark.selected or row.index == selected
    if trace.label is not None:
        for s in trace.label.acceptable_steps:
            marks.setdefault(s, Mark(s)).gold = True
    chosen = next((row for row in answers if row.index == selected), None)
    for s in (chosen.step_set or []) if chosen else []:
        if 0 <= s < len(trace.steps):
            marks.setdefault(s, Mark(s)).in_set = True
    return marks


@dataclass
class Agreement:
    """Methods that gave the same (agent, step)."""

    agent: str | None
    step: int | None
    methods: list[str]


def agreements(answers: Sequence[AnswerRow]) -> list[Agreement]:
    """Answers grouped by (agent, step), largest group first."""
    groups: dict[tuple[str | None, int | None], list[str]] = {}
    for row in answers:
        if row.status == "ok":
            groups.setdefault((row.agent, row.step), []).append(row.method)
    out = [Agreement(agent, step, methods) for (agent, step), methods in groups.items()]
    out.sort(key=lambda g: (-len(g.methods), g.step if g.step is not None else -1))
    return out


@dataclass
class EchoPass:
    name: str
    analysts: list[dict[str, Any]]
    agent_scores: dict[str, float]
    step_scores: dict[str, float]


def echo_votes(details: dict[str, Any]) -> list[EchoPass]:
    """ECHO's panel: each pass's analysts' conclusions and the consensus scores."""
    out: list[EchoPass] = []
    for name in ("unified_pass", "agent_pass", "step_pass"):
        record = details.get(name)
        if not isinstance(record, dict) or "analysts" not in record:
            continue
        consensus = record.get("consensus") or {}
        out.append(
            EchoPass(
                name=name.replace("_", " "),
                analysts=[a for a in record["analysts"] if isinstance(a, dict)],
                agent_scores={str(k): v for k, v in (consensus.get("agent_scores") or {}).items()},
                step_scores={str(k): v for k, v in (consensus.get("step_scores") or {}).items()},
            )
        )
    return out


def chief_path(details: dict[str, Any]) -> dict[str, Any] | None:
    """CHIEF's backtracking: the subtask order followed, candidates and why each was kept."""
    cand = details.get("candidates")
    if not isinstance(cand, dict):
        return None
    return {
        "order": cand.get("order") or [],
        "subtasks": cand.get("subtasks") or [],
        "agents": cand.get("agents") or [],
        "steps": cand.get("steps") or [],
        "reasons": cand.get("reasons") or {},
        "dropped": cand.get("dropped") or [],
    }
