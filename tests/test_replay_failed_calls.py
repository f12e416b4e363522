"""A model call that failed while recording is answered with the same failure in a replay:
same status, same error body, the same retry headers, in recorded order, so a program that
handled an error (a 400 it shortened its input for, a 429 its SDK retried, a 500 marked
not to be retried) takes the same path again. The real ``openai`` and ``anthropic`` SDKs,
unmodified, against the loopback fake upstream; replays with no upstream at all, so
anything not answered from the recording would be refused."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from faultfinder.cli.replay_cmd import report_lines
from faultfinder.replay.recorder import STEPS_FILE, RecordedCall, load_calls, utcnow
from faultfinder.replay.replayer import ReplayOptions, ReplayPlan
from faultfinder.replay.session import SessionOptions, record_run, replay_run
from faultfinder.testing import FakeOpenAIServer
from faultfinder.testing.fake_openai import ReplyError
from test_replay_retry import last_user

QUIET = SessionOptions(echo=False, timeout=60)

SHORTENS = """
import openai
client = openai.OpenAI(max_retries=2)
def ask(text):
    reply = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": text}])
    return reply.choices[0].message.content
try:
    answer = ask("LONG " * 50)
except openai.BadRequestError as error:
    print("shortened after:", error.status_code, error.body)
    answer = ask("short")
print("FINAL ANSWER:", answer)
"""

RETRIED = """
import openai
client = openai.OpenAI(max_retries=2)
raw = client.chat.completions.with_raw_response.create(
    model="m", messages=[{"role": "user", "content": "busy question"}])
print("retries taken:", raw.retries_taken)
print("FINAL ANSWER:", raw.parse().choices[0].message.content)
"""

NOT_RETRIED = """
import openai
client = openai.OpenAI(max_retries=2)
def ask(text):
    reply = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": text}])
    return reply.choices[0].message.content
try:
    answer = ask("fragile question")
except openai.InternalServerError as error:
    print("fell back after:", error.status_code)
    answer = ask("fallback question")
print("FINAL ANSWER:", answer)
"""

MESSAGES = """
import anthropic
client = anthropic.Anthropic(max_retries=2)
with client.messages.stream(
    model="claude-x", max_tokens=50, system="You are Solver.",
    messages=[{"role": "user", "content": "overloaded question"}],
) as stream:
    text = stream.get_final_text()
