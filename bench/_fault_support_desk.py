"""A billing support desk on the OpenAI Agents SDK as a base for fault injection.

The program is tests/fixtures/frameworks/agents_sdk_support_desk.py, unmodified, at the
SDK's default settings (the Responses API, ``Runner.run``): a Triage agent writes a
numbered CASE PLAN and routes the case by handoffs to Accounts (``get_account``,
``get_invoice``), Policy (``lookup_policy``) and Refunds (``compute_refund``,
``apply_cap``), each of whom hands it back; Triage then answers the refund. A case of n
invoices over r refund reasons makes a run of 2n + r + 10 steps (13 to 29 here).

:func:`faithful` plays every agent correctly from what each request says, and trusts it:
Triage routes to the first specialist of its plan that has not reported, Accounts and
Policy fetch what the plan lists, Refunds computes from the newest ACCOUNTS and POLICY
reports and the calculator's results, and Triage answers with the newest REFUNDS report's
amount. A base run succeeds, and a fault injected into it propagates to a wrong refund
(or none) the way it would with a model that believes its inputs.

Faults (each where the base run has a step of that kind; at most :data:`PER_KIND` sites
of each kind per run, drawn with the seed):

* ``corrupted-number``: a number changed in the ACCOUNTS or POLICY report, in the
  REFUNDS report's amount due, or in a ``compute_refund`` or ``apply_cap`` argument;
* ``wrong-tool-result``: an account's plan, an invoice's or a policy's number, or a
  refund or capped total the calculator returns, changed;
* ``wrong-handoff``: Triage transfers to another specialist than the one due;
* ``dropped-instruction``: one numbered line of the CASE PLAN dropped;
* ``premature-stop``: Triage, or a specialist about to call a tool, answers a refund
  (the last amount it saw) instead;
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
PROGRAM = ROOT / "tests" / "fixtures" / "frameworks" / "agents_sdk_support_desk.py"
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
    wrong_number,
)
from support_ledger import CASES, money  # noqa: E402

from frameworks_scripts import _call, _call_id, _system, _tools  # noqa: E402

ENV = {"OPENAI_AGENTS_DISABLE_TRACING": "1", "OTEL_SDK_DISABLED": "true"}
"""The SDK's documented switch that keeps its traces home (as tests/test_replay_apis.py)."""
PER_KIND = 3
"""Most injection sites of one fault kind per base run (drawn with the seed)."""
SPECIALISTS = ("Accounts", "Policy", "Refunds")
"""Triage's specialists, in the order a case goes through them."""
PLANS = ("Basic", "Pro", "Business")
ERRORS = {
    "get_account": ["Error: the billing service timed out", "error: 503 Service Unavailable"],
    "get_invoice": ["Error: the ledger timed out", "error: connection reset by peer"],
    "lookup_policy": ["Error: the policy book is unavailable", "error: 502 Bad Gateway"],
    "compute_refund": [
        "Error: the refund calculator timed out",
        "Traceback (most recent call last):\n  ZeroDivisionError: float division by zero",
    ],
    "apply_cap": ["Error: the refund service timed out", "error: connection refused"],
}
"""Tool results of the ``ignored-error`` fault, per tool (one drawn with the seed)."""

_NUM = r"-?\d+(?:\.\d+)?"
_NUMBER = re.compile(r"(?<![\w.-])-?\d+(?:\.\d+)?(?![\w.])")
"""A number standing alone (not the digits of an id such as INV-3301 or A-17)."""
_CASE = re.compile(r"\bSC-\d+\b")
_ACCOUNT = re.compile(r"\(account (A-\d+)\)")
_DISPUTE = re.compile(r"invoice (INV-\d+) \(([^)]+)\)")
_PLAN_LINE = re.compile(r"^(\d+)\.\s+(Accounts|Policy|Refunds):\s+(.+)$")
_INVOICE_LINE = re.compile(
    rf"^- (INV-\d+) \(([^)]+)\): ({_NUM}) for ({_NUM}) days(?:, ({_NUM}) days (used|of outage))?"
)
_RULE_LINE = re.compile(rf"^- ([a-z ]+): (unused|outage|all) days at ({_NUM})%, fee ({_NUM})")
_DUE = re.compile(rf"Refund due: ({_NUM})")


def tasks() -> list[tuple[str, str, str]]:
    """(id, task, right answer): one per support case."""
    return [(case.id.lower(), case.text(), money(case.answer())) for case in CASES.values()]


