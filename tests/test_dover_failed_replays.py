"""A replay whose program failed on its own is no evidence about a hypothesis, end to end
from the CLI on the demo team (real program, real replays through the proxy, loopback fake
upstreams, the scripted debugger as DoVer's model).

The failing upstream answers the demo Orchestrator's live calls 404 (an endpoint that
does not serve them) and the other agents' as the demo model would, so a replay edited
early gets its Researcher's live steps and then crashes when the Orchestrator speaks.

- `debug`: such replays used to count as judged failures, and with the judge seeing the
  edit carried out, as *refuted*; now the verdict is *inconclusive*, the row counts the
  failed replays and says why, and the command exits 4.
- `verify-edit`: the answer taken from the last step that ran (the edited one) used to be
  rated a success, so a crash could *validate* an edit; now it cannot.
- a replay that cannot start (a command that does not exist) used to read *not_applied*
  ("did not reach the intervened step with the recorded history"); now the row says that
  the replay could not run, and why.
- `check --json`: each candidate says how many calls of its replay went live and whether
  the replayed program failed.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from demo_recording import TEAM, record_demo
from faultfinder.cli import main
from faultfinder.demo_team import mock_model
from faultfinder.dover.models import DoverRow
from faultfinder.testing import FakeOpenAIServer
from faultfinder.testing.fake_openai import ReplyError

DEBUGGER = ["--model", "function:faultfinder.demo_team.mock_debugger:respond", "--cache", "none"]
ANSWER = "144630"


def no_orchestrator(body: dict[str, Any]) -> Any:
    """The demo model, except that the Orchestrator's calls are answered 404."""
    system = next(
        (str(m.get("content")) for m in body.get("messages") or [] if m.get("role") == "system"),
        "",
    )
    if "You are the Orchestrator" in system:
        raise ReplyError(404, "no route for this model here")
    return mock_model.reply(body)


@dataclass
class Setup:
    run_dir: Path
    good: FakeOpenAIServer
    """Answers every call as the demo model."""
    failing: FakeOpenAIServer
    """Answers the Orchestrator's calls 404."""


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """The demo team's failing run (answer 154131, reference 144630), recorded once."""
    root = tmp_path_factory.mktemp("runs")
    with (
        FakeOpenAIServer(reply=mock_model.reply) as good,
        FakeOpenAIServer(reply=no_orchestrator) as failing,
    ):
        outcome = record_demo(root, good.base_url, ground_truth=ANSWER)
        yield Setup(Path(outcome.run_dir), good, failing)


def rows(path: Path) -> list[DoverRow]:
    return [DoverRow.model_validate_json(line) for line in path.read_text().splitlines()]


def debug(
    setup: Setup, upstream: FakeOpenAIServer, out: Path, *program: str, check: str = ""
) -> Result:
    return CliRunner().invoke(
        main,
        ["debug", str(setup.run_dir), "--repeats", "3", "--segment", "none",
         "--out", str(out), *DEBUGGER, "--upstream", upstream.base_url,
         *(["--check", check] if check else []), "--", *(program or TEAM)],
    )  # fmt: skip


def verify_edit(setup: Setup, upstream: FakeOpenAIServer, tmp_path: Path) -> Result:
    """The Calculator's result (step 6) corrected to the reference, replayed 3 times."""
    edit = tmp_path / "fix.json"
    edit.write_text(json.dumps({"kind": "message", "text": ANSWER}), encoding="utf-8")
    return CliRunner().invoke(
        main,
        ["verify-edit", str(setup.run_dir), "--at", "6", "--edit-file", str(edit),
         "--repeats", "3", "--session", tmp_path.name, "--upstream", upstream.base_url,
         "--", *TEAM],
    )  # fmt: skip