print("FINAL ANSWER:", text)
"""


def failing(
    marker: str, status: int, times: int, headers: dict[str, str] | None = None
) -> Callable[[dict[str, Any]], str]:
    """A scripted model answering 'echo: <question>', and ``status`` (with ``headers``)
    to the first ``times`` requests whose question holds ``marker``."""
    failed = [0]
    lock = threading.Lock()

    def reply(body: dict[str, Any]) -> str:
        text = last_user(body)
        with lock:
            if marker in text and failed[0] < times:
                failed[0] += 1
                raise ReplyError(status, f"scripted {status} for {marker}", headers)
        return f"echo: {text.strip()[:20]}"

    return reply


def record_then_replay(
    tmp_path: Path,
    program: str,
    reply: Callable[[dict[str, Any]], str],
    args: list[str] | None = None,
) -> tuple[Any, Any]:
    """Record ``program`` (with ``args``) against a fake that answers with ``reply``,
    then replay it with no upstream named: only the recording can answer."""
    argv = [sys.executable, "-c", program, *(args or [])]
    with FakeOpenAIServer(reply) as upstream:
        recorded = asyncio.run(
            record_run(argv, upstream.base_url, tmp_path, run_id="run", options=QUIET)
        )
    assert recorded.child.exit_code == 0, recorded.child.stderr[-2000:]
    replayed = asyncio.run(replay_run(recorded.run_dir, argv, ReplayOptions(), options=QUIET))
    return recorded, replayed


def branch_calls(branch: Path) -> list[tuple[int, str]]:
    lines = (branch / STEPS_FILE).read_text(encoding="utf-8").splitlines()
    return [(c["status"], c["origin"]) for c in map(json.loads, lines)]


def test_a_400_the_program_handled_is_answered_again(tmp_path: Path) -> None:
    recorded, replayed = record_then_replay(tmp_path, SHORTENS, failing("LONG", 400, 1))
    failed = [c for c in load_calls(recorded.run_dir, include_failed=True) if not c.ok]
    assert [(c.status, c.error_headers) for c in failed] == [
        (400, {"content-type": "application/json"})
    ]
    assert replayed.child.exit_code == 0, replayed.child.stderr[-2000:]
    # The program saw the same error (status and body), so it shortened its input again.
    assert replayed.child.stdout == recorded.child.stdout
    assert "shortened after: 400 {'message': 'scripted 400 for LONG'" in replayed.child.stdout
    report = replayed.report
    assert report.served_failures == [0] and report.divergences == []
    assert (report.reproduced, report.live_calls, report.refused_calls) == (1, 0, 0)
    assert report.faithful
    assert branch_calls(replayed.branch_dir) == [(400, "cached"), (200, "cached")]
    assert len(replayed.trace.steps) == 1
    lines = report_lines(report, replayed.branch_dir, replayed.trace)
    assert (
        "errors:      1 recorded failed call(s) answered again with their recorded error, "
        "not sent upstream (calls [0])"
    ) in lines


def test_a_429_then_its_retry_replay_in_recorded_order(tmp_path: Path) -> None:
    headers = {"retry-after-ms": "20", "x-request-id": "req-1"}
    recorded, replayed = record_then_replay(tmp_path, RETRIED, failing("busy", 429, 1, headers))
    assert "retries taken: 1" in recorded.child.stdout
    [failure] = [c for c in load_calls(recorded.run_dir, include_failed=True) if not c.ok]
    # The headers a client acts on are kept; the request id is not.
    assert failure.error_headers == {"content-type": "application/json", "retry-after-ms": "20"}
    assert replayed.child.exit_code == 0, replayed.child.stderr[-2000:]
    # The SDK met the 429 again and retried, as while recording; the retry got the step.
    assert "retries taken: 1" in replayed.child.stdout
    assert branch_calls(replayed.branch_dir) == [(429, "cached"), (200, "cached")]
    report = replayed.report
    assert (report.served_failures, report.served_steps) == ([0], [0])
    assert (report.live_calls, report.divergences) == (0, [])


def test_x_should_retry_false_is_sent_again_so_the_sdk_does_not_retry(tmp_path: Path) -> None:
    reply = failing("fragile", 500, 1, {"x-should-retry": "false"})
    recorded, replayed = record_then_replay(tmp_path, NOT_RETRIED, reply)
    assert "fell back after: 500" in recorded.child.stdout
    assert replayed.child.exit_code == 0, replayed.child.stderr[-2000:]
    assert replayed.child.stdout == recorded.child.stdout
    # One 500, not retried (a retry would have matched nothing and been refused).
    assert branch_calls(replayed.branch_dir) == [(500, "cached"), (200, "cached")]
    assert replayed.report.divergences == [] and replayed.report.served_failures == [0]


def test_an_anthropic_529_on_a_stream_replays_then_its_retry(tmp_path: Path) -> None:
    pytest.importorskip("anthropic")
    reply = failing("overloaded", 529, 2, {"retry-after-ms": "5"})
    recorded, replayed = record_then_replay(tmp_path, MESSAGES, reply)
    failed = [c for c in load_calls(recorded.run_dir, include_failed=True) if not c.ok]
    assert [(c.api, c.status, c.stream) for c in failed] == [("messages", 529, True)] * 2
    assert isinstance(failed[0].error_body, dict)
    assert failed[0].error_body["type"] == "error"
    assert replayed.child.exit_code == 0, replayed.child.stderr[-2000:]
    assert replayed.trace.final_answer == recorded.trace.final_answer
    assert branch_calls(replayed.branch_dir) == [(529, "cached")] * 2 + [(200, "cached")]
    assert replayed.report.served_failures == [0, 1] and replayed.report.live_calls == 0


MESSAGES_HANDLED = """
import sys
import anthropic
client = anthropic.Anthropic(max_retries=2)
stream = "--stream" in sys.argv
def ask(text):
    raw = client.messages.with_raw_response.create(
        model="claude-x", max_tokens=50, system="You are Solver.", stream=stream,
        messages=[{"role": "user", "content": text}])
    print("retries taken:", raw.retries_taken)
    reply = raw.parse()
    if stream:
        return "".join(
            e.delta.text for e in reply if e.type == "content_block_delta")
    return reply.content[0].text
try:
    answer = ask("LONG busy " * 20)
except anthropic.BadRequestError as error:
    print("shortened after:", error.status_code, error.body)
    answer = ask("short busy")
