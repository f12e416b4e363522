"""What the proxy wrote, on disk while the program still runs: a secret faultfinder learns
mid-run (a key that a call quotes, revealed only by a later call's headers, or by a URL
the program prints) is scrubbed from ``steps.jsonl`` and ``meta.json`` as soon as it is
learned, not when the run ends, so a recorder that is killed leaves no secret it knew of
behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from faultfinder.redact import Redactor
from faultfinder.replay.recorder import RecordedCall, RunMeta, RunStore, load_calls
from faultfinder.testing import FakeOpenAIServer
from polling import wait_for

KEY = "plainkeyvalue-EEEE5555FFFF"
"""Not key-shaped, not in the environment: learned only mid-run."""

QUOTED_THEN_SENT = f"""\
import openai, pathlib, sys, time
key = {KEY!r}
ask = [{{"role": "user", "content": "my key is " + key}}]
openai.OpenAI().chat.completions.create(model="m", messages=ask)
LEARN
pathlib.Path(sys.argv[1]).write_text("called")
deadline = time.monotonic() + 30
while not pathlib.Path(sys.argv[2]).exists() and time.monotonic() < deadline:
    time.sleep(0.05)
print("FINAL ANSWER: 4", flush=True)
"""

LEARN = {
    # The second call's headers carry the key the first call's content quoted.
    "header": """openai.OpenAI(api_key=key).chat.completions.create(
    model="m", messages=[{"role": "user", "content": "again"}]
)""",
    # The program prints a URL holding it: the output's scrubber learns it.
    "printed-url": 'print("db at https://admin:" + key + "@db.example.com/x", flush=True)',
}


@pytest.mark.parametrize("learned_from", sorted(LEARN))
def test_a_key_learned_mid_run_leaves_steps_and_meta_while_the_program_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, learned_from: str
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    program = tmp_path / "quoting.py"
    program.write_text(QUOTED_THEN_SENT.replace("LEARN", LEARN[learned_from]), encoding="utf-8")
    called, go = tmp_path / "called", tmp_path / "go"
    run = tmp_path / "runs" / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with FakeOpenAIServer(reply="4") as upstream:
        recorder = subprocess.Popen(
            [sys.executable, "-m", "faultfinder", "record", "--upstream", upstream.base_url,
             "--out", str(tmp_path / "runs"), "--run-id", "run", "--quiet",
             "--task", f"use the key {KEY}", "--",
             sys.executable, str(program), str(called), str(go)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            assert wait_for(called.exists, 30), recorder.stderr
            # The first call was recorded before anyone knew the key; the program waits.
            first = upstream.chat_requests[0].body["messages"][0]["content"]
            assert first == f"my key is {KEY}"

            def scrubbed() -> bool:
                steps = (run / "steps.jsonl").read_bytes()
                meta = (run / "meta.json").read_bytes()
                return KEY.encode() not in steps + meta

            assert wait_for(scrubbed, 5), (run / "steps.jsonl").read_text()
            calls = load_calls(run)
            assert calls[0].request["messages"][0]["content"] == "my key is [REDACTED]"
            assert len(calls) == len(upstream.chat_requests)  # no line lost or doubled
            meta = json.loads((run / "meta.json").read_text())
            assert meta["task"] == "use the key [REDACTED]"
            assert recorder.poll() is None  # still running: nothing waited for the end
        finally:
            go.touch()
            _, errors = recorder.communicate(timeout=60)
    assert recorder.returncode == 0, errors
    for name in ("steps.jsonl", "meta.json", "trace.json", "stdout.txt"):
        assert KEY not in (run / name).read_text(), name


def call(index: int, content: str, **request: object) -> RecordedCall:
    now = datetime.now(UTC)
    return RecordedCall(
        call=index,
        agent="a",
        request={"model": "m", "messages": [{"role": "user", "content": content}], **request},
        request_hash=f"h{index}",
        response={"choices": [{"message": {"role": "assistant", "content": "ok"}}]},
        started_at=now,
        ended_at=now,
    )


def test_a_store_scrubs_its_files_again_once_a_secret_is_learned(tmp_path: Path) -> None:
    redactor = Redactor()
    store = RunStore(tmp_path, redactor)
    store.write_meta(RunMeta(run_id="r", task=f"task with {KEY}"))
    store.append(call(0, f"quoted {KEY}"))
    store.rescrub()  # nothing learned: nothing to do
    assert KEY in store.steps_path.read_text()
    redactor.add(KEY)
    store.rescrub()
    assert KEY not in store.steps_path.read_text() + (tmp_path / "meta.json").read_text()
    assert json.loads((tmp_path / "meta.json").read_text())["task"] == "task with [REDACTED]"
    store.append(call(1, "next"))
    assert [c.call for c in load_calls(tmp_path)] == [0, 1]


def test_a_secret_a_later_call_teaches_is_scrubbed_from_the_calls_before_it(
    tmp_path: Path,
) -> None:
    """A secret-named field of the second call is learned as that call is written; the
    first call, which quoted its value, is scrubbed at once."""
    store = RunStore(tmp_path, Redactor())
    store.append(call(0, f"quoted {KEY}"))
    store.append(call(1, "fine", metadata={"password": KEY}))
    assert KEY not in store.steps_path.read_text()
    assert load_calls(tmp_path)[0].request["messages"][0]["content"] == "quoted [REDACTED]"


def test_rescrubs_alongside_appends_lose_and_double_no_line(tmp_path: Path) -> None:
    redactor = Redactor()
    store = RunStore(tmp_path, redactor)
    secrets = [f"learned-secret-{n:04d}" for n in range(40)]
    done = threading.Event()

    def learn() -> None:
        for secret in secrets:
            redactor.add(secret)
            store.rescrub()
        done.set()

    def append(start: int) -> None:
        for n in range(start, start + 50):
            store.append(call(store.next_call_index(), f"{n} {secrets[n % len(secrets)]}"))

    threads = [threading.Thread(target=append, args=(s,)) for s in (0, 50)]
    threads.append(threading.Thread(target=learn))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert done.is_set()
    store.rescrub()
    text = store.steps_path.read_text()
    assert not any(secret in text for secret in secrets)
    assert sorted(c.call for c in load_calls(tmp_path)) == list(range(100))
    assert text.endswith("\n") and text.count("\n") == 100
