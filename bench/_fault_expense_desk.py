"""An expense-audit desk on the OpenAI Agents SDK (agents as tools) as a base for fault
injection.

The program is tests/fixtures/frameworks/agents_sdk_expense_desk.py, unmodified, at the
SDK's default settings (the Responses API, ``Runner.run``): a Manager that never hands
off calls four desks as tools (``Agent.as_tool``), one at a time, each with a numbered
list of what to do — ``read_receipts`` (the Receipts clerk, ``get_receipt`` per receipt),
``check_policy`` (the Policy desk, ``lookup_limit`` per category), ``convert_currency``
(the Currency desk, ``convert`` per receipt) and ``audit_claim`` (the Audit desk,
``cap_receipt`` per receipt) — and answers 'FINAL: reimburse <total> USD'. Each desk runs
as its own agent, so its model calls are steps of the trace under its own name, between
the Manager's call and the Manager's next step. A claim of n receipts in c categories
makes a run of 3n + c + 9 steps (13 to 32 here).

:func:`faithful` plays every agent correctly from what each request says, and trusts it:
the Manager calls the first desk it has not called yet, building its list from the
newest reports it was given (the receipts from the task; the categories, amounts, USD
amounts and limits from the RECEIPTS, POLICY and CONVERSIONS reports, a receipt missing
from any of them left out of the audit), and answers the newest AUDIT report's total; a
desk does each line of its list in order, one tool call per line, and reports what the
tools said. A base run succeeds, and a fault injected into it propagates to a wrong
total (or none) the way it would with a model that believes its inputs.

Faults (each where the base run has a step of that kind; at most :data:`PER_KIND` sites
of each kind per run, drawn with the seed):

* ``corrupted-number``: a number changed in a desk's report (a receipt's amount or units,
  a limit, a USD amount, the audited total), in the Manager's list for the Currency or
  Audit desk, or in a ``convert`` or ``cap_receipt`` argument;
* ``wrong-tool-result``: a receipt's amount or units (``get_receipt``), a limit
  (``lookup_limit``), a USD amount (``convert``) or what a receipt reimburses
  (``cap_receipt``) changed;
* ``wrong-handoff``: the Manager calls another desk than the one due (with the list
  meant for the due one) — the routing fault of a manager that never hands off;
* ``dropped-instruction``: one numbered line of the Manager's list for a desk dropped;
* ``premature-stop``: a desk about to call its tool reports instead, with what it has so
  far; the wrong total comes later, from the Manager;
* ``ignored-error``: a tool call fails, its result an error message, and the run goes on.

The Manager's calls of desks are not given wrong or failed results: what a desk returns
is its own agent's report, a step of the trace, and is faulted there.
"""

from __future__ import annotations

import random
import re
import sys
import zlib
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from faultfinder.replay import Edit
from faultfinder.replay.edits import ToolCallChange, ToolResultChange
from faultfinder.traces.schema import Step, Trace

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "fixtures" / "frameworks" / "agents_sdk_expense_desk.py"
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(PROGRAM.parent))

from _fault_common import (  # noqa: E402
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
    wrong_number,
)
from expense_data import CLAIMS, money  # noqa: E402

from frameworks_scripts import _call, _system  # noqa: E402

ENV = {"OPENAI_AGENTS_DISABLE_TRACING": "1", "OTEL_SDK_DISABLED": "true"}
"""The SDK's documented switch that keeps its traces home (as tests/test_replay_apis.py)."""
PER_KIND = 3
"""Most injection sites of one fault kind per base run (drawn with the seed)."""
DESKS = ("read_receipts", "check_policy", "convert_currency", "audit_claim")
"""The Manager's desks, as the tools it calls, in the order a claim goes through them."""
TOOLS = {
    "Receipts": "get_receipt",
    "Policy": "lookup_limit",
    "Currency": "convert",
    "Audit": "cap_receipt",
}
"""Each desk's own tool."""
ERRORS = {
    "get_receipt": ["Error: the receipt store timed out", "error: 503 Service Unavailable"],
    "lookup_limit": ["Error: the policy service is unavailable", "error: 502 Bad Gateway"],
    "convert": [
        "Error: the exchange-rate feed timed out",
        "Traceback (most recent call last):\n  KeyError: 'rate'",
    ],
    "cap_receipt": ["Error: the audit service timed out", "error: connection reset by peer"],
}
"""Tool results of the ``ignored-error`` fault, per tool (one drawn with the seed)."""
NO_TOTAL = "FINAL: no audited total (the claim could not be audited)."
"""The Manager's answer when no AUDIT report states a total (no number in it)."""