print("FINAL ANSWER:", answer)
"""


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_anthropic_400_and_429_replay_as_recorded(stream: bool, tmp_path: Path) -> None:
    """A 400 the program handled by shortening its input, then a 429 the SDK retried,
    on the Messages API: the replay meets both again and takes the same path."""
    pytest.importorskip("anthropic")
    too_long, busy = failing("LONG", 400, 1), failing("short", 429, 1, {"retry-after-ms": "5"})

    def reply(body: dict[str, Any]) -> str:
        too_long(body)
        return busy(body)

    args = ["--stream"] if stream else []
    recorded, replayed = record_then_replay(tmp_path, MESSAGES_HANDLED, reply, args)
    assert "shortened after: 400 {'type': 'error', 'error': {'type': 'invalid_request_error'" in (
        recorded.child.stdout
    )
    assert "retries taken: 1" in recorded.child.stdout
    failed = [c for c in load_calls(recorded.run_dir, include_failed=True) if not c.ok]
    assert [(c.api, c.status, c.stream) for c in failed] == [
        ("messages", 400, stream), ("messages", 429, stream)
    ]  # fmt: skip
    assert replayed.child.exit_code == 0, replayed.child.stderr[-2000:]
    assert replayed.child.stdout == recorded.child.stdout
    assert branch_calls(replayed.branch_dir) == [(400, "cached"), (429, "cached"), (200, "cached")]
    report = replayed.report
    assert (report.served_failures, report.live_calls, report.divergences) == ([0, 1], 0, [])


MID_STREAM = """
import sys
import anthropic
client = anthropic.Anthropic(max_retries=2)
QUESTION = dict(
    model="claude-x", max_tokens=50, system="You are Solver.",
    messages=[{"role": "user", "content": "overloaded question"}])
def ask():
    if "--plain" in sys.argv:
        return client.messages.create(**QUESTION).content[0].text
    with client.messages.stream(**QUESTION) as stream:
        return stream.get_final_text()
try:
    answer = ask()
except anthropic.APIStatusError as error:
    print("asked again after:", error.status_code, error.body)
    answer = ask()