def command(task: str) -> list[str]:
    return [sys.executable, str(PROGRAM), task]


# --- reading a request ------------------------------------------------------------------


@dataclass(frozen=True)
class _History(History):
    texts: list[tuple[int, str]]
    """Assistant texts, with their message index."""

    def latest(self, head: str) -> tuple[int, str] | None:
        return next(((i, t) for i, t in reversed(self.texts) if t.startswith(head)), None)


def _history(body: dict[str, Any]) -> _History:
    messages = body["messages"]
    texts = [
        (n, str(m["content"]))
        for n, m in enumerate(messages)
        if m.get("role") == "assistant" and m.get("content")
    ]
    base = read_history(messages)
    return _History(base.task, base.calls, base.results, texts)


def _plan(history: _History) -> list[tuple[str, str]]:
    """(specialist, instruction) for each numbered line of the newest CASE PLAN."""
    found = history.latest("CASE PLAN")
    lines = (_PLAN_LINE.match(line.strip()) for line in (found[1] if found else "").splitlines())
    return [(m.group(2), m.group(3)) for m in lines if m]


def _case_id(history: _History) -> str:
    found = _CASE.search(history.task)
    return found.group(0) if found else "?"


def _number(text: str) -> float:
    return float(text)


def _handback(body: dict[str, Any], text: str, to: str = "triage") -> dict[str, Any]:
    names = _tools(body)
    handoff = next((n for n in names if n == f"transfer_to_{to}"), names[0] if names else "")
    return {"text": text, "tool_calls": [_call(handoff, {}, _call_id(body))]}


def _tool_call(body: dict[str, Any], name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [_call(name, arguments, _call_id(body))]}


# --- the agents -------------------------------------------------------------------------


def _triage(body: dict[str, Any], history: _History) -> Any:
    plan = _plan(history)
    if history.latest("CASE PLAN") is None:
        account = _ACCOUNT.search(history.task)
        disputes = _DISPUTE.findall(history.task)
        reasons = list(dict.fromkeys(reason for _, reason in disputes))
        steps = [f"Accounts: pull account {account.group(1) if account else '?'}"]
        steps += [f"Accounts: pull invoice {i} ({reason})" for i, reason in disputes]
        steps += [f"Policy: look up {reason}" for reason in [*reasons, "refund cap"]]
        steps.append("Refunds: compute each invoice's refund, then apply the cap")
        lines = [f"CASE PLAN for {_case_id(history)}"]
        lines += [f"{n}. {step}" for n, step in enumerate(steps, 1)]
        return _handback(body, "\n".join(lines), "accounts")
    listed = [s for s in SPECIALISTS if any(who == s for who, _ in plan)]
    pending = [s for s in listed if history.latest(s.upper()) is None]
    if pending:
        return _handback(body, "", pending[0].lower())
    report = history.latest("REFUNDS")
    due = _DUE.search(report[1]) if report else None
    return f"FINAL: refund {due.group(1)}" if due else "FINAL: no refund was decided."


def _made(history: _History, name: str, key: str, value: str, after: int = -1) -> Call | None:
    """The newest call of ``name`` with ``key`` = ``value`` (after message ``after``)."""
    return next(
        (
            c
            for c in reversed(history.calls)
            if c.position > after and c.name == name and str(c.arguments.get(key)) == value
        ),
        None,
    )


def _accounts(body: dict[str, Any], history: _History) -> Any:
    wanted: list[tuple[str, str, str, str]] = []  # (tool, key, value, reason)
    for who, line in _plan(history):
        account = re.match(r"pull account (\S+)", line)
        invoice = re.match(r"pull invoice (\S+) \(([^)]+)\)", line)
        if who == "Accounts" and account:
            wanted.append(("get_account", "account_id", account.group(1), ""))
        elif who == "Accounts" and invoice:
            wanted.append(("get_invoice", "invoice_id", invoice.group(1), invoice.group(2)))
    for tool, key, value, _ in wanted:
        if _made(history, tool, key, value) is None:
            return _tool_call(body, tool, {key: value})
    lines = [f"ACCOUNTS for case {_case_id(history)}"]
    for tool, key, value, reason in wanted:
        call = _made(history, tool, key, value)
        result = history.result(call) if call else ""
        if tool == "get_account":
            plan = re.search(r"plan (\w+)", result)
            if failed(result) or not plan:
                lines.append(f"- account {value}: plan unknown ({result})")
            else:
                lines.append(f"- account {value}: plan {plan.group(1)}")
            continue
        found = re.search(
            rf"({_NUM}) for a ({_NUM})-day billing period; ({_NUM}) days used; "
            rf"({_NUM}) days of outage",
            result,
        )
        if failed(result) or not found:
            lines.append(f"- {value} ({reason}): unavailable ({result})")
            continue
        amount, period, used, outage = found.groups()
        line = f"- {value} ({reason}): {money(_number(amount))} for {period} days"
        if reason == "cancellation":
            line += f", {used} days used"
        elif reason == "outage":
            line += f", {outage} days of outage"
        lines.append(line)
    return _handback(body, "\n".join(lines))