_NUM = r"-?\d+(?:\.\d+)?"
_CLAIM = re.compile(r"\bEC-\d+\b")
_BAND = re.compile(r"\((\w+) band\)")
_RECEIPT_ID = re.compile(r"\bR-\d+\b")
_ITEM = re.compile(r"^\s*(\d+)\.\s+(.+?)\s*$")
_FOR_BAND = re.compile(r"for the (\w+) band")
_RECEIPT = re.compile(
    rf"\): (\w+), ({_NUM}) (\w+), ({_NUM}) ([A-Z]{{3}}), dated (\d{{4}}-\d{{2}}-\d{{2}})"
)
_LIMIT = re.compile(rf"up to ({_NUM}) USD per (\w+)")
_USD = re.compile(rf"= ({_NUM}) USD\s*$")
_REIMBURSE = re.compile(rf"reimburse ({_NUM})\s*$")
_RECEIPT_LINE = re.compile(rf"^- (R-\d+): (\w+), (\d+) \w+, ({_NUM}) ([A-Z]{{3}}), (\S+)$", re.M)
_LIMIT_LINE = re.compile(rf"^- (\w+): ({_NUM}) USD per (\w+)$", re.M)
_CONVERTED_LINE = re.compile(rf"^- (R-\d+): ({_NUM}) USD$", re.M)
_TOTAL = re.compile(rf"Reimbursable total: ({_NUM})")
_TO_CONVERT = re.compile(rf"^(R-\d+): ({_NUM}) ([A-Z]{{3}}) on (\S+)$")
_TO_AUDIT = re.compile(rf"^(R-\d+): ({_NUM}) USD, limit ({_NUM}) USD per \w+ x (-?\d+)$")


def tasks() -> list[tuple[str, str, str]]:
    """(id, task, right answer): one per expense claim."""
    return [(c.id.lower(), c.text(), money(c.answer())) for c in CLAIMS.values()]


def command(task: str) -> list[str]:
    return [sys.executable, str(PROGRAM), task]


# --- reading a request ------------------------------------------------------------------


@dataclass(frozen=True)
class _History(History):
    """A request's history; its task is the claim (the Manager) or the Manager's list (a
    desk)."""

    size: int
    """How many messages the request has."""

    def latest(self, heading: str) -> str:
        """The newest tool result that begins with ``heading`` ('' if none)."""
        return next(
            (r for c in reversed(self.calls) if (r := self.result(c)).startswith(heading)), ""
        )


def _history(messages: list[dict[str, Any]]) -> _History:
    base = read_history(messages)
    return _History(base.task, base.calls, base.results, len(messages))


def _role(messages: list[dict[str, Any]]) -> str:
    return role_of(_system({"messages": messages}))


def _items(text: str) -> list[str]:
    """The numbered lines of a list, without their numbers."""
    return [m.group(2) for line in text.split("\n") if (m := _ITEM.match(line))]


def _tool_call(history: _History, role: str, name: str, arguments: dict[str, Any]) -> Any:
    # Unique across the desks' nested runs and a function of the request only (replay
    # matches later requests, which carry the id, against the recording).
    tag = zlib.crc32(history.task.encode()) % 100_000
    return {"tool_calls": [_call(name, arguments, f"call_{role.lower()}_{history.size}_{tag}")]}


# --- the desks' reports (shared with the premature-stop fault) --------------------------


