"""A warehouse replenishment team on LangGraph as a base for fault injection.

The program is tests/fixtures/frameworks/langgraph_warehouse.py, unmodified: a
``StateGraph`` wired by hand in which a Coordinator routes by its own answer
('NEXT: <agent>') to a Planner (a numbered PLAN), Inventory (``check_stock`` per item),
a Forecaster (``forecast_demand`` per item), Purchasing (``compute_order`` per item) and
a Reviewer (``price_order``: the subtotal plus freight), each reporting back; the
Coordinator then answers 'FINAL: <total>'. A request of n items makes a run of 3n + 12
steps (15 to 33 for n = 1..7).

:func:`faithful` plays every agent correctly from what each request says, and trusts it:
the Coordinator sends the request to the Planner, then to the agent that follows the last
one to report in the plan's order; Inventory and the Forecaster do the plan's lines;
Purchasing orders each item of the newest FORECAST with the newest INVENTORY's stock
(none, if it is not there); the Reviewer prices the newest PURCHASE ORDER's subtotal; the
Coordinator answers the REVIEW's total. A base run succeeds, and a fault injected into
it propagates to a wrong total (or none) the way it would with a model that believes its
inputs.

Faults (each where the base run has a step of that kind; at most :data:`PER_KIND` sites
of each kind per run, drawn with the seed):

* ``corrupted-number``: a number changed in the PLAN (an item's weeks), in the INVENTORY
  or FORECAST report (an item's stock or demand), in the PURCHASE ORDER's subtotal, in
  the REVIEW's total, or in a ``compute_order`` or ``price_order`` argument;
* ``wrong-tool-result``: the stock (``check_stock``), the forecast demand
  (``forecast_demand``), a line's cost (``compute_order``) or the total
  (``price_order``) changed;
* ``wrong-handoff``: the Coordinator routes to another agent than the one due;
* ``dropped-instruction``: one numbered line of the PLAN dropped;
* ``premature-stop``: a worker about to call a tool reports instead, with what it has so
  far (the Reviewer: the subtotal as the total); the wrong total comes later, from the
  Coordinator;
* ``ignored-error``: a tool call fails, its result an error message, and the run goes on.
"""

from __future__ import annotations

import random
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faultfinder.replay import Edit
from faultfinder.replay.edits import ToolCallChange, ToolResultChange
from faultfinder.traces.schema import Step, Trace

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "fixtures" / "frameworks" / "langgraph_warehouse.py"
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(PROGRAM.parent))

from _fault_common import (  # noqa: E402
    Call,
    Corrupt,
    History,
    Injector,
    by_kind,
    calls,
    failed,
    read_history,
    role_of,
    sample,
    step_arguments,
    tool_errors,
)
from warehouse_data import REQUESTS, money  # noqa: E402

from frameworks_scripts import _call, _call_id, _system  # noqa: E402

PER_KIND = 3
"""Most injection sites of one fault kind per base run (drawn with the seed)."""
AGENTS = ("planner", "inventory", "forecaster", "purchasing", "reviewer")
"""The Coordinator's agents, by the names it routes to."""
HEADINGS = {
    "PLAN": "planner",
    "INVENTORY": "inventory",
    "FORECAST": "forecaster",
    "PURCHASE ORDER": "purchasing",
    "REVIEW": "reviewer",
}
"""How each agent's report begins."""
TOOLS = {
    "inventory": "check_stock",
    "forecaster": "forecast_demand",
    "purchasing": "compute_order",
    "reviewer": "price_order",
}
ERRORS = {
    "check_stock": ["Error: the stock database timed out", "error: 503 Service Unavailable"],
    "forecast_demand": [
        "Error: the forecasting service timed out",
        "Traceback (most recent call last):\n  ValueError: not enough history",
    ],
    "compute_order": ["Error: the pricing service timed out", "error: connection reset by peer"],
    "price_order": ["Error: the freight service is unavailable", "error: 502 Bad Gateway"],
}
"""Tool results of the ``ignored-error`` fault, per tool (one drawn with the seed)."""
NO_TOTAL = "FINAL: no reviewed order (nothing was priced)."
"""The Coordinator's answer when no REVIEW states a total (no number in it)."""

