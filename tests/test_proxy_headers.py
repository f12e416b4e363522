"""The proxy passes the upstream's response headers on to the program: on an error
(``retry-after``, ``retry-after-ms``, ``x-should-retry``, request ids) the program's SDK
retries, or does not, as it would talking to the upstream directly; on a live reply,
plain or streamed, request ids and the like reach it too. Headers of the connection are
the proxy's own, and no header is written to the run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
from click.testing import CliRunner, Result

from faultfinder.cli import main
from faultfinder.replay.httpserver import Request, Response
from faultfinder.replay.output import OUTPUT_FILES
from faultfinder.replay.proxy import relayed_headers
from faultfinder.testing import FakeOpenAIServer
from faultfinder.testing.fake_openai import ReplyError

ONE_CALL = """\
import openai, sys
client = openai.OpenAI(max_retries=int(sys.argv[1]))
try:
    reply = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
except openai.APIStatusError as exc:
    headers = exc.response.headers
    print("STATUS", exc.status_code, flush=True)
    for name in ("retry-after", "x-should-retry", "x-request-id"):
        print("HEADER", name, headers.get(name), flush=True)
    sys.exit(5)
print("FINAL ANSWER:", reply.choices[0].message.content)
"""

REQUEST_IDS = """\
import openai
client = openai.OpenAI()
messages = [{"role": "user", "content": "hi"}]
plain = client.chat.completions.with_raw_response.create(model="m", messages=messages)
print("PLAIN", plain.headers.get("x-request-id"), plain.parse().choices[0].message.content)
with client.chat.completions.with_streaming_response.create(
    model="m", messages=messages, stream=True
) as streamed:
    print("STREAM", streamed.headers.get("x-request-id"), streamed.headers.get("content-type"))
    text = "".join(c.choices[0].delta.content or "" for c in streamed.parse() if c.choices)
print("FINAL ANSWER:", text)
"""


def write_program(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "program.py"
    path.write_text(text, encoding="utf-8")
    return [sys.executable, str(path)]


def record(tmp_path: Path, upstream: str, program: list[str]) -> Result:
    return CliRunner().invoke(
        main,
        ["record", "--upstream", upstream, "--out", str(tmp_path / "runs"), "--run-id", "run",
         "--", *program],
    )  # fmt: skip


def failing_once(status: int, headers: dict[str, str]) -> object:
    sent = [False]

    def reply(body: dict[str, object]) -> str:
        if not sent[0]:
            sent[0] = True
            raise ReplyError(status, "scripted failure", headers)
        return "fine"

    return reply


def test_x_should_retry_false_on_a_500_stops_the_sdk_retrying(tmp_path: Path) -> None:
    program = write_program(tmp_path, ONE_CALL)
    reply = failing_once(500, {"x-should-retry": "false", "x-request-id": "req_500"})
    with FakeOpenAIServer(reply) as upstream:  # type: ignore[arg-type]
        # The SDK would retry a 500 twice; the upstream said not to, and it is obeyed.
        result = record(tmp_path, upstream.base_url, [*program, "2"])
        assert len(upstream.chat_requests) == 1
    assert result.exit_code == 5, result.output
    assert "STATUS 500" in result.output
    assert "HEADER x-should-retry false" in result.output
    assert "HEADER x-request-id req_500" in result.output


def test_a_429_reaches_the_program_with_its_retry_after(tmp_path: Path) -> None:
    program = write_program(tmp_path, ONE_CALL)
    with FakeOpenAIServer("fine", fail_first=1, fail_status=429, retry_after=7) as upstream:
        result = record(tmp_path, upstream.base_url, [*program, "0"])
    assert result.exit_code == 5, result.output
    assert "STATUS 429" in result.output
    assert "HEADER retry-after 7" in result.output


def test_the_sdk_waits_as_long_as_the_upstreams_retry_after_says(tmp_path: Path) -> None:
    program = write_program(tmp_path, ONE_CALL)
    with FakeOpenAIServer("fine", fail_first=1, fail_status=429, retry_after=2) as upstream:
        result = record(tmp_path, upstream.base_url, [*program, "1"])
        first, second = upstream.chat_requests
    assert result.exit_code == 0, result.output
    # Without the header the SDK backs off for under a second.
    assert second.received_at - first.received_at >= 1.8


class WithRequestIds(FakeOpenAIServer):
    """The fake upstream, adding a request id and a timing header to every reply, as
    hosted APIs send them."""

    async def _handle(self, request: Request) -> Response:
        response = await super()._handle(request)
        response.headers.append(("x-request-id", "req_live_1"))
        response.headers.append(("openai-processing-ms", "12"))
        return response


def test_live_replies_plain_and_streamed_carry_the_upstreams_headers(tmp_path: Path) -> None:
    program = write_program(tmp_path, REQUEST_IDS)
    with WithRequestIds("hello there") as upstream:
        result = record(tmp_path, upstream.base_url, program)
    assert result.exit_code == 0, result.output
    assert "PLAIN req_live_1 hello there" in result.output
    assert "STREAM req_live_1 text/event-stream" in result.output
    assert "FINAL ANSWER: hello there" in result.output
    # Relayed to the program only: what the proxy writes holds no header (the program's
    # own output, which printed the id, aside).
    run = tmp_path / "runs" / "run"
    assert json.loads((run / "meta.json").read_text())["exit_code"] == 0
    written = [p for p in run.rglob("*") if p.is_file() and p.name not in OUTPUT_FILES]
    assert {p.name for p in written} >= {"steps.jsonl", "trace.json", "meta.json"}
    for path in written:
        text = path.read_text(encoding="utf-8", errors="replace")
        assert "req_live_1" not in text and "openai-processing-ms" not in text, path


def test_headers_of_the_connection_are_not_relayed() -> None:
    upstream = httpx.Response(
        200,
        headers=[
            ("Content-Type", "application/json"),
            ("Content-Length", "2"),
            ("Content-Encoding", "gzip"),
            ("Transfer-Encoding", "chunked"),
            ("Connection", "keep-alive, X-Hop"),
            ("Keep-Alive", "timeout=5"),
            ("X-Hop", "1"),
            ("Set-Cookie", "a=1"),
            ("Set-Cookie", "b=2"),
            ("Retry-After-Ms", "250"),
        ],
    )
    headers = relayed_headers(upstream, [("content-type", "text/event-stream")])
    assert headers == [
        ("content-type", "text/event-stream"),
        ("set-cookie", "a=1"),
        ("set-cookie", "b=2"),
        ("retry-after-ms", "250"),
    ]