def receipts_report(given: str, done: list[tuple[str, str]]) -> str:
    """RECEIPTS from (receipt, get_receipt result) pairs."""
    claim = _CLAIM.search(given)
    lines = [f"RECEIPTS for {claim.group(0) if claim else 'the claim'}"]
    for receipt, result in done:
        found = _RECEIPT.search(result)
        if failed(result) or not found:
            lines.append(f"- {receipt}: unavailable ({result})")
            continue
        category, units, unit, amount, currency, date = found.groups()
        lines.append(f"- {receipt}: {category}, {units} {unit}, {amount} {currency}, {date}")
    return "\n".join(lines)


def policy_report(given: str, done: list[tuple[str, str]]) -> str:
    """POLICY from (category, lookup_limit result) pairs."""
    band = _FOR_BAND.search(given)
    lines = [f"POLICY for the {band.group(1) if band else '?'} band"]
    for category, result in done:
        found = _LIMIT.search(result)
        if failed(result) or not found:
            lines.append(f"- {category}: unknown ({result})")
        else:
            lines.append(f"- {category}: {found.group(1)} USD per {found.group(2)}")
    return "\n".join(lines)


def conversions_report(given: str, done: list[tuple[str, str]]) -> str:
    """CONVERSIONS from (receipt, convert result) pairs."""
    lines = ["CONVERSIONS"]
    for receipt, result in done:
        found = _USD.search(result)
        if failed(result) or not found:
            lines.append(f"- {receipt}: not converted ({result})")
        else:
            lines.append(f"- {receipt}: {found.group(1)} USD")
    return "\n".join(lines)


def audit_report(given: str, done: list[tuple[str, str]]) -> str:
    """AUDIT from (receipt, cap_receipt result) pairs, with the sum of what they reimburse."""
    claim = _CLAIM.search(given)
    lines = [f"AUDIT for {claim.group(0) if claim else 'the claim'}"]
    total = Decimal(0)
    for receipt, result in done:
        found = _REIMBURSE.search(result)
        if failed(result) or not found:
            lines.append(f"- {receipt}: not audited ({result})")
        else:
            lines.append(f"- {receipt}: reimburse {found.group(1)}")
            total += Decimal(found.group(1))
    lines.append(f"Reimbursable total: {money(total)}")
    return "\n".join(lines)


# --- the agents -------------------------------------------------------------------------


def _manager_list(desk: str, history: _History) -> str:
    """The Manager's numbered list for ``desk``, from the task and the newest reports."""
    claim = _CLAIM.search(history.task)
    claim_id = claim.group(0) if claim else "the claim"
    band = _BAND.search(history.task)
    receipts = _RECEIPT_LINE.findall(history.latest("RECEIPTS"))
    if desk == "read_receipts":
        head = f"Claim {claim_id}: read these receipts."
        items = _RECEIPT_ID.findall(history.task)
    elif desk == "check_policy":
        head = f"Limits for the {band.group(1) if band else '?'} band:"
        items = list(dict.fromkeys(category for _, category, *_ in receipts))
    elif desk == "convert_currency":
        head = "Convert to USD:"
        items = [f"{r}: {amount} {cur} on {date}" for r, _, _, amount, cur, date in receipts]
    else:
        head = f"Audit claim {claim_id}:"
        usd = dict(_CONVERTED_LINE.findall(history.latest("CONVERSIONS")))
        limits = {c: (v, u) for c, v, u in _LIMIT_LINE.findall(history.latest("POLICY"))}
        items = [
            f"{r}: {usd[r]} USD, limit {limits[c][0]} USD per {limits[c][1]} x {units}"
            for r, c, units, *_ in receipts
            if r in usd and c in limits
        ]
    return "\n".join([head, *(f"{n}. {item}" for n, item in enumerate(items, 1))])


def _manager(history: _History) -> Any:
    called = {c.name for c in history.calls}
    due = next((d for d in DESKS if d not in called), None)
    if due is not None:
        return _tool_call(history, "manager", due, {"input": _manager_list(due, history)})
    total = _TOTAL.search(history.latest("AUDIT"))
    return f"FINAL: reimburse {total.group(1)} USD" if total else NO_TOTAL