_NUM = r"-?\d+(?:\.\d+)?"
_REQUEST = re.compile(r"\bRR-\d+\b")
_TASK = re.compile(r"for the (\w+) warehouse: cover (\d+) weeks of demand for (.+?)\. Report", re.S)
_PLAN_HEAD = re.compile(r"^PLAN for (\S+) \((\w+) warehouse")
_PLAN_LINE = re.compile(r"^(\d+)\.\s+(Inventory|Forecaster|Purchasing|Reviewer):\s+(.+)$")
_CHECK = re.compile(r"check stock of (.+) at (\w+)$")
_FORECAST = re.compile(r"forecast (\d+) weeks of demand for (.+) at (\w+)$")
_AVAILABLE = re.compile(r"^- (.+): (\d+) available$", re.M)
_DEMAND = re.compile(r"^- (.+): demand (\d+)$", re.M)
_SUBTOTAL = re.compile(rf"^Subtotal: ({_NUM})$", re.M)
_TOTAL = re.compile(rf"Total order cost: ({_NUM})")
_STOCK = re.compile(r"(\d+) on hand, (\d+) reserved")
_DEMAND_RESULT = re.compile(r"forecast demand (\d+) units")
_LINE_RESULT = re.compile(rf"order (\d+) units at {_NUM} each = ({_NUM})\s*$")
_VALUE = re.compile(rf"= ({_NUM})\s*$")


def tasks() -> list[tuple[str, str, str]]:
    """(id, task, right answer): one per replenishment request."""
    return [(r.id.lower(), r.text(), money(r.answer())) for r in REQUESTS.values()]


def command(task: str) -> list[str]:
    return [sys.executable, str(PROGRAM), task]


# --- reading a request ------------------------------------------------------------------


@dataclass(frozen=True)
class _History(History):
    reports: list[tuple[str, str]]
    """(agent, text) of each report, in order (assistant texts that begin a heading)."""

    def latest(self, agent: str) -> str | None:
        return next((t for a, t in reversed(self.reports) if a == agent), None)

    def made(self, tool: str, item: str) -> Call | None:
        """The newest call of ``tool`` for ``item`` (whatever its other arguments)."""
        return next(
            (c for c in reversed(self.calls) if c.name == tool and c.arguments.get("item") == item),
            None,
        )


def _reporter(text: str) -> str | None:
    return next((a for h, a in HEADINGS.items() if text.startswith(h)), None)


def _history(body: dict[str, Any]) -> _History:
    messages = body["messages"]
    reports = []
    for m in messages:
        if m.get("role") == "assistant":
            text = str(m.get("content") or "")
            agent = _reporter(text)
            if agent and not m.get("tool_calls"):
                reports.append((agent, text))
    base = read_history(messages)
    return _History(base.task, base.calls, base.results, reports)


def _plan(history: _History) -> list[tuple[str, str]]:
    """(agent, instruction) of each numbered line of the newest PLAN."""
    lines = (
        _PLAN_LINE.match(line.strip()) for line in (history.latest("planner") or "").split("\n")
    )
    return [(m.group(2).lower(), m.group(3)) for m in lines if m]


def _header(history: _History) -> tuple[str, str]:
    """The request's id and warehouse (from the task)."""
    request = _REQUEST.search(history.task)
    task = _TASK.search(history.task)
    return (request.group(0) if request else "?", task.group(1) if task else "?")


def _tool_call(body: dict[str, Any], name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [_call(name, arguments, _call_id(body))]}


# --- the reports (shared with the premature-stop fault) ---------------------------------


def _item_report(
    heading: str,
    request: str,
    warehouse: str,
    done: list[tuple[str, str]],
    found: re.Pattern[str],
    say: Callable[[re.Match[str]], str],
) -> str:
    """A report with one line per (item, tool result) pair: what ``say`` makes of the
    result's ``found`` match, or 'unknown' when the call failed."""
    lines = [f"{heading} for {request} ({warehouse})"]
    for item, result in done:
        match = found.search(result)
        if failed(result) or not match:
            lines.append(f"- {item}: unknown ({result})")
        else:
            lines.append(f"- {item}: {say(match)}")
    return "\n".join(lines)


