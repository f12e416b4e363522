"""`faultfinder demo` and its bundled trace."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.cli.demo import load_demo_trace


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`demo` saves its trace under the working directory: keep it out of the repository."""
    monkeypatch.chdir(tmp_path)


def test_bundled_trace_is_valid_and_shows_the_schema_off() -> None:
    trace = load_demo_trace()
    assert 8 <= len(trace.steps) <= 12
    assert trace.ground_truth and trace.final_answer and trace.ground_truth != trace.final_answer
    assert trace.label is not None and trace.label.agent and trace.label.step is not None
    assert trace.steps[trace.label.step].agent == trace.label.agent
    assert all(agent.system_prompt for agent in trace.agents)
    assert {a.name for a in trace.agents} == set(trace.agent_names())
    assert trace.has_inputs
    assert any(step.tool_calls and step.tool_results for step in trace.steps)


def _replies(tmp_path: Path, replies: list[str]) -> str:
    path = tmp_path / "replies.json"
    path.write_text(json.dumps(replies), encoding="utf-8")
    return f"scripted:{path}"


def test_the_first_command_answers_offline_and_replays_the_fix() -> None:
    """`faultfinder demo` with nothing but the package: an answered attribution (agent,
    step, why, step set) from the offline shortlist beside the floors and the gold label,
    then the demo team's failure recorded and replayed with the fix, flipping."""
    result = CliRunner().invoke(main, ["demo"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "method:     shortlist  (model none" in out
    assert "status:     ok" in out
    assert re.search(r"^agent:      \w+", out, re.MULTILINE)
    assert re.search(r"^step:       \d+  \(0-based\)", out, re.MULTILINE)
    assert re.search(r"^reason:     \S", out, re.MULTILINE)
    # The embedded demo trace is of no source the shipped weights trained on: its set uses
    # the thresholds for a source never trained on, which at 90% hold the whole trace
    # (docs/methods/shortlist.md, "Calibrated sets").
    assert re.search(
        r"^step set:   \{0-9\}.*10 of 10 steps.*\(calibrated on sources never trained on\)$",
        out,
        re.MULTILINE,
    )
    assert "gold agent: WebSurfer" in out and "gold step:  3" in out
    for floor in (
        "random",
        "baseline:first-speaker",
        "baseline:majority-agent",
        "baseline:position",
    ):
        assert re.search(
            rf"^  {re.escape(floor)} +\w+ +\d+ +(yes|no) +(yes|no)$", out, re.MULTILINE
        )
    assert re.search(r"^  \(gold label\) +WebSurfer +3$", out, re.MULTILINE)
    # the replay half: a real recording and a real replay branch on disk
    assert "answer:     154131  (reference 144630): failure" in out
    assert "now:      1. Researcher: Look up the population of Avalon in 2020" in out
    assert "replayed:   steps 0 edited, 1-" in out and "answer 144630" in out
    assert "outcome:    failure -> success" in out
    run = Path(".faultfinder") / "demo-run"
    assert (run / "trace.json").exists() and (run / "meta.json").exists()
    assert (run / "branches" / "fixed" / "report.json").exists()
    assert "SmolLM2" not in out  # no embedded-model note when no model ran
    # a second demo replaces its recording instead of failing or piling up
    again = CliRunner().invoke(main, ["demo", "--save-trace", "none"])
    assert again.exit_code == 0, again.output
    assert sorted(p.name for p in (run / "branches").iterdir()) == ["fixed"]


def test_demo_refuses_to_replace_a_folder_that_is_not_a_recording(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me", encoding="utf-8")
    result = CliRunner().invoke(main, ["demo", "--run-dir", str(mine)])
    assert result.exit_code == 1, result.output
    assert "is not a recording" in result.output
    assert (mine / "notes.txt").read_text(encoding="utf-8") == "keep me"


def test_demo_with_a_model_method_prints_trace_attribution_and_gold(tmp_path: Path) -> None:
    model = _replies(
        tmp_path, ["Agent Name: WebSurfer\nStep Number: 3\nReason for Mistake: used 2021 column"]
    )
    args = ["demo", "--method", "all-at-once", "--model", model, "--cache", "none", "--no-replay"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Riverton Public Library" in out
    assert "WebSurfer" in out and "[calls fetch_page]" in out
    assert "method:     all-at-once" in out
    assert "reason:     used 2021 column" in out
    assert "gold agent: WebSurfer    (match)" in out
    assert "gold step:  3    (match; in the step set)" in out
    assert "== 2." not in out and not (Path(".faultfinder") / "demo-run").exists()
    assert "SmolLM2" not in out  # the embedded-model note is only for --model local


def test_demo_reports_a_mismatch_and_other_methods(tmp_path: Path) -> None:
    # binary search over 10 steps: [0,9] -> lower [5,9] -> upper [5,7] -> upper [5,6] -> [5,5]
    model = _replies(tmp_path, ["lower half", "upper half", "upper half", "upper half"])
    args = ["demo", "--method", "binary-search", "--model", model, "--cache", "none", "--no-replay"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "step:       5  (0-based)" in result.output
    assert "gold agent: WebSurfer    (no match)" in result.output
    assert "gold step:  3    (no match" in result.output


def test_demo_saves_its_trace_for_the_next_command(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["demo", "--method", "random", "--no-replay"])
    assert result.exit_code == 0, result.output
    saved = Path(".faultfinder") / "demo-trace.json"
    assert f"faultfinder attribute {saved} --method shortlist" in result.output
    # The commands the demo suggests run on the saved file, with no model installed or named.
    for method in ("shortlist", "baseline:first-speaker"):
        follow = CliRunner().invoke(main, ["attribute", str(saved), "--method", method])
        assert follow.exit_code == 0, follow.output
        assert "gold agent: WebSurfer" in follow.output  # a labelled trace shows its gold
    skipped = CliRunner().invoke(
        main, ["demo", "--method", "random", "--save-trace", "none", "--no-replay"]
    )
    assert skipped.exit_code == 0 and "demo-trace.json" not in skipped.output


def test_demo_says_why_an_answer_is_unparsed_and_exits_3_a_budget_stop_is_5(
    tmp_path: Path,
) -> None:
    # An unreadable answer is shown with its reason, and the exit code says so (3), as for
    # `attribute` (docs/exit-codes.md).
    junk = _replies(tmp_path, ["I think it was 2.", "maybe", "no idea"])
    base = ["demo", "--method", "all-at-once", "--model", junk, "--cache", "none", "--no-replay"]
    shown = CliRunner().invoke(main, base)
    assert shown.exit_code == 3, shown.output
    status = next(line for line in shown.output.splitlines() if line.startswith("status:"))
    assert status.startswith("status:     unparsed  (") and len(status) > 30
    stopped = CliRunner().invoke(main, [*base, "--max-calls", "1", "--max-tokens", "1"])
    assert stopped.exit_code == 5, stopped.output
