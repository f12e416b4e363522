"""The OpenAI Agents SDK program of the framework tests as a base for fault injection.

The program is tests/fixtures/frameworks/agents_sdk_default.py, unmodified, at the SDK's
default settings (the Responses API, ``Runner.run``): a Triage agent hands the question
off to a Researcher, who looks facts up with a tool and answers. tests/frameworks_scripts.py
scripts it with a deliberate mistake; here :func:`faithful` plays both agents *correctly*
from what each request says, so a base run succeeds and an injected fault propagates
through the later steps as it would with a model that trusts its inputs.

The tasks need one, two or four facts, and the Researcher looks them up one per step,
writing what the last lookup gave ("Avalon in 2020: 144,630") next to its next call, as a
model's preamble to a tool call. Its answer is computed from those notes and the last
result, so a fault in a lookup or in a note shows in the final answer several steps
later. The Researcher takes the k-th lookup's result as the k-th fact it planned: it does
not check what came back.

Faults (each where the base run has a step of that kind):

* ``wrong-tool-result``: one lookup's result has its number changed;
* ``corrupted-number``: the number in one of the Researcher's notes is changed (the
  final answer, which ends the run, is left alone: its symptom would not come later);
* ``wrong-tool-argument``: a lookup asks for the other year;
* ``premature-stop``: the Triage agent answers instead of handing off, or the Researcher
  answers instead of making its next lookup;
* ``ignored-error``: a lookup fails (its result an error message) and the run goes on.

There is no wrong handoff: the Triage agent has one agent to hand off to, and the
Researcher none.
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
PROGRAM = ROOT / "tests" / "fixtures" / "frameworks" / "agents_sdk_default.py"
sys.path.insert(0, str(ROOT / "tests"))

from _fault_common import CITIES, NUMBER, Injector, ignored_error, lookup_steps  # noqa: E402

from frameworks_scripts import _call, _call_id, _system  # noqa: E402

ENV = {"OPENAI_AGENTS_DISABLE_TRACING": "1", "OTEL_SDK_DISABLED": "true"}
"""The SDK's documented switch that keeps its traces home (as tests/test_replay_apis.py)."""

_YEAR = re.compile(r"\b(?:19|20)\d\d\b")
_POPULATION = re.compile(r"(-?\d[\d,]*(?:\.\d+)?) inhabitants")
_NOTE = re.compile(r"^(\w+) in (\d{4}): (.+)$", re.M)


def tasks() -> list[tuple[str, str, str]]:
    """(id, task, right answer): each city in each year (one lookup), both cities
    together, the gap between them and each city's growth (two), both cities' growth
    (four)."""
    a, b = CITIES["Avalon"], CITIES["Brigadoon"]
    out = []
    for year in ("2019", "2020"):
        for city, years in CITIES.items():
            out.append(
                (
                    f"{city.lower()}-{year}",
                    f"What was the population of {city} in {year}?",
                    str(years[year]),
                )
            )
        out.append(
            (
                f"both-{year}",
                f"What was the combined population of Avalon and Brigadoon in {year}?",
                str(a[year] + b[year]),
            )
        )
        out.append(
            (
                f"gap-{year}",
                f"How many more people lived in Avalon than in Brigadoon in {year}?",
                str(a[year] - b[year]),
            )
        )
    for city, years in CITIES.items():
        out.append(
            (
                f"{city.lower()}-growth",
                f"By how much did the population of {city} grow from 2019 to 2020?",
                str(years["2020"] - years["2019"]),
            )
        )
    growth = a["2020"] + b["2020"] - a["2019"] - b["2019"]
    out.append(
        (
            "both-growth",
            "By how much did the combined population of Avalon and Brigadoon grow "
            "from 2019 to 2020?",
            str(growth),
        )
    )
    return out


def command(task: str) -> list[str]:
    return [sys.executable, str(PROGRAM), task]


def plan(task: str) -> list[tuple[str, str]]:
    """The facts a task needs, in the order the Researcher looks them up: every city it
    names in every year it names."""
    cities = sorted((c for c in CITIES if c in task), key=task.index)
    years = list(dict.fromkeys(_YEAR.findall(task)))
    return [(city, year) for year in years for city in cities]


def _number(text: str) -> float | None:
    found = _POPULATION.findall(text)
    return float(found[0].replace(",", "")) if found else None


def _show(value: float | None) -> str:
    if value is None:
        return "unknown"
    return f"{value:,.0f}" if value.is_integer() else f"{value:,.2f}"


