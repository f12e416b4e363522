"""What the framework programs' fault injectors share (``bench/_fault_<program>.py``).

Every framework program of the test suite looks population facts up in one fact book
(tests/fixtures/frameworks/facts.py); the injectors need its numbers to know a right
answer, one set of tool error messages for the ``ignored-error`` fault, and one shape of
injector.

The players of the longer programs (warehouse, support desk, expense desk, software team)
also read requests the same way: what a request shows of the tool calls made and their
results (:class:`History`, :func:`read_history`), which tool results are failures
(:func:`failed`), who is asked (:func:`role_of`), and, in the faults, a recorded call's
arguments (:func:`step_arguments`) and a wrong number of a different value
(:func:`wrong_number`).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from faultfinder.replay import Edit
from faultfinder.replay.edits import ToolResultChange
from faultfinder.traces.schema import Step, Trace

CITIES = {"Avalon": {"2019": 140210, "2020": 144630}, "Brigadoon": {"2019": 19500, "2020": 20000}}
"""The fact book of tests/fixtures/frameworks/facts.py, as numbers (for the answers)."""
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
"""A number as the programs write it (thousands separators allowed)."""
ERRORS = [
    "Error: the fact book timed out",
    "Traceback (most recent call last):\n  KeyError: 'population'",
    "error: connection refused",
]
"""Tool results of the ``ignored-error`` fault (one drawn with the seed)."""

Injector = Callable[[Trace, random.Random], list[tuple[int, Edit]]]
"""A fault kind: (step, edit) pairs for a successful base run, drawn with the seed."""
Corrupt = Callable[[str, random.Random], str]
"""What turns a number into a wrong one (``fault_injection.py``'s, drawn with the seed)."""


def by_kind(*injectors: Injector) -> dict[str, Injector]:
    """The fault kinds a program has, named after their injectors
    (``corrupted_number`` -> ``corrupted-number``)."""
    return {f.__name__.replace("_", "-"): f for f in injectors}


def calls(trace: Trace, tool: str) -> list[Step]:
    """The steps that call ``tool``."""
    return [s for s in trace.steps if any(c.name == tool for c in s.tool_calls)]


def sample(sites: list[tuple[int, Edit]], rng: random.Random, most: int) -> list[tuple[int, Edit]]:
    """At most ``most`` of ``sites``, drawn with ``rng``, in step order."""
    return sorted(rng.sample(sites, min(most, len(sites))), key=lambda site: site[0])


def tool_errors(
    trace: Trace, rng: random.Random, errors: dict[str, list[str]], most: int
) -> list[tuple[int, Edit]]:
    """The ``ignored-error`` fault of a program with several tools: a call to one of the
    tools of ``errors`` fails, its result one of that tool's messages; at most ``most``
    such sites."""
    sites = [
        (s.index, Edit(tool_result=ToolResultChange(content=rng.choice(messages))))
        for tool, messages in errors.items()
        for s in calls(trace, tool)
    ]
    return sample(sites, rng, most)


def lookup_steps(trace: Trace) -> list[int]:
    """The steps that call the fact book's ``lookup`` tool."""
    return [s.index for s in trace.steps if any(c.name == "lookup" for c in s.tool_calls)]


def ignored_error(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
    """The ``ignored-error`` fault of a program with one lookup per step: that lookup's
    result replaced by an error message, at each lookup step."""
    return [
        (step, Edit(tool_result=ToolResultChange(content=rng.choice(ERRORS))))
        for step in lookup_steps(trace)
    ]


# --- reading a request ------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """A tool call that a request's history shows."""

    position: int
    """Index of the assistant message that made the call."""
    id: str
    name: str
    arguments: dict[str, Any]
    """Its arguments; {} when they are not a JSON object."""


@dataclass(frozen=True)
class History:
    """What a chat request shows an agent: its task, the tool calls made and their results.
    A player that needs more (reports, texts) subclasses it."""

    task: str
    """The first user message."""
    calls: list[Call]
    results: dict[str, str]
    """Tool call id -> the result the model sees."""

    def result(self, call: Call) -> str:
        return self.results.get(call.id, "")


def first_user(messages: list[dict[str, Any]]) -> str:
    """The first user message of a request ('' if none)."""
    return next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")


def read_history(messages: list[dict[str, Any]]) -> History:
    """The task, tool calls and tool results of a request's messages."""
    found, results = [], {}
    for n, m in enumerate(messages):
        if m.get("role") == "assistant":
            for c in m.get("tool_calls") or []:
                function = c.get("function") or {}
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except json.JSONDecodeError:
                    arguments = {}
                if not isinstance(arguments, dict):
                    arguments = {}
                found.append(Call(n, str(c.get("id")), str(function.get("name")), arguments))
        elif m.get("role") == "tool":
            results[str(m.get("tool_call_id"))] = str(m.get("content") or "")
    return History(first_user(messages), found, results)


def role_of(system: str) -> str:
    """Who a request asks, from its system prompt ('You are the Planner ...' -> 'Planner';
    '' if it does not say)."""
    found = re.match(r"\s*You are (?:the )?(\w+)", system)
    return found.group(1) if found else ""


def failed(result: str) -> bool:
    """Whether a tool result is a failure (an error message or a traceback)."""
    return bool(re.match(r"\s*(error|traceback)", result, re.I))


# --- the faults -------------------------------------------------------------------------


def step_arguments(step: Step, n: int = 0) -> dict[str, Any]:
    """The arguments of the ``n``-th tool call of a recorded step ({} if not an object)."""
    parsed = json.loads(step.tool_calls[n].arguments or "{}")
    return parsed if isinstance(parsed, dict) else {}


def wrong_number(number: str, rng: random.Random, corrupt: Corrupt) -> str:
    """A wrong number for ``number``: one of a different value."""
    for _ in range(5):
        wrong = corrupt(number, rng)
        if float(wrong) != float(number):
            return wrong
    return str(int(float(number)) + 7)
