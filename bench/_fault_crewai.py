"""The CrewAI crew of the framework tests as a base for fault injection.

The program is tests/fixtures/frameworks/crewai_team.py, unmodified: a sequential crew of
a Researcher with a ``lookup`` tool and a Writer, run in CrewAI's own environment (its
pins conflict with the project's; tests/framework_env.py builds it once and caches it).
tests/frameworks_scripts.py scripts it with a deliberate mistake; here :func:`faithful`
plays both agents *correctly* from what each request says, so a base run succeeds and an
injected fault propagates through the later steps as it would with a model that trusts
its inputs:

* the Researcher looks up every (city, year) its task names, one native tool call per
  request, then reports the results as ``Final Answer: ...`` (CrewAI passes that reply to
  the Writer verbatim, prefix included, as the Writer task's context);
* the Writer computes the answer (one population, a sum, a growth) from the populations
  the context reports, trusting them, and states it as ``Final Answer: N``, which CrewAI
  parses into the crew's result.

Tasks with several facts (both cities, a growth over two years, both) make the
Researcher do up to four lookups, so traces vary in length (3 to 6 steps).

Faults (each where the base run has a step of that kind; a sequential crew has no
handoff the model chooses, so there is no wrong-handoff here):

* ``wrong-tool-result``: a lookup's result has its number changed;
* ``corrupted-number``: the Researcher's report has a population changed;
* ``wrong-tool-argument``: a lookup asks for the other year or the other city;
* ``premature-stop``: the Researcher reports before its lookups are done (with a guess
  when it has found nothing yet);
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
PROGRAM = ROOT / "tests" / "fixtures" / "frameworks" / "crewai_team.py"
sys.path.insert(0, str(ROOT / "tests"))

from _fault_common import CITIES, NUMBER, Injector, ignored_error, lookup_steps  # noqa: E402

from framework_env import CREWAI, NO_TELEMETRY, framework_python  # noqa: E402
from frameworks_scripts import _call, _call_id, _system  # noqa: E402

ENV_NAME = "crewai"
REQUIREMENTS = CREWAI
"""The environment of tests/test_frameworks.py (same name and pins: the cached one)."""
ENV = NO_TELEMETRY
"""The telemetry switches the tests set for every framework program."""

YEARS = ("2019", "2020")
_FACT = re.compile(r"\b([A-Z][a-z]+) had (\d[\d,]*) inhabitants in (\d{4})")
_POPULATION = re.compile(r"(\d[\d,]*) inhabitants")


def tasks() -> list[tuple[str, str, str]]:
    """(id, task, right answer): each city in each year, both cities in each year, each
    city's growth and both cities' growth from 2019 to 2020 (one to four lookups)."""
    both = "the combined population of Avalon and Brigadoon"
    out = []
    for year in YEARS:
        for city, years in CITIES.items():
            out.append(
                (
                    f"{city.lower()}-{year}",
                    f"What was the population of {city} in {year}?",
                    str(years[year]),
                )
            )
        total = sum(c[year] for c in CITIES.values())
        out.append((f"both-{year}", f"What was {both} in {year}?", str(total)))
    for city, years in CITIES.items():
        out.append(
            (
                f"{city.lower()}-growth",
                f"By how many inhabitants did the population of {city} grow from 2019 to 2020?",
                str(years["2020"] - years["2019"]),
            )
        )
    growth = sum(c["2020"] - c["2019"] for c in CITIES.values())
    out.append(
        ("both-growth", f"By how many inhabitants did {both} grow from 2019 to 2020?", str(growth))
    )
    return out


def command(task: str) -> list[str]:
    return [str(framework_python(ENV_NAME, REQUIREMENTS)), str(PROGRAM), task]


def _question(text: str) -> str:
    """The question inside a CrewAI task prompt (``Current Task: <description>``)."""
    found = re.search(r"Current Task:[^:]*:\s*(.+)", text)
    return found.group(1).strip() if found else text


def _needed(question: str) -> list[tuple[str, str]]:
    """The (city, year) facts a question needs, in the order a researcher looks them up."""
    cities = [c for c in CITIES if c in question]
    years = re.findall(r"\b(?:19|20)\d\d\b", question)
    return [(c, y) for c in cities for y in years]


def _researcher(body: dict[str, Any]) -> Any:
    messages = body["messages"]
    task = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
    results = [str(m.get("content")) for m in messages if m.get("role") == "tool"]
    needed = _needed(_question(task))
    if len(results) < len(needed):
        city, year = needed[len(results)]
        query = {"query": f"population of {city} in {year}"}
        return {"tool_calls": [_call("lookup", query, _call_id(body))]}
    return "Final Answer: " + " ".join(results)


def _writer(body: dict[str, Any]) -> str:
    """The answer from the populations the context reports, trusted as they are."""
    prompt = "\n".join(str(m.get("content") or "") for m in body["messages"])
    question = _question(prompt.split("This is the expected criteria")[0])
    context = prompt.split("This is the context you're working with:")[-1]
    facts: dict[str, list[tuple[str, int]]] = {}
    for city, number, year in _FACT.findall(context):
        facts.setdefault(city, []).append((year, int(number.replace(",", ""))))
    asked = [c for c in CITIES if c in question]
    answer: int | None = None
    if "grow" in question:
        # Each city's earliest reported population to its latest.
        spans = [sorted(facts[c]) for c in asked if len(facts.get(c, [])) > 1]
        answer = sum(f[-1][1] - f[0][1] for f in spans) if spans else None
    else:
        found = [facts[c][-1][1] for c in asked if c in facts]
        answer = sum(found) if found else None
    stated = f"{answer:,}" if answer is not None else "unknown"
    return f"Thought: I now know the final answer\nFinal Answer: {stated}"


def faithful(body: dict[str, Any]) -> Any:
    """Both agents of the crew, played by rule and without mistakes."""
    system = _system(body)
    if "You are Researcher" in system:
        return _researcher(body)
    return _writer(body)


def final_answer(trace: Trace) -> str | None:
    """The crew's result as the program printed it, else the Writer's ``Final Answer:``."""
    if trace.final_answer is not None:
        return trace.final_answer
    for s in reversed(trace.steps):
        if s.agent == "Writer" and "Final Answer:" in s.content:
            return s.content.split("Final Answer:")[-1].strip()
    return None


def _corrupt(text: str, rng: random.Random, corrupt: Callable[[str, random.Random], str]) -> str:
    """``text`` with one number changed: a population where it names one, not a year,
    written as the original is (with thousands separators if it had them, so the format
    does not give the edit away)."""
    numbers = _POPULATION.findall(text) or NUMBER.findall(text)
    pick = rng.choice(numbers)
    wrong = corrupt(pick.replace(",", ""), rng)
    if "," in pick and re.fullmatch(r"-?\d+", wrong):
        wrong = f"{int(wrong):,}"
    head, _, tail = text.rpartition(pick)
    return head + wrong + tail


def _swap(query: str, rng: random.Random) -> str:
    """The query for the other year or the other city."""
    if rng.random() < 0.5:
        return re.sub(r"20(19|20)", lambda m: "2020" if m[1] == "19" else "2019", query)
    return re.sub(
        r"Avalon|Brigadoon", lambda m: "Brigadoon" if m[0] == "Avalon" else "Avalon", query
    )


def injectors(corrupt: Callable[[str, random.Random], str]) -> dict[str, Injector]:
    """The fault kinds of this program (``corrupt`` turns a number into a wrong one)."""

    def wrong_tool_result(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        out = []
        for step in lookup_steps(trace):
            results = trace.steps[step].tool_results
            if results and NUMBER.search(results[0].content):
                wrong = _corrupt(results[0].content, rng, corrupt)
                out.append((step, Edit(tool_result=ToolResultChange(content=wrong))))
        return out

    def corrupted_number(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        return [
            (s.index, Edit(output=_corrupt(s.content, rng, corrupt)))
            for s in trace.steps
            if s.agent == "Researcher" and not s.tool_calls and _POPULATION.search(s.content)
        ]

    def wrong_tool_argument(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        out = []
        for step in lookup_steps(trace):
            query = str(json.loads(trace.steps[step].tool_calls[0].arguments or "{}")["query"])
            swapped = _swap(query, rng)
            if swapped != query:
                change = ToolCallChange(index=0, set_arguments={"query": swapped})
                out.append((step, Edit(tool_call_changes=[change])))
        return out

    def premature_stop(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        out = []
        found: list[str] = []
        for step in lookup_steps(trace):
            results = trace.steps[step].tool_results
            if found:
                report = " ".join(found)
            elif results and NUMBER.search(results[0].content):
                # Nothing looked up yet: a figure from memory, near the real one.
                report = _corrupt(results[0].content, rng, corrupt)
            else:
                report = f"about {rng.randint(10_000, 200_000):,} inhabitants"
            out.append((step, Edit(output=f"Final Answer: {report}")))
            found += [r.content for r in results[:1]]
        return out

    return {
        "wrong-tool-result": wrong_tool_result,
        "corrupted-number": corrupted_number,
        "wrong-tool-argument": wrong_tool_argument,
        "premature-stop": premature_stop,
        "ignored-error": ignored_error,
    }
