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

_TOKENS = re.compile(r"\S+\s*|\s+")
"""A word with the whitespace after it (so text reads naturally and whitespace alone never
anchors a match)."""
DIFF_LIMIT = 20_000
"""Characters per side compared and shown; the page says when a text is longer and links
its step page."""
PAGE_DIFF_CHARS = 200_000
"""Characters a replay page compares word by word, over all its changed steps; changed
steps past it are shown whole as removed and added text, and the page says so. difflib's
matching grows faster than the square of a text's words, so an unbounded page (a 20,000-step
replay, or texts of repeated words) would hold a server thread for hours."""


def word_diff(old: str, new: str) -> list[Segment]:
    """Word-level diff of the first DIFF_LIMIT characters of two texts as segments.
    Words seen in more than 1% of the new text (``the``, a repeated token) do not start a
    match on their own (difflib's autojunk): the diff stays correct, a little coarser,
    and its time bounded."""
    a = _TOKENS.findall(old[:DIFF_LIMIT])
    b = _TOKENS.findall(new[:DIFF_LIMIT])
    out: list[Segment] = []
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=True)
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
class DiffBudget:
    """The characters one page may still compare word by word (PAGE_DIFF_CHARS)."""

    left: int = PAGE_DIFF_CHARS

    def diff(self, old: str, new: str) -> tuple[list[Segment], bool]:
        """(segments, compared): a word diff within the budget; past it, both texts (their
        first DIFF_LIMIT characters) as removed and added, and False."""
        cost = min(len(old), DIFF_LIMIT) + min(len(new), DIFF_LIMIT)
        if cost > self.left:
            return [("del", old[:DIFF_LIMIT]), ("ins", new[:DIFF_LIMIT])], False
        self.left -= cost
        return word_diff(old, new), True


@dataclass
class StepPair:
    index: int
    original: Step | None
    replayed: Step | None
    origin: str
    """The replayed step's origin: cached, edited, edited-input, live (or '-')."""
    same: bool
    diff: list[Segment]
    original_chars: int = 0
    """Length of the original's text (output and tool calls): more than DIFF_LIMIT is cut."""
    replayed_chars: int = 0
    compared: bool = True
    """False: past the page's PAGE_DIFF_CHARS, shown as removed and added text, unmatched."""


def pair_steps(original: Trace, replayed: Trace) -> list[StepPair]:
    """Steps side by side by canonical index; word diffs where the text differs, within
    the page's PAGE_DIFF_CHARS."""
    n = max(len(original.steps), len(replayed.steps))
    pairs: list[StepPair] = []
    budget = DiffBudget()
    for i in range(n):
        o = original.steps[i] if i < len(original.steps) else None
        r = replayed.steps[i] if i < len(replayed.steps) else None
        origin = str(r.metadata.get("origin", "-")) if r is not None else "-"
        old, new = _text(o) if o else "", _text(r) if r else ""
        same = o is not None and r is not None and old == new and o.agent == r.agent
        pair = StepPair(i, o, r, origin, same, [], len(old), len(new))
        if not same:
            pair.diff, pair.compared = budget.diff(old, new)
        pairs.append(pair)
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
    """Tokens of the steps the upstream answered (live, or an edited request), as their
    replies report them (see :func:`unreported_live_steps` for those that report none)."""
    return sum(
        s.usage.total_tokens
        for s in trace.steps
        if s.usage is not None and s.metadata.get("origin") in LIVE_ORIGINS
    )


def unreported_live_steps(trace: Trace) -> int:
    """Steps the upstream answered whose replies report no usage: their tokens are
    unknown, not 0, and are not in :func:`live_tokens`."""
    return sum(
        1 for s in trace.steps if s.usage is None and s.metadata.get("origin") in LIVE_ORIGINS
    )
