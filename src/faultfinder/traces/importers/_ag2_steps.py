"""What ``_ag2_tools.py`` and ``_ag2_responses.py`` share: the tool calls an AG2 log shows
an agent being asked to run, which call of a step each result answers, and where a step
of its own goes."""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from faultfinder.traces.importers._ag2_logs import Session, event_time
from faultfinder.traces.importers._spans import maybe_json
from faultfinder.traces.schema import Step, ToolCall, ToolResult


def insert_in_time(steps: list[Step], step: Step) -> None:
    """Insert ``step`` before the first step that started after it (at the end when its
    time is unknown); the caller renumbers the steps."""
    if step.started_at is not None:
        for position, other in enumerate(steps):
            if other.started_at is not None and other.started_at > step.started_at:
                steps.insert(position, step)
                return
    steps.append(step)


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
