"""The support-desk source of bench/fault_injection.py (``--program support-desk``): the
OpenAI Agents SDK program of tests/fixtures/frameworks/agents_sdk_support_desk.py,
unmodified, recorded against the loopback scripted upstream; a base run succeeds, and a
fault of each kind, replayed forward, is a labelled failure at the injected step."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from test_fault_injection import _bench, check_label, each_kind

FRAMEWORKS = Path(__file__).resolve().parent / "fixtures" / "frameworks"
sys.path.insert(0, str(FRAMEWORKS))

from support_ledger import (  # noqa: E402
    CASES,
    capped,
    read_account,
    read_invoice,
    read_policy,
    refund,
)


def test_the_ledger_tools_read_tables_and_do_arithmetic() -> None:
    assert read_account("a-17") == "Account A-17 (Dana Whit): plan Pro, customer since 2021."
    assert read_invoice("INV-3301") == (
        "Invoice INV-3301 (account A-17): 59.00 for a 30-day billing period; 12 days used; "
        "0 days of outage."
    )
    assert "150%" in read_policy("Outage")
    for missing in [read_account("A-99"), read_invoice("../etc"), read_policy("__import__")]:
        assert missing.startswith("error: no ")
    # Unused days less the fee, outage days at 150%, never below zero.
    assert refund(59.0, 18, 30, 100, 4.5) == 30.9
    assert refund(59.0, 3, 31, 150, 0) == 8.56
    assert refund(9.9, 5, 30, 100, 4.5) == 0.0
    with pytest.raises(ValueError):
        refund(10.0, 1, 0, 100, 0)
    assert capped([300.0, 250.5], 500.0) == 500.0
    assert capped([1.25, 2.5], None) == 3.75
    # Cases of one to eight invoices, the answer computed from the tables.
    sizes = [len(case.disputes) for case in CASES.values()]
    assert min(sizes) == 1 and max(sizes) == 8 and len(CASES) >= 12
    assert CASES["SC-2046"].answer() == 54.21
    assert CASES["SC-2057"].answer() == 500.0  # the Business plan's cap
    assert "invoice INV-3301 (cancellation)" in CASES["SC-2041"].text()


def test_the_scripted_desk_plans_and_routes_by_the_plan() -> None:
    bench = _bench()
    import _fault_support_desk as desk

    task = CASES["SC-2045"].text()
    system = {"role": "system", "content": "You are the Triage agent."}
    tools = [
        {"type": "function", "function": {"name": f"transfer_to_{n}"}}
        for n in ("accounts", "policy", "refunds")
    ]
    body = {"messages": [system, {"role": "user", "content": task}], "tools": tools}
    first = desk.faithful(body)
    assert first["tool_calls"][0]["name"] == "transfer_to_accounts"
    plan = first["text"].splitlines()
    assert plan[0] == "CASE PLAN for SC-2045"
    assert "1. Accounts: pull account A-42" in plan
    assert "6. Policy: look up refund cap" in plan
    assert plan[-1].startswith("7. Refunds:")
    # A report of each specialist moves the case on; the REFUNDS amount is the answer.
    history = [{"role": "assistant", "content": first["text"]}]
    for report, due in [("ACCOUNTS for case SC-2045", "policy"), ("POLICY for case", "refunds")]:
        history.append({"role": "assistant", "content": report})
        reply = desk.faithful({**body, "messages": [*body["messages"], *history]})
        assert reply["tool_calls"][0]["name"] == f"transfer_to_{due}"
    history.append({"role": "assistant", "content": "REFUNDS\nRefund due: 46.85"})
    assert desk.faithful({**body, "messages": [*body["messages"], *history]}) == (
        "FINAL: refund 46.85"
    )
    assert bench.is_right("refund 46.85", "46.85")
    assert [t[2] for t in desk.tasks()][:2] == ["30.90", "4.37"]


@pytest.mark.slow
def test_a_support_desk_gets_each_fault_kind_replayed_forward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("agents", reason="needs the OpenAI Agents SDK (frameworks extra)")
    # The seed draws a decisive site of each kind (a handoff to Accounts after its report,
    # or an error in a cap that does not bind, is recovered from and dropped).
    base = "sc-2046"  # three invoices over two reasons: a base run of 18 steps
    bench, program, traces = each_kind(tmp_path, monkeypatch, "support-desk", base, seed=1)
    right = f"{CASES['SC-2046'].answer():.2f}"
    agents = {"Triage", "Accounts", "Policy", "Refunds"}
    for fault, trace in traces.items():
        label = check_label(trace, "support-desk")
        assert label.step is not None
        assert {s.agent for s in trace.steps} <= agents
        # The unmodified program ran on from the fault to a wrong answer, the run's
        # closing text (a premature stop is that answer itself).
        answer = program.final_answer(trace)
        assert not bench.is_right(answer, right), (fault, answer)
        assert not trace.steps[-1].tool_calls
        if fault != "premature-stop":
            assert len(trace.steps) > label.step + 1, fault
            assert trace.steps[-1].agent == "Triage"

    handoff = traces["wrong-handoff"]
    step = handoff.steps[handoff.label.step]  # type: ignore[union-attr]
    assert step.agent == "Triage"
    # The SDK gave the turn to the specialist the edited handoff named.
    specialist = step.tool_calls[0].name.removeprefix("transfer_to_")
    assert handoff.steps[step.index + 1].agent == specialist.capitalize()

    stopped = traces["premature-stop"]
    assert stopped.label.step == len(stopped.steps) - 1  # type: ignore[union-attr]
    assert stopped.steps[-1].content.startswith("FINAL: refund")

    for fault in ("wrong-tool-result", "ignored-error"):
        trace = traces[fault]
        step = trace.steps[trace.label.step]  # type: ignore[union-attr]
        edited = trace.metadata["replay"]["edit"]["tool_result"]["content"]
        assert step.tool_calls and step.tool_results[0].content == edited
        # The specialist that made the call went on with what it was (wrongly) told.
        assert trace.steps[step.index + 1].agent == step.agent

    dropped = traces["dropped-instruction"]
    step = dropped.steps[dropped.label.step]  # type: ignore[union-attr]
    assert step.agent == "Triage" and step.content.startswith("CASE PLAN")
    assert step.content == dropped.metadata["replay"]["edit"]["output"]
    corrupted = traces["corrupted-number"]
    assert corrupted.steps[corrupted.label.step].agent != "Triage"  # type: ignore[union-attr]
