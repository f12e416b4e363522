"""The trace page's data: lanes of the timeline, step rows, and every method's answer.

Everything here returns plain values; the templates escape them (autoescape is on and no
template marks trace content safe).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from faultfinder.eval.metrics import agent_correct, step_correct
from faultfinder.judging.method import Attribution
from faultfinder.shortlist.sets import describe as describe_step_set
from faultfinder.shortlist.sets import withdrawn_because
from faultfinder.shown import clip_name
from faultfinder.traces.schema import Step, Trace
from faultfinder.ui.catalog import AttributionEntry

CONTENT_LIMIT = 20_000
"""Characters of a step's output, and of each tool call's arguments and tool result, shown
inline; the step page shows everything."""
LANE_HEIGHT = 22
LABEL_WIDTH = 140
LANE_CHARS = 20
"""Characters of an agent's name that fit its lane label (the label's title says more)."""


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
    agent: str
    """The step's agent (the template names it in the box's title, clipped)."""


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
                agent=step.agent,
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
class Part:
    """A tool call's arguments or a tool result as the trace page shows it: ``label`` (the
    tool's name, the result's status) and its first CONTENT_LIMIT characters; ``chars``,
    its whole length, says when it was cut."""

    name: str
    status: str
    text: str
    chars: int


@dataclass
class StepRow:
    step: Step
    content: str
    truncated: bool
    tokens: str
    latency: str
    inputs: int
    calls: list[Part] = field(default_factory=list)
    results: list[Part] = field(default_factory=list)


def part(name: str | None, status: str | None, text: str) -> Part:
    return Part(name or "", status or "", text[:CONTENT_LIMIT], len(text))


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
                calls=[part(c.name, None, c.arguments) for c in step.tool_calls],
                results=[part(r.name, r.status, r.content) for r in step.tool_results],
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
    step_set_claimed: bool | None = None
    """Whether the step set's level is claimed for this trace; None: no set."""
    step_set_badge: str | None = None
    """What the badge on each step of the set says: the level and whether it is claimed
    for this trace ('in step set · 90% claimed')."""
    step_set_title: str | None = None
    """The badge's title: whose set it is and, when the level is not claimed, why."""


def set_badge(method: str, a: Attribution) -> tuple[str | None, str | None]:
    """The text and title of the badge on a step of ``a``'s step set: whether its level is
    claimed for this trace (as the line above the steps says), the level when it is."""
    if a.step_set is None or a.step_set_level is None:
        return None, None
    level = f"{100 * a.step_set_level:g}%"
    whose = f"in the step set of the selected answer ({clip_name(method)})"
    if a.step_set_calibrated is False:
        why = withdrawn_because(a.step_set_shift, a.step_set_shift_limit)
        return (
            f"in step set · {level} not claimed",
            f"{whose}; its {level} level is NOT claimed for this trace: {why}",
        )
    return f"in step set · {level} claimed", f"{whose}, claimed at {level} for this trace"


def answer_rows(trace: Trace, entries: Sequence[AttributionEntry]) -> list[AnswerRow]:
    gold = trace.label
    rows: list[AnswerRow] = []
    for i, entry in enumerate(entries):
        a = entry.attribution
        method = a.method + (f" (run {entry.row.run})" if entry.row is not None else "")
        badge, title = set_badge(method, a)
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
                        a.step_set_shift_limit,
                    )
                ),
                step_set_claimed=(None if badge is None else a.step_set_calibrated is not False),
                step_set_badge=badge,
                step_set_title=title,
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
class Analyst:
    """One analyst's reply as the panel shows it: its conclusion as (field, value) text
    pairs, or why there is none (an unparsed reply's parse error)."""

    name: str
    status: str
    conclusion: list[tuple[str, str]]
    note: str = ""


@dataclass
class EchoPass:
    name: str
    analysts: list[Analyst]
    agent_scores: list[tuple[str, str]]
    step_scores: list[tuple[str, str]]
    """(step, score) pairs, the score formatted ("0.80", or the value as text when it is
    not a number)."""


def _text(value: Any) -> str:
    """Any JSON value as one line of text for the page (never markup: it is escaped)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _score(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:.2f}"
    return _text(value)


def _pairs(value: Any) -> list[tuple[str, str]]:
    """A mapping as (key, text) pairs; anything else as one unnamed pair, or none."""
    if isinstance(value, dict):
        return [(str(k), _text(v)) for k, v in value.items()]
    text = _text(value)
    return [("", text)] if text else []


def _analyst(record: dict[str, Any]) -> Analyst:
    note_parts = []
    if record.get("parse_error") is not None:
        note_parts.append(_text(record["parse_error"]))
    if record.get("error") is not None:
        note_parts.append(_text(record["error"]))
    if record.get("attempts") is not None:
        note_parts.append(f"attempts: {_text(record['attempts'])}")
    return Analyst(
        name=_text(record.get("analyst")) or "-",
        status=_text(record.get("status")) or "-",
        conclusion=_pairs(record.get("conclusion")),
        note="; ".join(note_parts),
    )


def _scores(consensus: dict[str, Any], name: str) -> list[tuple[str, str]]:
    scores = consensus.get(name)
    if not isinstance(scores, dict):
        return []
    return [(str(k), _score(v)) for k, v in scores.items()]


def echo_votes(details: dict[str, Any]) -> list[EchoPass]:
    """ECHO's panel: each pass's analysts' conclusions and the consensus scores. The
    details come from a results file (untrusted, free-form): a part of the wrong shape
    is skipped or shown as text, never an error."""
    out: list[EchoPass] = []
    for name in ("unified_pass", "agent_pass", "step_pass"):
        record = details.get(name)
        if not isinstance(record, dict) or "analysts" not in record:
            continue
        analysts = record["analysts"]
        consensus = record.get("consensus")
        consensus = consensus if isinstance(consensus, dict) else {}
        out.append(
            EchoPass(
                name=name.replace("_", " "),
                analysts=[
                    _analyst(a)
                    for a in (analysts if isinstance(analysts, list) else [])
                    if isinstance(a, dict)
                ],
                agent_scores=_scores(consensus, "agent_scores"),
                step_scores=_scores(consensus, "step_scores"),
            )
        )
    return out


def _texts(value: Any) -> list[str]:
    """A list as its items' text; a single value as one item; nothing for a mapping."""
    if isinstance(value, list):
        return [_text(v) for v in value]
    if value is None or isinstance(value, dict):
        return []
    return [_text(value)]


def _steps(value: Any) -> list[int]:
    items = value if isinstance(value, list) else [value]
    return [v for v in items if isinstance(v, int) and not isinstance(v, bool)]


def chief_path(details: dict[str, Any]) -> dict[str, Any] | None:
    """CHIEF's backtracking: the subtask order followed, candidates and why each was kept
    (free-form details from a results file: a part of the wrong shape is skipped or shown
    as text)."""
    cand = details.get("candidates")
    if not isinstance(cand, dict):
        return None
    reasons = cand.get("reasons")
    return {
        "order": _texts(cand.get("order")),
        "subtasks": _texts(cand.get("subtasks")),
        "agents": _texts(cand.get("agents")),
        "steps": _steps(cand.get("steps")),
        "reasons": _pairs(reasons) if isinstance(reasons, dict) else [],
        "dropped": _texts(cand.get("dropped")),
    }