def _rule(topic: str, result: str) -> str:
    """A policy's report line, from what ``lookup_policy`` said."""
    if failed(result):
        return f"- {topic}: unknown ({result})"
    if topic == "refund cap":
        caps = re.findall(rf"({_NUM}) on (\w+)", result)
        return "- refund cap: " + ", ".join(f"{plan} {money(_number(v))}" for v, plan in caps)
    rate = re.search(rf"({_NUM})%", result)
    fee = re.search(rf"fee of ({_NUM})", result)
    if "unused days" in result:
        basis = "unused"
    elif "outage" in result:
        basis = "outage"
    elif "whole billing period" in result:
        basis = "all"
    else:
        return f"- {topic}: unknown ({result})"
    shown = f"{_number(rate.group(1)):g}" if rate else "100"
    return f"- {topic}: {basis} days at {shown}%, fee {money(_number(fee.group(1)) if fee else 0)}"


def _policy(body: dict[str, Any], history: _History) -> Any:
    topics = [
        m.group(1)
        for who, line in _plan(history)
        if who == "Policy" and (m := re.match(r"look up (.+)", line))
    ]
    for topic in topics:
        if _made(history, "lookup_policy", "topic", topic) is None:
            return _tool_call(body, "lookup_policy", {"topic": topic})
    lines = [f"POLICY for case {_case_id(history)}"]
    for topic in topics:
        call = _made(history, "lookup_policy", "topic", topic)
        lines.append(_rule(topic, history.result(call) if call else ""))
    return _handback(body, "\n".join(lines))


def _refunds(body: dict[str, Any], history: _History) -> Any:
    accounts = history.latest("ACCOUNTS")
    policy = history.latest("POLICY")
    since = max(accounts[0] if accounts else -1, policy[0] if policy else -1)
    plan_of = re.search(r"^- account \S+: plan (\w+)", accounts[1] if accounts else "", re.M)
    rules = {
        m.group(1): (m.group(2), _number(m.group(3)), _number(m.group(4)))
        for line in (policy[1] if policy else "").splitlines()
        if (m := _RULE_LINE.match(line))
    }
    caps_line = re.search(r"^- refund cap: (.+)$", policy[1] if policy else "", re.M)
    caps = (
        {p: _number(v) for p, v in re.findall(rf"(\w+) ({_NUM})", caps_line.group(1))}
        if (caps_line)
        else {}
    )
    todo: list[dict[str, Any]] = []
    for line in (accounts[1] if accounts else "").splitlines():
        found = _INVOICE_LINE.match(line)
        if not found or found.group(2) not in rules:
            continue  # no invoice data, or no policy for its reason: nothing to refund
        invoice, reason, amount, period, count, _ = found.groups()
        basis, rate, fee = rules[reason]
        days = {"unused": int(period) - int(count or 0), "outage": int(count or 0)}.get(
            basis, int(period)
        )
        todo.append(
            {
                "invoice_id": invoice,
                "amount": _number(amount),
                "days": days,
                "period_days": int(period),
                "rate_percent": rate,
                "fee": fee,
            }
        )
    for arguments in todo:
        if _made(history, "compute_refund", "invoice_id", arguments["invoice_id"], since) is None:
            return _tool_call(body, "compute_refund", arguments)
    refunds: list[tuple[str, float]] = []
    for arguments in todo:
        call = _made(history, "compute_refund", "invoice_id", arguments["invoice_id"], since)
        value = re.search(rf"= ({_NUM})\s*$", history.result(call) if call else "")
        if value and not failed(history.result(call) if call else ""):
            refunds.append((arguments["invoice_id"], _number(value.group(1))))
    lines = [f"REFUNDS for case {_case_id(history)}"]
    if not todo:
        lines += ["(no invoice with a policy to refund)", "Refund due: 0.00"]
        return _handback(body, "\n".join(lines))
    capping = next(
        (c for c in reversed(history.calls) if c.name == "apply_cap" and c.position > since),
        None,
    )
    if capping is None:
        cap = caps.get(plan_of.group(1)) if plan_of else None
        return _tool_call(body, "apply_cap", {"amounts": [v for _, v in refunds], "cap": cap})
    lines += [f"- {invoice}: {money(value)}" for invoice, value in refunds]
    result = history.result(capping)
    due = re.search(rf"refund ({_NUM})\s*$", result)
    if failed(result) or not due:
        lines.append(f"Refund due: unknown ({result})")
    else:
        lines.append(f"Refund due: {money(_number(due.group(1)))}")
    return _handback(body, "\n".join(lines))


