"""`faultfinder demo` and its bundled trace."""

from __future__ import annotations

import json
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


def test_demo_prints_trace_attribution_and_gold(tmp_path: Path) -> None:
    model = _replies(
        tmp_path, ["Agent Name: WebSurfer\nStep Number: 3\nReason for Mistake: used 2021 column"]
    )
    result = CliRunner().invoke(main, ["demo", "--model", model, "--cache", "none"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Riverton Public Library" in out
    assert "WebSurfer" in out and "[calls fetch_page]" in out
    assert "method:     all-at-once" in out
    assert "reason:     used 2021 column" in out
    assert "gold agent: WebSurfer    (match)" in out
    assert "gold step:  3    (match)" in out
    assert "SmolLM2" not in out  # the embedded-model note is only for --model local


def test_demo_reports_a_mismatch_and_other_methods(tmp_path: Path) -> None:
    # binary search over 10 steps: [0,9] -> lower [5,9] -> upper [5,7] -> upper [5,6] -> [5,5]
    model = _replies(tmp_path, ["lower half", "upper half", "upper half", "upper half"])
    args = ["demo", "--method", "binary-search", "--model", model, "--cache", "none"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "step:       5  (0-based)" in result.output
    assert "gold agent: WebSurfer    (no match)" in result.output
    assert "gold step:  3    (no match)" in result.output


def test_demo_saves_its_trace_for_the_next_command(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["demo", "--method", "random"])
    assert result.exit_code == 0, result.output
    saved = Path(".faultfinder") / "demo-trace.json"
    assert f"trace saved to {saved}" in result.output
    # The command the demo suggests runs on the saved file, with no model installed or named.
    follow = CliRunner().invoke(
        main, ["attribute", str(saved), "--method", "baseline:first-speaker"]
    )
    assert follow.exit_code == 0, follow.output
    assert "agent:      Orchestrator" in follow.output and "step:       0" in follow.output
    skipped = CliRunner().invoke(main, ["demo", "--method", "random", "--save-trace", "none"])
    assert skipped.exit_code == 0 and "trace saved" not in skipped.output


def test_demo_shows_an_unreadable_answer_and_exits_0_but_a_budget_stop_is_5(
    tmp_path: Path,
) -> None:
    # The tiny embedded model often answers unreadably: the demo still ran end to end.
    junk = _replies(tmp_path, ["I think it was 2.", "maybe", "no idea"])
    shown = CliRunner().invoke(main, ["demo", "--model", junk, "--cache", "none"])
    assert shown.exit_code == 0, shown.output
    assert "status:     unparsed" in shown.output
    stopped = CliRunner().invoke(
        main, ["demo", "--model", junk, "--cache", "none", "--max-calls", "1", "--max-tokens", "1"]
    )
    assert stopped.exit_code == 5, stopped.output
