"""A stream the upstream breaks off with an error once it has begun (status 200) is a
failed call, recorded with its events and answered again in a replay: Chat Completions'
error chunk (``data: {"error": ...}``) and the Responses API's ``error`` and
``response.failed`` events, with the real ``openai`` SDK against the loopback fake
upstream. The replay names no upstream, so anything not answered from the recording
would be refused; the program must meet the same error where it met it while recording.
(Anthropic's mid-stream ``error`` event: ``test_replay_failed_calls.py``.)"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from faultfinder.replay.recorder import load_calls
from faultfinder.replay.replayer import ReplayOptions
from faultfinder.replay.session import record_run, replay_run
from faultfinder.testing import FakeOpenAIServer
from faultfinder.testing.fake_responses import FakeResponses
from test_replay_failed_calls import QUIET, branch_calls
from test_replay_retry import last_user

CHAT = """
import sys
import openai
client = openai.OpenAI(max_retries=2)
QUESTION = dict(model="m", messages=[{"role": "user", "content": "fragile question"}])
def ask():
    if "--plain" in sys.argv:
        return client.chat.completions.create(**QUESTION).choices[0].message.content
    stream = client.chat.completions.create(**QUESTION, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
try:
    answer = ask()
except openai.APIError as error:
    print("asked again after:", type(error).__name__, error.body)
    answer = ask()
print("FINAL ANSWER:", answer)
"""


def record(program: str, tmp_path: Path, server: FakeOpenAIServer) -> Any:
    argv = [sys.executable, "-c", program]
    with server as upstream:
        recorded = asyncio.run(
            record_run(argv, upstream.base_url, tmp_path, run_id="run", options=QUIET)
        )
    assert recorded.child.exit_code == 0, recorded.child.stderr[-2000:]
    return recorded


def replay(recorded: Any, program: str, *args: str) -> Any:
    argv = [sys.executable, "-c", program, *args]
    return asyncio.run(replay_run(recorded.run_dir, argv, ReplayOptions(), options=QUIET))


def breaks_first_stream(error: dict[str, Any], done: bool = False) -> Any:
    """A scripted model whose first streamed reply breaks off with ``error``."""
    streams = [0]

    def reply(body: dict[str, Any]) -> str | dict[str, Any]:
        if not body.get("stream"):
            return f"echo: {last_user(body)}"
        streams[0] += 1
        if streams[0] > 1:
            return "recovered"
        return {"text": "half an answer", "stream_error": {"error": error, "done": done}}

    return reply


@pytest.mark.parametrize("done", [False, True], ids=["cut", "then-done"])
def test_a_chat_stream_error_chunk_is_recorded_and_replayed(done: bool, tmp_path: Path) -> None:
    """OpenAI ends such a stream after the error chunk, vLLM sends ``[DONE]`` after it;
    either way the SDK raises ``APIError`` with the chunk's error as its body."""
    error = {"message": "the model is overloaded", "type": "server_error", "code": None}
    recorded = record(CHAT, tmp_path, FakeOpenAIServer(breaks_first_stream(error, done)))
    assert "asked again after: APIError {'message': 'the model is overloaded'" in (
        recorded.child.stdout
    )
    [failure] = [c for c in load_calls(recorded.run_dir, include_failed=True) if not c.ok]
    assert (failure.status, failure.stream) == (200, True)
    assert failure.error == "the stream ended with an error event: the model is overloaded"
    assert failure.error_body == {"error": error}
    assert failure.events is not None and len(failure.events) == (3 if done else 2)

    replayed = replay(recorded, CHAT)
    assert replayed.child.exit_code == 0, replayed.child.stderr[-2000:]
    assert replayed.child.stdout == recorded.child.stdout
    assert branch_calls(replayed.branch_dir) == [(200, "cached"), (200, "cached")]
    report = replayed.report
    assert (report.served_failures, report.live_calls, report.divergences) == ([0], 0, [])
    assert (report.reproduced, report.refused_calls) == (1, 0)


def test_a_chat_stream_error_asked_without_streaming_is_a_502(tmp_path: Path) -> None:
    reply = breaks_first_stream({"message": "boom"})
    recorded = record(CHAT, tmp_path, FakeOpenAIServer(reply))
    plain = replay(recorded, CHAT, "--plain")
    assert plain.child.exit_code == 0, plain.child.stderr[-2000:]
    # No non-streamed answer was recorded: the error, as a 502 the SDK must not retry.
    assert "asked again after: InternalServerError {'message': 'boom'}" in plain.child.stdout
    assert branch_calls(plain.branch_dir) == [(502, "cached"), (200, "cached")]
    assert plain.report.live_calls == 0 and plain.report.divergences == []


RESPONSES = """
import openai
client = openai.OpenAI(max_retries=2)
def ask():
    text = ""
    for event in client.responses.create(model="m", input="fragile question", stream=True):
        if event.type == "response.output_text.delta":
            text += event.delta
        elif event.type == "error":
            raise RuntimeError(f"error event {event.code}: {event.message}")
        elif event.type == "response.failed":
            raise RuntimeError(f"response failed: {event.response.error.message}")
    return text
try:
    answer = ask()
except RuntimeError as error:
    print("asked again after:", error)
    answer = ask()
print("FINAL ANSWER:", answer)
"""


class FailsOnce(FakeResponses):
    """The Responses API breaking its first stream off after ``response.in_progress``
    with an ``error`` event or a ``response.failed`` event, as the API does."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how
        self.streams = 0

    def stream(self, response: dict[str, Any]) -> list[bytes]:
        events = super().stream(response)
        self.streams += 1
        if self.streams > 1:
            return events
        if self.how == "error":
            data: dict[str, Any] = {
                "type": "error", "code": "server_error", "message": "busy", "param": None
            }  # fmt: skip
        else:
            error = {"code": "server_error", "message": "busy"}
            failed = {**response, "status": "failed", "output": [], "error": error}
            data = {"type": "response.failed", "response": failed}
        data["sequence_number"] = 2
        return [*events[:2], f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()]


@pytest.mark.parametrize("how", ["error", "response.failed"])
def test_a_responses_stream_that_fails_is_recorded_and_replayed(how: str, tmp_path: Path) -> None:
    recorded = record(RESPONSES, tmp_path, FakeOpenAIServer("recovered").mount(FailsOnce(how)))
    said = "error event server_error: busy" if how == "error" else "response failed: busy"
    assert f"asked again after: {said}" in recorded.child.stdout
    [failure] = [c for c in load_calls(recorded.run_dir, include_failed=True) if not c.ok]
    assert (failure.api, failure.status, failure.stream) == ("responses", 200, True)
    assert failure.error == "the stream ended with an error event: busy"
    assert isinstance(failure.error_body, dict) and failure.error_body["type"] == how
    assert failure.events is not None and len(failure.events) == 3

    replayed = replay(recorded, RESPONSES)
    assert replayed.child.exit_code == 0, replayed.child.stderr[-2000:]
    assert replayed.child.stdout == recorded.child.stdout
    assert branch_calls(replayed.branch_dir) == [(200, "cached"), (200, "cached")]
    report = replayed.report
    assert (report.served_failures, report.live_calls, report.divergences) == ([0], 0, [])
