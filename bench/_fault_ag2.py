"""The AG2 GroupChat program of the framework tests as a base for fault injection.

The program is tests/fixtures/frameworks/ag2_groupchat.py, unmodified, on AG2 0.14 in an
environment of its own (the same name and pins as tests/test_frameworks.py, so the cached
environment is reused): a User, a Planner, a Researcher with a ``lookup`` tool and a
Writer, the next speaker chosen by the model (the GroupChatManager asks it "select the
next role"). tests/frameworks_scripts.py scripts it with a deliberate mistake; here
:func:`faithful` plays every agent and the speaker selection *correctly* from what each
request says (the task's cities and years, the plan, the tool results, the report), so a
base run succeeds and an injected fault propagates through the later steps as it would
with a model that trusts its inputs.

The flow of a base run: selection -> Planner (a numbered plan of lookups and what to do
with the figures), selection -> Researcher (parallel ``lookup`` calls; the User runs
them, which is no model call and so no step), selection -> Researcher (the report),
selection -> Writer (the number, then TERMINATE).

The proxy names a speaker-selection call ``speaker-selector`` (by its prompt, see
docs/replay.md); :func:`name_agents` gives those steps the name of the agent that makes
them in AG2, the GroupChatManager (``chat_manager``, AG2's default name), so a label on
a selection names the manager as the program does.

Faults (each where the base run has a step of that kind):

* ``wrong-speaker``: a speaker selection names another role;
* ``wrong-tool-result``: one lookup's result has its number changed;
* ``corrupted-number``: the Researcher's report has a population changed;
* ``wrong-tool-argument``: a lookup asks for the other year;
* ``dropped-instruction``: one lookup of the Planner's plan dropped;
* ``premature-stop``: the Planner or the Researcher says TERMINATE, ending the chat
  before the Writer answers;
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
from faultfinder.traces.schema import Step, Trace

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "fixtures" / "frameworks" / "ag2_groupchat.py"
sys.path.insert(0, str(ROOT / "tests"))

from _fault_common import CITIES, ERRORS, NUMBER, Injector  # noqa: E402

from framework_env import AG2_GROUPCHAT, NO_TELEMETRY, framework_python  # noqa: E402
from frameworks_scripts import _call, _call_id, _system, _tools  # noqa: E402

ENV_NAME = "ag2-groupchat"
REQUIREMENTS = AG2_GROUPCHAT
"""The environment of tests/test_frameworks.py: same name and pins (the cached one)."""
ENV = NO_TELEMETRY
MANAGER = "chat_manager"
"""The GroupChatManager's name (AG2's default): the agent of a speaker selection."""
ROLES = ("Planner", "Researcher", "Writer")

_POPULATION = re.compile(r"(\d[\d,]*) inhabitants")
_LOOKUP = re.compile(r"^\s*\d+\.\s*Look up:\s*(.+?)\s*$", re.M)


def tasks() -> list[tuple[str, str, str]]:
    """(id, task, right answer): each city in each year, both together, the difference
    between them, and each city's growth (one, two or two lookups across years)."""
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
        avalon, brigadoon = CITIES["Avalon"][year], CITIES["Brigadoon"][year]
        out.append(
            (
                f"both-{year}",
                f"What was the combined population of Avalon and Brigadoon in {year}?",
                str(avalon + brigadoon),
            )
        )
        out.append(
            (
                f"difference-{year}",
                f"How many more people lived in Avalon than in Brigadoon in {year}?",
                str(avalon - brigadoon),
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
    growth = sum(c["2020"] - c["2019"] for c in CITIES.values())
    out.append(
        (
            "both-growth",
            "By how much did the combined population of Avalon and Brigadoon grow"
            " from 2019 to 2020?",
            str(growth),
        )
    )
    return out


def command(task: str) -> list[str]:
    """The program in its own AG2 0.14 environment (built once, then reused)."""
    return [str(framework_python(ENV_NAME, REQUIREMENTS)), str(PROGRAM), task]


def _text(message: dict[str, Any]) -> str:
    return str(message.get("content") or "")


def is_selection(messages: list[dict[str, Any]]) -> bool:
    """Whether a request is the GroupChatManager's speaker selection."""
    return any("select the next role" in _text(m).lower() for m in messages[-1:])


def _after_plan(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """The Planner's latest plan ('' if none yet) and the messages after it."""
    for n in range(len(messages) - 1, -1, -1):
        if messages[n].get("name") == "Planner":
            return _text(messages[n]), messages[n + 1 :]
    return "", []


def plan(task: str) -> str:
    """The Planner's plan for ``task``: the lookups, then what to do with the figures."""
    cities = sorted((c for c in CITIES if c in task), key=task.index)
    years = re.findall(r"\b(?:19|20)\d\d\b", task)
    if "grow" in task and len(years) >= 2:
        queries = [f"population of {c} in {y}" for y in reversed(years) for c in cities]
    else:
        queries = [f"population of {c} in {years[0] if years else ''}" for c in cities]
    if "grow" in task and len(cities) > 1:
        then = "Then subtract the sum of the last two figures from the sum of the first two."
    elif "combined" in task:
        then = "Then add the figures."
    elif "more" in task or "grow" in task:
        then = "Then subtract the second figure from the first."
    else:
        then = "Then state the figure."
    lines = [f"{n}. Look up: {q}" for n, q in enumerate(queries, 1)]
    return "PLAN:\n" + "\n".join(lines) + "\n" + then


def _lookups_done(after: list[dict[str, Any]]) -> int:
    return sum(len(m.get("tool_calls") or []) for m in after)


def _select(messages: list[dict[str, Any]]) -> str:
    """The next role, from the conversation so far (it trusts what it reads: a lookup
    made counts as a planned lookup done)."""
    said = [m for m in messages[1:-1] if m.get("role") != "system"]
    planned, after = _after_plan(said)
    if not planned:
        return "Planner"
    if not any(m.get("name") == "Researcher" for m in after):
        return "Researcher"
    if _lookups_done(after) < len(_LOOKUP.findall(planned)):
        return "Researcher"
    if after and after[-1].get("role") == "tool":
        return "Researcher"  # the results are in: the Researcher reports them
    return "Writer"


def _year(query: str) -> str:
    found = re.findall(r"\b(?:19|20)\d\d\b", query)
    return found[-1] if found else ""


def _research(messages: list[dict[str, Any]], body: dict[str, Any]) -> Any:
    """The next lookups of the plan (those of one year at once, in parallel); with every
    planned lookup made, a report of every result since the plan."""
    planned, after = _after_plan(messages)
    queries = _LOOKUP.findall(planned)[_lookups_done(after) :]
    if queries and "lookup" in _tools(body):
        batch = [q for q in queries if _year(q) == _year(queries[0])]
        return {
            "tool_calls": [
                _call("lookup", {"query": q}, _call_id(body, str(n))) for n, q in enumerate(batch)
            ]
        }
    results = [_text(m) for m in after if m.get("role") == "tool"]
    if results:
        return " ".join(results)
    return "Nothing was planned to look up."


def _write(messages: list[dict[str, Any]]) -> str:
    """The figures of the Researcher's latest report, combined as the plan says."""
    planned, after = _after_plan(messages)
    reports = [_text(m) for m in after if m.get("name") == "Researcher" and _text(m)]
    source = reports[-1] if reports else " ".join(_text(m) for m in after)
    figures = [int(n.replace(",", "")) for n in _POPULATION.findall(source)]
    if not figures:
        return "I have no figures to state. TERMINATE"
    if "sum of the last two" in planned:
        answer = sum(figures[:2]) - sum(figures[2:4])
    elif "subtract" in planned and len(figures) >= 2:
        answer = figures[0] - figures[1]
    elif "add" in planned:
        answer = sum(figures)
    else:
        answer = figures[0]
    return f"{answer:,} TERMINATE"


def faithful(body: dict[str, Any]) -> Any:
    """Every agent of the program and the speaker selection, by rule, without mistakes."""
    system, messages = _system(body), body["messages"]
    if is_selection(messages):
        return _select(messages)
    if "You are the Planner" in system:
        task = next((_text(m) for m in messages if m.get("role") == "user"), "")
        return plan(task)
    if "You are the Researcher" in system:
        return _research(messages, body)
    if "You are the Writer" in system:
        return _write(messages)
    return "TERMINATE"


def _selection_step(step: Step) -> bool:
    return is_selection(step.input_messages or [])


def name_agents(trace: Trace) -> Trace:
    """``trace`` with its speaker selections named after the GroupChatManager."""
    steps = [
        s.model_copy(update={"agent": MANAGER}) if _selection_step(s) else s for s in trace.steps
    ]
    return trace.model_copy(update={"steps": steps})


def final_answer(trace: Trace) -> str | None:
    """The program's printed answer (the Writer's last message, TERMINATE removed)."""
    return trace.final_answer or None


def _corrupt(text: str, rng: random.Random, corrupt: Callable[[str, random.Random], str]) -> str:
    """``text`` with one population changed (a number where it names none)."""
    numbers = _POPULATION.findall(text) or NUMBER.findall(text)
    pick = rng.choice(numbers)
    head, _, tail = text.rpartition(pick)
    return head + corrupt(pick.replace(",", ""), rng) + tail


def _lookup_steps(trace: Trace) -> list[Step]:
    return [s for s in trace.steps if any(c.name == "lookup" for c in s.tool_calls)]


def _reports(trace: Trace) -> list[Step]:
    """The Researcher's text reports."""
    return [
        s
        for s in trace.steps
        if s.agent == "Researcher" and not s.tool_calls and _POPULATION.search(s.content)
    ]


def injectors(corrupt: Callable[[str, random.Random], str]) -> dict[str, Injector]:
    """The fault kinds of this program (``corrupt`` turns a number into a wrong one)."""

    def wrong_speaker(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        out = []
        for s in trace.steps:
            if _selection_step(s) and s.content.strip() in ROLES:
                other = rng.choice([r for r in ROLES if r != s.content.strip()])
                out.append((s.index, Edit(output=other)))
        return out

    def wrong_tool_result(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        out = []
        for s in _lookup_steps(trace):
            calls = [n for n, r in enumerate(s.tool_results) if _POPULATION.search(r.content)]
            if calls:
                n = rng.choice(calls)
                wrong = _corrupt(s.tool_results[n].content, rng, corrupt)
                out.append((s.index, Edit(tool_result=ToolResultChange(content=wrong, index=n))))
        return out

    def corrupted_number(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        return [(s.index, Edit(output=_corrupt(s.content, rng, corrupt))) for s in _reports(trace)]

    def wrong_tool_argument(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        out = []
        for s in _lookup_steps(trace):
            n = rng.randrange(len(s.tool_calls))
            query = str(json.loads(s.tool_calls[n].arguments or "{}").get("query", ""))
            swapped = re.sub(r"20(19|20)", lambda m: "2020" if m[1] == "19" else "2019", query)
            if swapped != query:
                change = ToolCallChange(index=n, set_arguments={"query": swapped})
                out.append((s.index, Edit(tool_call_changes=[change])))
        return out

    def dropped_instruction(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        out = []
        for s in trace.steps:
            lines = s.content.splitlines()
            lookups = [n for n, line in enumerate(lines) if _LOOKUP.match(line)]
            if s.agent == "Planner" and not _selection_step(s) and lookups:
                drop = rng.choice(lookups)
                out.append((s.index, Edit(output="\n".join(lines[:drop] + lines[drop + 1 :]))))
        return out

    def premature_stop(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        return [
            (s.index, Edit(output=f"{s.content}\nTERMINATE"))
            for s in trace.steps
            if s.agent in ("Planner", "Researcher")
            and not _selection_step(s)
            and not s.tool_calls
            and s.content.strip()
        ]

    def ignored_error(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        out = []
        for s in _lookup_steps(trace):
            n = rng.randrange(len(s.tool_calls))
            change = ToolResultChange(content=rng.choice(ERRORS), index=n)
            out.append((s.index, Edit(tool_result=change)))
        return out

    return {
        "wrong-speaker": wrong_speaker,
        "wrong-tool-result": wrong_tool_result,
        "corrupted-number": corrupted_number,
        "wrong-tool-argument": wrong_tool_argument,
        "dropped-instruction": dropped_instruction,
        "premature-stop": premature_stop,
        "ignored-error": ignored_error,
    }
