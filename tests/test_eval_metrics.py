"""Metrics against hand-computed cases."""

from __future__ import annotations

import math

import pytest

from faultfinder.eval.metrics import (
    TOLERANCES,
    ScoredRow,
    agent_correct,
    aggregate,
    joint_correct,
    mean_std,
    normalise_agent,
    score,
    step_correct,
)
from faultfinder.traces.schema import GoldLabel


def gold(agent: str = "Coder", step: int = 1, acceptable: list[int] | None = None) -> GoldLabel:
    return GoldLabel(agent=agent, step=step, acceptable_steps=acceptable or [])


def test_agent_names_compare_normalised() -> None:
    assert normalise_agent("Orchestrator (thought)") == "orchestrator"
    assert normalise_agent("Orchestrator (-> WebSurfer)") == "orchestrator"
    assert agent_correct("web_surfer", gold("WebSurfer"))
    assert agent_correct(" Websurfer ", gold("WebSurfer"))
    assert not agent_correct("FileSurfer", gold("WebSurfer"))
    assert not agent_correct(None, gold("WebSurfer"))
    assert not agent_correct("", GoldLabel(agent=""))
    assert not agent_correct("Coder", GoldLabel(agent=None, step=1))


def test_step_is_integer_equality_not_substring() -> None:
    # The official scripts test `str(gold) in str(prediction)`: gold 1 would match 12.
    assert not step_correct(12, gold(step=1))
    assert not step_correct(10, gold(step=1))
    assert not step_correct(21, gold(step=1))
    assert step_correct(1, gold(step=1))
    assert not step_correct(None, gold(step=1))
    assert not step_correct(True, gold(step=1))


def test_acceptable_steps_and_tolerance() -> None:
    label = gold(step=5, acceptable=[8])
    assert label.acceptable_steps == [5, 8]
    assert step_correct(8, label)
    assert not step_correct(7, label)
    assert step_correct(7, label, tolerance=1)
    assert not step_correct(2, label, tolerance=2)
    assert step_correct(2, label, tolerance=3)
    assert step_correct(13, label, tolerance=5)
    assert not step_correct(14, label, tolerance=5)


def test_joint_and_score() -> None:
    label = gold("Coder", 4)
    assert joint_correct("coder", 4, label)
    assert not joint_correct("Planner", 4, label)
    assert not joint_correct("Coder", 3, label)
    s = score("Coder", 6, label)
    assert (s.agent, s.step, s.joint) == (True, False, False)
    assert s.within == (False, False, True, True, True, True)
    assert len(s.within) == len(TOLERANCES)


def test_mean_std_is_sample_std_across_runs() -> None:
    m = mean_std([0.5, 0.7])
    assert m.mean == pytest.approx(0.6)
    assert m.std == pytest.approx(math.sqrt(0.02))
    assert m.format() == "60.0 ± 14.1"
    single = mean_std([0.25])
    assert single.std is None and single.format() == "25.0"
    assert mean_std([]).format() == "-"


def row(case: str, run: int, agent: str | None, step: int | None, status: str = "ok") -> ScoredRow:
    labels = {"a": gold("Coder", 3), "b": gold("Planner", 0)}
    return ScoredRow(
        case=case,
        run=run,
        status=status,
        score=score(agent, step, labels[case]),
        total_tokens=100 * (run + 1),
        calls=2,
        wall_time_s=0.5,
    )


def test_aggregate_per_run_then_across_runs() -> None:
    rows = [
        row("a", 0, "Coder", 3),  # all right
        row("b", 0, None, None, status="unparsed"),  # counts as wrong
        row("a", 1, "Coder", 5),  # agent right, step off by 2
        row("b", 1, "Planner", 0),  # all right
        ScoredRow(case="c", run=0, status="ok", score=None, total_tokens=100),  # unlabelled
    ]
    m = aggregate(rows)
    assert (m.cases, m.runs, m.rows, m.scored_rows) == (3, 2, 5, 4)
    # run 0: agent 1/2, run 1: agent 2/2
    assert m.agent.mean == pytest.approx(0.75)
    assert m.agent.std == pytest.approx(math.sqrt(0.125))
    # step exact: 1/2 in both runs
    assert m.step.mean == pytest.approx(0.5) and m.step.std == pytest.approx(0.0)
    assert m.joint.mean == pytest.approx(0.5)
    # within ±1: run0 1/2, run1 1/2; within ±2: run0 1/2, run1 2/2
    assert m.within[0].mean == pytest.approx(0.5)
    assert m.within[1].mean == pytest.approx(0.5)
    assert m.within[2].mean == pytest.approx(0.75)
    assert m.unparsed == 1 and m.errors == 0
    assert m.tokens_per_case == pytest.approx((100 + 100 + 200 + 200 + 100) / 5)
    assert m.calls_per_case == pytest.approx(8 / 5)
    assert m.status_counts == {"ok": 4, "unparsed": 1}


def test_errors_count_as_wrong_and_are_counted() -> None:
    rows = [
        row("a", 0, "Coder", 3),
        row("b", 0, None, None, status="error"),
        row("b", 1, None, None, status="budget-exceeded"),
        row("a", 1, "Coder", 3),
    ]
    m = aggregate(rows)
    assert m.errors == 2
    assert m.agent.mean == pytest.approx(0.5)
    assert m.step.mean == pytest.approx(0.5)