def faithful(body: dict[str, Any]) -> Any:
    """Every agent of the program, played by rule and without mistakes."""
    history, role = _history(body), role_of(_system(body))
    if role == "Triage":
        return _triage(body, history)
    if role == "Accounts":
        return _accounts(body, history)
    if role == "Policy":
        return _policy(body, history)
    return _refunds(body, history)


def final_answer(trace: Trace) -> str | None:
    """The closing text of the run (the program prints it as its answer)."""
    for s in reversed(trace.steps):
        text = str(s.content).strip()
        if not s.tool_calls and text:
            return text.removeprefix("FINAL:").strip()
    return None


# --- the faults -------------------------------------------------------------------------


def _change_number(
    text: str,
    rng: random.Random,
    corrupt: Corrupt,
    lines: Callable[[str], bool] = lambda line: True,
) -> str | None:
    """``text`` with one standalone number changed, on a line ``lines`` accepts; None if
    there is none."""
    all_lines = text.splitlines()
    spots = [
        (n, m) for n, line in enumerate(all_lines) if lines(line) for m in _NUMBER.finditer(line)
    ]
    if not spots:
        return None
    n, found = rng.choice(spots)
    line = all_lines[n]
    all_lines[n] = (
        line[: found.start()] + wrong_number(found.group(0), rng, corrupt) + line[found.end() :]
    )
    return "\n".join(all_lines)


def _change_invoice(result: str, reason: str, rng: random.Random, corrupt: Corrupt) -> str | None:
    """An invoice with one figure its refund depends on changed: the amount, the period,
    and the days used (a cancellation) or of outage (an outage)."""
    found = re.search(
        rf"({_NUM}) for a ({_NUM})-day billing period; ({_NUM}) days used; ({_NUM}) days",
        result,
    )
    if not found:
        return None
    groups = [1, 2] + ([3] if reason == "cancellation" else [4] if reason == "outage" else [])
    g = rng.choice(groups)
    wrong = wrong_number(found.group(g), rng, corrupt)
    return result[: found.start(g)] + wrong + result[found.end(g) :]


_calls = calls


def _keep_calls(step: Step) -> list[dict[str, Any]]:
    return [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in step.tool_calls]


def _sample(sites: list[tuple[int, Edit]], rng: random.Random) -> list[tuple[int, Edit]]:
    return sample(sites, rng, PER_KIND)