def test_debug_does_not_refute_a_hypothesis_with_crashed_replays(
    setup: Setup, tmp_path: Path
) -> None:
    result = debug(setup, setup.failing, tmp_path / "rows.jsonl")
    assert result.exit_code == 4, result.output
    (row,) = rows(tmp_path / "rows.jsonl")
    assert row.intervention is not None and row.intervention.step == 1
    assert len(row.repeats) == 3
    for replay in row.repeats:
        # The edit was served, the Researcher answered live, the Orchestrator's call got
        # a 404 and the program died.
        assert replay.edit_applied and replay.program_failed and replay.live_calls >= 1
        assert replay.success is None and replay.fulfilled is None
        assert replay.error and "failed on its own" in replay.error
        assert "404" in replay.error
    assert row.verdict == "inconclusive"
    assert row.failed_replays == 3
    assert "3/3 replays" in row.verdict_reason and "no evidence" in row.verdict_reason
    # Nothing was judged, so there is no flip rate to report.
    assert row.flip_rate is None and row.flip_rate_ci is None
    assert row.trial_success_rate is None
    assert "failed on their own" in result.output


def test_debug_with_a_working_upstream_still_validates(setup: Setup, tmp_path: Path) -> None:
    result = debug(setup, setup.good, tmp_path / "rows.jsonl")
    assert result.exit_code == 0, result.output
    (row,) = rows(tmp_path / "rows.jsonl")
    assert row.verdict == "validated" and row.failed_replays == 0
    assert all(r.success and not r.program_failed and r.error is None for r in row.repeats)


def test_verify_edit_does_not_validate_a_crashed_replay(setup: Setup, tmp_path: Path) -> None:
    """Step 6 edited to the reference answer: the Orchestrator's next call fails, so the
    program dies and the trace's answer is the edited step's text, which matches."""
    result = verify_edit(setup, setup.failing, tmp_path)
    assert result.exit_code == 4, result.output
    (row,) = rows(setup.run_dir / "dover" / f"{tmp_path.name}.jsonl")
    assert [r.final_answer for r in row.repeats] == [ANSWER] * 3
    assert all(r.program_failed and r.success is None for r in row.repeats)
    assert row.verdict == "inconclusive", row.verdict_reason
    assert row.failed_replays == 3 and "no evidence" in row.verdict_reason
    assert row.flip_rate is None and row.successes == 0
    assert "success True" not in result.output
    assert "failed on its own" in result.output
    assert "recovered by an intervention" in result.output
    assert "0 recovered" in result.output


def test_verify_edit_with_a_working_upstream_still_validates(setup: Setup, tmp_path: Path) -> None:
    result = verify_edit(setup, setup.good, tmp_path)
    assert result.exit_code == 0, result.output
    (row,) = rows(setup.run_dir / "dover" / f"{tmp_path.name}.jsonl")
    assert row.verdict == "validated" and row.failed_replays == 0
    assert all(r.success and not r.program_failed for r in row.repeats)


def test_debug_checks_the_recording_once_whatever_the_trials(setup: Setup, tmp_path: Path) -> None:
    """A --check command may be slow or cost money: `debug` checked the recording once to
    decide whether to debug it and again for every trial's row."""
    marker = tmp_path / "checked.log"
    script = tmp_path / "check.py"
    script.write_text(
        "import json, sys\n"
        "job = json.load(sys.stdin)\n"
        f"open({str(marker)!r}, 'a').write(job['run_dir'] + '\\n')\n"
        "print('pass' if job['final_answer'] == job['reference'] else 'fail')\n",
        encoding="utf-8",
    )
    result = debug(setup, setup.good, tmp_path / "rows.jsonl", check=f"{sys.executable} {script}")
    assert result.exit_code == 0, result.output
    (row,) = rows(tmp_path / "rows.jsonl")
    assert row.original_success is False and row.verdict == "validated"
    checked = marker.read_text().splitlines()
    assert checked.count(str(setup.run_dir)) == 1
    assert len(checked) == 1 + len(row.repeats)  # and once per replay


