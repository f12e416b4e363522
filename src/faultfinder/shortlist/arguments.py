"""Where the values a step passes to its tools come from: the ``arguments`` feature group.

A wrong value does harm when an agent acts on it, and the arguments of a tool call are
where an invented or altered value becomes an action. A tool-call argument with no source
earlier in the run, or one that contradicts the value an earlier step gave for the same
key, marks the step that caused what follows; the steps that reuse the value later are
its symptoms. The sources of a value are the task and every earlier step: its text, its
tool calls' arguments and its tool results.

Values are numbers, compared by value (``45``, ``45.0`` and ``45.00`` are one). A value's
key is the last word before it on its line and its place among the values that follow
that word (``qty 3 4``: ``(qty, 0)`` and ``(qty, 1)``). Whole numbers under 10 count as
sources but never as unsupported (list markers and counts are everywhere).

A step with no tool call gets zeros, so a trace without structured tool calls (all of
Who&When) is ranked by the other groups alone.
"""

from __future__ import annotations

import math
import re

from faultfinder.traces.schema import Step, Trace

COLUMNS = ("arg_conflicts", "first_arg_conflict", "unsupported_args", "first_unsupported_arg")
"""``arg_conflicts``: log(1 + the step's argument values whose key was given earlier with
other values only); ``first_arg_conflict``: the first step with one; ``unsupported_args``:
log(1 + the step's argument values found nowhere earlier, nor in the step's own text);
``first_unsupported_arg``: the first step with one."""

_VALUE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w]|\.\d)")
_WORD = re.compile(r"[A-Za-z_][A-Za-z_]+")
Key = tuple[str, int]


def _number(text: str) -> float:
    return round(float(text), 6)


def keyed_values(text: str) -> list[tuple[Key, float]]:
    """Each value in ``text`` that follows a word on its line, with its key."""
    out: list[tuple[Key, float]] = []
    for line in text.splitlines():
        word, place, last = "", 0, 0
        for m in _VALUE.finditer(line):
            words = _WORD.findall(line, last, m.start())
            if words:
                word, place = words[-1].lower(), 0
            else:
                place += 1
            last = m.end()
            if word:
                out.append(((word, place), _number(m.group(1))))
    return out


def values(text: str, small: bool) -> set[float]:
    """The values in ``text`` (``small``: whole numbers under 10 too)."""
    found = set()
    for m in _VALUE.finditer(text):
        raw = m.group(1)
        value = _number(raw)
        if small or "." in raw or value >= 10:
            found.add(value)
    return found


def _arguments(step: Step) -> str:
    return "\n".join(c.arguments for c in step.tool_calls or [])


def _results(step: Step) -> str:
    return "\n".join(r.content for r in step.tool_results or [])


def argument_columns(trace: Trace) -> list[list[float]]:
    """One row of :data:`COLUMNS` per step of ``trace``."""
    seen = values(trace.task, True)
    given: dict[Key, set[float]] = {}
    for key, value in keyed_values(trace.task):
        given.setdefault(key, set()).add(value)
    rows: list[list[float]] = []
    any_conflict = any_unsupported = False
    for step in trace.steps:
        text, args, results = step.content, _arguments(step), _results(step)
        conflicts = sum(
            1 for key, value in keyed_values(args) if given.get(key) and value not in given[key]
        )
        unsupported = len(values(args, False) - seen - values(text, False))
        rows.append(
            [
                math.log1p(conflicts),
                float(conflicts > 0 and not any_conflict),
                math.log1p(unsupported),
                float(unsupported > 0 and not any_unsupported),
            ]
        )
        any_conflict |= conflicts > 0
        any_unsupported |= unsupported > 0
        for part in (text, args, results):
            seen |= values(part, True)
            for key, value in keyed_values(part):
                given.setdefault(key, set()).add(value)
    return rows
