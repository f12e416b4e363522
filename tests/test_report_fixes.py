"""Fixes from an audit of `faultfinder report`: a trace given as results, the advice for
rows stopped by their own budget, runs over different cases, the reliability table's
counts and the step sets of the floors it computes."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.eval import reliability
from faultfinder.eval.report import render, summarise
from faultfinder.eval.rows import EvalRow
from faultfinder.traces.schema import GoldLabel

HERE = Path(__file__).parent
FIXTURE = HERE / "fixtures" / "eval" / "traces.jsonl"


def invoke(*args: Any) -> Any:
    return CliRunner().invoke(main, [str(a) for a in args])


def test_report_of_a_one_line_trace_says_it_is_a_trace(tmp_path: Path) -> None:
    trace = tmp_path / "run.json"
    trace.write_text(FIXTURE.read_text().splitlines()[0])  # no final newline, as written
    result = invoke("report", trace)
    assert result.exit_code == 1
    assert "No result rows" not in result.output
    assert f"{trace} is a trace, not eval results" in result.output
    assert "faultfinder attribute" in result.output and "faultfinder eval" in result.output
    # Beside a results file too: the trace is named, not dropped as an unfinished row.
    results = tmp_path / "r.jsonl"
    ran = invoke("eval", FIXTURE, "--method", "random", "--no-progress", "--out", results)
    assert ran.exit_code == 0, ran.output
    both = invoke("report", results, trace)
    assert both.exit_code == 1 and f"{trace} is a trace" in both.output
    assert "unfinished" not in both.output


def row(
    trace: str,
    run: int,
    step: int | None,
    *,
    status: str = "ok",
    confidence: float | None = None,
    budget_stop: str | None = None,
    method: str = "m1",
    **extra: Any,
) -> EvalRow:
    return EvalRow(
        trace_id=trace,
        method=method,
        config={},
        model="function:test",
        prompt_version="t",
        with_ground_truth=False,
        observability="outputs",
        agent="Coder" if step is not None else None,
        step=step,
        status=status,
        confidence=confidence,
        budget_stop=budget_stop,  # type: ignore[arg-type]
        key=f"{trace}|{method}|cfg0000000|function:test|run{run}",
        config_id="cfg0000000",
        run=run,
        subset="Alpha",
        gold=GoldLabel(agent="Coder", step=2),
        **extra,
    )


def test_reliability_counts_cases_and_says_the_rows_apart() -> None:
    # Two cases, three runs each: six rows in one bin are two cases.
    rows = [row(t, r, 2, confidence=0.75) for t in ("t1", "t2") for r in range(3)]
    text = reliability.render_rows(rows, "text")
    assert "on Alpha (2 cases, 6 rows, ECE" in text
    header, _, first = text.splitlines()[1:4]
    assert header.split() == [
        "confidence",
        "cases",
        "rows",
        "mean",
        "confidence",
        "step",
        "accuracy",
    ]
    assert first.split()[:3] == ["0.7–0.8", "2", "6"]
    md = reliability.render_rows(rows, "markdown")
    assert "| confidence | cases | rows | mean confidence | step accuracy |" in md
    assert "| 0.7–0.8 | 2 | 6 | 0.75 | 100.0% |" in md
    # One run: the table is as before, a case per row.
    once = reliability.render_rows([row("t1", 0, 2, confidence=0.75)], "markdown")
    assert "(1 case, ECE" in once and "| 0.7–0.8 | 1 | 0.75 | 100.0% |" in once


def test_rows_stopped_by_their_own_budget_are_not_sent_to_resume() -> None:
    stopped = row("t1", 0, None, status="budget-exceeded", budget_stop="case")
    text = render(summarise([row("t2", 0, 2), stopped]))
    assert "--resume to retry" not in text
    assert "1 row(s) stopped on their own per-case token budget" in text
    assert "--resume keeps them" in text and "a larger --budget-tokens" in text
    # An error and a run-wide budget stop are what --resume retries.
    failed = [
        row("t3", 0, None, status="error"),
        row("t4", 0, None, status="budget-exceeded", budget_stop="run"),
    ]
    text = render(summarise([stopped, *failed]))
    assert "2 row(s) failed (status error/budget-exceeded)" in text
    assert "with --resume to retry them" in text and "1 row(s) stopped on their own" in text


def test_runs_over_different_cases_are_said_in_a_note() -> None:
    # Run 0 has three cases, run 1 (cut short) one of them, run 2 two.
    rows = [row(t, 0, 2) for t in ("t1", "t2", "t3")]
    rows += [row("t1", 1, 2), row("t1", 2, 3), row("t2", 2, 2)]
    rows += [row(t, r, 2, method="m2") for t in ("t1", "t2") for r in range(2)]
    text = render(summarise(rows))
    assert "Runs cover different cases: each run's accuracy is over the cases it has" in text
    assert "m1 on Alpha: 1 of 3 cases in run 1; 2 of 3 cases in run 2." in text
    assert "m2 on Alpha" not in text  # both its runs have both its cases
    assert "with --resume runs the missing cases" in text
    # Runs over the same cases: no note.
    assert "Runs cover different cases" not in render(summarise(rows[-4:]))


def floor_levels(stdout: str) -> dict[str, set[str]]:
    """Method -> the levels of its lines in the report's step-set section."""
    section = stdout.split("Step sets:", 1)[1].split("\n\n", 1)[0]
    out: dict[str, set[str]] = {}
    for line in section.splitlines()[3:]:
        cells = line.split()
        out.setdefault(cells[1], set()).add(cells[2])
    return out


