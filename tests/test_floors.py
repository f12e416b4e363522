"""Floors as methods (random, baseline:*) and the report's confidence intervals."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.eval.floors import FLOORS, floor_rows, is_floor
from faultfinder.eval.metrics import ScoredRow, aggregate, score, wilson
from faultfinder.eval.report import render, summarise
from faultfinder.judging.method import run_method
from faultfinder.llm import LLM
from faultfinder.llm.doubles import NoModelBackend
from faultfinder.registry import create_method
from faultfinder.traces.io import trace_from_dict
from faultfinder.traces.schema import GoldLabel, Trace

EVAL_SET = str(Path(__file__).parent / "fixtures" / "eval" / "traces.jsonl")


def make_trace(*speakers: str, human_first: bool = True) -> Trace:
    steps: list[dict[str, Any]] = []
    if human_first:
        steps.append({"index": 0, "agent": "human", "kind": "human", "content": "the task"})
    for name in speakers:
        steps.append({"index": len(steps), "agent": name, "content": f"{name} speaks"})
    return trace_from_dict({"schema_version": "1", "id": "t", "task": "x", "steps": steps})


def attribute(spec: str, trace: Trace, **overrides: Any) -> tuple[str | None, int | None, str]:
    method = create_method(spec, **overrides)
    result = asyncio.run(run_method(method, trace, LLM(NoModelBackend()), label=spec))
    assert result.model == "none" and result.usage.calls == 0
    return result.agent, result.step, result.status


@pytest.mark.parametrize(
    ("spec", "speakers", "agent", "step"),
    [
        # The human's step 0 is never blamed: the first agent step is step 1.
        ("baseline:first-speaker", ("Orchestrator", "WebSurfer", "WebSurfer"), "Orchestrator", 1),
        # Majority: WebSurfer speaks most; its first step.
        ("baseline:majority-agent", ("Orchestrator", "WebSurfer", "WebSurfer"), "WebSurfer", 2),
        # A tie goes to the agent that speaks first.
        ("baseline:majority-agent", ("Coder", "Planner", "Planner", "Coder"), "Coder", 1),
        # Position 0.5 of 5 agent steps (1..5) is the third: step 3.
        ("baseline:position", ("A", "B", "C", "D", "E"), "C", 3),
        # 4 agent steps: round(0.5 * 3) = 2 (Python rounds half to even) -> the third, step 3.
        ("baseline:position", ("A", "B", "C", "D"), "C", 3),
    ],
)
def test_baseline_rules(spec: str, speakers: tuple[str, ...], agent: str, step: int) -> None:
    assert attribute(spec, make_trace(*speakers)) == (agent, step, "ok")


def test_first_speaker_is_step_0_without_a_human() -> None:
    trace = make_trace("Planner", "Coder", human_first=False)
    assert attribute("baseline:first-speaker", trace) == ("Planner", 0, "ok")


@pytest.mark.parametrize(("position", "expected"), [(0.0, 1), (1.0, 5), (0.26, 2)])
def test_position_is_a_fixed_parameter(position: float, expected: int) -> None:
    trace = make_trace("A", "B", "C", "D", "E")
    _, step, _ = attribute("baseline:position", trace, relative_position=position)
    assert step == expected


def test_position_out_of_range_is_refused() -> None:
    with pytest.raises(Exception, match="relative_position"):
        create_method("baseline:position", relative_position=1.5)


def test_a_log_with_only_the_human_gives_no_error_found() -> None:
    assert attribute("baseline:majority-agent", make_trace()) == (None, None, "no-error-found")


@pytest.mark.parametrize("spec", FLOORS[1:])
def test_every_baseline_names_a_step_its_agent_took(spec: str) -> None:
    trace = make_trace("A", "B", "B", "C", "A", "B", "C")
    agent, step, _ = attribute(spec, trace)
    assert step is not None and trace.steps[step].agent == agent


def test_is_floor() -> None:
    assert all(is_floor(label) for label in FLOORS)
    assert not is_floor("all-at-once") and not is_floor("echo:I1") and not is_floor("nope")
    # Needing no model does not make a method a floor: the shortlist is a method.
    from faultfinder.registry import methods

    assert not methods()["shortlist"].needs_model and not is_floor("shortlist")


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    # Newcombe (1998), Statistics in Medicine 17:857, Table I, method 3 (Wilson score).
    [
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
    ],
)
def test_wilson_matches_published_values(k: int, n: int, low: float, high: float) -> None:
    got = wilson(k, n)
    assert got == pytest.approx((low, high), abs=5e-5)


def test_wilson_half_width_on_who_and_when_sized_subsets() -> None:
    # The "±8 to ±11 points": 126 and 58 cases at accuracies of 30-50%.
    for n, p, lo, hi in ((126, 0.3, 7.5, 8.5), (126, 0.5, 8.4, 8.9), (58, 0.3, 11.0, 12.5)):
        low, high = wilson(p * n, n)
        assert lo <= 100 * (high - low) / 2 <= hi


def test_interval_over_cases_with_several_runs() -> None:
    gold = GoldLabel(agent="A", step=1)
    rows = [
        ScoredRow(
            case=f"c{c}", run=r, status="ok", score=score("A" if (c + r) % 2 else "B", 1, gold)
        )
        for c in range(10)
        for r in range(2)
    ]
    m = aggregate(rows)
    # Every case is right in exactly one of two runs: per-case mean 0.5 -> 5 of 10.
    assert m.agent.mean == 0.5 and m.agent.ci == pytest.approx(wilson(5, 10))
    assert m.step.ci == pytest.approx(wilson(10, 10))


def test_report_shows_intervals_and_floors_last(tmp_path: Path) -> None:
    rows = floor_rows([t for t in _traces() if t.label is not None], random_runs=2)
    text = render(summarise(rows), "text")
    alpha = text.split("== Alpha ==")[1].split("==")[0]
    assert "33.3 (6.1–79.2)" in alpha  # first speaker: 1 of 3, Wilson interval
    records = json.loads(render(summarise(rows), "json"))
    assert {r["method"] for r in records} == set(FLOORS)
    assert all(r["floor"] for r in records)
    first = next(
        r for r in records if r["method"] == "baseline:first-speaker" and r["subset"] == "Alpha"
    )
    assert (first["agent_ci_low"], first["agent_ci_high"]) == pytest.approx(wilson(1, 3), abs=1e-6)


def _traces() -> list[Trace]:
    from faultfinder.traces.loader import load_traces

    return load_traces(EVAL_SET)


def test_cli_report_floors_from_the_dataset(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    replies = tmp_path / "replies.json"
    replies.write_text(
        json.dumps(
            {
                "replies": ["Agent Name: Coder\nStep Number: 1\nReason for Mistake: x"],
                "repeat_last": True,
            }
        )
    )
    runner = CliRunner()
    ran = runner.invoke(
        main,
        [
            "eval",
            EVAL_SET,
            "--out",
            str(out),
            "--model",
            f"scripted:{replies}",
            "--cache",
            "none",
            "--no-progress",
        ],
    )
    assert ran.exit_code == 3, ran.output  # Beta has no agent 'Coder': 2 cases unparsed
    plain = runner.invoke(main, ["report", str(out)])
    assert plain.exit_code == 0 and "No floors in these results" in plain.output
    assert "random" not in plain.output.split("Accuracies:")[0]
    with_floors = runner.invoke(main, ["report", str(out), "--floors", EVAL_SET])
    assert with_floors.exit_code == 0, with_floors.output
    alpha = with_floors.output.split("== Alpha ==")[1].split("Step accuracy")[0]
    lines = [ln.split()[0] for ln in alpha.strip().splitlines()[2:]]
    assert lines == ["all-at-once", *sorted(FLOORS)]  # the method first, then its floors
    assert "Floors (no model; listed last in each subset)" in with_floors.output
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps(make_trace("A").model_dump(mode="json")) + "\n")
    mismatch = runner.invoke(main, ["report", str(out), "--floors", str(other)])
    assert mismatch.exit_code == 1 and "none of its traces is in the results" in mismatch.output
