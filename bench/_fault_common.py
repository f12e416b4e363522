"""What the framework programs' fault injectors share (``bench/_fault_<program>.py``).

Every framework program of the test suite looks population facts up in one fact book
(tests/fixtures/frameworks/facts.py); the injectors need its numbers to know a right
answer, one set of tool error messages for the ``ignored-error`` fault, and one shape of
injector.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

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
