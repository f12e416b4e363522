"""A software team on LangGraph as a base for fault injection: long runs, six agents.

The program is tests/fixtures/frameworks/langgraph_swe_team.py, unmodified: a Supervisor
routes a ticket through a ProductManager (reads the ticket with a tool, writes a spec of
numbered requirements), an Architect (a plan: the functions in build order, constants
resolved), an Engineer (writes each function with ``write_code``), QA (runs each
function's hidden tests with ``run_tests``) and a Reviewer (approves and evaluates the
deliverable with ``evaluate``, or requests changes); the Supervisor then answers. A
ticket of n functions makes a run of 9 + 6n steps (15 to 33 for n = 1..4).

:func:`faithful` plays every agent correctly from what each request says, and trusts it:
the Supervisor routes on the last report, the Architect plans the newest spec, the
Engineer codes the newest plan, QA tests the function last reported written, the
Reviewer approves when every planned function passed. A base run succeeds, and a fault
injected into it propagates to a wrong final answer (a wrong value, or nothing
delivered) the way it would with a model that believes its inputs.

Faults (each where the base run has a step of that kind; at most :data:`PER_KIND` sites
of each kind per run, drawn with the seed):

* ``corrupted-number``: a number changed in the ProductManager's spec, the Architect's
  plan, the code the Engineer writes (its ``write_code`` argument) or the value the
  Reviewer approves;
* ``wrong-tool-result``: the ticket (``read_ticket``) with a number changed, a test run
  (``run_tests``) reporting a failure, or the deliverable's value (``evaluate``) changed;
* ``wrong-handoff``: the Supervisor transfers to another worker than the one due;
* ``dropped-instruction``: one numbered line of the spec or of the plan dropped;
* ``premature-stop``: the Supervisor answers, with the last number it saw, instead of
  transferring;
* ``ignored-error``: a ``read_ticket``, ``run_tests`` or ``evaluate`` call fails, its
  result an error message, and the run goes on.
"""

from __future__ import annotations

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
PROGRAM = ROOT / "tests" / "fixtures" / "frameworks" / "langgraph_swe_team.py"
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(PROGRAM.parent))

from _fault_common import (  # noqa: E402
    Corrupt,
    Injector,
    by_kind,
    calls,
    failed,
    first_user,
    read_history,
    role_of,
    sample,
    step_arguments,
    tool_errors,
)
from swe_tickets import TICKETS  # noqa: E402

from frameworks_scripts import _call, _call_id, _last_call, _system, _tools  # noqa: E402

PER_KIND = 3
"""Most injection sites of one fault kind per base run (drawn with the seed)."""
WORKERS = ("product_manager", "architect", "engineer", "qa", "reviewer")
"""The Supervisor's workers, by their LangGraph names (``transfer_to_<name>``)."""
ERRORS = {
    "read_ticket": ["Error: the tracker timed out", "error: 503 Service Unavailable"],
    "run_tests": ["Error: the test runner timed out", "error: worker crashed (exit code 137)"],
    "evaluate": ["Error: the sandbox timed out", "error: connection refused"],
}
"""Tool results of the ``ignored-error`` fault, per tool (one drawn with the seed). Not
``write_code``: an edited result is only what the model sees, the program still saved the
code, so an Engineer who ignores the error loses nothing and the branch always recovers."""
NOT_DELIVERED = "FINAL: not delivered (the review requested changes)."
"""The Supervisor's answer when the Reviewer does not approve (no number in it)."""

_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
_TICKET = re.compile(r"\bT-\d+\b")
_ITEM = re.compile(r"^(R?\d+)\.\s+(.*)$")
_DEFINITION = re.compile(r"^([a-z_]\w*)\(([^()]*)\)\s*=\s*(.+)$")
_CONSTANT = re.compile(r"^([A-Z][A-Z_]+)\s*=\s*(-?\d+(?:\.\d+)?)")


def tasks() -> list[tuple[str, str, str]]:
    """(id, task, right answer): one per ticket of the tracker."""
    return [
        (
            ticket.id.lower(),
            f"Implement ticket {ticket.id} and report the value its acceptance criterion asks for.",
            ticket.answer(),
        )
        for ticket in TICKETS.values()
    ]


def command(task: str) -> list[str]:
    return [sys.executable, str(PROGRAM), task]


# --- reading a request ------------------------------------------------------------------


def _reports(messages: list[dict[str, Any]]) -> list[str]:
    """What the workers said, in order (their closing messages in the shared history)."""
    return [
        str(m.get("content"))
        for m in messages
        if m.get("role") == "assistant"
        and m.get("name") not in (None, "supervisor")
        and not m.get("tool_calls")
        and m.get("content")
    ]