print("FINAL ANSWER:", answer)
"""


def test_an_anthropic_error_event_mid_stream_replays_as_recorded(tmp_path: Path) -> None:
    """Anthropic's ``error`` event in a 200 stream (an overload after ``message_start``):
    the SDK raises, the program asks again. The replay sends the same events again, so
    the program meets the error again, rather than its first try getting the reply."""
    pytest.importorskip("anthropic")
    from faultfinder.testing.fake_messages import FakeMessages

    class OverloadedOnce(FakeMessages):
        def __init__(self) -> None:
            super().__init__()
            self.streams = 0

        def stream(self, response: dict[str, Any]) -> list[bytes]:
            events = super().stream(response)
            self.streams += 1
            if self.streams > 1:
                return events
            error = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
            return [events[0], f"event: error\ndata: {json.dumps(error)}\n\n".encode()]

    argv = [sys.executable, "-c", MID_STREAM]
    with FakeOpenAIServer(failing("never", 500, 0)) as upstream:
        upstream.mount(OverloadedOnce())
        recorded = asyncio.run(
            record_run(argv, upstream.base_url, tmp_path, run_id="run", options=QUIET)
        )
    assert recorded.child.exit_code == 0, recorded.child.stderr[-2000:]
    assert "asked again after: 200 {'type': 'error'" in recorded.child.stdout
    [failure] = [c for c in load_calls(recorded.run_dir, include_failed=True) if not c.ok]
    assert (failure.status, failure.stream) == (200, True)
    assert failure.error == "the stream ended with an error event: busy"
    assert failure.error_body == {
        "type": "error", "error": {"type": "overloaded_error", "message": "busy"}
    }  # fmt: skip
    replayed = asyncio.run(replay_run(recorded.run_dir, argv, ReplayOptions(), options=QUIET))
    assert replayed.child.exit_code == 0, replayed.child.stderr[-2000:]
    assert replayed.child.stdout == recorded.child.stdout
    assert branch_calls(replayed.branch_dir) == [(200, "cached"), (200, "cached")]
    assert replayed.report.served_failures == [0] and replayed.report.live_calls == 0
    # Asked without streaming, the recorded error comes back as a 502 not to be retried.
    plain = asyncio.run(
        replay_run(recorded.run_dir, [*argv, "--plain"], ReplayOptions(), options=QUIET)
    )
    assert plain.child.exit_code == 0, plain.child.stderr[-2000:]
    assert "asked again after: 502 {'type': 'error'" in plain.child.stdout
    assert branch_calls(plain.branch_dir) == [(502, "cached"), (200, "cached")]
    assert plain.report.live_calls == 0 and plain.report.divergences == []


def test_a_failure_recorded_without_its_reply_is_still_refused(tmp_path: Path) -> None:
    """A recording made before error replies were kept: the call has nothing to answer
    with, and the replay refuses it as before, saying why."""
    recorded, _ = record_then_replay(tmp_path, SHORTENS, failing("LONG", 400, 1))
    steps = recorded.run_dir / STEPS_FILE
    lines = [json.loads(line) for line in steps.read_text(encoding="utf-8").splitlines()]
    for line in lines:
        line.pop("error_body", None)
        line.pop("error_headers", None)
    steps.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    argv = [sys.executable, "-c", SHORTENS]
    replayed = asyncio.run(replay_run(recorded.run_dir, argv, ReplayOptions(), options=QUIET))
    [divergence] = replayed.report.divergences
    assert divergence.action == "refused" and divergence.step is None
    assert divergence.difference == (
        "its request was recorded only as a failed call (call 0: upstream error: scripted "
        "400 for LONG), which has no reply to replay"
    )
    assert replayed.report.served_failures == []
    assert replayed.child.exit_code != 0


def test_a_quoted_key_in_an_error_body_is_not_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-proj-Qw3rTy7Uiop9Asdf2Ghjk4Lzxc"
    monkeypatch.setenv("OPENAI_API_KEY", key)

    def quoting(body: dict[str, Any]) -> str:
        if "LONG" in last_user(body):
            raise ReplyError(400, f"too long for key {key}")
        return "fine"

    recorded, replayed = record_then_replay(tmp_path, SHORTENS, quoting)
    assert key not in (recorded.run_dir / STEPS_FILE).read_text(encoding="utf-8")
    [failure] = [c for c in load_calls(recorded.run_dir, include_failed=True) if not c.ok]
    assert isinstance(failure.error_body, dict) and "too long for key" in json.dumps(
        failure.error_body
    )
    assert replayed.report.served_failures == [0]
    assert key not in (replayed.branch_dir / STEPS_FILE).read_text(encoding="utf-8")


# --- the plan: failures in recorded order, and only before step `at` -------------------


def call(number: int, text: str, status: int = 200) -> RecordedCall:
    now = utcnow()
    reply = {
        "id": f"r{number}",
        "object": "chat.completion",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
    }
    return RecordedCall(
        call=number,
        agent="A",
        request={"model": "m", "messages": [{"role": "user", "content": text}]},
        request_hash="-",
        response=reply if status == 200 else None,
        status=status,
        error=None if status == 200 else f"upstream error: {status}",
        error_body=None if status == 200 else {"error": {"message": str(status)}},
        started_at=now,
        ended_at=now,
    )


def ask(plan: ReplayPlan, text: str) -> tuple[str, int]:
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    decision = plan.decide("A", body)
    return decision.action, decision.status


def test_each_identical_request_gets_the_next_recorded_answer_failures_included() -> None:
    recorded = [call(0, "x", 429), call(1, "x"), call(2, "x", 500), call(3, "x", 500), call(4, "x")]
    plan = ReplayPlan(recorded, ReplayOptions())
    answers = [ask(plan, "x") for _ in range(5)]
    statuses = [429, 200, 500, 500, 200]
    assert answers == [("serve" if s == 200 else "error", s) for s in statuses]
    assert plan.report.served_failures == [0, 2, 3] and plan.report.served_steps == [0, 1]


def test_failures_recorded_after_step_at_are_left_to_the_upstream() -> None:
    recorded = [call(0, "x", 400), call(1, "y"), call(2, "z"), call(3, "w", 400)]
    plan = ReplayPlan(recorded, ReplayOptions(at=1))
    assert ask(plan, "x") == ("error", 400)
    assert ask(plan, "y") == ("serve", 200)
    assert ask(plan, "z")[0] == "live"  # step 1: at
    # Recorded after step `at`: the upstream answers now, whatever it says.
    assert ask(plan, "w")[0] == "live"
    assert plan.report.served_failures == [0]


def test_an_error_event_names_its_message_wherever_the_api_puts_it() -> None:
    # Anthropic nests it under "error"; the Responses API's streamed error event has it
    # at the top level, which read as "no message".
    from faultfinder.replay.proxy_calls import error_message

    assert error_message({"type": "error", "error": {"message": "Overloaded"}}) == "Overloaded"
    assert error_message({"type": "error", "code": "server_error", "message": "boom"}) == "boom"
