"""Original run vs. a replay branch, step by step, with word-level text diffs (difflib)."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from faultfinder.dover.edit_repeats import LIVE_ORIGINS
from faultfinder.shown import clip_name
from faultfinder.traces.schema import Step, Trace

Segment = tuple[str, str]
"""(op, text): op is 'same', 'del' (only in the original) or 'ins' (only in the replay)."""

_TOKENS = re.compile(r"\s+|[^\s]+")
DIFF_LIMIT = 20_000
"""Characters per side compared; longer texts are compared on their first DIFF_LIMIT."""


def word_diff(old: str, new: str) -> list[Segment]:
    """Word-level diff of two texts as segments (whitespace kept, so text reads naturally)."""
    a = _TOKENS.findall(old[:DIFF_LIMIT])
    b = _TOKENS.findall(new[:DIFF_LIMIT])
    out: list[Segment] = []
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            out.append(("same", "".join(a[i1:i2])))
            continue
        if i2 > i1:
            out.append(("del", "".join(a[i1:i2])))
        if j2 > j1:
            out.append(("ins", "".join(b[j1:j2])))
    return out


@dataclass
class StepPair:
    index: int
    original: Step | None
    replayed: Step | None
    origin: str
    """The replayed step's origin: cached, edited, edited-input, live (or '-')."""
    same: bool
    diff: list[Segment]


def pair_steps(original: Trace, replayed: Trace) -> list[StepPair]:
    """Steps side by side by canonical index; diffs where the text differs."""
    n = max(len(original.steps), len(replayed.steps))
    pairs: list[StepPair] = []
    for i in range(n):
        o = original.steps[i] if i < len(original.steps) else None
        r = replayed.steps[i] if i < len(replayed.steps) else None
        origin = str(r.metadata.get("origin", "-")) if r is not None else "-"
        same = o is not None and r is not None and _text(o) == _text(r) and o.agent == r.agent
        diff = [] if same else word_diff(_text(o) if o else "", _text(r) if r else "")
        pairs.append(StepPair(i, o, r, origin, same, diff))
    return pairs


def _text(step: Step) -> str:
    calls = "".join(f"\n[tool call] {c.name}({c.arguments})" for c in step.tool_calls)
    return step.content + calls


def first_difference(pairs: list[StepPair]) -> int | None:
    return next((p.index for p in pairs if not p.same), None)


def edit_summary(edit: dict[str, Any] | None, limit: int = 100) -> str:
    """One line saying what a replay's edit changed (from ``report.json``'s ``edit``): its
    text on one line, clipped to ``limit`` characters as names are
    (`faultfinder.shown.clip_name`: an ellipsis and the whole length mark the cut)."""
    if not edit:
        return "no edit"

    def short(text: Any) -> str:
        return clip_name(" ".join(str(text).split()), limit)

    if edit.get("input") is not None:
        return "instruction: " + short(edit["input"])
    if isinstance(edit.get("tool_result"), dict):
        return "tool result: " + short(edit["tool_result"].get("content", ""))
    changes = edit.get("tool_call_changes")
    if isinstance(changes, list) and changes and isinstance(changes[0], dict):
        change = changes[0]
        arguments = change.get("arguments", change.get("set_arguments", ""))
        name = change.get("name") or "call"
        return f"tool call {change.get('index', 0)}: " + short(f"{name}({arguments})")
    if edit.get("tool_calls"):
        return "reply: " + short(edit.get("output") or "") + " + tool calls"
    return "output: " + short(edit.get("output", ""))


def live_tokens(trace: Trace) -> int:
    """Tokens of the steps the upstream answered (live, or an edited request)."""
    return sum(
        s.usage.total_tokens
        for s in trace.steps
        if s.usage is not None and s.metadata.get("origin") in LIVE_ORIGINS
    )
