"""The expense-desk source of bench/fault_injection.py (``--program expense-desk``): the
OpenAI Agents SDK program of tests/fixtures/frameworks/agents_sdk_expense_desk.py (a
Manager calling four desks as tools), unmodified, recorded against the loopback scripted
upstream; a base run succeeds, and a fault of each kind, replayed forward, is a labelled
failure at the injected step."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from faultfinder.traces.schema import Step, ToolResult, Trace
from test_fault_injection import _bench, check_label, each_kind

FRAMEWORKS = Path(__file__).resolve().parent / "fixtures" / "frameworks"
sys.path.insert(0, str(FRAMEWORKS))

from expense_data import (  # noqa: E402
    CLAIMS,
    cap_amount,
    convert_amount,
    read_limit,
    read_receipt,
)

SEED = 0
"""Draws a decisive site of each kind from the slow test's base run (its check)."""
MANAGER = "You are the Manager of an expense-audit desk."


def test_the_expense_tools_read_tables_and_do_arithmetic() -> None:
    assert read_receipt(" r-1042") == (
        "Receipt R-1042 (Dishoom, claim EC-104): meals, 2 days, 131.50 GBP, dated 2026-03-17."
    )
    assert read_receipt("R-1031").endswith("lodging, 4 nights, 168000 JPY, dated 2026-04-06.")
    assert read_limit("senior", "Lodging") == "Senior band, lodging: up to 220.00 USD per night."
    # At the rate of the receipt's month, rounded half up to the cent.
    assert convert_amount(398.0, "gbp", "2026-03-16") == (
        "398 GBP on 2026-03-16 at 1.2648 USD per GBP = 503.39 USD"
    )
    # Up to the limit times the units.
    assert cap_amount("R-1041", 503.39, 220.0, 2).endswith("= 440.00 USD allowed: reimburse 440.00")
    assert cap_amount("R-1043", 48.57, 60.0, 1).endswith("reimburse 48.57")
    for missing in [
        read_receipt("__import__('os')"),
        read_limit("Intern", "lodging"),
        read_limit("Staff", "R-1011"),
        convert_amount(1.0, "XYZ", "2026-03-01"),
        convert_amount(1.0, "EUR", "../etc"),
        cap_amount("R-1", 1.0, 5.0, -1),
    ]:
        assert missing.startswith("error: "), missing
    # Claims of one to seven receipts, some capped by the policy; the answer computed from
    # the tables.
    sizes = [len(c.receipts) for c in CLAIMS.values()]
    assert min(sizes) == 1 and max(sizes) == 7 and len(CLAIMS) == 20
    assert CLAIMS["EC-104"].answer() == 638.57  # 440.00 + 150.00 + 48.57
    assert "receipts R-1041, R-1042 and R-1043." in CLAIMS["EC-104"].text()
    assert "(Senior band)" in CLAIMS["EC-104"].text()


def _body(system: str, given: str, history: list[dict[str, Any]] | None = None) -> dict:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": given}]
    return {"messages": [*messages, *(history or [])]}


def _called(name: str, arguments: dict[str, Any], result: str, n: int) -> list[dict[str, Any]]:
    call = {"id": f"c{n}", "function": {"name": name, "arguments": json.dumps(arguments)}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{n}", "content": result},
    ]


def _input(reply: Any) -> tuple[str, str]:
    call = reply["tool_calls"][0]
    return call["name"], json.loads(call["arguments"])["input"]


