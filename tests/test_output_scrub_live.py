"""The program's output on disk while it still runs: a secret faultfinder learns mid-run
(the program's own key, known only once its first model call arrives) is scrubbed from
``stdout.txt`` and ``stderr.txt`` as soon as it is learned, not when the run ends, so a
recorder that is killed leaves no secret it knew of behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from faultfinder.redact import Redactor
from faultfinder.replay.output import rescrub_open
from faultfinder.testing import FakeOpenAIServer
from polling import wait_for

KEY = "plainkeyvalue-CCCC3333DDDD"
"""Not key-shaped, not in the environment: learned only from the call's header."""

WAITING = f"""\
import openai, os, pathlib, sys, time
key = {KEY!r}
print("my key is", key, flush=True)
sys.stderr.write("stderr key " + key + "\\n")
sys.stderr.flush()
openai.OpenAI(api_key=key).chat.completions.create(
    model="m", messages=[{{"role": "user", "content": "hi"}}]
)
pathlib.Path(sys.argv[1]).write_text("called")
deadline = time.monotonic() + 30
while not pathlib.Path(sys.argv[2]).exists() and time.monotonic() < deadline:
    time.sleep(0.05)
print("FINAL ANSWER: 4", flush=True)
"""


def test_a_key_learned_mid_run_leaves_the_output_files_while_the_program_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    program = tmp_path / "waiting.py"
    program.write_text(WAITING, encoding="utf-8")
    called, go = tmp_path / "called", tmp_path / "go"
    run = tmp_path / "runs" / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with FakeOpenAIServer(reply="4") as upstream:
        recorder = subprocess.Popen(
            [sys.executable, "-m", "faultfinder", "record", "--upstream", upstream.base_url,
             "--out", str(tmp_path / "runs"), "--run-id", "run", "--quiet", "--",
             sys.executable, str(program), str(called), str(go)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            assert wait_for(called.exists, 30), recorder.stderr
            # The key was written before anyone knew it; the program now waits, mid-run.
            assert upstream.chat_requests[0].headers["authorization"] == f"Bearer {KEY}"

            def scrubbed() -> bool:
                out = (run / "stdout.txt").read_bytes()
                err = (run / "stderr.txt").read_bytes()
                return KEY.encode() not in out + err and b"stderr key" in err

            assert wait_for(scrubbed, 5), (run / "stdout.txt").read_text()
            assert (run / "stdout.txt").read_text() == "my key is [REDACTED]\n"
            assert recorder.poll() is None  # still running: nothing waited for the end
        finally:
            go.touch()
            _, errors = recorder.communicate(timeout=60)
    assert recorder.returncode == 0, errors
    out = (run / "stdout.txt").read_text()
    assert out == "my key is [REDACTED]\nFINAL ANSWER: 4\n"  # appended after the rewrite


def test_a_rescrub_in_place_leaves_the_handle_where_the_next_line_goes(tmp_path: Path) -> None:
    """The in-place rewrite keeps later lines whole, whether the scrubbed text is shorter
    (a long secret) or longer (a short one) than what it replaces."""
    short, long = "abcdef", "x" * 40
    redactor = Redactor()
    with (tmp_path / "stdout.txt").open("w+b") as sink:
        sink.write(f"s {short} l {long}\n".encode())
        rescrub_open(sink, redactor)  # nothing learned: nothing changes
        redactor.add(short)
        redactor.add(long)
        rescrub_open(sink, redactor)
        sink.write(b"tail line\n")
    assert (tmp_path / "stdout.txt").read_text() == "s [REDACTED] l [REDACTED]\ntail line\n"
    redactor.add("tail line")
    with (tmp_path / "stdout.txt").open("r+b") as sink:
        sink.seek(0, 2)
        rescrub_open(sink, redactor)
        sink.write(b"end\n")
    assert (tmp_path / "stdout.txt").read_text() == "s [REDACTED] l [REDACTED]\n[REDACTED]\nend\n"