def _desk(role: str, history: _History, stop: bool = False) -> Any:
    """A desk: one call of its tool per line of its list, in order, then its report (or
    its report at once, with what it has, when ``stop``)."""
    tool = TOOLS[role]
    lines = _items(history.task)
    todo: list[tuple[str, dict[str, Any] | None]] = []  # (what, arguments; None: cannot)
    for line in lines:
        key = line.split(":", 1)[0].strip()
        if role == "Receipts":
            todo.append((key, {"receipt_id": key}))
        elif role == "Policy":
            band = _FOR_BAND.search(history.task)
            todo.append((key, {"band": band.group(1) if band else "?", "category": key}))
        elif role == "Currency":
            found = _TO_CONVERT.match(line)
            todo.append(
                (key, None)
                if found is None
                else (key, {"amount": float(found[2]), "currency": found[3], "date": found[4]})
            )
        else:
            found = _TO_AUDIT.match(line)
            arguments = None
            if found is not None:
                arguments = {
                    "receipt_id": found[1],
                    "usd": float(found[2]),
                    "limit": float(found[3]),
                    "units": int(found[4]),
                }
            todo.append((key, arguments))
    made = [c for c in history.calls if c.name == tool]
    callable_ = [(what, arguments) for what, arguments in todo if arguments is not None]
    if not stop and len(made) < len(callable_):
        return _tool_call(history, role, tool, callable_[len(made)][1] or {})
    results = iter(history.result(c) for c in made)
    done = [
        (what, next(results, "") if arguments is not None else "error: nothing to work with")
        for what, arguments in todo
    ]
    done = [(what, result) for what, result in done if result]
    report = {
        "Receipts": receipts_report,
        "Policy": policy_report,
        "Currency": conversions_report,
        "Audit": audit_report,
    }[role]
    return report(history.task, done)


def faithful(body: dict[str, Any]) -> Any:
    """Every agent of the program, played by rule and without mistakes."""
    messages = body["messages"]
    role, history = _role(messages), _history(messages)
    if role == "Manager":
        return _manager(history)
    return _desk(role if role in TOOLS else "Audit", history)


def report_so_far(step: Step) -> str:
    """What the desk of ``step`` reports if it stops there instead of calling its tool."""
    messages = list(step.input_messages or [])
    return str(_desk(_role(messages), _history(messages), stop=True))


def final_answer(trace: Trace) -> str | None:
    """The Manager's closing text (the program prints it as its answer)."""
    for s in reversed(trace.steps):
        if s.agent == "Manager" and "FINAL:" in s.content:
            return s.content.rpartition("FINAL:")[2].strip()
    return None


# --- the faults -------------------------------------------------------------------------


def _change(
    text: str, pattern: re.Pattern[str], groups: tuple[int, ...], rng: random.Random, c: Corrupt
) -> str | None:
    """``text`` with one of ``pattern``'s number groups changed; None if it has none."""
    spots = [(m, g) for m in pattern.finditer(text) for g in groups]
    if not spots:
        return None
    match, group = rng.choice(spots)
    wrong = wrong_number(match.group(group), rng, c)
    return text[: match.start(group)] + wrong + text[match.end(group) :]


_REPORT_NUMBERS = {
    "RECEIPTS": (re.compile(rf"^- R-\d+: \w+, (\d+) \w+, ({_NUM}) ", re.M), (1, 2)),
    "POLICY": (re.compile(rf"^- \w+: ({_NUM}) USD per", re.M), (1,)),
    "CONVERSIONS": (re.compile(rf"^- R-\d+: ({_NUM}) USD$", re.M), (1,)),
    "AUDIT": (_TOTAL, (1,)),
}
"""In each desk's report, the numbers that the Manager reads."""
_LIST_NUMBERS = {
    "convert_currency": (re.compile(rf"^\d+\. R-\d+: ({_NUM}) [A-Z]{{3}}", re.M), (1,)),
    "audit_claim": (
        re.compile(rf"^\d+\. R-\d+: ({_NUM}) USD, limit ({_NUM}) USD per \w+ x (\d+)$", re.M),
        (1, 2, 3),
    ),
}
"""In the Manager's lists, the numbers that a desk reads."""
_RESULT_NUMBERS = {
    "get_receipt": (re.compile(rf"\): \w+, (\d+) \w+, ({_NUM}) [A-Z]{{3}}"), (1, 2)),
    "lookup_limit": (_LIMIT, (1,)),
    "convert": (_USD, (1,)),
    "cap_receipt": (_REIMBURSE, (1,)),
}
"""In each tool's result, the numbers that its desk reads."""
_ARGUMENTS = {"convert": ("amount",), "cap_receipt": ("usd", "limit", "units")}


