"""DoVer's trial success rate has one definition: successful replays / replays judged, the
replays that failed on their own or could not run set apart (``failed_replays``).

End to end from the CLI on the demo team (real program, real replays through the proxy,
a loopback fake upstream, the scripted debugger as DoVer's model): the upstream answers
the first Orchestrator call it sees 404 and every later call as the demo model would, so
the first replay crashes and the other two recover the reference answer. The rate is then
2/2, not 2/3: the crash is no evidence either way (docs/methods/dover.md).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from demo_recording import TEAM, record_demo
from faultfinder.cli import main
from faultfinder.demo_team import mock_model
from faultfinder.dover.models import DoverRow, RepeatResult
from faultfinder.dover.report import aggregate, format_summary
from faultfinder.dover.verdict import trial_success
from faultfinder.testing import FakeOpenAIServer
from faultfinder.testing.fake_openai import ReplyError

DEBUGGER = ["--model", "function:faultfinder.demo_team.mock_debugger:respond", "--cache", "none"]
ANSWER = "144630"


class FirstOrchestratorCallFails:
    """The demo model, except that the first Orchestrator call it gets is answered 404."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.orchestrator_calls = 0

    def __call__(self, body: dict[str, Any]) -> Any:
        messages = body.get("messages") or []
        system = next((str(m.get("content")) for m in messages if m.get("role") == "system"), "")
        if "You are the Orchestrator" in system:
            with self.lock:
                self.orchestrator_calls += 1
                first = self.orchestrator_calls == 1
            if first:
                raise ReplyError(404, "no route for this model here")
        return mock_model.reply(body)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The demo team's failing run (answer 154131, reference 144630), recorded once."""
    root = tmp_path_factory.mktemp("runs")
    yield Path(record_demo(root, ground_truth=ANSWER).run_dir)


def rows(path: Path) -> list[DoverRow]:
    return [DoverRow.model_validate_json(line) for line in path.read_text().splitlines()]


def check_one_crash_of_three(row: DoverRow) -> None:
    crashed, *others = row.repeats
    assert crashed.program_failed and crashed.success is None and "404" in (crashed.error or "")
    assert all(r.success and not r.program_failed for r in others)
    assert row.failed_replays == 1 and row.successes == 2
    # 2 successes of the 2 replays judged; the crash is in neither count (not 2/3).
    assert row.trial_success_rate == 1.0 and row.flip_rate == 1.0
    assert row.flip_rate_ci is not None and round(row.flip_rate_ci[0], 3) == 0.342
    assert row.verdict == "validated", row.verdict_reason
    assert "1/3 replays are no evidence" in row.verdict_reason


def test_debug_leaves_a_crashed_replay_out_of_the_rate(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    with FakeOpenAIServer(reply=FirstOrchestratorCallFails()) as upstream:
        result = CliRunner().invoke(
            main,
            ["debug", str(run_dir), "--repeats", "3", "--segment", "none", "--out", str(out),
             *DEBUGGER, "--upstream", upstream.base_url, "--", *TEAM],
        )  # fmt: skip
    # A replayed program failed: exit 4, even though the verdict stands.
    assert result.exit_code == 4, result.output
    (row,) = rows(out)
    check_one_crash_of_three(row)
    assert (
        "trial success rate 100% (95% CI 34%-100%) over 2 replays judged "
        "(1 failed replay left out)" in result.output
    )
    assert "trial success rate:  100.0% (95% CI 34.2%-100.0%) over 2 replays judged" in (
        result.output
    )

    report = CliRunner().invoke(main, ["debug-report", str(out), "--json"])
    assert report.exit_code == 0, report.output
    summary = json.loads(report.output)
    assert summary["trial_success_rate"] == 1.0 and summary["judged_replays"] == 2
    assert summary["failed_replays"] == 1 and summary["replays"] == 3


def test_verify_edit_leaves_a_crashed_replay_out_of_the_rate(run_dir: Path, tmp_path: Path) -> None:
    """The Calculator's result (step 6) corrected to the reference, replayed 3 times."""
    edit = tmp_path / "fix.json"
    edit.write_text(json.dumps({"kind": "message", "text": ANSWER}), encoding="utf-8")
    with FakeOpenAIServer(reply=FirstOrchestratorCallFails()) as upstream:
        result = CliRunner().invoke(
            main,
            ["verify-edit", str(run_dir), "--at", "6", "--edit-file", str(edit),
             "--repeats", "3", "--session", tmp_path.name, "--upstream", upstream.base_url,
             "--", *TEAM],
        )  # fmt: skip
    assert result.exit_code == 4, result.output
    (row,) = rows(run_dir / "dover" / f"{tmp_path.name}.jsonl")
    # Without a judge model nothing is judged fulfilled; two successes still validate.
    check_one_crash_of_three(row)
    assert "flip rate 100%" in result.output
    assert "over 2 replays judged (1 failed replay left out)" in result.output


def repeat(number: int, **fields: Any) -> RepeatResult:
    return RepeatResult(repeat=number, branch=f"b{number}", **fields)


def test_one_definition_for_rows_and_the_report() -> None:
    repeats = [
        repeat(0, edit_applied=True, success=True),
        repeat(1, edit_applied=True, success=False),
        # Written before failed replays were set apart: its answer was rated a success.
        repeat(2, edit_applied=True, success=True, program_failed=True, exit_code=1),
        repeat(3, ran=False, error="the replay could not run: Cannot run 'x'"),
        repeat(4, edit_applied=False, divergences=2),  # never got the edit
        repeat(5, edit_applied=True, success=None),  # the checker could not tell
    ]
    rate = trial_success(repeats)
    assert (rate.successes, rate.judged, rate.failed_replays) == (1, 2, 2)
    assert rate.rate == 0.5 and rate.interval is not None
    assert trial_success([]).rate is None and trial_success([]).interval is None
    assert trial_success(repeats[2:4]).rate is None

    row = DoverRow.model_validate(
        {
            "run_dir": "r",
            "trace_id": "t",
            "task": "q",
            "trial": {"index": 0, "start": 0, "end": 3},
            "hypothesis": {"trial": 0, "method": "m", "step": 1},
            "intervention": {
                "category": "modified_instruction",
                "replacement": "new",
                "step": 1,
                "agent": "A",
                "original": "old",
            },
            "repeats": [r.model_dump() for r in repeats],
        }
    )
    summary = aggregate([row])
    assert summary.trial_success_rate == rate.rate and summary.judged_replays == 2
    assert summary.failed_replays == 2 and summary.replays == 6
    assert summary.trial_success_rate_ci == rate.interval
    assert "over 2 replays judged (2 failed replays left out)" in format_summary(summary)
