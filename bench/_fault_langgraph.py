"""The LangGraph supervisor program of the framework tests as a base for fault injection.

The program is tests/fixtures/frameworks/langgraph_team.py, unmodified: a Supervisor
(langgraph-supervisor) delegates to a Researcher, who looks facts up with parallel tool
calls, and to a Calculator, who adds with a tool. tests/frameworks_scripts.py scripts it
with a deliberate mistake; here :func:`faithful` plays every agent *correctly* from what
each request says (the task's cities and year, the tool results, the reports), so a base
run succeeds and an injected fault propagates through the later steps as it would with a
model that trusts its inputs.

Faults (each where the base run has a step of that kind):

* ``wrong-tool-result``: one lookup's result has its number changed;
* ``corrupted-number``: the Researcher's report or the Calculator's sum has a number
  changed;
* ``wrong-handoff``: the Supervisor transfers to the other agent;
* ``wrong-tool-argument``: a lookup asks for the other year;
* ``premature-stop``: the Supervisor answers instead of delegating;
* ``ignored-error``: a lookup fails (its result an error message) and the run goes on.
"""

from __future__ import annotations

import json
import random
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faultfinder.replay import Edit
from faultfinder.replay.edits import ToolCallChange, ToolResultChange
from faultfinder.traces.schema import Trace

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "fixtures" / "frameworks" / "langgraph_team.py"
sys.path.insert(0, str(ROOT / "tests"))

from _fault_common import CITIES, ERRORS, NUMBER, Injector  # noqa: E402

from frameworks_scripts import _call, _call_id, _last_call, _system, _tools  # noqa: E402


def tasks() -> list[tuple[str, str, str]]:
    """(id, task, right answer): each city and both together, in each year."""
    out = []
    for year in ("2019", "2020"):
        both = sum(c[year] for c in CITIES.values())
        out.append(
            (
                f"both-{year}",
                f"What was the combined population of Avalon and Brigadoon in {year}?",
                str(both),
            )
        )
        for city, years in CITIES.items():
            out.append(
                (
                    f"{city.lower()}-{year}",
                    f"What was the population of {city} in {year}?",
                    str(years[year]),
                )
            )
    return out


def command(task: str) -> list[str]:
    return [sys.executable, str(PROGRAM), task]


def faithful(body: dict[str, Any]) -> Any:
    """Every agent of the program, played by rule and without mistakes."""
    system, messages = _system(body), body["messages"]
    last = messages[-1]
    text = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") != "system")
    task = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
    if "Supervisor" in system:
        if "Sum:" in text:
            found = NUMBER.findall(text.split("Sum:")[-1])
            return found[0] if found else "unknown"
        reported = "inhabitants" in text or "rror" in text or "NOT FOUND" in text
        wanted = "calculator" if reported else "researcher"
        handoff = next(n for n in _tools(body) if wanted in n)
        return {"tool_calls": [_call(handoff, {}, _call_id(body))]}
    if "Researcher" in system:
        if last.get("role") == "tool" and _last_call(body) == "lookup":
            results: list[str] = []
            for m in reversed(messages):
                if m.get("role") != "tool":
                    break
                results.append(str(m.get("content")))
            return " ".join(reversed(results))
        year = re.search(r"\b(?:19|20)\d\d\b", task)
        cities = [c for c in CITIES if c in task]
        return {
            "tool_calls": [
                _call(
                    "lookup",
                    {"query": f"population of {c} in {year.group(0) if year else ''}"},
                    _call_id(body, str(n)),
                )
                for n, c in enumerate(cities)
            ]
        }
    # Calculator
    if last.get("role") == "tool" and _last_call(body) == "add":
        return f"Sum: {last.get('content')}"
    numbers = [float(n.replace(",", "")) for n in re.findall(r"(\d[\d,]*) inhabitants", text)]
    return {"tool_calls": [_call("add", {"numbers": numbers}, _call_id(body))]}