def inventory_report(request: str, warehouse: str, done: list[tuple[str, str]]) -> str:
    """INVENTORY from (item, check_stock result) pairs."""
    return _item_report(
        "INVENTORY",
        request,
        warehouse,
        done,
        _STOCK,
        lambda m: f"{int(m.group(1)) - int(m.group(2))} available",
    )


def forecast_report(request: str, warehouse: str, done: list[tuple[str, str]]) -> str:
    """FORECAST from (item, forecast_demand result) pairs."""
    return _item_report(
        "FORECAST", request, warehouse, done, _DEMAND_RESULT, lambda m: f"demand {m.group(1)}"
    )


def purchase_report(request: str, warehouse: str, done: list[tuple[str, str | None]]) -> str:
    """PURCHASE ORDER from (item, compute_order result) pairs (None: no demand known)."""
    lines = [f"PURCHASE ORDER for {request} ({warehouse})"]
    subtotal = 0.0
    for item, result in done:
        line = _LINE_RESULT.search(result or "")
        if result is None:
            lines.append(f"- {item}: no order (demand unknown)")
        elif failed(result) or not line:
            lines.append(f"- {item}: not priced ({result})")
        else:
            lines.append(f"- {item}: {line.group(1)} units = {line.group(2)}")
            subtotal += float(line.group(2))
    lines.append(f"Subtotal: {money(subtotal)}")
    return "\n".join(lines)


def review_report(request: str, total: str | None, why: str = "") -> str:
    if total is None:
        return f"REVIEW for {request}: the order could not be priced ({why})."
    return f"REVIEW for {request}: approved. Total order cost: {total}"


# --- the agents -------------------------------------------------------------------------


def _coordinator(history: _History) -> str:
    order = list(dict.fromkeys(agent for agent, _ in _plan(history)))
    if not history.reports:
        return "NEXT: planner"
    last = history.reports[-1][0]
    if last == "planner":
        due = order[0] if order else None
    elif last in order and order.index(last) + 1 < len(order):
        due = order[order.index(last) + 1]
    else:
        due = None
    if due is not None:
        return f"NEXT: {due}"
    review = history.latest("reviewer")
    total = _TOTAL.search(review or "")
    return f"FINAL: {total.group(1)}" if total else NO_TOTAL


def _planner(history: _History) -> str:
    request, warehouse = _header(history)
    task = _TASK.search(history.task)
    if task is None:
        return f"PLAN for {request} ({warehouse} warehouse): the request names no items."
    weeks, listed = task.group(2), task.group(3)
    items = [i.strip() for i in re.split(r",| and ", listed) if i.strip()]
    steps = [f"Inventory: check stock of {item} at {warehouse}" for item in items]
    steps += [
        f"Forecaster: forecast {weeks} weeks of demand for {item} at {warehouse}" for item in items
    ]
    steps.append("Purchasing: compute the order of each forecast item")
    steps.append(f"Reviewer: price the order for {warehouse} with freight and report the total")
    lines = [f"PLAN for {request} ({warehouse} warehouse, {weeks} weeks)"]
    lines += [f"{n}. {step}" for n, step in enumerate(steps, 1)]
    return "\n".join(lines)


def _inventory(body: dict[str, Any], history: _History) -> Any:
    wanted = [
        m.groups() for a, line in _plan(history) if a == "inventory" if (m := _CHECK.search(line))
    ]
    done = []
    for item, warehouse in wanted:
        call = history.made("check_stock", item)
        if call is None:
            return _tool_call(body, "check_stock", {"item": item, "warehouse": warehouse})
        done.append((item, history.result(call)))
    return inventory_report(*_header(history), done)


def _forecaster(body: dict[str, Any], history: _History) -> Any:
    wanted = [
        m.groups()
        for a, line in _plan(history)
        if a == "forecaster"
        if (m := _FORECAST.search(line))
    ]
    done = []
    for weeks, item, warehouse in wanted:
        call = history.made("forecast_demand", item)
        if call is None:
            arguments = {"item": item, "warehouse": warehouse, "weeks": int(weeks)}
            return _tool_call(body, "forecast_demand", arguments)
        done.append((item, history.result(call)))
    return forecast_report(*_header(history), done)