def _latest(reports: list[str], head: str) -> str | None:
    return next((r for r in reversed(reports) if r.startswith(head)), None)


def _items(document: str | None) -> list[str]:
    """The numbered lines of a spec or a plan, without their numbers."""
    found = (_ITEM.match(line.strip()) for line in (document or "").splitlines())
    return [m.group(2) for m in found if m]


def _deliverable(document: str | None) -> str:
    found = re.search(r"^Deliverable:\s*(.+)$", document or "", re.M)
    return found.group(1).strip() if found else "unknown"


def _planned(reports: list[str]) -> list[str]:
    """The definitions of the newest plan, in build order."""
    return [item for item in _items(_latest(reports, "PLAN")) if _DEFINITION.match(item)]


def _name(definition: str) -> str:
    return definition.split("(", 1)[0].strip()


def _written(reports: list[str]) -> list[str]:
    """Names of the functions the Engineer reported written, in order."""
    return [_name(r.removeprefix("Wrote ")) for r in reports if r.startswith("Wrote ")]


def _tested(reports: list[str]) -> dict[str, str]:
    """Function name -> its newest test report's verdict text."""
    out: dict[str, str] = {}
    for r in reports:
        found = re.match(r"Tests for (\w+): (.*)", r, re.S)
        if found:
            out[found.group(1)] = found.group(2)
    return out


