"""`verify-edit` follows DoVer's rules before it replays anything: a recorded run that
already passes the success check has nothing to flip (no verdict, no flip rate, never a
"recovery"), and an edit equal to what the step recorded changes nothing (`not_applied`).
Neither sends a request upstream. The demo team is recorded for real, on loopback."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from demo_recording import TEAM, record_demo
from faultfinder.cli import main
from faultfinder.demo_team import mock_model
from faultfinder.dover.models import DoverRow
from faultfinder.dover.report import aggregate
from faultfinder.testing import FakeOpenAIServer
from faultfinder.traces.loader import load_traces

WRONG, RIGHT = "154131", "144630"  # what the team answers; the reference


def record(root: Path, ground_truth: str) -> Path:
    return Path(record_demo(root, run_id=f"gt-{ground_truth}", ground_truth=ground_truth).run_dir)


def verify(
    run_dir: Path, edit: dict[str, object], at: int, session: str, *options: str
) -> tuple[str, int, int]:
    path = run_dir / f"{session}.edit.json"
    path.write_text(json.dumps(edit), encoding="utf-8")
    with FakeOpenAIServer(reply=mock_model.reply) as upstream:
        result = CliRunner().invoke(
            main,
            ["verify-edit", str(run_dir), "--at", str(at), "--edit-file", str(path),
             "--repeats", "3", "--session", session, "--upstream", upstream.base_url,
             *options, "--", *TEAM],
        )  # fmt: skip
        sent = len(upstream.requests)
    return result.output, result.exit_code, sent


def row_of(run_dir: Path, session: str) -> DoverRow:
    (line,) = (run_dir / "dover" / f"{session}.jsonl").read_text().splitlines()
    return DoverRow.model_validate_json(line)


@pytest.mark.slow
def test_a_run_that_already_succeeded_gets_no_verdict(tmp_path: Path) -> None:
    run_dir = record(tmp_path, WRONG)  # the team's own answer: the run passes its check
    output, code, sent = verify(run_dir, {"kind": "message", "text": RIGHT}, 6, "ok-run")
    assert code == 0, output
    assert sent == 0
    assert "not replayed: the recorded run already passes the success check" in output
    assert "verdict: none, the run already succeeded" in output
    row = row_of(run_dir, "ok-run")
    assert row.status == "already-succeeded" and row.verdict is None
    assert row.flip_rate is None and row.repeats == []
    summary = aggregate([row])
    assert summary.already_succeeded == 1 and summary.runs_recovered == 0


def counting_check(tmp_path: Path, verdict: str) -> tuple[str, Path]:
    """A --check command that says ``verdict`` and leaves a line per run in a file: the
    run directory it was given."""
    marker = tmp_path / "checks.log"
    script = tmp_path / "check.py"
    script.write_text(
        "import json, sys\n"
        f"open({str(marker)!r}, 'a').write(json.load(sys.stdin)['run_dir'] + '\\n')\n"
        f"print({verdict!r})\n",
        encoding="utf-8",
    )
    return f"{sys.executable} {script}", marker


@pytest.mark.slow
def test_the_success_check_runs_once_on_the_recorded_run(tmp_path: Path) -> None:
    """A --check command may be slow or cost money: the recorded run is checked once,
    for the rule and the row alike (it ran twice)."""
    run_dir = record(tmp_path, RIGHT)
    command, marker = counting_check(tmp_path, "pass")
    output, code, sent = verify(
        run_dir, {"kind": "message", "text": RIGHT}, 6, "once", "--check", command
    )
    assert code == 0 and sent == 0, output
    assert "verdict: none, the run already succeeded" in output
    # Once, and given the recording's directory, as `debug` gives it (it got '').
    assert marker.read_text().splitlines() == [str(run_dir)]


@pytest.mark.slow
def test_an_edit_equal_to_the_recording_is_not_applied(tmp_path: Path) -> None:
    run_dir = record(tmp_path, RIGHT)
    (trace,) = load_traces(run_dir / "trace.json", format="faultfinder")
    same = {"kind": "message", "text": "  " + trace.steps[6].content + "\n"}
    output, code, sent = verify(run_dir, same, 6, "same")
    assert code == 0, output
    assert sent == 0
    assert "not replayed: the edit is what the step recorded" in output
    row = row_of(run_dir, "same")
    assert row.verdict == "not_applied" and row.repeats == []


@pytest.mark.slow
def test_an_edit_that_never_went_out_says_the_step_was_reached(tmp_path: Path) -> None:
    """A tool_result edit naming a call id no request carries reaches its step and is never
    sent. Each replay's line used to read 'success False', as if the edit had been tried
    and failed, and the verdict said the program 'did not reach the intervened step',
    which it did: the user looked for a divergence that was not there."""
    run_dir = record(tmp_path, RIGHT)
    (trace,) = load_traces(run_dir / "trace.json", format="faultfinder")
    at = next(s.index for s in trace.steps if s.tool_calls)
    edit = {"kind": "tool_result", "tool_call_id": "call_nobody", "content": RIGHT}
    output, code, _ = verify(run_dir, edit, at, "no-such-call")
    assert code == 0, output
    assert "success False" not in output
    assert output.count("the edit was NOT applied (the step was reached, but no request") == 3
    row = row_of(run_dir, "no-such-call")
    assert row.verdict == "not_applied"
    assert "did not reach the intervened step" not in (row.verdict_reason or "")
    assert "3 reached the intervened step, but the edit never went out" in (
        row.verdict_reason or ""
    )
    assert all(r.at_reached and not r.edit_applied and r.success is None for r in row.repeats)