def test_floors_get_step_sets_at_the_results_level(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.delenv("FAULTFINDER_SHORTLIST_WEIGHTS", raising=False)
    out = tmp_path / "r80.jsonl"
    args = ["eval", FIXTURE, "--method", "shortlist", "--no-progress", "--cache", "none"]
    assert invoke(*args, "--step-set", "0.8", "--out", out).exit_code == 0
    result = invoke("report", out, "--floors", FIXTURE, "--no-tolerances")
    assert result.exit_code == 0, result.output
    levels = floor_levels(result.stdout)
    assert levels["random"] == levels["baseline:position"] == levels["shortlist"] == {"80%"}
    assert "note: --floors" not in result.stderr  # the rows say one level and weights
    # Results without step sets: the floors get none either.
    off = tmp_path / "off.jsonl"
    assert invoke(*args, "--step-set", "off", "--out", off).exit_code == 0
    result = invoke("report", off, "--floors", FIXTURE)
    assert result.exit_code == 0 and "Step sets:" not in result.stdout


def test_floors_say_which_weights_their_step_sets_come_from(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.delenv("FAULTFINDER_SHORTLIST_WEIGHTS", raising=False)
    mine = tmp_path / "mine.json"
    mine.write_bytes((HERE.parent / "src/faultfinder/shortlist/weights.json").read_bytes())
    out = tmp_path / "r.jsonl"
    args = ["eval", FIXTURE, "--method", "shortlist", "--no-progress", "--cache", "none"]
    assert invoke(*args, "--shortlist-weights", mine, "--out", out).exit_code == 0
    shipped = invoke("report", out, "--floors", FIXTURE)
    assert shipped.exit_code == 0, shipped.output
    assert (
        "note: --floors: the results' step sets come from the shortlist weights 'mine.json'; "
        "the floors' come from 'shipped': pass that file as --shortlist-weights"
    ) in shipped.stderr
    same = invoke("report", out, "--floors", FIXTURE, "--shortlist-weights", mine)
    assert same.exit_code == 0 and "note: --floors" not in same.stderr
    # Rows at two levels: the floors take the one most rows have, and say so.
    more = tmp_path / "more.jsonl"
    assert invoke(*args, "--step-set", "0.95", "--limit", "1", "--out", more).exit_code == 0
    mixed = invoke("report", more, out, "--floors", FIXTURE, "--shortlist-weights", mine)
    assert mixed.exit_code == 0, mixed.output
    # (the shipped weights' shortlist is another config: its rows are lines of their own)
    assert "several levels, 90% (5 rows), 95% (2 rows); the floors' are at 90%" in mixed.stderr
    assert "weights 'mine.json', 'shipped'; the floors' come from 'mine.json'" in mixed.stderr
    # Without --floors the file would serve nothing: said, not ignored.
    alone = invoke("report", out, "--shortlist-weights", mine)
    assert alone.exit_code == 2 and "only applies with --floors" in alone.output


def test_csv_and_json_reports_keep_their_notes_on_stderr(tmp_path: Path) -> None:
    # A per-case budget stop and a run cut short: caveats a script must not lose.
    rows = [row("t1", 0, 2), row("t2", 0, None, status="budget-exceeded", budget_stop="case")]
    rows.append(row("t1", 1, 2))
    results = tmp_path / "r.jsonl"
    results.write_text("".join(r.model_dump_json() + "\n" for r in rows))
    for fmt in ("csv", "json"):
        result = invoke("report", results, "--format", fmt)
        assert result.exit_code == 0, result.output
        notes = result.stderr.splitlines()
        assert all(line.startswith("note: ") for line in notes)
        assert any("1 row(s) stopped on their own per-case token budget" in n for n in notes)
        assert any("m1 on Alpha: 1 of 2 cases in run 1" in n for n in notes)
        assert any("No floors in these results" in n for n in notes)
        assert not any(n.startswith("note: Accuracies:") for n in notes)  # the tables' key
        assert "note:" not in result.stdout  # the data stays as it was
    data = json.loads(invoke("report", results, "--format", "json").stdout)
    assert [r["method"] for r in data] == ["m1"] and data[0]["errors"] == 1
    records = list(csv.DictReader(io.StringIO(invoke("report", results, "--format", "csv").stdout)))
    assert len(records) == 1 and records[0]["runs"] == "2"


def test_csv_and_json_records_say_which_line_the_notes_are_about(tmp_path: Path) -> None:
    # m1: a per-case budget stop, and run 1 cut short; m2: both runs over both cases.
    rows = [row("t1", 0, 2), row("t2", 0, None, status="budget-exceeded", budget_stop="case")]
    rows += [row("t1", 1, 2), row("t3", 0, None, status="error")]
    rows += [row(t, r, 2, method="m2") for t in ("t1", "t2") for r in range(2)]
    results = tmp_path / "r.jsonl"
    results.write_text("".join(r.model_dump_json() + "\n" for r in rows))
    report = json.loads(invoke("report", results, "--format", "json").stdout)
    data = {r["method"]: r for r in report}
    assert data["m1"]["errors"] == 2 and data["m1"]["case_budget_stops"] == 1
    assert (data["m1"]["min_run_cases"], data["m1"]["max_run_cases"]) == (1, 3)
    assert data["m1"]["scored_cases"] == 3  # min_run_cases below it: the runs differ
    assert data["m2"]["case_budget_stops"] == 0
    assert (data["m2"]["min_run_cases"], data["m2"]["max_run_cases"]) == (2, 2)
    # Additive: the new columns come last, after every column the records had.
    out = invoke("report", results, "--format", "csv").stdout
    header = next(csv.reader(io.StringIO(out)))
    new = ["case_budget_stops", "min_run_cases", "max_run_cases", "empty_traces"]
    assert header[-5:] == list(data["m1"])[-5:] == ["no_error_found", *new]
    records = {r["method"]: r for r in csv.DictReader(io.StringIO(out))}
    assert records["m1"]["case_budget_stops"] == "1" and records["m1"]["min_run_cases"] == "1"
    # A line without a labelled row has no run to count.
    unlabelled = row("t1", 0, 2).model_copy(update={"gold": None})
    empty = json.loads(render(summarise([unlabelled]), "json"))
    assert empty[0]["min_run_cases"] is None and empty[0]["max_run_cases"] is None