def test_the_manager_calls_each_desk_in_turn_with_a_list_from_the_reports() -> None:
    _bench()
    import _fault_expense_desk as desk

    task = CLAIMS["EC-104"].text()
    assert _input(desk.faithful(_body(MANAGER, task))) == (
        "read_receipts",
        "Claim EC-104: read these receipts.\n1. R-1041\n2. R-1042\n3. R-1043",
    )
    receipts = (
        "RECEIPTS for EC-104\n- R-1041: lodging, 2 nights, 398.00 GBP, 2026-03-16\n"
        "- R-1042: unavailable (error: timeout)\n- R-1043: taxi, 1 ride, 38.40 GBP, 2026-03-18"
    )
    history = _called("read_receipts", {"input": "..."}, receipts, 1)
    assert _input(desk.faithful(_body(MANAGER, task, history))) == (
        "check_policy",
        "Limits for the Senior band:\n1. lodging\n2. taxi",
    )
    policy = "POLICY for the Senior band\n- lodging: 220.00 USD per night\n- taxi: unknown (x)"
    history += _called("check_policy", {"input": "..."}, policy, 2)
    assert _input(desk.faithful(_body(MANAGER, task, history))) == (
        "convert_currency",
        "Convert to USD:\n1. R-1041: 398.00 GBP on 2026-03-16\n2. R-1043: 38.40 GBP on 2026-03-18",
    )
    history += _called("convert_currency", {"input": "..."}, "CONVERSIONS\n- R-1041: 503.39 USD", 3)
    # It trusts the reports: a receipt with no USD amount or no limit is left out.
    assert _input(desk.faithful(_body(MANAGER, task, history))) == (
        "audit_claim",
        "Audit claim EC-104:\n1. R-1041: 503.39 USD, limit 220.00 USD per night x 2",
    )
    audit = "AUDIT for EC-104\n- R-1041: reimburse 440.00\nReimbursable total: 440.00"
    history += _called("audit_claim", {"input": "..."}, audit, 4)
    assert desk.faithful(_body(MANAGER, task, history)) == "FINAL: reimburse 440.00 USD"
    assert [t[2] for t in desk.tasks()][:4] == ["660.00", "165.00", "1332.40", "638.57"]


def test_a_desk_does_its_list_in_order_and_reports_what_its_tool_said() -> None:
    _bench()
    import _fault_expense_desk as desk

    given = "Convert to USD:\n1. R-1041: 398.00 GBP on 2026-03-16\n2. R-1043"
    system = "You are the Currency desk."
    reply = desk.faithful(_body(system, given))
    call = reply["tool_calls"][0]
    assert call["name"] == "convert"
    assert json.loads(call["arguments"]) == {
        "amount": 398.0,
        "currency": "GBP",
        "date": "2026-03-16",
    }
    history = _called("convert", {}, convert_amount(398.0, "GBP", "2026-03-16"), 1)
    # The line with no amount gets no call, and says so.
    assert desk.faithful(_body(system, given, history)).split("\n") == [
        "CONVERSIONS",
        "- R-1041: 503.39 USD",
        "- R-1043: not converted (error: nothing to work with)",
    ]
    # Given another desk's list (a wrong handoff), a desk still does what the list says.
    reply = desk.faithful(_body("You are the Receipts clerk.", "Limits:\n1. lodging"))
    assert json.loads(reply["tool_calls"][0]["arguments"]) == {"receipt_id": "lodging"}
    # Call ids are unique across the desks' nested runs.
    other = desk.faithful(_body("You are the Receipts clerk.", "Limits:\n1. meals"))
    assert other["tool_calls"][0]["id"] != reply["tool_calls"][0]["id"]


def _step(index: int, agent: str, messages: list[dict[str, Any]], **fields: Any) -> Step:
    return Step(index=index, agent=agent, content="", input_messages=messages, **fields)


