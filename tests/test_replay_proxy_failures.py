"""Failures the program met that were not an upstream's error reply: the proxy's own 502
when the upstream was unreachable while recording, and a background-mode Responses call
whose polled response ended ``failed``. A replay answers each as recorded, from the
recording, never live: the real ``openai`` SDK, the replay with no upstream named."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path
from typing import Any

from faultfinder.replay.recorder import load_calls
from faultfinder.replay.replayer import ReplayOptions
from faultfinder.replay.session import record_run, replay_run
from faultfinder.testing import FakeOpenAIServer
from faultfinder.testing.fake_responses import FakeResponses
from test_replay_failed_calls import QUIET, branch_calls

OFFLINE = """
import openai
client = openai.OpenAI(max_retries=1)
try:
    reply = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "anyone there?"}])
    answer = reply.choices[0].message.content
except openai.InternalServerError as error:
    print("no model:", error.status_code, error.body["type"])
    answer = "offline"
print("FINAL ANSWER:", answer)
"""


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_proxys_502_for_an_unreachable_upstream_is_answered_again(tmp_path: Path) -> None:
    """The SDK retried the 502 once, then the program fell back. The replay sends the same
    502 twice, so it takes the same path, rather than refusing the first try as a
    divergence (the program crashed on that refusal)."""
    argv = [sys.executable, "-c", OFFLINE]
    nowhere = f"http://127.0.0.1:{closed_port()}/v1"
    recorded = asyncio.run(record_run(argv, nowhere, tmp_path, run_id="run", options=QUIET))
    assert recorded.child.exit_code == 0, recorded.child.stderr[-2000:]
    assert "no model: 502 faultfinder_proxy_error" in recorded.child.stdout
    failed = [c for c in load_calls(recorded.run_dir, include_failed=True) if not c.ok]
    assert [(c.status, c.replayable_error) for c in failed] == [(502, True)] * 2
    assert failed[0].error is not None and "unreachable" in failed[0].error

    replayed = asyncio.run(replay_run(recorded.run_dir, argv, ReplayOptions(), options=QUIET))
    assert replayed.child.exit_code == 0, replayed.child.stderr[-2000:]
    assert replayed.child.stdout == recorded.child.stdout
    assert branch_calls(replayed.branch_dir) == [(502, "cached")] * 2
    report = replayed.report
    assert (report.served_failures, report.live_calls, report.divergences) == ([0, 1], 0, [])


BACKGROUND = """
import time
from openai import OpenAI
client = OpenAI()
def ask():
    response = client.responses.create(model="m", input="long job", background=True)
    while response.status in ("queued", "in_progress"):
        time.sleep(0.02)
        response = client.responses.retrieve(response.id)
    return response
response = ask()
if response.status == "failed":
    print("failed:", response.error.code, response.error.message)
    print("fetched again:", client.responses.retrieve(response.id).status)
    response = ask()
print("FINAL ANSWER:", response.output_text)
"""


class FailsFirstJob(FakeResponses):
    """Background mode whose first response, once polled to its end, ended ``failed``."""

    def __init__(self) -> None:
        super().__init__()
        self.failed: str | None = None

    def retrieve(self, method: str, path: str) -> dict[str, Any] | None:
        stored = super().retrieve(method, path)
        if stored is None or stored.get("status") != "completed":
            return stored
        if self.failed in (None, stored["id"]):
            self.failed = str(stored["id"])
            error = {"code": "server_error", "message": "the job died"}
            return {**stored, "status": "failed", "output": [], "error": error}
        return stored


def test_a_background_response_that_ended_failed_is_answered_again(tmp_path: Path) -> None:
    """While recording, the program polled the job until it failed, then asked again.
    The replay answers the first create with the failed response (a poll of it too), so
    the program meets the failure again, rather than its first try getting the step."""
    argv = [sys.executable, "-c", BACKGROUND]
    with FakeOpenAIServer("done").mount(FailsFirstJob()) as upstream:
        recorded = asyncio.run(
            record_run(argv, upstream.base_url, tmp_path, run_id="run", options=QUIET)
        )
    assert recorded.child.exit_code == 0, recorded.child.stderr[-2000:]
    assert "failed: server_error the job died" in recorded.child.stdout
    [failure] = [c for c in load_calls(recorded.run_dir, include_failed=True) if not c.ok]
    assert failure.error == "background response failed: the job died"
    assert (failure.status, failure.replayable_error) == (200, True)
    assert isinstance(failure.error_body, dict) and failure.error_body["status"] == "failed"

    replayed = asyncio.run(replay_run(recorded.run_dir, argv, ReplayOptions(), options=QUIET))
    assert replayed.child.exit_code == 0, replayed.child.stderr[-2000:]
    assert replayed.child.stdout == recorded.child.stdout
    assert branch_calls(replayed.branch_dir) == [(200, "cached"), (200, "cached")]
    report = replayed.report
    assert (report.served_failures, report.live_calls, report.divergences) == ([0], 0, [])
    assert report.reproduced == 1
