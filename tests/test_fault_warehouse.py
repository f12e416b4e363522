"""The warehouse source of bench/fault_injection.py (``--program warehouse``): the
hand-wired LangGraph StateGraph of tests/fixtures/frameworks/langgraph_warehouse.py,
unmodified, recorded against the loopback scripted upstream; a base run succeeds, and a
fault of each kind, replayed forward, is a labelled failure at the injected step."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from faultfinder.traces.schema import Step, ToolResult, Trace
from test_fault_injection import _bench, check_label, each_kind

FRAMEWORKS = Path(__file__).resolve().parent / "fixtures" / "frameworks"
sys.path.insert(0, str(FRAMEWORKS))

from warehouse_data import (  # noqa: E402
    REQUESTS,
    forecast,
    price_line,
    price_total,
    read_forecast,
    read_stock,
)

SEED = 0
"""Draws a decisive site of each kind from the slow test's base run (its check)."""


def test_the_warehouse_tools_read_tables_and_do_arithmetic() -> None:
    assert (
        read_stock("Kraft  Paper", "ridgeway") == "kraft paper at Ridgeway: 18 on hand, 3 reserved."
    )
    assert read_forecast("kraft paper", "Ridgeway", 3).startswith(
        "kraft paper at Ridgeway: forecast demand 30 units over the next 3 weeks"
    )
    # The warehouse's share of the network's average week, times the weeks, rounded up.
    assert forecast("kraft paper", "Ridgeway", 3) == 30  # 130 / 8 * 0.6 * 3 = 29.25
    # Demand plus safety stock (8) less what is available, at the unit cost.
    assert price_line("kraft paper", 30, 15) == "kraft paper: order 23 units at 26.75 each = 615.25"
    assert price_line("kraft paper", 5, 90).endswith("order 0 units at 26.75 each = 0.00")
    assert price_total("Ridgeway", 935.05) == (
        "Order for Ridgeway: subtotal 935.05 + freight 95.50 = 1030.55"
    )
    for missing in [
        read_stock("__import__('os')", "Harbor"),
        read_stock("kraft paper", "../etc"),
        read_forecast("kraft paper", "Harbor", 0),
        price_line("1 + 1", 3, 4),
        price_total("Atlantis", 1.0),
    ]:
        assert missing.startswith("error: "), missing
    # Requests of one to seven items, each item needing an order; the answer computed
    # from the tables.
    sizes = [len(r.items) for r in REQUESTS.values()]
    assert min(sizes) == 1 and max(sizes) == 7 and len(REQUESTS) == 18
    assert REQUESTS["RR-03"].answer() == 1030.55
    assert "for kraft paper and cable ties." in REQUESTS["RR-03"].text()


def _request(system: str, history: list[dict], task: str) -> dict:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": task}]
    return {"messages": [*messages, *history]}


def _reply(text: str, name: str) -> dict:
    return {"role": "assistant", "content": text, "name": name}


def test_the_scripted_team_plans_routes_by_the_plan_and_trusts_its_inputs() -> None:
    bench = _bench()
    import _fault_warehouse as team

    task = REQUESTS["RR-03"].text()
    coordinator = "You are the Coordinator of a warehouse replenishment team."
    assert team.faithful(_request(coordinator, [], task)) == "NEXT: planner"
    plan = team.faithful(_request("You are the Planner.", [], task))
    assert plan.split("\n") == [
        "PLAN for RR-03 (Ridgeway warehouse, 3 weeks)",
        "1. Inventory: check stock of kraft paper at Ridgeway",
        "2. Inventory: check stock of cable ties at Ridgeway",
        "3. Forecaster: forecast 3 weeks of demand for kraft paper at Ridgeway",
        "4. Forecaster: forecast 3 weeks of demand for cable ties at Ridgeway",
        "5. Purchasing: compute the order of each forecast item",
        "6. Reviewer: price the order for Ridgeway with freight and report the total",
    ]
    history = [_reply(plan, "planner")]
    # The agent after the last to report, in the plan's order; the REVIEW's total last.
    for report, due in [
        ("INVENTORY for RR-03 (Ridgeway)", "NEXT: forecaster"),
        ("FORECAST for RR-03 (Ridgeway)", "NEXT: purchasing"),
        ("PURCHASE ORDER for RR-03 (Ridgeway)\nSubtotal: 9.00", "NEXT: reviewer"),
        ("REVIEW for RR-03: approved. Total order cost: 104.50", "FINAL: 104.50"),
    ]:
        history.append(_reply(report, "x"))
        assert team.faithful(_request(coordinator, history, task)) == due
    assert bench.is_right("104.50", "104.5")

    # Purchasing trusts the reports: an item missing from INVENTORY has nothing available.
    reports = [
        _reply(plan, "planner"),
        _reply("INVENTORY for RR-03 (Ridgeway)\n- cable ties: 67 available", "inventory"),
        _reply("FORECAST for RR-03 (Ridgeway)\n- kraft paper: demand 31", "forecaster"),
    ]
    reply = team.faithful(_request("You are the Purchasing agent.", reports, task))
    call = reply["tool_calls"][0]
    assert call["name"] == "compute_order"
    assert json.loads(call["arguments"]) == {"item": "kraft paper", "demand": 31, "available": 0}
    assert [t[2] for t in team.tasks()][:3] == ["2371.40", "2189.75", "1030.55"]


