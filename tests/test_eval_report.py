"""Report tables, plot, and the `eval` / `report` commands."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.eval.report import plot_tolerance, render, summarise
from faultfinder.eval.rows import EvalRow, read_rows
from faultfinder.traces.schema import GoldLabel
from faultfinder.usage import Usage

FIXTURE = Path(__file__).parent / "fixtures" / "eval" / "traces.jsonl"


def make_row(
    trace: str,
    run: int,
    agent: str | None,
    step: int | None,
    *,
    method: str = "m1",
    subset: str = "Alpha",
    status: str = "ok",
    config_id: str = "cfg0000000",
    gold: GoldLabel | None = None,
) -> EvalRow:
    return EvalRow(
        trace_id=trace,
        method=method,
        config={},
        model="function:test",
        prompt_version="t",
        with_ground_truth=False,
        observability="outputs",
        agent=agent,
        step=step,
        status=status,
        usage=Usage(prompt_tokens=90, completion_tokens=10, calls=1),
        wall_time_s=0.25,
        key=f"{trace}|{method}|{config_id}|function:test|run{run}",
        config_id=config_id,
        run=run,
        subset=subset,
        gold=gold or GoldLabel(agent="Coder", step=2),
    )


def rows() -> list[EvalRow]:
    return [
        make_row("t1", 0, "Coder", 2),
        make_row("t2", 0, "Planner", 5),
        make_row("t1", 1, "Coder", 3),
        make_row("t2", 1, None, None, status="unparsed"),
        make_row("t1", 0, "Coder", 2, method="m2", subset="Beta"),
        make_row("t1", 1, None, None, method="m2", subset="Beta", status="error"),
    ]


def test_summaries_and_text_table() -> None:
    summaries = summarise(rows())
    assert [(g.key.subset, g.label) for g in summaries] == [("Alpha", "m1"), ("Beta", "m2")]
    alpha = summaries[0].metrics
    # run 0: agent 1/2, step 1/2; run 1: agent 1/2, step 0/2.
    assert alpha.agent.format() == "50.0 ± 0.0"
    assert alpha.step.format() == "25.0 ± 35.4"
    assert alpha.within[1].format() == "50.0 ± 0.0"
    assert alpha.within[3].format() == "75.0 ± 35.4"
    text = render(summaries, "text")
    assert "== Alpha ==" in text and "== Beta ==" in text
    assert "25.0 ± 35.4" in text and "step ±3 %" in text
    assert "rerun" in text and "--resume" in text  # the error row is flagged
    assert "step ±3" not in render(summaries, "text", tolerances=False)


def test_markdown_csv_json() -> None:
    summaries = summarise(rows())
    md = render(summaries, "markdown")
    assert "### Alpha" in md and "| method | model | GT |" in md
    records = list(csv.DictReader(io.StringIO(render(summaries, "csv"))))
    assert len(records) == 2
    assert records[0]["subset"] == "Alpha" and float(records[0]["agent_mean"]) == 0.5
    assert records[0]["unparsed"] == "1" and records[1]["errors"] == "1"
    data = json.loads(render(summaries, "json"))
    assert data[0]["step_within_3_mean"] == 0.75
    assert data[0]["tokens_per_case"] == 100 and data[0]["calls_per_case"] == 1


def test_same_label_with_two_configs_is_disambiguated() -> None:
    summaries = summarise(
        [make_row("t1", 0, "Coder", 2), make_row("t1", 0, "Coder", 2, config_id="other00000")]
    )
    assert sorted(g.label for g in summaries) == ["m1#cfg000", "m1#other0"]


def test_plot_is_written(tmp_path: Path) -> None:
    path = plot_tolerance(summarise(rows()), tmp_path / "plots" / "tol.png")
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 1000


def invoke(*args: Any) -> Any:
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_cli_eval_resume_and_report(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    base = ["eval", FIXTURE, "--method", "random", "--model", "function:json:dumps"]
    base += ["--cache", "none", "--no-progress", "--out", out]
    result = invoke(*base, "--runs", "2", "--observability", "full,outputs")
    assert result.exit_code == 0, result.output
    assert "ran 20 case(s)" in result.output and "random" in result.output
    assert len(read_rows(out)) == 20

    refused = invoke(*base, "--runs", "2", "--observability", "full,outputs")
    assert refused.exit_code == 1 and "--resume" in refused.output

    resumed = invoke(*base, "--runs", "3", "--observability", "full,outputs", "--resume")
    assert resumed.exit_code == 0 and "ran 10 case(s), 20 already" in resumed.output

    bad = invoke(*base, "--observability", "everything", "--force")
    assert bad.exit_code == 2 and "--observability" in bad.output

    plot = tmp_path / "tol.png"
    report = invoke("report", out, "--plot", plot, "--format", "markdown")
    assert report.exit_code == 0, report.output
    assert "### Alpha" in report.output and "| random |" in report.output
    assert plot.stat().st_size > 1000


def test_cli_subset_limit_and_unknown_method(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    args = ["eval", FIXTURE, "--model", "function:json:dumps", "--cache", "none", "--out", out]
    result = invoke(
        *args, "--method", "random", "--subset", "Beta", "--limit", "1", "--no-progress"
    )
    assert result.exit_code == 0, result.output
    assert [r.trace_id for r in read_rows(out)] == ["beta/1"]
    unknown = invoke(*args, "--method", "nope", "--force")
    assert unknown.exit_code == 1 and "Unknown method 'nope'" in unknown.output


def test_a_plot_without_the_plot_extra_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "results.jsonl"
    args = ["eval", FIXTURE, "--method", "random", "--model", "function:json:dumps"]
    assert invoke(*args, "--cache", "none", "--no-progress", "--out", out).exit_code == 0
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    for flag in ("--plot", "--reliability-plot"):
        result = invoke("report", out, flag, tmp_path / "p.png")
        assert result.exit_code == 1, result.output
        assert "pip install 'faultfinder[plot]'" in result.output
        assert "random" not in result.output  # said before any table
    assert not (tmp_path / "p.png").exists()