def injectors(corrupt: Corrupt) -> dict[str, Injector]:
    """The fault kinds of this program (``corrupt`` turns a number into a wrong one)."""

    def corrupted_number(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        sites: list[tuple[int, Edit]] = []
        for s in trace.steps:
            text = s.content
            if s.agent == "Accounts" and text.startswith("ACCOUNTS"):
                wrong = _change_number(text, rng, corrupt, lambda line: line.startswith("- INV"))
            elif s.agent == "Policy" and text.startswith("POLICY"):
                wrong = _change_number(text, rng, corrupt, lambda line: line.startswith("- "))
            elif s.agent == "Refunds" and text.startswith("REFUNDS"):
                wrong = _change_number(
                    text, rng, corrupt, lambda line: line.startswith("Refund due")
                )
            else:
                wrong = None
            if wrong is not None:
                sites.append((s.index, Edit(output=wrong, tool_calls=_keep_calls(s))))
        for s in _calls(trace, "compute_refund"):
            arguments = step_arguments(s)
            key = rng.choice(["amount", "days", "period_days", "rate_percent", "fee"])
            value = arguments.get(key)
            if isinstance(value, int | float):
                wrong = wrong_number(str(value), rng, corrupt)
                new: float = int(float(wrong)) if isinstance(value, int) else float(wrong)
                change = ToolCallChange(set_arguments={key: new})
                sites.append((s.index, Edit(tool_call_changes=[change])))
        for s in _calls(trace, "apply_cap"):
            arguments = step_arguments(s)
            amounts = list(arguments.get("amounts") or [])
            cap = arguments.get("cap")
            if cap is not None and (not amounts or rng.random() < 0.5):
                patch: dict[str, Any] = {"cap": float(wrong_number(str(cap), rng, corrupt))}
            elif amounts:
                k = rng.randrange(len(amounts))
                amounts[k] = float(wrong_number(str(amounts[k]), rng, corrupt))
                patch = {"amounts": amounts}
            else:
                continue
            sites.append((s.index, Edit(tool_call_changes=[ToolCallChange(set_arguments=patch)])))
        return _sample(sites, rng)

    def wrong_tool_result(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        sites: list[tuple[int, Edit]] = []
        plan = next((s.content for s in trace.steps if s.content.startswith("CASE PLAN")), "")
        reasons = dict(_DISPUTE.findall(plan.replace("pull invoice", "invoice")))
        for tool in ("get_account", "get_invoice", "lookup_policy", "compute_refund", "apply_cap"):
            for s in _calls(trace, tool):
                result = s.tool_results[0].content if s.tool_results else ""
                if failed(result):
                    continue
                if tool == "get_account":
                    plan = re.search(r"plan (\w+)", result)
                    if not plan:
                        continue
                    other = rng.choice([p for p in PLANS if p != plan.group(1)])
                    wrong: str | None = result.replace(f"plan {plan.group(1)}", f"plan {other}")
                elif tool in ("compute_refund", "apply_cap"):
                    # The value it returns, not the figures it was given.
                    head, sep, value = result.rpartition(
                        "= " if tool == "compute_refund" else "refund "
                    )
                    changed = _change_number(value, rng, corrupt) if sep else None
                    wrong = head + sep + changed if changed is not None else None
                elif tool == "get_invoice":
                    invoice = str(step_arguments(s).get("invoice_id"))
                    wrong = _change_invoice(result, reasons.get(invoice, ""), rng, corrupt)
                else:
                    wrong = _change_number(result, rng, corrupt)
                if wrong is not None and wrong != result:
                    sites.append((s.index, Edit(tool_result=ToolResultChange(content=wrong))))
        return _sample(sites, rng)

    def wrong_handoff(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        sites: list[tuple[int, Edit]] = []
        for s in trace.steps:
            for n, call in enumerate(s.tool_calls):
                if s.agent == "Triage" and call.name.startswith("transfer_to_"):
                    others = [
                        w.lower() for w in SPECIALISTS if f"transfer_to_{w.lower()}" != call.name
                    ]
                    change = ToolCallChange(index=n, name=f"transfer_to_{rng.choice(others)}")
                    sites.append((s.index, Edit(tool_call_changes=[change])))
        return _sample(sites, rng)

    def dropped_instruction(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        sites: list[tuple[int, Edit]] = []
        for s in trace.steps:
            if s.agent == "Triage" and s.content.startswith("CASE PLAN"):
                lines = s.content.splitlines()
                items = [n for n, line in enumerate(lines) if _PLAN_LINE.match(line)]
                if items:
                    drop = rng.choice(items)
                    kept = "\n".join(line for n, line in enumerate(lines) if n != drop)
                    sites.append((s.index, Edit(output=kept, tool_calls=_keep_calls(s))))
        return _sample(sites, rng)

    def premature_stop(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
        sites: list[tuple[int, Edit]] = []
        seen: list[str] = []
        for s in trace.steps:
            handoff = s.agent == "Triage" and s.tool_calls
            working = s.agent != "Triage" and any(
                not c.name.startswith("transfer_to_") for c in s.tool_calls
            )
            if handoff or working:
                guess = seen[-1] if seen else f"{rng.randint(5, 400)}.{rng.randint(0, 99):02d}"
                sites.append((s.index, Edit(output=f"FINAL: refund {guess}")))
            for text in [s.content, *(r.content for r in s.tool_results)]:
                seen += re.findall(r"(?<![\w.-])\d+\.\d\d(?![\w.])", text)
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
