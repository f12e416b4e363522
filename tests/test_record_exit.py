"""How `record` ends for programs that do not simply exit: one killed by a signal exits
128+N as a shell says (never 1, "could not run"), and one that made no model call leaves
a recording of no step that `replay` replays (an --at edit on it is refused, saying why)."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from faultfinder.cli import main
from faultfinder.cli.kinds import RECORDING, kind_of
from faultfinder.cli.record_cmd import exit_status
from faultfinder.replay.recorder import load_calls
from faultfinder.testing import FakeOpenAIServer

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

SIGNALLED = """\
import openai, os, signal, sys
reply = openai.OpenAI().chat.completions.create(
    model="m", messages=[{"role": "user", "content": "hi"}]
)
print("FINAL ANSWER:", reply.choices[0].message.content, flush=True)
os.kill(os.getpid(), getattr(signal, sys.argv[1]))
"""

NO_MODEL = """\
print("FINAL ANSWER: none needed")
"""


def write_program(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "program.py"
    path.write_text(text, encoding="utf-8")
    return [sys.executable, str(path)]


def record(tmp_path: Path, upstream: str, program: list[str], *extra: str) -> Result:
    return CliRunner().invoke(
        main,
        ["record", "--upstream", upstream, "--out", str(tmp_path / "runs"), "--run-id", "run",
         "--quiet", *extra, "--", *program],
    )  # fmt: skip


def test_exit_status_follows_the_shell_for_a_signal() -> None:
    assert exit_status(0) == 0 and exit_status(None) == 0
    assert exit_status(3) == 3
    assert exit_status(-signal.SIGTERM) == 143
    assert exit_status(-signal.SIGKILL) == 137


@posix_only
@pytest.mark.parametrize(("name", "code"), [("SIGTERM", 143), ("SIGKILL", 137)])
def test_a_program_killed_by_a_signal_makes_record_exit_128_plus_n(
    tmp_path: Path, name: str, code: int
) -> None:
    program = write_program(tmp_path, SIGNALLED)
    with FakeOpenAIServer("4") as upstream:
        result = record(tmp_path, upstream.base_url, [*program, name])
    number = int(getattr(signal, name))
    assert result.exit_code == code, result.output
    assert f"program killed by signal {number}" in result.output
    run = tmp_path / "runs" / "run"
    meta = json.loads((run / "meta.json").read_text(encoding="utf-8"))
    assert meta["exit_code"] == -number
    trace = json.loads((run / "trace.json").read_text(encoding="utf-8"))
    assert len(trace["steps"]) == 1
    assert trace["metadata"]["program_failure"] == f"program killed by signal {number}"


def test_a_recording_without_a_model_call_replays(tmp_path: Path) -> None:
    program = write_program(tmp_path, NO_MODEL)
    with FakeOpenAIServer("unused") as upstream:
        recorded = record(tmp_path, upstream.base_url, program)
        assert upstream.requests == []
    assert recorded.exit_code == 0, recorded.output
    run = tmp_path / "runs" / "run"
    assert (run / "steps.jsonl").is_file() and load_calls(run) == []
    assert kind_of(run) is RECORDING  # what commands given the directory recognise
    replayed = CliRunner().invoke(
        main, ["replay", str(run), "--branch-id", "b", "--quiet", "--", *program]
    )
    assert replayed.exit_code == 0, replayed.output
    assert "replayed:    0/0 recorded steps reproduced" in replayed.output
    assert "answer:      'none needed'" in replayed.output
    report = json.loads((run / "branches" / "b" / "report.json").read_text(encoding="utf-8"))
    assert report["recorded_steps"] == 0 and report["live_calls"] == 0


def test_a_run_directory_without_steps_jsonl_has_no_calls(tmp_path: Path) -> None:
    # Recordings of such programs made before `record` created steps.jsonl up front.
    program = write_program(tmp_path, NO_MODEL)
    with FakeOpenAIServer("unused") as upstream:
        assert record(tmp_path, upstream.base_url, program).exit_code == 0
    run = tmp_path / "runs" / "run"
    (run / "steps.jsonl").unlink()
    assert load_calls(run) == []
    replayed = CliRunner().invoke(main, ["replay", str(run), "--quiet", "--", *program])
    assert replayed.exit_code == 0, replayed.output


def test_an_edit_of_a_recording_without_steps_is_refused_saying_why(tmp_path: Path) -> None:
    program = write_program(tmp_path, NO_MODEL)
    with FakeOpenAIServer("unused") as upstream:
        assert record(tmp_path, upstream.base_url, program).exit_code == 0
        result = CliRunner().invoke(
            main,
            ["replay", str(tmp_path / "runs" / "run"), "--at", "0", "--edit", "x",
             "--upstream", upstream.base_url, "--quiet", "--", *program],
        )  # fmt: skip
        assert upstream.requests == []
    assert result.exit_code == 1, result.output
    assert "step 0 is outside the recording: it has no steps" in result.output
    assert "made no model call" in result.output


CATCHES_SIGTERM = """\
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("started", flush=True)
time.sleep(60)
"""


@posix_only
def test_a_program_stopped_by_timeout_exits_124_even_when_it_exits_0(tmp_path: Path) -> None:
    program = write_program(tmp_path, CATCHES_SIGTERM)
    with FakeOpenAIServer("unused") as upstream:
        result = record(tmp_path, upstream.base_url, program, "--timeout", "1")
    assert result.exit_code == 124, result.output
    assert "program timed out after 1 s" in result.output
    meta = json.loads((tmp_path / "runs" / "run" / "meta.json").read_text(encoding="utf-8"))
    assert meta["timed_out"] is True
    assert exit_status(0, timed_out=True) == 124


def test_replay_json_is_alone_on_stdout(tmp_path: Path) -> None:
    """`replay --json` without --quiet: stdout is the report only (the program's own
    output, echoed otherwise, would make it unreadable as JSON); the output is kept in the
    branch's stdout.txt."""
    import subprocess

    program = write_program(tmp_path, NO_MODEL)
    with FakeOpenAIServer("unused") as upstream:
        recorded = record(tmp_path, upstream.base_url, program)
        assert recorded.exit_code == 0, recorded.output
        done = subprocess.run(
            [sys.executable, "-m", "faultfinder", "replay", str(tmp_path / "runs" / "run"),
             "--json", "--branch-id", "b1", "--", *program],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["live_calls"] == 0
    branch = tmp_path / "runs" / "run" / "branches" / "b1"
    assert "FINAL ANSWER: none needed" in (branch / "stdout.txt").read_text(encoding="utf-8")


TOOL_PROGRAM = """\
import json, openai
client = openai.OpenAI()
messages = [{"role": "user", "content": "What is the capital?"}]
tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
first = client.chat.completions.create(model="m", messages=messages, tools=tools)
call = first.choices[0].message.tool_calls[0]
messages += [first.choices[0].message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.id, "content": "Lyon"}]
final = client.chat.completions.create(model="m", messages=messages)
print("FINAL ANSWER:", final.choices[0].message.content)
"""


def tool_reply(body: dict[str, object]) -> object:
    messages = body.get("messages") or []
    results = [m for m in messages if isinstance(m, dict) and m.get("role") == "tool"]
    if not results:
        return {"tool_calls": [{"name": "lookup", "arguments": {}}]}
    return str(results[-1].get("content"))


def test_an_edit_never_applied_is_not_a_passing_replay(tmp_path: Path) -> None:
    """A tool_result edit naming a call id no request carries is never applied; the
    program still exits 0. The replay tested nothing, so it exits 1, saying why."""
    program = write_program(tmp_path, TOOL_PROGRAM)
    edit = tmp_path / "edit.json"
    edit.write_text(
        json.dumps({"kind": "tool_result", "tool_call_id": "call_zzz", "content": "Paris"}),
        encoding="utf-8",
    )
    with FakeOpenAIServer(tool_reply) as upstream:
        recorded = record(tmp_path, upstream.base_url, program)
        assert recorded.exit_code == 0, recorded.output
        result = CliRunner().invoke(
            main,
            ["replay", str(tmp_path / "runs" / "run"), "--at", "0", "--edit-file", str(edit),
             "--upstream", upstream.base_url, "--quiet", "--", *program],
        )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "NOT applied" in result.output and "tested nothing" in result.output
    (branch,) = (tmp_path / "runs" / "run" / "branches").iterdir()
    report = json.loads((branch / "report.json").read_text(encoding="utf-8"))
    assert report["edit_applied"] is False and report["program_failed"] is False