def final_answer(trace: Trace) -> str | None:
    """The Supervisor's closing text (the program prints it as its answer)."""
    for s in reversed(trace.steps):
        if s.agent == "Supervisor" and not s.tool_calls and s.content.strip():
            return s.content.strip()
    return None


_POPULATION = re.compile(r"(\d[\d,]*) inhabitants")


def _corrupt(text: str, rng: random.Random, corrupt: Callable[[str, random.Random], str]) -> str:
    """``text`` with one number changed: a population where it names one, not a year."""
    numbers = _POPULATION.findall(text) or NUMBER.findall(text)
    pick = rng.choice(numbers)
    head, _, tail = text.rpartition(pick)
    return head + corrupt(pick.replace(",", ""), rng) + tail


def _lookups(trace: Trace) -> list[tuple[int, int]]:
    """(step, call index) of every lookup call."""
    return [
        (s.index, n)
        for s in trace.steps
        for n, call in enumerate(s.tool_calls)
        if call.name == "lookup"
    ]


def injectors(corrupt: Callable[[str, random.Random], str]) -> dict[str, Injector]:
    """The fault kinds of this program (``corrupt`` turns a number into a wrong one)."""

    def wrong_tool_result(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        out = []
        for s in trace.steps:
            calls = [n for n, r in enumerate(s.tool_results) if NUMBER.search(r.content)]
            if any(c.name == "lookup" for c in s.tool_calls) and calls:
                n = rng.choice(calls)
                wrong = _corrupt(s.tool_results[n].content, rng, corrupt)
                out.append((s.index, Edit(tool_result=ToolResultChange(content=wrong, index=n))))
        return out

    def corrupted_number(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        return [
            (s.index, Edit(output=_corrupt(s.content, rng, corrupt)))
            for s in trace.steps
            if s.agent != "Supervisor" and not s.tool_calls and NUMBER.search(s.content)
        ]

    def wrong_handoff(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        out = []
        for s in trace.steps:
            for n, call in enumerate(s.tool_calls):
                if call.name in ("transfer_to_researcher", "transfer_to_calculator"):
                    other = (
                        "transfer_to_calculator"
                        if call.name == "transfer_to_researcher"
                        else "transfer_to_researcher"
                    )
                    change = ToolCallChange(index=n, name=other)
                    out.append((s.index, Edit(tool_call_changes=[change])))
        return out

    def wrong_tool_argument(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        out = []
        for step in sorted({step for step, _ in _lookups(trace)}):
            n = rng.randrange(len(trace.steps[step].tool_calls))
            arguments = trace.steps[step].tool_calls[n].arguments
            query = str(json.loads(arguments or "{}").get("query", ""))
            swapped = re.sub(r"20(19|20)", lambda m: "2020" if m[1] == "19" else "2019", query)
            if swapped != query:
                change = ToolCallChange(index=n, set_arguments={"query": swapped})
                out.append((step, Edit(tool_call_changes=[change])))
        return out

    def premature_stop(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        out = []
        seen: list[str] = []
        for s in trace.steps:
            if s.agent == "Supervisor" and s.tool_calls:
                guess = seen[-1] if seen else str(rng.randint(10_000, 200_000))
                out.append((s.index, Edit(output=guess)))
            seen += _POPULATION.findall(s.content) + [
                x for r in s.tool_results for x in _POPULATION.findall(r.content)
            ]
        return out

    def ignored_error(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        steps = sorted({step for step, _ in _lookups(trace)})
        out = []
        for step in steps:
            n = rng.randrange(len(trace.steps[step].tool_calls))
            change = ToolResultChange(content=rng.choice(ERRORS), index=n)
            out.append((step, Edit(tool_result=change)))
        return out

    return {
        "wrong-tool-result": wrong_tool_result,
        "corrupted-number": corrupted_number,
        "wrong-handoff": wrong_handoff,
        "wrong-tool-argument": wrong_tool_argument,
        "premature-stop": premature_stop,
        "ignored-error": ignored_error,
    }
