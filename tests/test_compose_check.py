"""``faultfinder check --method compose --check-below C``: the replay check only when the
composition is unsure, with its shortlisted steps as the candidates; end to end from the
CLI against the demo team and the loopback fake upstream."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from demo_recording import TEAM, record_demo
from faultfinder.cli import main
from faultfinder.demo_team import mock_model
from faultfinder.testing import FakeOpenAIServer

DEBUGGER = ["--model", "function:faultfinder.demo_team.mock_debugger:respond", "--cache", "none"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, FakeOpenAIServer]]:
    """A recorded failing demo run and the upstream its replays' live calls go to."""
    root = tmp_path_factory.mktemp("runs")
    with FakeOpenAIServer(reply=mock_model.reply) as upstream:
        outcome = record_demo(root, upstream.base_url)
        yield Path(outcome.run_dir), upstream


def check(
    run_dir: Path, upstream: FakeOpenAIServer, *args: str, method: str = "compose:k8"
) -> tuple[int, dict[str, Any], str]:
    """Run ``check`` from the command line; (exit code, the JSON result, stderr). On the
    demo recording the scripted debugger blames step 1, which compose:k8 shortlists
    (compose:k1 does not: with min_saving=null its answer is then unparsed)."""
    result = CliRunner().invoke(
        main,
        [
            "check",
            str(run_dir),
            "--method",
            method,
            "--upstream",
            upstream.base_url,
            "--json",
            *DEBUGGER,
            *args,
            "--",
            *TEAM,
        ],
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    start = result.stdout.index("{")
    return result.exit_code, json.loads(result.stdout[start:]), result.stderr


def test_confident_compose_is_not_replayed(recorded: tuple[Path, FakeOpenAIServer]) -> None:
    run_dir, upstream = recorded
    before = len(upstream.chat_requests)
    code, result, _ = check(run_dir, upstream, "--check-below", "0")
    assert code == 0
    assert result["confidence"] is not None, result["static"]
    assert result["replayed"] is False and result["candidates"] == []
    assert result["why"].startswith("not replayed: confidence")
    assert (result["agent"], result["step"]) == (
        result["static"]["agent"],
        result["static"]["step"],
    )
    assert result["usage"]["calls"] == 1  # compose's judge only: no proposal, no judging
    assert len(upstream.chat_requests) == before  # the program was not re-run


def test_unsure_compose_replays_its_shortlisted_steps(
    recorded: tuple[Path, FakeOpenAIServer],
) -> None:
    run_dir, upstream = recorded
    before = len(upstream.chat_requests)
    code, result, _ = check(run_dir, upstream, "--check-below", "1", "--candidates", "3")
    assert code == 0
    assert result["replayed"] is True and result["why"].startswith("replayed: confidence")
    assert "shortlisted" in result["why"]
    assert result["prompt_version"] == "dynamic-check-v1+shortlist"
    # The candidates are compose's shortlist, its chosen step first.
    assert [c["step"] for c in sorted(result["candidates"], key=lambda c: c["rank"])] == (
        result["shortlist"][:3]
    )
    assert result["shortlist"][0] == result["static"]["step"] or result["static"]["step"] is None
    assert len(upstream.chat_requests) > before  # replays ran live after the edit
    assert all(c["branch"] for c in result["candidates"] if c["error"] is None)


def test_compose_without_a_confidence_is_replayed(
    recorded: tuple[Path, FakeOpenAIServer],
) -> None:
    run_dir, upstream = recorded
    # With k = 1 the deploy model shortlists step 0 only, so the judge's step 1 is refused
    # (the demo's steps are short: without min_saving=null the whole log would be judged).
    code, result, _ = check(
        run_dir, upstream, "--check-below", "0", "--set", "min_saving=null", method="compose:k1"
    )
    assert code == 0
    assert result["static"]["status"] == "unparsed" and result["confidence"] is None
    assert result["replayed"] is True and "states no confidence" in result["why"]
    # No chosen step: the shortlist in its own order.
    assert [c["step"] for c in sorted(result["candidates"], key=lambda c: c["rank"])] == (
        result["shortlist"][:3]
    )


def test_check_budget_stops_with_exit_5(recorded: tuple[Path, FakeOpenAIServer]) -> None:
    run_dir, upstream = recorded
    code, result, stderr = check(run_dir, upstream, "--check-below", "1", "--budget-tokens", "1")
    assert code == 5, stderr
    assert result["budget_tokens"] == 1 and result["stopped"]
    assert result["static"]["status"] == "budget-exceeded"
    assert "exit 5" in stderr


def test_check_never_runs_a_stored_command(recorded: tuple[Path, FakeOpenAIServer]) -> None:
    run_dir, _ = recorded
    refused = CliRunner().invoke(
        main, ["check", str(run_dir), "--method", "compose", "--check-below", "0.5", *DEBUGGER]
    )
    assert refused.exit_code == 2 and "never run" in refused.output


def test_debug_budget_is_per_trial_and_exits_5(
    recorded: tuple[Path, FakeOpenAIServer], tmp_path: Path
) -> None:
    run_dir, upstream = recorded
    out = tmp_path / "rows.jsonl"
    args = ["debug", str(run_dir), "--upstream", upstream.base_url, "--out", str(out), "--json"]
    result = CliRunner().invoke(main, [*args, "--budget-tokens", "1", *DEBUGGER, "--", *TEAM])
    assert result.exit_code == 5, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows and all(row["status"] == "budget-exceeded" for row in rows)
    assert all(row["config"]["budget_tokens"] == 1 for row in rows)
    assert "Per-case token budget of 1" in rows[0]["error"]
    assert "ran out of budget" in result.stderr
