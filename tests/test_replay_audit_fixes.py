"""Record/replay/DoVer defects found by an audit, each pinned by a test: a key the program
printed before its first model call, an upstream URL with a query string, an edit that
does not fit its step, `check`/`debug` exit codes without a readable verdict,
`debug-report` given the wrong file, `proxy --replay` going live silently, and a crashed
program counted as a success."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.demo_team import mock_model
from faultfinder.dover.checker import ExactChecker, check_recorded
from faultfinder.replay.edits import Edit, ToolCallChange
from faultfinder.replay.outcome import program_failure
from faultfinder.replay.proxy import upstream_url
from faultfinder.replay.recorder import RecordedCall, utcnow
from faultfinder.replay.replayer import EDIT_ERROR_STATUS, ReplayOptions, ReplayPlan
from faultfinder.testing import FakeOpenAIServer
from faultfinder.traces.schema import Trace

DEBUGGER = ["--model", "function:faultfinder.demo_team.mock_debugger:respond", "--cache", "none"]
TEAM = [sys.executable, "-m", "faultfinder.demo_team", "--quiet", "--task-id", "avalon-2020"]

KEY = "plainkeyvalue-AAAA1111BBBB"

LEAKY = f"""\
import openai, sys
key = {KEY!r}
print("my key is", key, flush=True)
sys.stderr.write("stderr key " + key + "\\n")
client = openai.OpenAI(api_key=key)
reply = client.chat.completions.create(
    model="m", messages=[{{"role": "user", "content": "hi"}}]
)
print("FINAL ANSWER:", reply.choices[0].message.content)
"""

TWO_CALLS = """\
import openai, os, sys
client = openai.OpenAI()
first = client.chat.completions.create(
    model="m", messages=[{"role": "user", "content": "first"}]
)
try:
    second = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "second"}]
    )
except openai.APIStatusError as exc:
    print("STATUS", exc.status_code, exc.response.headers.get("x-should-retry"), flush=True)
    print("MESSAGE", exc.message, flush=True)
    sys.exit(7)