def _purchasing(body: dict[str, Any], history: _History) -> Any:
    demand = dict(_DEMAND.findall(history.latest("forecaster") or ""))
    available = dict(_AVAILABLE.findall(history.latest("inventory") or ""))
    items = [
        line[2:].split(":", 1)[0] for line in (history.latest("forecaster") or "").split("\n")[1:]
    ]
    done: list[tuple[str, str | None]] = []
    for item in items:
        if item not in demand:
            done.append((item, None))
            continue
        call = history.made("compute_order", item)
        if call is None:
            arguments = {
                "item": item,
                "demand": int(demand[item]),
                "available": int(available.get(item, 0)),
            }
            return _tool_call(body, "compute_order", arguments)
        done.append((item, history.result(call)))
    return purchase_report(*_header(history), done)


def _reviewer(body: dict[str, Any], history: _History) -> Any:
    request, warehouse = _header(history)
    order = history.latest("purchasing")
    subtotal = _SUBTOTAL.search(order or "")
    if subtotal is None:
        return review_report(request, None, "there is no purchase order")
    call = next((c for c in reversed(history.calls) if c.name == "price_order"), None)
    if call is None:
        arguments = {"warehouse": warehouse, "subtotal": float(subtotal.group(1))}
        return _tool_call(body, "price_order", arguments)
    result = history.result(call)
    value = _VALUE.search(result)
    if failed(result) or not value:
        return review_report(request, None, result)
    return review_report(request, value.group(1))


def faithful(body: dict[str, Any]) -> Any:
    """Every agent of the program, played by rule and without mistakes."""
    history, role = _history(body), role_of(_system(body))
    if role == "Coordinator":
        return _coordinator(history)
    if role == "Planner":
        return _planner(history)
    if role == "Inventory":
        return _inventory(body, history)
    if role == "Forecaster":
        return _forecaster(body, history)
    if role == "Purchasing":
        return _purchasing(body, history)
    return _reviewer(body, history)


def final_answer(trace: Trace) -> str | None:
    """The Coordinator's closing text (the program prints it as its answer)."""
    for s in reversed(trace.steps):
        if s.agent == "Coordinator" and s.content.startswith("FINAL:"):
            return s.content.removeprefix("FINAL:").strip()
    return None


# --- the faults -------------------------------------------------------------------------


def _swap(text: str, match: re.Match[str], group: int, new: str) -> str:
    return text[: match.start(group)] + new + text[match.end(group) :]


def _change(
    text: str,
    pattern: re.Pattern[str],
    rng: random.Random,
    corrupt: Corrupt,
    groups: tuple[int, ...] = (1,),
) -> str | None:
    """``text`` with one of ``pattern``'s number groups changed; None if it has none."""
    spots = [(m, g) for m in pattern.finditer(text) for g in groups]
    if not spots:
        return None
    match, group = rng.choice(spots)
    return _swap(text, match, group, corrupt(match.group(group), rng))


_REPORT_NUMBERS = {
    "planner": (re.compile(r"^\d+\.\s+Forecaster: forecast (\d+) weeks", re.M), (1,)),
    "inventory": (re.compile(r"^- .+: (\d+) available$", re.M), (1,)),
    "forecaster": (re.compile(r"^- .+: demand (\d+)$", re.M), (1,)),
    "purchasing": (_SUBTOTAL, (1,)),
    "reviewer": (_TOTAL, (1,)),
}
"""In each agent's report, the numbers that the next agent reads."""
_RESULT_NUMBERS = {
    "check_stock": (_STOCK, (1, 2)),
    "forecast_demand": (_DEMAND_RESULT, (1,)),
    "compute_order": (_VALUE, (1,)),
    "price_order": (_VALUE, (1,)),
}
"""In each tool's result, the numbers that its caller reads."""
_ARGUMENTS = {"compute_order": ("demand", "available"), "price_order": ("subtotal",)}