def _answer(task: str, values: dict[tuple[str, str], float | None]) -> str:
    """The task's answer from the facts as the Researcher noted them."""
    slots = plan(task)
    years = list(dict.fromkeys(y for _, y in slots))
    cities = list(dict.fromkeys(c for c, _ in slots))
    known = {k: v for k, v in values.items() if v is not None}
    if "grow" in task:
        if len(known) < len(slots):
            return "unknown"
        total = {y: sum(known[(c, y)] for c in cities) for y in years}
        return _show(total[years[-1]] - total[years[0]])
    if "more people" in task:
        if len(known) < len(slots):
            return "unknown"
        return _show(known[slots[0]] - known[slots[1]])
    # One fact, or a sum (of what the lookups gave)
    return _show(sum(known.values())) if known else "unknown"


def faithful(body: dict[str, Any]) -> Any:
    """Both agents of the program, played by rule and without mistakes."""
    system, messages = _system(body), body["messages"]
    task = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
    if "Triage" in system:
        handoff = next(t["function"]["name"] for t in body.get("tools") or [])
        return {"tool_calls": [_call(handoff, {}, _call_id(body))]}
    # Researcher: its lookups so far, their results, and its own notes.
    lookups = [
        str(c.get("id"))
        for m in messages
        if m.get("role") == "assistant"
        for c in m.get("tool_calls") or []
        if (c.get("function") or {}).get("name") == "lookup"
    ]
    results = {
        str(m.get("tool_call_id")): str(m.get("content") or "")
        for m in messages
        if m.get("role") == "tool"
    }
    noted = {
        (city, year): _number(f"{value} inhabitants")
        for m in messages
        if m.get("role") == "assistant"
        for city, year, value in _NOTE.findall(str(m.get("content") or ""))
    }
    slots = plan(task)
    values = {
        slot: noted[slot] if slot in noted else _number(results.get(call, ""))
        for slot, call in zip(slots, lookups, strict=False)
    }
    done = len(lookups)
    note = ""
    if done:
        city, year = slots[done - 1]
        note = f"{city} in {year}: {_show(values[(city, year)])}"
    if done < len(slots):
        city, year = slots[done]
        query = {"query": f"population of {city} in {year}"}
        return {"text": note, "tool_calls": [_call("lookup", query, _call_id(body))]}
    return _answer(task, values)


def final_answer(trace: Trace) -> str | None:
    """The closing text of the run (the program prints it as its answer)."""
    for s in reversed(trace.steps):
        text = str(s.content).strip()
        if not s.tool_calls and text:
            return text
    return None


def injectors(corrupt: Callable[[str, random.Random], str]) -> dict[str, Injector]:
    """The fault kinds of this program (``corrupt`` turns a number into a wrong one)."""

    def wrong_number(text: str, rng: random.Random) -> str:
        numbers = _POPULATION.findall(text) or [
            n for n in NUMBER.findall(text) if not _YEAR.fullmatch(n)
        ]
        pick = rng.choice(numbers)
        head, _, tail = text.rpartition(pick)
        wrong = corrupt(pick.replace(",", ""), rng)
        return head + (_show(float(wrong)) if "," in pick else wrong) + tail

    def wrong_tool_result(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        out = []
        for step in lookup_steps(trace):
            results = trace.steps[step].tool_results
            if results and _POPULATION.search(results[0].content):
                wrong = wrong_number(results[0].content, rng)
                out.append((step, Edit(tool_result=ToolResultChange(content=wrong))))
        return out

    def corrupted_number(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        out = []
        for step in lookup_steps(trace):
            s = trace.steps[step]
            if _NOTE.search(s.content) and not s.content.rstrip().endswith("unknown"):
                calls = [
                    {"id": c.id, "name": c.name, "arguments": c.arguments} for c in s.tool_calls
                ]
                out.append((step, Edit(output=wrong_number(s.content, rng), tool_calls=calls)))
        return out

    def wrong_tool_argument(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        out = []
        for step in lookup_steps(trace):
            arguments = trace.steps[step].tool_calls[0].arguments
            query = str(json.loads(arguments or "{}").get("query", ""))
            swapped = re.sub(r"20(19|20)", lambda m: "2020" if m[1] == "19" else "2019", query)
            if swapped != query:
                change = ToolCallChange(index=0, set_arguments={"query": swapped})
                out.append((step, Edit(tool_call_changes=[change])))
        return out

    def premature_stop(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        out = []
        seen: list[str] = []
        for s in trace.steps:
            handoff = any(c.name.startswith("transfer_to") for c in s.tool_calls)
            if handoff or any(c.name == "lookup" for c in s.tool_calls):
                guess = seen[-1] if seen else f"{rng.randint(10_000, 200_000):,}"
                out.append((s.index, Edit(output=guess)))
            seen += [x for r in s.tool_results for x in _POPULATION.findall(r.content)]
        return out

    return {
        "wrong-tool-result": wrong_tool_result,
        "corrupted-number": corrupted_number,
        "wrong-tool-argument": wrong_tool_argument,
        "premature-stop": premature_stop,
        "ignored-error": ignored_error,
    }