def test_a_worker_that_stops_early_reports_what_it_has() -> None:
    _bench()
    import _fault_warehouse as team

    def call(index: int, item: str, result: str) -> Step:
        arguments = json.dumps({"item": item, "warehouse": "Ridgeway"})
        return Step(
            index=index,
            agent="Inventory",
            content="",
            tool_calls=[{"name": "check_stock", "arguments": arguments}],
            tool_results=[ToolResult(content=result)],
        )

    steps = [
        Step(index=0, agent="Planner", content="PLAN for RR-03 (Ridgeway warehouse, 3 weeks)"),
        call(1, "kraft paper", "kraft paper at Ridgeway: 18 on hand, 3 reserved."),
        call(2, "cable ties", "cable ties at Ridgeway: 75 on hand, 8 reserved."),
    ]
    trace = Trace(id="t", task="x", steps=steps)
    stops = dict(team.injectors(str)["premature-stop"](trace, random.Random(0)))
    assert stops[1].output == "INVENTORY for RR-03 (Ridgeway)"
    assert stops[2].output == "INVENTORY for RR-03 (Ridgeway)\n- kraft paper: 15 available"


@pytest.mark.slow
def test_a_warehouse_team_gets_each_fault_kind_replayed_forward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("langgraph", reason="needs the frameworks extra")
    pytest.importorskip("langchain_openai", reason="needs the frameworks extra")
    # The seed draws a decisive site of each kind (a handoff back to an agent that already
    # reported is recovered from and dropped).
    base = "rr-03"  # two items: a base run of 18 steps
    bench, program, traces = each_kind(tmp_path, monkeypatch, "warehouse", base, SEED)
    right = f"{REQUESTS['RR-03'].answer():.2f}"
    agents = {"Coordinator", "Planner", "Inventory", "Forecaster", "Purchasing", "Reviewer"}
    for fault, trace in traces.items():
        label = check_label(trace, "warehouse")
        assert label.step is not None
        assert {s.agent for s in trace.steps} <= agents
        # The unmodified program ran on from the fault to a wrong answer, given later by
        # the Coordinator: the symptom comes after the injected step, for every kind.
        answer = program.final_answer(trace)
        assert not bench.is_right(answer, right), (fault, answer)
        last = trace.steps[-1]
        assert last.agent == "Coordinator" and last.content.startswith("FINAL:")
        assert len(trace.steps) > label.step + 1, fault

    handoff = traces["wrong-handoff"]
    step = handoff.steps[handoff.label.step]  # type: ignore[union-attr]
    assert step.agent == "Coordinator"
    # The graph's conditional edge gave the turn to the agent the edited answer named.
    routed = step.content.removeprefix("NEXT: ")
    assert handoff.steps[step.index + 1].agent.lower() == routed

    stopped = traces["premature-stop"]
    step = stopped.steps[stopped.label.step]  # type: ignore[union-attr]
    assert step.agent in agents - {"Coordinator", "Planner"} and not step.tool_calls
    assert step.content == stopped.metadata["replay"]["edit"]["output"]

    for fault in ("wrong-tool-result", "ignored-error"):
        trace = traces[fault]
        step = trace.steps[trace.label.step]  # type: ignore[union-attr]
        edited = trace.metadata["replay"]["edit"]["tool_result"]["content"]
        assert step.tool_calls and step.tool_results[0].content == edited
        # The agent that made the call went on with what it was (wrongly) told.
        assert trace.steps[step.index + 1].agent == step.agent

    dropped = traces["dropped-instruction"]
    step = dropped.steps[dropped.label.step]  # type: ignore[union-attr]
    assert step.agent == "Planner" and step.content.startswith("PLAN")
    assert step.content == dropped.metadata["replay"]["edit"]["output"]
    assert len(step.content.split("\n")) == 6  # the header and five of the six lines
    corrupted = traces["corrupted-number"]
    step = corrupted.steps[corrupted.label.step]  # type: ignore[union-attr]
    assert step.agent in agents - {"Coordinator"}