def _agent(step: Step) -> str:
    return step.agent.lower()


def _context(trace: Trace) -> tuple[str, str]:
    """The request id and warehouse, from the base run's PLAN."""
    for s in trace.steps:
        head = _PLAN_HEAD.match(s.content)
        if head:
            return head.group(1), head.group(2)
    return "?", "?"


def _early_report(trace: Trace, step: Step) -> str:
    """What the worker of ``step`` reports if it stops there: its earlier calls' results."""
    request, warehouse = _context(trace)
    tool = step.tool_calls[0].name
    earlier = [s for s in calls(trace, tool) if s.index < step.index and s.tool_results]
    done = [(str(step_arguments(s).get("item")), s.tool_results[0].content) for s in earlier]
    if tool == "check_stock":
        return inventory_report(request, warehouse, done)
    if tool == "forecast_demand":
        return forecast_report(request, warehouse, done)
    if tool == "compute_order":
        return purchase_report(request, warehouse, [(i, r) for i, r in done])
    order = next(
        (
            s.content
            for s in reversed(trace.steps[: step.index])
            if s.content.startswith("PURCHASE ORDER")
        ),
        "",
    )
    subtotal = _SUBTOTAL.search(order)
    return review_report(request, subtotal.group(1) if subtotal else "0.00")


def injectors(corrupt: Corrupt) -> dict[str, Injector]:
    """The fault kinds of this program (``corrupt`` turns a number into a wrong one)."""

    def _sample(sites: list[tuple[int, Edit]], rng: random.Random) -> list[tuple[int, Edit]]:
        return sample(sites, rng, PER_KIND)

    def corrupted_number(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        sites: list[tuple[int, Edit]] = []
        for s in trace.steps:
            agent = _reporter(s.content)
            if agent is None or s.tool_calls:
                continue
            pattern, groups = _REPORT_NUMBERS[agent]
            wrong = _change(s.content, pattern, rng, corrupt, groups)
            if wrong is not None:
                sites.append((s.index, Edit(output=wrong)))
        for tool, keys in _ARGUMENTS.items():
            for s in calls(trace, tool):
                key = rng.choice(keys)
                value = step_arguments(s).get(key)
                if value is None:
                    continue
                wrong_value = corrupt(str(value), rng)
                number: float | int = (
                    float(wrong_value) if tool == "price_order" else int(float(wrong_value))
                )
                change = ToolCallChange(set_arguments={key: number})
                sites.append((s.index, Edit(tool_call_changes=[change])))
        return _sample(sites, rng)

    def wrong_tool_result(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        sites: list[tuple[int, Edit]] = []
        for tool, (pattern, groups) in _RESULT_NUMBERS.items():
            for s in calls(trace, tool):
                result = s.tool_results[0].content if s.tool_results else ""
                wrong = _change(result, pattern, rng, corrupt, groups)
                if wrong is not None:
                    sites.append((s.index, Edit(tool_result=ToolResultChange(content=wrong))))
        return _sample(sites, rng)

    def wrong_handoff(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        sites: list[tuple[int, Edit]] = []
        for s in trace.steps:
            found = re.match(r"NEXT: (\w+)", s.content)
            if s.agent == "Coordinator" and found:
                other = rng.choice([a for a in AGENTS if a != found.group(1)])
                sites.append((s.index, Edit(output=f"NEXT: {other}")))
        return _sample(sites, rng)

    def dropped_instruction(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        sites: list[tuple[int, Edit]] = []
        for s in trace.steps:
            if s.agent == "Planner" and s.content.startswith("PLAN"):
                lines = s.content.split("\n")
                items = [n for n, line in enumerate(lines) if _PLAN_LINE.match(line)]
                if items:
                    drop = rng.choice(items)
                    kept = "\n".join(line for n, line in enumerate(lines) if n != drop)
                    sites.append((s.index, Edit(output=kept)))
        return _sample(sites, rng)

    def premature_stop(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        sites = [
            (s.index, Edit(output=_early_report(trace, s)))
            for s in trace.steps
            if s.tool_calls and TOOLS.get(_agent(s)) == s.tool_calls[0].name
        ]
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
