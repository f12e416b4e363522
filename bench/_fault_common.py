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
from faultfinder.traces.schema import Trace

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
