"""Fixes from an audit of `faultfinder report`: a trace given as results, the advice for
rows stopped by their own budget, runs over different cases, the reliability table's
counts and the step sets of the floors it computes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from click.testing import CliRunner

from faultfinder.cli import main

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
