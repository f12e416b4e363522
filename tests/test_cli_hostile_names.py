"""Names from a trace or a results file, printed by the command line: clipped as the web UI
clips them (`faultfinder.shown.clip_name`), their escapes and direction changes shown inert.

A name is untrusted: an importer that took a system prompt for an agent's name makes a
100,000-character name, and a hostile file can hide an OSC-8 hyperlink, a title change or
a right-to-left override in one. Each command that names the agent must print it as its
first characters and its length, never whole, and never as raw control characters."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from demo_recording import TEAM, record_demo
from faultfinder.cli import main
from faultfinder.demo_team import mock_model
from faultfinder.testing import FakeOpenAIServer

HOSTILE = (
    "Planner\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\\x1b]0;pwned\x07\u202etxt.exe"
)
HUGE = HOSTILE + "A" * 100_000
"""An agent name a hostile (or careless) importer made: escapes, then 100,000 characters."""
LENGTH = f"({len(HUGE):,} chars)"
"""How the clipped name says how long the whole is."""
BOUND = 6_000
"""Characters a command's whole output may hold here: a few clipped names and its lines."""


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.stdout, result.stderr


def assert_shown_clipped(out: str, err: str) -> None:
    """Both streams hold no raw control or direction character, stay short, and name the
    hostile agent clipped, with its length."""
    for stream in (out, err):
        assert not {"\x1b", "\x07", "\u202e"} & set(stream), stream[:400]
    assert len(out) + len(err) < BOUND, (len(out), len(err))
    assert LENGTH in out + err


def hostile_trace(path: Path) -> Path:
    trace = {
        "schema_version": "1",
        "task": "Count the rows.",
        "id": "run-1",
        "steps": [
            {"index": 0, "agent": HUGE, "content": "plan: read the file"},
            {"index": 1, "agent": "Solver", "content": "Error: the file was not found"},
            {"index": 2, "agent": HUGE, "content": "Error: I gave up"},
        ],
        "label": {"agent": HUGE, "step": 2, "reason": "gave up"},
    }
    path.write_text(json.dumps(trace), "utf-8")
    return path


@pytest.mark.parametrize("method", ["baseline:first-speaker", "shortlist", "random"])
def test_attribute_clips_the_agent_it_names(tmp_path: Path, method: str) -> None:
    path = hostile_trace(tmp_path / "t.json")
    code, out, err = invoke("attribute", str(path), "--method", method, "--no-save")
    assert code == 0, err
    assert_shown_clipped(out, err)
    assert "gold agent: Planner\\x1b]8;;http://evil.example/\\x1b\\click" in out
    # --json is for scripts: the whole name, escaped by JSON itself.
    code, out, err = invoke("attribute", str(path), "--method", method, "--no-save", "--json")
    assert code == 0, err
    assert json.loads(out)["agent"] in (HUGE, "Solver")


def test_label_and_import_clip_the_agent_they_name(tmp_path: Path) -> None:
    path = hostile_trace(tmp_path / "t.json")
    code, out, err = invoke("import", str(path))
    assert code == 0, err
    assert_shown_clipped(out, err)
    code, out, err = invoke("label", str(path), "--step", "0")
    assert code == 1 and "already labelled" in err
    assert_shown_clipped(out, err)
    code, out, err = invoke("label", str(path), "--step", "1", "--agent", "Nobody", "--force")
    assert code == 2 and "is not an agent of the trace" in err
    assert_shown_clipped(out, err)
    code, out, err = invoke("label", str(path), "--step", "0", "--force")
    assert code == 0, err
    assert_shown_clipped(out, err)


def test_eval_and_report_clip_the_names_of_a_results_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    hostile_trace(data / "t.json")
    rows = tmp_path / "rows.jsonl"
    methods = "random,baseline:first-speaker,shortlist"
    code, out, err = invoke("eval", str(data), "--method", methods, "-o", str(rows))
    assert code == 0, err
    assert len(out) + len(err) < BOUND
    # A results file from elsewhere: its labels are as untrusted as a trace's names.
    hostile = []
    for line in rows.read_text("utf-8").splitlines():
        row = json.loads(line)
        row.update(method=row["method"] + HUGE, model="none" + HUGE, subset="S" + HUGE)
        hostile.append(json.dumps(row))
    rows.write_text("\n".join(hostile) + "\n", "utf-8")
    for fmt in ("text", "markdown"):
        code, out, err = invoke("report", str(rows), "--format", fmt)
        assert code == 0, err
        # Three labels a row, on three rows of two tables, the subset and the floors' note.
        assert not {"\x1b", "\x07", "\u202e"} & set(out + err)
        assert len(out) + len(err) < 6 * BOUND
        assert f"({len('S' + HUGE):,} chars)" in out
    code, out, err = invoke("report", str(rows), "--format", "csv")
    assert code == 0, err
    assert not {"\x1b", "\x07", "\u202e"} & set(out + err)


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A recorded failing demo run whose Orchestrator is recorded under ``HUGE``, and the
    upstream its replays' live calls go to."""
    root = tmp_path_factory.mktemp("runs")
    with FakeOpenAIServer(reply=mock_model.reply) as upstream:
        run_dir = Path(record_demo(root, upstream.base_url).run_dir)
        calls = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
        for call in calls:
            if call["agent"] == "Orchestrator":
                call["agent"] = HUGE
        (run_dir / "steps.jsonl").write_text("".join(json.dumps(c) + "\n" for c in calls))
        (run_dir / "trace.json").unlink()
        yield run_dir, upstream.base_url


def test_check_clips_the_agents_it_names(hostile_run: tuple[Path, str]) -> None:
    run_dir, upstream = hostile_run
    debugger = "function:faultfinder.demo_team.mock_debugger:respond"
    code, out, err = invoke(
        "check",
        str(run_dir),
        "--method",
        "baseline:first-speaker",
        "--upstream",
        upstream,
        "--model",
        debugger,
        "--cache",
        "none",
        "--",
        *TEAM,
    )
    # The replayed team speaks as the Orchestrator, not as the name recorded: it fails.
    assert code == 4, err
    assert_shown_clipped(out, err)
    assert out.startswith("static (baseline:first-speaker): Planner\\x1b]8;;http://evil")
