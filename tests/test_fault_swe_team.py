"""The software-team source of bench/fault_injection.py (``--program swe-team``): the
LangGraph program of tests/fixtures/frameworks/langgraph_swe_team.py, unmodified, recorded
against the loopback scripted upstream; a base run succeeds, and a fault of each kind,
replayed forward, is a labelled failure at the injected step."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from test_fault_injection import check_label, each_kind

FRAMEWORKS = Path(__file__).resolve().parent / "fixtures" / "frameworks"
sys.path.insert(0, str(FRAMEWORKS))

from swe_tickets import TICKETS, CodeError, evaluate, parse  # noqa: E402


def test_the_code_tools_evaluate_formulas_and_run_nothing_else() -> None:
    functions = {f.name: f for f in map(parse, ["double(x) = x * 2", "f(x, y) = double(x) + y"])}
    assert evaluate("f(3, 0.5)", functions) == 6.5
    assert evaluate("max(-1, min(4, 2))", {}) == 2
    for hostile in [
        "__import__('os').system('true')",
        "double.__class__",
        "(lambda: 1)()",
        "[1, 2][0]",
        "open('x')",
        "2 ** 10",
    ]:
        with pytest.raises(CodeError):
            evaluate(hostile, functions)
    with pytest.raises(CodeError, match="ZeroDivisionError"):
        evaluate("1 / (2 - 2)", {})
    with pytest.raises(CodeError, match="RecursionError"):
        evaluate("loop(1)", {"loop": parse("loop(x) = loop(x)")})
    with pytest.raises(CodeError, match="SyntaxError"):
        parse("import os")
    ticket = TICKETS["T-101"]
    # The hidden tests compare the written code with the ticket's own formula.
    assert ticket.run_tests("subtotal", ticket.reference) == "subtotal: 2 of 2 tests passed."
    wrong = {"subtotal": parse("subtotal(qty, price) = qty + price")}
    assert ticket.run_tests("subtotal", wrong).startswith("subtotal: 0 of 2 tests passed; ")
    assert "no function 'discount'" in ticket.run_tests("discount", wrong)


@pytest.mark.slow
def test_a_software_team_gets_each_fault_kind_replayed_forward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("langgraph_supervisor", reason="needs the frameworks extra")
    base = "t-501"  # two functions: a base run of 21 steps
    bench, program, traces = each_kind(tmp_path, monkeypatch, "swe-team", base, seed=0)
    right = TICKETS["T-501"].answer()
    agents = {"Supervisor", "ProductManager", "Architect", "Engineer", "QA", "Reviewer"}
    for fault, trace in traces.items():
        label = check_label(trace, "swe-team")
        assert label.step is not None
        assert {s.agent for s in trace.steps} <= agents
        # The unmodified program ran on from the fault to a wrong answer, given later by
        # the Supervisor (a premature stop is that answer itself).
        answer = program.final_answer(trace)
        assert answer is not None and not bench.is_right(answer, right), (fault, answer)
        assert trace.steps[-1].agent == "Supervisor" and not trace.steps[-1].tool_calls
        if fault != "premature-stop":
            assert len(trace.steps) > label.step + 1, fault

    handoff = traces["wrong-handoff"]
    step = handoff.steps[handoff.label.step]  # type: ignore[union-attr]
    assert step.agent == "Supervisor"
    # LangGraph gave the turn to the worker the edited transfer named.
    worker = step.tool_calls[0].name.removeprefix("transfer_to_")
    names = {"product_manager": "ProductManager", "qa": "QA"}
    assert handoff.steps[step.index + 1].agent == names.get(worker, worker.capitalize())

    stopped = traces["premature-stop"]
    assert stopped.label.step == len(stopped.steps) - 1  # type: ignore[union-attr]
    assert stopped.steps[-1].agent == "Supervisor"

    for fault in ("wrong-tool-result", "ignored-error"):
        trace = traces[fault]
        step = trace.steps[trace.label.step]  # type: ignore[union-attr]
        edited = trace.metadata["replay"]["edit"]["tool_result"]["content"]
        assert step.tool_calls and step.tool_results[0].content == edited
        # The worker that made the call went on with what it was (wrongly) told.
        report = trace.steps[step.index + 1]
        assert report.agent == step.agent and not report.tool_calls
        if step.agent == "QA":
            assert report.content.startswith("Tests for") and "passed," not in report.content
        elif step.agent == "Reviewer":
            assert report.content == f"APPROVED. {edited}"
        else:
            told = [line[2:] for line in edited.splitlines() if line.startswith("- ")]
            assert report.content.startswith("SPEC")
            assert all(line in report.content for line in told), (fault, report.content)
            assert told or "no requirements" in report.content

    corrupted = traces["corrupted-number"]
    step = corrupted.steps[corrupted.label.step]  # type: ignore[union-attr]
    assert step.agent in agents - {"Supervisor", "QA"}
    dropped = traces["dropped-instruction"]
    step = dropped.steps[dropped.label.step]  # type: ignore[union-attr]
    assert step.agent in ("ProductManager", "Architect") and step.content[:4] in ("SPEC", "PLAN")
    assert step.content == dropped.metadata["replay"]["edit"]["output"]