print("FINAL ANSWER:", second.choices[0].message.content)
sys.exit(int(os.environ.get("FAILCODE", "0")))
"""


def write_program(tmp_path: Path, name: str, text: str) -> list[str]:
    path = tmp_path / name
    path.write_text(text)
    return [sys.executable, str(path)]


def record(
    tmp_path: Path, upstream: str, program: list[str], *extra: str, run_id: str = "run"
) -> Any:
    return CliRunner().invoke(
        main,
        ["record", "--upstream", upstream, "--out", str(tmp_path / "runs"),
         "--run-id", run_id, "--quiet", *extra, "--", *program],
    )  # fmt: skip


def files_under(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


# --- 1. a secret learned after it was written --------------------------------------------


def test_a_key_printed_before_the_first_call_is_in_no_file_of_the_run_or_branch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    program = write_program(tmp_path, "leaky.py", LEAKY)
    with FakeOpenAIServer(reply="4") as upstream:
        recorded = record(tmp_path, upstream.base_url, program)
        assert recorded.exit_code == 0, recorded.output
        # The key really was sent (and so learned only then).
        assert upstream.chat_requests[0].headers["authorization"] == f"Bearer {KEY}"
        run = tmp_path / "runs" / "run"
        replayed = CliRunner().invoke(
            main, ["replay", str(run), "--branch-id", "b1", "--quiet", "--", *program]
        )
        assert replayed.exit_code == 0, replayed.output
    written = files_under(tmp_path / "runs")
    assert run / "stdout.txt" in written and run / "branches" / "b1" / "stdout.txt" in written
    leaks = [str(path) for path, data in written.items() if KEY.encode() in data]
    assert leaks == []
    assert "my key is [REDACTED]" in (run / "stdout.txt").read_text()
    assert "stderr key [REDACTED]" in (run / "branches" / "b1" / "stderr.txt").read_text()
    assert json.loads((run / "meta.json").read_text())["final_answer"] == "4"


# --- 2. an upstream URL with a query string -------------------------------------------------


def test_upstream_url_puts_the_path_before_the_query_and_merges_queries() -> None:
    base = "http://127.0.0.1:1/v1?api-version=1"
    assert upstream_url(base, "/v1/chat/completions", "") == (
        "http://127.0.0.1:1/v1/chat/completions?api-version=1"
    )
    assert upstream_url(base + "&api-key=X", "/v1/models", "limit=2") == (
        "http://127.0.0.1:1/v1/models?api-version=1&api-key=X&limit=2"
    )
    assert upstream_url("http://h/v1/", "/v1/responses", "") == "http://h/v1/responses"
    assert upstream_url("http://h", "/v1/messages", "beta=true") == "http://h/messages?beta=true"


def test_an_upstream_with_a_query_string_is_reached_and_its_credential_kept_off_disk(
    tmp_path: Path,
) -> None:
    secret = "QUERYSECRET-445566"
    program = write_program(tmp_path, "two.py", TWO_CALLS)
    with FakeOpenAIServer(reply="echo") as upstream:
        recorded = record(
            tmp_path,
            f"{upstream.base_url}?api-version=1",
            program,
            "--api-upstream",
            f"chat={upstream.base_url}?api-key={secret}&api-version=2",
        )
        assert recorded.exit_code == 0, recorded.output
        assert [r.path for r in upstream.chat_requests] == ["/v1/chat/completions"] * 2
    run = tmp_path / "runs" / "run"
    assert "recorded 2 steps" in recorded.output
    meta = json.loads((run / "meta.json").read_text())
    assert meta["upstream"].endswith("/v1?api-version=1")
    assert meta["upstreams"]["chat"].endswith("?api-key=[REDACTED]&api-version=2")
    leaks = [
        str(p) for p, data in files_under(tmp_path / "runs").items() if secret.encode() in data
    ]
    assert leaks == []


# --- 3. an edit that cannot be applied -------------------------------------------------------


BAD_TOOL_CALL = {"kind": "tool_call", "index": 5, "name": "x", "arguments": {}}


def test_an_edit_that_does_not_fit_its_step_is_refused_before_the_program_runs(
    tmp_path: Path,
) -> None:
    program = write_program(tmp_path, "two.py", TWO_CALLS)
    edit = tmp_path / "edit.json"
    edit.write_text(json.dumps(BAD_TOOL_CALL))
    with FakeOpenAIServer(reply="echo") as upstream:
        assert record(tmp_path, upstream.base_url, program).exit_code == 0
        run = tmp_path / "runs" / "run"
        sent = len(upstream.requests)
        result = CliRunner().invoke(
            main,
            ["replay", str(run), "--at", "1", "--edit-file", str(edit),
             "--upstream", upstream.base_url, "--branch-id", "b1", "--", *program],
        )  # fmt: skip
        assert len(upstream.requests) == sent
    assert result.exit_code == 1, result.output
    assert "the edit cannot be applied at step 1" in result.output
    assert "index 5, but the step's reply has 0 tool call(s)" in result.output
    assert "Traceback" not in result.output
    assert not (run / "branches" / "b1").exists()


def test_an_edit_failing_at_its_step_is_refused_with_a_4xx_and_not_reported_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The check before the run is skipped, as for an edit only the live step shows wrong.
    monkeypatch.setattr("faultfinder.replay.replayer.edit_problem", lambda *_: None)
    program = write_program(tmp_path, "two.py", TWO_CALLS)
    edit = tmp_path / "edit.json"
    edit.write_text(json.dumps(BAD_TOOL_CALL))
    with FakeOpenAIServer(reply="echo") as upstream:
        assert record(tmp_path, upstream.base_url, program).exit_code == 0
        run = tmp_path / "runs" / "run"
        result = CliRunner().invoke(
            main,
            ["replay", str(run), "--at", "1", "--edit-file", str(edit),
             "--upstream", upstream.base_url, "--branch-id", "b1", "--", *program],
        )  # fmt: skip
    branch = run / "branches" / "b1"
    assert result.exit_code == 1, result.output
    assert "edit:        could NOT be applied: tool_call edit: index 5" in result.output
    assert "edit: applied" not in result.output
    assert f"STATUS {EDIT_ERROR_STATUS} false" in (branch / "stdout.txt").read_text()
    report = json.loads((branch / "report.json").read_text())
    assert report["edit_applied"] is False and report["at_reached"] is True
    assert "index 5" in report["edit_error"]
    steps = [json.loads(line) for line in (branch / "steps.jsonl").read_text().splitlines()]
    failed = [s for s in steps if s["status"] == EDIT_ERROR_STATUS]
    assert len(failed) == 1 and "cannot be applied" in failed[0]["error"]


def _recorded(content: str, tool_calls: list[dict[str, Any]] | None = None) -> RecordedCall:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return RecordedCall(
        call=0,
        agent="a",
        request={"model": "m", "messages": [{"role": "user", "content": "q"}]},
        request_hash="h",
        response={"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]},
        started_at=utcnow(),
        ended_at=utcnow(),
    )


def test_the_plan_checks_tool_call_and_tool_result_edits_against_the_step() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    fits = Edit(tool_call_changes=[ToolCallChange(index=0, name="g")])
    ReplayPlan([_recorded("", [call])], ReplayOptions(at=0, edit=fits))
    for edit in (
        Edit(tool_call_changes=[ToolCallChange(index=1, name="g")]),
        Edit.model_validate({"tool_result": {"content": "x", "index": 0}}),
    ):
        with pytest.raises(ValueError, match="the edit cannot be applied at step 0"):
            ReplayPlan([_recorded("plain text")], ReplayOptions(at=0, edit=edit))


# --- 4. check and debug without a readable verdict ------------------------------------------


GARBAGE = 'def respond(request):\n    return "I cannot say."\n'


@pytest.fixture
def demo_run(tmp_path: Path) -> Any:
    with FakeOpenAIServer(reply=mock_model.reply) as upstream:
        recorded = record(tmp_path, upstream.base_url, TEAM, "--ground-truth", "144630")
        assert recorded.exit_code == 0, recorded.output
        yield tmp_path / "runs" / "run", upstream


def test_check_and_debug_exit_3_when_the_method_answer_is_unreadable(
    demo_run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, upstream = demo_run
    (tmp_path / "garbage_model.py").write_text(GARBAGE)
    monkeypatch.syspath_prepend(str(tmp_path))
    garbage = ["--model", "function:garbage_model:respond", "--cache", "none"]
    checked = CliRunner().invoke(
        main,
        ["check", str(run), *garbage, "--upstream", upstream.base_url, "--json", "--", *TEAM],
    )
    assert checked.exit_code == 3, checked.output
    result = json.loads(checked.output[: checked.output.rindex("}") + 1])
    assert result["static"]["status"] == "unparsed" and result["candidates"] == []
    assert result["replayed"] is False and "nothing was replayed" in result["why"]
    assert "exit 3: of 1 check, 1 unparsed" in checked.output

    debugged = CliRunner().invoke(
        main,
        ["debug", str(run), *garbage, "--segment", "none", "--repeats", "1",
         "--out", str(tmp_path / "rows.jsonl"), "--upstream", upstream.base_url, "--", *TEAM],
    )  # fmt: skip
    assert debugged.exit_code == 3, debugged.output
    assert "no-hypothesis" in debugged.output and "(unparsed)" in debugged.output
    assert "exit 3: of 1 trial, 1 unparsed" in debugged.output


# --- 5. debug-report given what is not DoVer rows --------------------------------------------


def test_debug_report_refuses_empty_wrong_kind_and_unreadable_files(
    demo_run: Any, tmp_path: Path
) -> None:
    run, _ = demo_run
    cases: dict[str, tuple[bytes, str]] = {
        "empty.jsonl": (b"", "empty: it holds no DoVer rows"),
        "blank.jsonl": (b"\n \n", "empty: it holds no DoVer rows"),
        "list.jsonl": (b"[1,2]\n", ":1: not a DoVer row: a JSON array, not an object"),
        "bin.jsonl": (b"\xff\xfe\x00garbage\n", "is a binary file (it holds NUL bytes"),
        "latin.jsonl": (b"\xff\xfegarbage\n", "not UTF-8 text (byte 0)"),
        "check.jsonl": (
            json.dumps({"kind": "dynamic-check", "run_dir": "r"}).encode() + b"\n",
            ":1: not a DoVer row: it is a `check` result (check --out)",
        ),
        "partial.jsonl": (b'{"kind":"dover"}\n', ":1: not a DoVer row: field '"),
        "notjson.jsonl": (b"{oops\n", ":1: not a DoVer row: not valid JSON: Expecting"),
    }
    for name, (data, expected) in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        result = CliRunner().invoke(main, ["debug-report", str(path)])
        assert result.exit_code == 1, (name, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit), name
        assert expected in result.output, (name, result.output)
        assert str(path) in result.output and len(result.output.strip().splitlines()) == 1
    steps = CliRunner().invoke(main, ["debug-report", str(run / "steps.jsonl")])
    assert steps.exit_code == 1
    assert "is a recording's call log (steps.jsonl), not DoVer result rows" in steps.output


# --- 6. proxy --replay says what went live ---------------------------------------------------


def test_proxy_replay_prints_the_replay_summary_when_stopped(tmp_path: Path) -> None:
    program = write_program(tmp_path, "two.py", TWO_CALLS)
    with FakeOpenAIServer(reply="echo") as upstream:
        assert record(tmp_path, upstream.base_url, program).exit_code == 0
        run = tmp_path / "runs" / "run"
        proc = subprocess.Popen(
            [sys.executable, "-m", "faultfinder", "proxy", "--replay", str(run), "--at", "1",
             "--upstream", upstream.base_url, "--run-id", "p1", "--port", "0"],
            stderr=subprocess.PIPE, text=True, env={**os.environ, "NO_COLOR": "1"},
        )  # fmt: skip
        assert proc.stderr is not None
        base_url = ""
        for line in proc.stderr:
            found = re.search(r"proxy on (\S+) ->", line)
            if found:
                base_url = found.group(1)
                break
        try:
            assert base_url, f"the proxy stopped before it was ready (exit {proc.wait()})"
            for content in ("first", "second"):
                request = urllib.request.Request(
                    f"{base_url}/chat/completions",
                    data=json.dumps(
                        {"model": "m", "messages": [{"role": "user", "content": content}]}
                    ).encode(),
                    headers={"Content-Type": "application/json"},
                )
                with urllib.request.urlopen(request, timeout=30) as reply:
                    assert reply.status == 200
            with urllib.request.urlopen(f"{base_url}/models", timeout=30) as reply:
                assert reply.status == 200
        finally:
            proc.send_signal(signal.SIGINT)
            _, rest = proc.communicate(timeout=30)
    assert proc.returncode == 0, rest
    assert "live calls:  2 sent to the upstream (1 model call(s)" in rest
    assert "1 other request(s))" in rest
    assert "GET /v1/models (not a model call) -> 200" in rest
    assert "replayed:    1/1 steps before step 1 reproduced" in rest
    assert f"wrote {run / 'branches' / 'p1' / 'trace.json'} (2 steps)" in rest


# --- 7. a crashed program is not a success ---------------------------------------------------


def test_program_failure_says_why_and_spares_a_replay_stopped_by_its_window() -> None:
    assert program_failure(0) is None and program_failure(None) is None
    assert program_failure(3) == "program exited 3"
    assert program_failure(-9) == "program killed by signal 9"
    assert program_failure(-15, killed=True) is None
    assert program_failure(-15, killed=True, timed_out=True) == "program timed out"


def test_a_crashed_recording_with_the_right_answer_is_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    program = write_program(tmp_path, "two.py", TWO_CALLS)
    monkeypatch.setenv("FAILCODE", "3")
    with FakeOpenAIServer(reply="echo") as upstream:
        recorded = record(tmp_path, upstream.base_url, program, "--ground-truth", "echo")
    assert recorded.exit_code == 3, recorded.output
    assert "final answer 'echo': failure (program exited 3)" in recorded.output
    trace = Trace.model_validate_json((tmp_path / "runs" / "run" / "trace.json").read_text())
    assert trace.metadata["outcome"] == "failure"
    assert trace.metadata["outcome_reason"] == "program exited 3"
    check = check_recorded(ExactChecker(), trace)
    assert check.passed is False and "program exited 3" in check.detail
    monkeypatch.setenv("FAILCODE", "0")
    with FakeOpenAIServer(reply="echo") as upstream:
        fine = record(tmp_path, upstream.base_url, program, "--ground-truth", "echo", run_id="ok")
    assert fine.exit_code == 0 and "final answer 'echo': success" in fine.output