def _desk_calls(trace: Trace) -> list[Step]:
    """The Manager's steps that call a desk."""
    return [
        s
        for s in trace.steps
        if s.agent == "Manager" and s.tool_calls and s.tool_calls[0].name in DESKS
    ]


def _list_edit(new: str) -> Edit:
    """The Manager's call of a desk with ``new`` as its list."""
    return Edit(tool_call_changes=[ToolCallChange(set_arguments={"input": new})])


def injectors(corrupt: Corrupt) -> dict[str, Injector]:
    """The fault kinds of this program (``corrupt`` turns a number into a wrong one)."""

    def _sample(sites: list[tuple[int, Edit]], rng: random.Random) -> list[tuple[int, Edit]]:
        return sample(sites, rng, PER_KIND)

    def corrupted_number(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        sites: list[tuple[int, Edit]] = []
        for s in trace.steps:
            heading = next((h for h in _REPORT_NUMBERS if s.content.startswith(h)), None)
            if heading is None or s.tool_calls or s.agent == "Manager":
                continue
            wrong = _change(s.content, *_REPORT_NUMBERS[heading], rng, corrupt)
            if wrong is not None:
                sites.append((s.index, Edit(output=wrong)))
        for s in _desk_calls(trace):
            desk = s.tool_calls[0].name
            if desk in _LIST_NUMBERS:
                given = str(step_arguments(s).get("input", ""))
                wrong = _change(given, *_LIST_NUMBERS[desk], rng, corrupt)
                if wrong is not None:
                    sites.append((s.index, _list_edit(wrong)))
        for tool, keys in _ARGUMENTS.items():
            for s in calls(trace, tool):
                key = rng.choice(keys)
                value = step_arguments(s).get(key)
                if not isinstance(value, int | float):
                    continue
                wrong_value = wrong_number(str(value), rng, corrupt)
                new: float = int(float(wrong_value)) if key == "units" else float(wrong_value)
                change = ToolCallChange(set_arguments={key: new})
                sites.append((s.index, Edit(tool_call_changes=[change])))
        return _sample(sites, rng)

    def wrong_tool_result(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        sites: list[tuple[int, Edit]] = []
        for tool, (pattern, groups) in _RESULT_NUMBERS.items():
            for s in calls(trace, tool):
                result = s.tool_results[0].content if s.tool_results else ""
                wrong = _change(result, pattern, groups, rng, corrupt)
                if wrong is not None:
                    sites.append((s.index, Edit(tool_result=ToolResultChange(content=wrong))))
        return _sample(sites, rng)

    def wrong_handoff(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        sites: list[tuple[int, Edit]] = []
        for s in _desk_calls(trace):
            other = rng.choice([d for d in DESKS if d != s.tool_calls[0].name])
            sites.append((s.index, Edit(tool_call_changes=[ToolCallChange(name=other)])))
        return _sample(sites, rng)

    def dropped_instruction(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        sites: list[tuple[int, Edit]] = []
        for s in _desk_calls(trace):
            lines = str(step_arguments(s).get("input", "")).split("\n")
            numbered = [n for n, line in enumerate(lines) if _ITEM.match(line)]
            if numbered:
                drop = rng.choice(numbered)
                kept = [line for n, line in enumerate(lines) if n != drop]
                # Renumbered, as a list written without that line would be.
                items = _items("\n".join(kept))
                head = [line for line in kept if not _ITEM.match(line)]
                new = "\n".join([*head, *(f"{n}. {item}" for n, item in enumerate(items, 1))])
                sites.append((s.index, _list_edit(new)))
        return _sample(sites, rng)

    def premature_stop(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        sites = [
            (s.index, Edit(output=report_so_far(s)))
            for s in trace.steps
            if s.tool_calls and TOOLS.get(s.agent) == s.tool_calls[0].name
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
