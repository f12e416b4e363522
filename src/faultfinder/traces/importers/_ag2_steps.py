"""What ``_ag2_tools.py`` and ``_ag2_responses.py`` share: the tool calls an AG2 log shows
an agent being asked to run, which call of a step each result answers, and where a step
of its own goes."""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from heapq import merge
from pathlib import Path
from typing import Any

from faultfinder.traces.importers._ag2_logs import Session, event_time
from faultfinder.traces.importers._spans import maybe_json
from faultfinder.traces.schema import Step, ToolCall, ToolResult

Key = tuple[Any, ...]
"""What a step's tool call is found by: ``("id", id)``; for a call with no id, ``("name",
name)`` and ``("place", number of calls, place)``; ``("function", name)`` and ``("any",)``
for every call (the last two only while the step has a call of that name, or any call,
still unanswered)."""


def _keys(step: Step) -> set[Key]:
    keys: set[Key] = set()
    for place, call in enumerate(step.tool_calls):
        if call.id is not None:
            keys.add(("id", call.id))
        else:
            keys |= {("name", call.name), ("place", len(step.tool_calls), place)}
    return keys


class _Ordered:
    """Steps in timeline order, split so that those that started at or before a moment are
    found by bisection: ``regular`` steps started at their order's moment (in time order),
    the few others (no start time, or one earlier than a step before them) are
    ``irregular``."""

    def __init__(self) -> None:
        self.regular: list[Step] = []
        self.times: list[datetime] = []
        self.irregular: list[Step] = []


class Timeline:
    """The steps of one log in order while tool steps are put in among them, and the steps
    asking for a call found without walking the others.

    A step of its own goes before the first step that started after it, at the end when
    its time is unknown (:meth:`insert`). Each step's place is a label, the latest start
    time at or before it (which never decreases along the steps) and the order it came in,
    so putting one in is a bisection, not a walk, and the order is the same."""

    def __init__(self, steps: list[Step]) -> None:
        self._steps: list[Step] = []
        self._label: dict[int, tuple[tuple[int, datetime | None], int]] = {}
        self._top: tuple[int, datetime | None] = (0, None)
        self._found: dict[Key, _Ordered] = {}
        for step in steps:
            self._rise(step.started_at)
            self._add(step, self._top, asking=True)

    def _add(self, step: Step, at: tuple[int, datetime | None], *, asking: bool) -> None:
        self._label[id(step)] = (at, len(self._label))
        self._steps.append(step)
        keys = _keys(step)
        if asking:
            keys |= {("function", c.name) for c in step.tool_calls}
            keys |= {("any",)} if step.tool_calls else set()
        for key in keys:
            self._file(key, step)

    def _file(self, key: Key, step: Step) -> None:
        found = self._found.setdefault(key, _Ordered())
        label = self._label[id(step)]
        if step.started_at is not None and label[0] == (1, step.started_at):
            at = bisect_right(found.regular, label, key=lambda s: self._label[id(s)])
            found.regular.insert(at, step)
            found.times.insert(at, step.started_at)
        else:
            insort(found.irregular, step, key=lambda s: self._label[id(s)])

    def insert(self, step: Step) -> None:
        """Put a step of its own (a tool run, with its call's result) in time order:
        before the first step that started after it, at the end when its time is
        unknown."""
        if step.started_at is None:
            self._add(step, self._top, asking=False)
            return
        self._rise(step.started_at)
        self._add(step, (1, step.started_at), asking=False)

    def _rise(self, moment: datetime | None) -> None:
        """Keep the latest start time seen."""
        if moment is not None and (self._top[1] is None or moment > self._top[1]):
            self._top = (1, moment)

    def ordered(self) -> list[Step]:
        """Every step, in order."""
        return sorted(self._steps, key=lambda s: self._label[id(s)])

    def steps(self) -> list[Step]:
        """Every step, in the order they came in."""
        return self._steps

    def latest(self, key: Key, moment: datetime | None) -> Iterator[Step]:
        """The steps found by ``key`` that started at or before ``moment`` (any, when a
        time is unknown), latest first."""
        found = self._found.get(key)
        if found is None:
            return
        end = len(found.regular) if moment is None else bisect_right(found.times, moment)
        regular = (found.regular[n] for n in range(end - 1, -1, -1))
        others = (
            s
            for s in reversed(found.irregular)
            if s.started_at is None or moment is None or s.started_at <= moment
        )
        yield from merge(regular, others, key=lambda s: self._label[id(s)], reverse=True)

    def answered(self, step: Step, pending: list[tuple[int, ToolCall]]) -> None:
        """Forget ``step`` under the names of the calls it has no longer unanswered."""
        left = {("function", c.name) for _, c in pending} | ({("any",)} if pending else set())
        stale = {("function", c.name) for c in step.tool_calls} | {("any",)}
        for key in stale - left:
            found = self._found.get(key)
            if found is None:
                continue
            label = self._label[id(step)]
            for steps in (found.regular, found.irregular):
                at = bisect_left(steps, label, key=lambda s: self._label[id(s)])
                if at < len(steps) and steps[at] is step:
                    del steps[at]
                    if steps is found.regular:
                        del found.times[at]


