"""record -> attribute -> replay -> debug -> debug-report from the command line, on the demo
team, offline (scripted team model on a loopback fake upstream, scripted debugger)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.demo_team import mock_model
from faultfinder.testing import FakeOpenAIServer

DEBUGGER = ["--model", "function:faultfinder.demo_team.mock_debugger:respond", "--cache", "none"]


def test_record_attribute_replay_debug_from_the_cli(tmp_path: Path) -> None:
    runner = CliRunner()
    steps_file = tmp_path / "solution.txt"
    steps_file.write_text(
        "Look up the population of Avalon in 2020: 48210.\nMultiply by 3: 144630.\n"
    )
    team = [sys.executable, "-m", "faultfinder.demo_team", "--quiet", "--task-id", "avalon-2020"]
    with FakeOpenAIServer(reply=mock_model.reply) as upstream:
        recorded = runner.invoke(
            main,
            [
                "record", "--upstream", upstream.base_url, "--out", str(tmp_path / "runs"),
                "--run-id", "avalon", "--ground-truth", "144630",
                "--reference-steps", str(steps_file), "--quiet", "--", *team,
            ],
        )  # fmt: skip
        assert recorded.exit_code == 0, recorded.output
        assert "recorded 8 steps from 3 agents" in recorded.output
        run = tmp_path / "runs" / "avalon"
        assert json.loads((run / "trace.json").read_text())["metadata"]["outcome"] == "failure"

        attributed = runner.invoke(
            main, ["attribute", str(run / "trace.json"), "--method", "all-at-once", *DEBUGGER]
        )
        assert attributed.exit_code == 0, attributed.output
        assert (
            "agent:      Orchestrator" in attributed.output and "step:       1" in attributed.output
        )

        fix = "NEXT: Researcher | Look up the population of Avalon in 2020"
        replayed = runner.invoke(
            main,
            ["replay", str(run), "--at", "1", "--edit", fix, "--upstream", upstream.base_url,
             "--quiet", "--", *team],
        )  # fmt: skip
        assert replayed.exit_code == 0, replayed.output
        assert "edit:        applied at step 1" in replayed.output
        assert "'144630' (matches the reference)" in replayed.output

        out = tmp_path / "dover.jsonl"
        debugged = runner.invoke(
            main,
            [
                "debug",
                str(run),
                "--repeats",
                "1",
                "--segment",
                "pattern:^PLAN",
                "--out",
                str(out),
                "--upstream",
                upstream.base_url,
                *DEBUGGER,
                "--",
                *team,
            ],
        )
        assert debugged.exit_code == 0, debugged.output
        assert "-> validated (1/1 runs succeeded)" in debugged.output

    report = runner.invoke(main, ["debug-report", str(out), "--json"])
    assert report.exit_code == 0, report.output
    summary = json.loads(report.output)
    assert summary["verdicts"]["validated"] == 1 and summary["trial_success_rate"] == 1.0
    assert len(list((run / "branches").iterdir())) == 2


def test_replay_refuses_a_step_outside_the_recording(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "steps.jsonl").write_text("")
    result = CliRunner().invoke(
        main, ["replay", str(run), "--at", "3", "--edit", "x", "--", "true"]
    )
    assert result.exit_code == 1
    assert "outside the recording" in result.output