def _own_call(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The arguments of the calling agent's last tool call."""
    made = read_history(messages).calls
    return made[-1].arguments if made else {}


# --- the agents -------------------------------------------------------------------------


def _supervisor(body: dict[str, Any], reports: list[str]) -> Any:
    last = reports[-1] if reports else ""
    planned = [_name(d) for d in _planned(reports)]
    unwritten = [f for f in planned if f not in _written(reports)]
    if last.startswith("APPROVED"):
        found = re.search(r"=\s*(-?\d+(?:\.\d+)?)\s*\.?\s*$", last)
        return f"FINAL: {found.group(1)}" if found else NOT_DELIVERED
    if last.startswith("CHANGES REQUESTED"):
        return NOT_DELIVERED
    if last.startswith("SPEC"):
        wanted = "architect"
    elif last.startswith("PLAN"):
        wanted = "engineer" if planned else "reviewer"
    elif last.startswith("Wrote "):
        wanted = "qa"
    elif last.startswith("Tests for "):
        wanted = "engineer" if unwritten else "reviewer"
    elif _latest(reports, "SPEC") is None:  # the first turn, or a report out of turn
        wanted = "product_manager"
    elif _latest(reports, "PLAN") is None:
        wanted = "architect"
    else:
        untested = [f for f in _written(reports) if f not in _tested(reports)]
        wanted = "engineer" if unwritten else "qa" if untested else "reviewer"
    handoff = next(n for n in _tools(body) if n == f"transfer_to_{wanted}")
    return {"tool_calls": [_call(handoff, {}, _call_id(body))]}


def _product_manager(body: dict[str, Any], task: str) -> Any:
    messages = body["messages"]
    last = messages[-1]
    if last.get("role") == "tool" and _last_call(body) == "read_ticket":
        ticket = str(_own_call(messages).get("ticket_id", ""))
        result = str(last.get("content"))
        title = result.splitlines()[0].split(":", 1)[-1].strip() if result else ""
        if failed(result):
            return f"SPEC for ticket {ticket}\n(no requirements: {result})\nDeliverable: unknown"
        lines = [f"SPEC for ticket {ticket}: {title}"]
        requirements = [line[2:] for line in result.splitlines() if line.startswith("- ")]
        lines += [f"R{n}. {r}" for n, r in enumerate(requirements, 1)]
        found = re.search(r"report the value of (.+?)\.?$", result, re.M)
        lines.append(f"Deliverable: {found.group(1) if found else 'unknown'}")
        return "\n".join(lines)
    found = _TICKET.search(task)
    arguments = {"ticket_id": found.group(0) if found else task}
    return {"tool_calls": [_call("read_ticket", arguments, _call_id(body))]}


def _architect(reports: list[str]) -> str:
    spec = _latest(reports, "SPEC")
    if spec is None:
        return "PLAN: nothing to plan yet (there is no SPEC)."
    ticket = _TICKET.search(spec.splitlines()[0])
    values: dict[str, str] = {}
    definitions: list[str] = []
    for item in _items(spec):
        constant = _CONSTANT.match(item)
        if constant:
            values[constant.group(1)] = constant.group(2)
        elif _DEFINITION.match(item):
            definitions.append(item)
    lines = [f"PLAN for ticket {ticket.group(0) if ticket else '?'}"]
    for n, definition in enumerate(definitions, 1):
        resolved = re.sub(
            r"\b[A-Z][A-Z_]+\b", lambda m: values.get(m.group(0), m.group(0)), definition
        )
        lines.append(f"{n}. {resolved}")
    lines.append(f"Deliverable: {_deliverable(spec)}")
    return "\n".join(lines)


def _ticket_of(reports: list[str], task: str) -> str:
    for text in [*reversed(reports), task]:
        found = _TICKET.search(text)
        if found:
            return found.group(0)
    return "?"


def _engineer(body: dict[str, Any], reports: list[str], task: str) -> Any:
    messages = body["messages"]
    if messages[-1].get("role") == "tool" and _last_call(body) == "write_code":
        # The Engineer says what it wrote, whatever the tool answered.
        return f"Wrote {_own_call(messages).get('code', '')}"
    written = _written(reports)
    todo = [d for d in _planned(reports) if _name(d) not in written]
    if not todo:
        return "Nothing left to write: every planned function is written."
    arguments = {"ticket_id": _ticket_of(reports, task), "code": todo[0]}
    return {"tool_calls": [_call("write_code", arguments, _call_id(body))]}


def _qa(body: dict[str, Any], reports: list[str], task: str) -> Any:
    messages = body["messages"]
    if messages[-1].get("role") == "tool" and _last_call(body) == "run_tests":
        function = str(_own_call(messages).get("function", ""))
        result = str(messages[-1].get("content"))
        if failed(result):
            return f"Tests for {function}: not run ({result})"
        counts = re.search(r"(\d+) of (\d+) tests passed", result)
        if counts and counts.group(1) == counts.group(2):
            return f"Tests for {function}: passed, {counts.group(1)} of {counts.group(2)}."
        return f"Tests for {function}: FAILED. {result}"
    written = _written(reports)
    if not written:
        return "Nothing to test yet: no function is written."
    arguments = {"ticket_id": _ticket_of(reports, task), "function": written[-1]}
    return {"tool_calls": [_call("run_tests", arguments, _call_id(body))]}


def _reviewer(body: dict[str, Any], reports: list[str], task: str) -> Any:
    messages = body["messages"]
    if messages[-1].get("role") == "tool" and _last_call(body) == "evaluate":
        return f"APPROVED. {messages[-1].get('content')}"
    planned = [_name(d) for d in _planned(reports)]
    if not planned:
        return "CHANGES REQUESTED: nothing was planned."
    tested = _tested(reports)
    missing = [f for f in planned if not tested.get(f, "").startswith("passed")]
    if missing:
        return f"CHANGES REQUESTED: {', '.join(missing)} did not pass its tests."
    arguments = {
        "ticket_id": _ticket_of(reports, task),
        "expression": _deliverable(_latest(reports, "PLAN")),
    }
    return {"tool_calls": [_call("evaluate", arguments, _call_id(body))]}


def faithful(body: dict[str, Any]) -> Any:
    """Every agent of the program, played by rule and without mistakes."""
    messages = body["messages"]
    task, reports, role = first_user(messages), _reports(messages), role_of(_system(body))
    if role == "Supervisor":
        return _supervisor(body, reports)
    if role == "ProductManager":
        return _product_manager(body, task)
    if role == "Architect":
        return _architect(reports)
    if role == "Engineer":
        return _engineer(body, reports, task)
    if role == "QA":
        return _qa(body, reports, task)
    return _reviewer(body, reports, task)


def final_answer(trace: Trace) -> str | None:
    """The Supervisor's closing text (the program prints it as its answer)."""
    for s in reversed(trace.steps):
        if s.agent == "Supervisor" and not s.tool_calls and s.content.strip():
            return str(s.content).strip().removeprefix("FINAL:").strip()
    return None


# --- the faults -------------------------------------------------------------------------


def _change_number(
    text: str,
    rng: random.Random,
    corrupt: Corrupt,
    lines: Callable[[str], bool] = lambda line: True,
) -> str | None:
    """``text`` with one number changed, on a line ``lines`` accepts (a line's own
    item number, ``R3.`` or ``3.``, is not a number of it); None if there is none."""
    spots = []
    for n, line in enumerate(text.splitlines()):
        head = _ITEM.match(line)
        start = len(line) - len(head.group(2)) if head else 0
        if lines(line):
            spots += [(n, m) for m in _NUMBER.finditer(line, start)]
    if not spots:
        return None
    n, found = rng.choice(spots)
    all_lines = text.splitlines()
    line = all_lines[n]
    all_lines[n] = line[: found.start()] + corrupt(found.group(0), rng) + line[found.end() :]
    return "\n".join(all_lines)


def _change_value(text: str, rng: random.Random, corrupt: Corrupt) -> str | None:
    """``text`` with the value it states changed, not the call's arguments
    ('total(3, 20) = 57.3'); None if it states none."""
    head, equals, value = text.rpartition("= ")
    changed = _change_number(value, rng, corrupt) if equals else None
    return head + equals + changed if changed is not None else None


def _document_line(line: str) -> bool:
    """A line of a spec or plan that holds a requirement or the deliverable."""
    return bool(_ITEM.match(line)) or line.startswith("Deliverable:")


def _ticket_line(line: str) -> bool:
    """A line of a ticket that holds a constant, a formula or the acceptance example."""
    return line.startswith(("- ", "Acceptance:"))


_calls = calls


def _sample(sites: list[tuple[int, Edit]], rng: random.Random) -> list[tuple[int, Edit]]:
    return sample(sites, rng, PER_KIND)


def injectors(corrupt: Corrupt) -> dict[str, Injector]:
    """The fault kinds of this program (``corrupt`` turns a number into a wrong one)."""

    def corrupted_number(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        sites: list[tuple[int, Edit]] = []
        for s in trace.steps:
            text = s.content
            if s.agent in ("ProductManager", "Architect") and re.match(r"SPEC|PLAN", text):
                wrong = _change_number(text, rng, corrupt, _document_line)
            elif s.agent == "Reviewer" and text.startswith("APPROVED"):
                wrong = _change_value(text, rng, corrupt)
            else:
                wrong = None
            if wrong is not None:
                sites.append((s.index, Edit(output=wrong)))
        for s in _calls(trace, "write_code"):
            code = str(step_arguments(s).get("code", ""))
            wrong = _change_number(code, rng, corrupt)
            if wrong is not None:
                change = ToolCallChange(set_arguments={"code": wrong})
                sites.append((s.index, Edit(tool_call_changes=[change])))
        return _sample(sites, rng)

    def wrong_tool_result(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        sites: list[tuple[int, Edit]] = []
        for tool in ("read_ticket", "run_tests", "evaluate"):
            for s in _calls(trace, tool):
                result = s.tool_results[0].content if s.tool_results else ""
                if tool == "run_tests":
                    counts = re.search(r"(\d+) of (\d+) tests passed", result)
                    if not counts:
                        continue
                    total = int(counts.group(2))
                    name = result.split(":", 1)[0]
                    wrong: str | None = (
                        f"{name}: {total - 1} of {total} tests passed; "
                        f"test {total} failed: AssertionError"
                    )
                elif tool == "read_ticket":
                    # A constant, a formula or the acceptance example; not the ticket's id.
                    wrong = _change_number(result, rng, corrupt, _ticket_line)
                else:
                    wrong = _change_value(result, rng, corrupt)
                if wrong is not None:
                    change = ToolResultChange(content=wrong)
                    sites.append((s.index, Edit(tool_result=change)))
        return _sample(sites, rng)

    def wrong_handoff(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        sites: list[tuple[int, Edit]] = []
        for s in trace.steps:
            for n, call in enumerate(s.tool_calls):
                if s.agent == "Supervisor" and call.name.startswith("transfer_to_"):
                    others = [w for w in WORKERS if f"transfer_to_{w}" != call.name]
                    change = ToolCallChange(index=n, name=f"transfer_to_{rng.choice(others)}")
                    sites.append((s.index, Edit(tool_call_changes=[change])))
        return _sample(sites, rng)

    def dropped_instruction(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        sites: list[tuple[int, Edit]] = []
        for s in trace.steps:
            if s.agent in ("ProductManager", "Architect") and re.match(r"SPEC|PLAN", s.content):
                lines = s.content.splitlines()
                items = [n for n, line in enumerate(lines) if _ITEM.match(line)]
                if items:
                    drop = rng.choice(items)
                    kept = "\n".join(line for n, line in enumerate(lines) if n != drop)
                    sites.append((s.index, Edit(output=kept)))
        return _sample(sites, rng)

    def premature_stop(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        sites: list[tuple[int, Edit]] = []
        seen: list[str] = []
        for s in trace.steps:
            if s.agent == "Supervisor" and s.tool_calls:
                guess = seen[-1] if seen else str(rng.randint(10, 999))
                sites.append((s.index, Edit(output=f"FINAL: {guess}")))
            if s.agent != "Supervisor" and not s.tool_calls:
                seen += _NUMBER.findall(s.content)
        return _sample(sites, rng)

    def ignored_error(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        return tool_errors(trace, rng, ERRORS, PER_KIND)

    return by_kind(
        corrupted_number,
        wrong_tool_result,
        wrong_handoff,
        dropped_instruction,
        premature_stop,
        ignored_error,
    )