def test_the_injectors_edit_lists_desks_and_tool_results() -> None:
    _bench()
    import _fault_expense_desk as desk

    given = "Audit claim EC-104:\n1. R-1041: 503.39 USD, limit 220.00 USD per night x 2"
    given += "\n2. R-1042: 166.32 USD, limit 75.00 USD per day x 2"
    first = cap_amount("R-1041", 503.39, 220.0, 2)
    audit_call = {"name": "cap_receipt", "arguments": json.dumps({"receipt_id": "R-1042"})}
    listing = {"name": "audit_claim", "arguments": json.dumps({"input": given})}
    system = {"role": "system", "content": "You are the Audit desk."}
    opened = [system, {"role": "user", "content": given}]
    steps = [
        _step(0, "Manager", [], tool_calls=[listing]),
        _step(
            1,
            "Audit",
            [*opened, *_called("cap_receipt", {}, first, 1)],
            tool_calls=[audit_call],
            tool_results=[ToolResult(content=cap_amount("R-1042", 166.32, 75.0, 2))],
        ),
    ]
    trace = Trace(id="t", task="x", steps=steps)
    kinds = desk.injectors(lambda number, rng: "7")
    rng = random.Random(0)
    # A desk that stops before its second call reports the first, and its total so far.
    stops = dict(kinds["premature-stop"](trace, rng))
    assert stops[1].output == (
        "AUDIT for EC-104\n- R-1041: reimburse 440.00\nReimbursable total: 440.00"
    )
    # The Manager's list loses a line (renumbered); the Manager calls another desk.
    dropped = dict(kinds["dropped-instruction"](trace, rng))[0]
    new = dropped.tool_call_changes[0].set_arguments["input"]  # type: ignore[index]
    assert new.split("\n")[0] == "Audit claim EC-104:" and len(new.split("\n")) == 2
    assert new.split("\n")[1].startswith("1. R-104")
    routed = dict(kinds["wrong-handoff"](trace, rng))[0]
    assert routed.tool_call_changes[0].name in desk.DESKS[:3]  # type: ignore[index]
    # The calculator's answer changes, not the figures it was given.
    wrong = dict(kinds["wrong-tool-result"](trace, rng))[1]
    assert wrong.tool_result is not None
    assert wrong.tool_result.content.endswith("reimburse 7")
    assert "against 2 x 75.00 = 150.00 USD" in wrong.tool_result.content
    errors = dict(kinds["ignored-error"](trace, rng))
    assert list(errors) == [1] and errors[1].tool_result.content in desk.ERRORS["cap_receipt"]  # type: ignore[union-attr]


@pytest.mark.slow
def test_an_expense_desk_gets_each_fault_kind_replayed_forward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("agents", reason="needs the OpenAI Agents SDK (frameworks extra)")
    bench, program, traces = each_kind(tmp_path, monkeypatch, "expense-desk", "ec-104", SEED)
    import _fault_expense_desk

    right = f"{CLAIMS['EC-104'].answer():.2f}"
    agents = {"Manager", "Receipts", "Policy", "Currency", "Audit"}
    for fault, trace in traces.items():
        label = check_label(trace, "expense-desk")
        assert label.step is not None
        # The desks' own model calls are steps under their own names.
        assert {s.agent for s in trace.steps} <= agents
        assert {"Manager", "Receipts"} <= {s.agent for s in trace.steps}
        # The unmodified program ran on from the fault to a wrong answer, given later by
        # the Manager: the symptom comes after the injected step, for every kind.
        answer = program.final_answer(trace)
        assert not bench.is_right(answer, right), (fault, answer)
        last = trace.steps[-1]
        assert last.agent == "Manager" and last.content.startswith("FINAL:")
        assert len(trace.steps) > label.step + 1, fault

    routed = traces["wrong-handoff"]
    step = routed.steps[routed.label.step]  # type: ignore[union-attr]
    assert step.agent == "Manager"
    # The SDK ran the desk the edited call named, as a nested run of its own agent.
    desk = {
        "read_receipts": "Receipts",
        "check_policy": "Policy",
        "convert_currency": "Currency",
        "audit_claim": "Audit",
    }[step.tool_calls[0].name]
    assert routed.steps[step.index + 1].agent == desk

    stopped = traces["premature-stop"]
    step = stopped.steps[stopped.label.step]  # type: ignore[union-attr]
    assert step.agent in agents - {"Manager"} and not step.tool_calls
    assert step.content == stopped.metadata["replay"]["edit"]["output"]
    assert stopped.steps[step.index + 1].agent == "Manager"

    for fault in ("wrong-tool-result", "ignored-error"):
        trace = traces[fault]
        step = trace.steps[trace.label.step]  # type: ignore[union-attr]
        edited = trace.metadata["replay"]["edit"]["tool_result"]["content"]
        assert step.agent != "Manager"
        assert step.tool_calls and step.tool_results[0].content == edited
        # The desk that made the call went on with what it was (wrongly) told.
        assert trace.steps[step.index + 1].agent == step.agent

    dropped = traces["dropped-instruction"]
    step = dropped.steps[dropped.label.step]  # type: ignore[union-attr]
    assert step.agent == "Manager" and step.tool_calls[0].name in _fault_expense_desk.DESKS
    corrupted = traces["corrupted-number"]
    assert corrupted.steps[corrupted.label.step].agent in agents  # type: ignore[union-attr]
