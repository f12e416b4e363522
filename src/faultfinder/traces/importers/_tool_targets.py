"""The steps a span-based trace's tool spans are attached to, indexed (helper of
``_call_spans.py``): the latest step asking for a call id, the latest earlier step asking
for a tool by name or of an agent, the call ids already answered, and how many calls and
results of a name a step holds, each found without walking every step or every call of a
step, so a trace of many tool spans (thousands on one step) imports in time linear in its
spans."""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Iterator
from datetime import datetime
from heapq import merge
from typing import Any

from faultfinder.traces.schema import Step, ToolResult


class _Found:
    """The positions of the steps found by one key, ascending: ``regular`` those that
    started at the latest start time up to them (their start times ascend too, so those at
    or before a moment are a prefix), ``irregular`` the others (no start time, or one
    earlier than a step before them)."""

    def __init__(self) -> None:
        self.regular: list[int] = []
        self.times: list[datetime] = []
        self.irregular: list[int] = []


class ToolTargets:
    """``steps`` (appended to, never reordered) with what attaching a tool span asks of
    them. Every step added, and every call or result put on a step, must be told
    (:meth:`add`, :meth:`note`)."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self.answered: set[str] = set()
        self._position: dict[int, int] = {}
        self._top: datetime | None = None
        self._regular: list[bool] = []
        self._last_with_id: dict[str, int] = {}
        self._found: dict[tuple[str, str], _Found] = {}
        self._seen: dict[int, tuple[int, int]] = {}  # position -> (calls, results) indexed
        self._names: dict[int, set[str]] = {}  # position -> names of the calls indexed
        self._ids: dict[int, set[str]] = {}  # position -> ids of the calls indexed
        self._counts: dict[tuple[int, Any], list[int]] = {}  # (position, name) -> calls, results
        self._blank: dict[tuple[int, str], int] = {}  # (position, name) -> calls with no id
        self._open: dict[tuple[int, str], set[str]] = {}  # -> ids no result has answered yet
        self._waiting: dict[str, list[tuple[int, str]]] = {}  # id -> keys of _open holding it
        for step in list(steps):
            self._index(step)

    def _index(self, step: Step) -> None:
        position = len(self._position)
        self._position[id(step)] = position
        if step.started_at is not None and (self._top is None or step.started_at >= self._top):
            self._top = step.started_at
            self._regular.append(True)
        else:
            self._regular.append(False)
        self._seen[position] = (0, 0)
        self._names[position] = set()
        self._ids[position] = set()
        self._file(("agent", step.agent), position)
        self.note(step)

    def _file(self, key: tuple[str, str], position: int) -> None:
        found = self._found.setdefault(key, _Found())
        step = self.steps[position]
        if self._regular[position] and step.started_at is not None:
            at = bisect_right(found.regular, position)  # a call put on an earlier step
            found.regular.insert(at, position)
            found.times.insert(at, step.started_at)
        else:
            insort(found.irregular, position)

    def add(self, step: Step) -> None:
        """Append a new step."""
        self.steps.append(step)
        self._index(step)

    def note(self, step: Step) -> None:
        """Index the calls and results put on ``step`` since it was last indexed."""
        position = self._position[id(step)]
        calls, results = self._seen[position]
        names = self._names[position]
        for call in step.tool_calls[calls:]:
            key = (position, call.name)
            self._counts.setdefault(key, [0, 0])[0] += 1
            if call.id:
                self._last_with_id[call.id] = max(self._last_with_id.get(call.id, -1), position)
                self._ids[position].add(call.id)
                if call.id not in self.answered:
                    self._open.setdefault(key, set()).add(call.id)
                    self._waiting.setdefault(call.id, []).append(key)
            else:
                self._blank[key] = self._blank.get(key, 0) + 1
            if call.name not in names:
                names.add(call.name)
                self._file(("name", call.name), position)
        for result in step.tool_results[results:]:
            self._counts.setdefault((position, result.name), [0, 0])[1] += 1
            self._answer(result)
        self._seen[position] = (len(step.tool_calls), len(step.tool_results))

    def _answer(self, result: ToolResult) -> None:
        if result.call_id and result.call_id not in self.answered:
            self.answered.add(result.call_id)
            for key in self._waiting.pop(result.call_id, []):
                self._open[key].discard(result.call_id)

    def counts(self, step: Step, name: Any) -> tuple[int, int]:
        """How many calls and results named ``name`` ``step`` holds."""
        calls, results = self._counts.get((self._position[id(step)], name), (0, 0))
        return calls, results

    def asks(self, step: Step, call_id: Any) -> bool:
        """Whether ``step`` holds a call with the id ``call_id``."""
        return isinstance(call_id, str) and call_id in self._ids[self._position[id(step)]]

    def unanswered(self, step: Step, name: Any) -> bool:
        """Whether ``step`` holds a call named ``name`` that no result has answered by its id
        (a call with no id counts as unanswered)."""
        key = (self._position[id(step)], name)
        return bool(self._blank.get(key) or self._open.get(key))

    def with_id(self, call_id: Any) -> Step | None:
        """The latest step asking for the call ``call_id``."""
        position = self._last_with_id.get(call_id) if isinstance(call_id, str) else None
        return self.steps[position] if position is not None else None

    def earlier(self, key: tuple[str, str], moment: datetime | None) -> Iterator[Step]:
        """The steps found by ``key`` (``("name", tool)``: asking for that tool;
        ``("agent", name)``: of that agent) that started at or before ``moment`` (any,
        when a time is unknown), latest first."""
        found = self._found.get(key)
        if found is None:
            return
        end = len(found.regular) if moment is None else bisect_right(found.times, moment)
        regular = (found.regular[n] for n in range(end - 1, -1, -1))
        others = (
            p
            for p in reversed(found.irregular)
            if (at := self.steps[p].started_at) is None or moment is None or at <= moment
        )
        for position in merge(regular, others, reverse=True):
            yield self.steps[position]


class LaterAnswers:
    """Where the model calls of ``steps`` answer a call by id in their input (a ``tool``
    message's ``tool_call_id``): for a call id and a step's position, the first such
    answer in a later step, with its text."""

    def __init__(self, steps: list[Step]) -> None:
        self._at: dict[str, list[int]] = {}
        self._text: dict[str, list[str]] = {}
        for n, step in enumerate(steps):
            for message in step.input_messages or []:
                call_id = message.get("tool_call_id")
                if message.get("role") != "tool" or not isinstance(call_id, str) or not call_id:
                    continue
                at = self._at.setdefault(call_id, [])
                if at and at[-1] == n:
                    continue  # the step's first answer of the call is the one read
                content = message.get("content")
                at.append(n)
                self._text.setdefault(call_id, []).append(
                    content if isinstance(content, str) else ""
                )

    def after(self, call_id: Any, position: int) -> tuple[str, int] | None:
        """The first answer of ``call_id`` after the step at ``position``, and where."""
        at = self._at.get(call_id) if isinstance(call_id, str) else None
        if not at:
            return None
        n = bisect_right(at, position)
        return (self._text[call_id][n], at[n]) if n < len(at) else None