@dataclass
class Asked:
    """The tool calls one agent was asked to run: a ``received_message`` event whose
    message holds ``tool_calls``, each kept at its place in the message (a call with no id,
    as a Mistral model writes them, too)."""

    agent: str
    moment: datetime | None
    timestamp: str
    calls: list[Any]
    """The message's ``tool_calls`` as written (an entry that is not an object is kept, so
    that each call keeps its place)."""
    claimed: set[int] = field(default_factory=set)
    """Positions in ``calls`` already matched to a function call record."""


def who(record: dict[str, Any]) -> str:
    """The agent that logged a record: its ``source_id`` (the agent's Python id, which
    events and function calls share), else its name."""
    source = record.get("source_id")
    return f"id:{source}" if source is not None else f"name:{record.get('source_name')}"


def asked_calls(session: Session, path: Path) -> list[Asked]:
    """Every received message asking its receiver to run tool calls, in time order."""
    found = []
    for event in session.chat_events:
        state = maybe_json(event.get("json_state"))
        message = state.get("message") if isinstance(state, dict) else None
        if event.get("event_name") != "received_message" or not isinstance(message, dict):
            continue
        calls = message.get("tool_calls")
        if isinstance(calls, list) and any(isinstance(c, dict) for c in calls):
            found.append(
                Asked(
                    agent=who(event),
                    moment=event_time(event, path),
                    timestamp=str(event.get("timestamp")),
                    calls=calls,
                )
            )
    found.sort(key=lambda a: (a.moment is None, a.moment or datetime.min))
    return found


class Answers:
    """Which of a step's tool calls each of its results answers, by the call's place in
    ``tool_calls``: results are kept in the order of their calls, so a result with no call
    id (a Mistral-style call, a legacy ``function_call``) answers the call at its own
    place, and a later call's result never reads as an earlier, unanswered one's."""

    def __init__(self) -> None:
        self._places: dict[int, list[int]] = {}

    def _of(self, step: Step) -> list[int]:
        places = self._places.get(id(step))
        if places is None:  # a step whose results came with it: each answers in order
            answered = Counter(r.call_id for r in step.tool_results)
            places = []
            for place, call in enumerate(step.tool_calls):
                if answered[call.id]:
                    answered[call.id] -= 1
                    places.append(place)
            places += [len(step.tool_calls)] * (len(step.tool_results) - len(places))
            self._places[id(step)] = places
        return places

    def pending(self, step: Step) -> list[tuple[int, ToolCall]]:
        """The step's calls no result answers yet, each with its place."""
        done = set(self._of(step))
        return [(n, c) for n, c in enumerate(step.tool_calls) if n not in done]

    def add(self, step: Step, place: int, result: ToolResult) -> None:
        """Put ``result`` on ``step`` as the answer of its call at ``place``."""
        places = self._of(step)
        at = bisect_right(places, place)
        places.insert(at, place)
        step.tool_results.insert(at, result)