def test_debug_says_a_replay_could_not_run(setup: Setup, tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-program")
    result = debug(setup, setup.good, tmp_path / "rows.jsonl", missing)
    # No program ran: the command could not do its job, as verify-edit says in that case.
    assert result.exit_code == 1, result.output
    assert "exit 1: of 3 replays, 3 could not run (the replay could not run: Cannot run" in (
        result.stderr
    )
    (row,) = rows(tmp_path / "rows.jsonl")
    assert row.intervention is not None
    assert row.verdict == "inconclusive", row.verdict_reason
    assert "could not run" in row.verdict_reason and "Cannot run" in row.verdict_reason
    assert "recorded history" not in row.verdict_reason
    assert row.failed_replays == 3
    assert all(not r.ran and r.error and "Cannot run" in r.error for r in row.repeats)


def test_check_json_says_what_went_live_and_what_failed(setup: Setup) -> None:
    def check(upstream: FakeOpenAIServer) -> tuple[int, dict[str, Any]]:
        result = CliRunner().invoke(
            main,
            ["check", str(setup.run_dir), "--method", "all-at-once", "--candidates", "2",
             "--json", *DEBUGGER, "--upstream", upstream.base_url, "--", *TEAM],
        )  # fmt: skip
        start = result.stdout.index("{")
        return result.exit_code, json.loads(result.stdout[start:])

    code, data = check(setup.failing)
    assert code == 4
    replayed = [c for c in data["candidates"] if c["branch"]]
    assert replayed
    for candidate in replayed:
        report = json.loads((Path(candidate["branch"]) / "report.json").read_text())
        assert candidate["live_calls"] == report["live_calls"]
        assert candidate["program_failed"] is (
            report["program_exit_code"] not in (0, None) and not report["window_reached"]
        )
        assert candidate["exit_code"] == report["program_exit_code"]
    failed = [c for c in replayed if c["program_failed"]]
    assert failed
    # A window cut short by the failure is not judged: it cannot rank a crash first.
    for candidate in failed:
        assert candidate["observation"] is None and candidate["score"] == 0
        assert "failed on its own" in candidate["error"]

    code, data = check(setup.good)
    assert code == 0
    replayed = [c for c in data["candidates"] if c["branch"]]
    assert replayed and all(c["live_calls"] >= 1 for c in replayed)
    assert not any(c["program_failed"] for c in replayed)


async def hang_on_the_note(body: dict[str, Any]) -> Any:
    """The demo model, except that a request carrying the check's reviewer note never gets
    an answer in time (an upstream that hangs)."""
    if "Note from a reviewer" in json.dumps(body):
        await asyncio.sleep(60)
    return mock_model.reply(body)


def test_check_stops_a_replay_at_its_replay_timeout(setup: Setup) -> None:
    """`check` had no bound on a candidate's replay: a program whose live call hangs held
    the check for as long as it hung. --replay-timeout stops it; the candidate is then a
    program that failed (not judged) and the check exits 4, saying why."""
    with FakeOpenAIServer(reply=hang_on_the_note) as hanging:
        started = time.monotonic()
        result = CliRunner().invoke(
            main,
            ["check", str(setup.run_dir), "--method", "all-at-once", "--candidates", "1",
             "--replay-timeout", "3", "--json", *DEBUGGER, "--upstream", hanging.base_url,
             "--", *TEAM],
        )  # fmt: skip
        took = time.monotonic() - started
    assert result.exit_code == 4, result.output
    assert took < 30
    data = json.loads(result.stdout[result.stdout.index("{") :])
    assert data["replay_timeout"] == 3
    (candidate,) = data["candidates"]
    assert candidate["program_failed"] and candidate["observation"] is None
    assert "ran past the replay timeout of 3 s" in candidate["error"]
    report = json.loads((Path(candidate["branch"]) / "report.json").read_text())
    assert report["program_timed_out"]


def test_check_says_a_candidate_replay_could_not_run(setup: Setup) -> None:
    """A command that does not exist used to give `check` exit 0, the static method's
    answer printed as the verdict, as if the check had run: now 1, as `debug` and
    `verify-edit` stop, with the reason on stderr and in each candidate's row."""
    result = CliRunner().invoke(
        main,
        ["check", str(setup.run_dir), "--method", "all-at-once", "--candidates", "2",
         "--json", *DEBUGGER, "--upstream", setup.good.base_url, "--",
         "no-such-program-faultfinder"],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "could not be replayed (the replay could not run: Cannot run" in result.stderr
    data = json.loads(result.stdout[result.stdout.index("{") :])
    assert data["replayed"] is False
    assert data["candidates"]
    for candidate in data["candidates"]:
        assert candidate["ran"] is False and candidate["branch"] is None
        assert candidate["error"].startswith("the replay could not run: Cannot run")
