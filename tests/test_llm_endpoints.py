"""Endpoints that misbehave: trickling replies, malformed 200 replies, nothing listening.

The misbehaving servers are raw loopback sockets, so they can do what no well-behaved HTTP
library would (send a body one byte at a time, lie about the content type).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from faultfinder import errors
from faultfinder.judging.method import run_method
from faultfinder.llm import LLM
from faultfinder.llm.openai_compat import OpenAICompatBackend, reported_usage
from faultfinder.registry import create_method
from faultfinder.traces.schema import Step, Trace

pytestmark = pytest.mark.usefixtures("loopback_requests")


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return await reader.readexactly(length)


@asynccontextmanager
async def raw_server(handler: Handler) -> AsyncIterator[tuple[str, list[int]]]:
    """A loopback server; yields its /v1 URL and a list counting requests served."""
    count: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await _read_request(reader)
                count.append(1)
                await handler(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1", count
    finally:
        server.close()


def reply_with(body: bytes, content_type: str = "application/json") -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (
            f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        writer.write(head + body)
        await writer.drain()

    return handler


async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    body = json.dumps({"choices": [{"message": {"content": "x" * 200}}]}).encode()
    writer.write(
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
    )
    for byte in body:  # one byte every 0.1 s: no read ever times out, the whole takes 20 s
        writer.write(bytes([byte]))
        await writer.drain()
        await asyncio.sleep(0.1)


async def no_sleep(seconds: float) -> None:
    return None


def llm_for(url: str, **options: Any) -> LLM:
    return LLM(OpenAICompatBackend("m", base_url=url), sleep=no_sleep, **options)


def test_a_trickling_reply_is_cut_at_the_deadline() -> None:
    llm: LLM | None = None

    async def go() -> float:
        nonlocal llm
        async with raw_server(trickle) as (url, _):
            started = time.monotonic()
            llm = llm_for(url, timeout=1.0)
            with pytest.raises(errors.LLMCallError, match=r"within 1 s \(retries included\)"):
                await llm.chat("hi")
            return time.monotonic() - started

    assert asyncio.run(go()) < 5
    # The endpoint had the request: one call, as a local call cut by the timeout counts
    # (test_llm_local.py), with its prompt estimated and no completion.
    assert llm is not None
    assert (llm.usage.calls, llm.usage.completion_tokens, llm.usage.estimated) == (1, 0, True)


def test_the_deadline_covers_retries_and_backoff() -> None:
    async def go() -> tuple[float, int]:
        async with raw_server(reply_with(b"{}")) as (url, count):
            llm = LLM(
                OpenAICompatBackend("m", base_url=url),
                timeout=1.0,
                max_retries=50,
                backoff_base=0.3,
                backoff_max=0.3,
            )
            started = time.monotonic()
            with pytest.raises(errors.LLMCallError, match=r"deadline|within"):
                await llm.chat("hi")
            return time.monotonic() - started, len(count)

    elapsed, attempts = asyncio.run(go())
    assert elapsed < 3 and 1 < attempts < 50


@pytest.mark.parametrize(
    ("body", "content_type", "why"),
    [
        (b"<html>proxy error</html>", "text/html", "not a JSON object|not JSON"),
        (b"{not json", "application/json", "not JSON"),
        (b"[1, 2]", "application/json", "not a JSON object"),
        (b'{"id": "x"}', "application/json", "no choices"),
        (b'{"choices": "many"}', "application/json", "no choices"),
        (b'{"choices": [{"message": "hi"}]}', "application/json", "no message"),
        (b'{"choices": [{"message": {"content": 5}}]}', "application/json", "not text"),
        (b'{"choices": [{"message": {"tool_calls": [1]}}]}', "application/json", "tool call"),
    ],
)
def test_a_malformed_200_reply_is_retried_then_an_error(
    body: bytes, content_type: str, why: str
) -> None:
    async def go() -> int:
        async with raw_server(reply_with(body, content_type)) as (url, count):
            with pytest.raises(errors.LLMCallError, match=why):
                await llm_for(url, max_retries=2).chat("hi")
            return len(count)

    assert asyncio.run(go()) == 3


def test_a_malformed_reply_becomes_an_error_row_not_a_traceback() -> None:
    trace = Trace(
        id="t",
        task="q",
        steps=[Step(index=0, agent="a", content="x"), Step(index=1, agent="b", content="y")],
    )

    async def go() -> Any:
        async with raw_server(reply_with(b"{broken")) as (url, _):
            method = create_method("all-at-once")
            return await run_method(method, trace, llm_for(url, max_retries=1))

    result = asyncio.run(go())
    assert result.status == "error"
    assert "malformed reply" in (result.error or "")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("url", "why"),
    [
        (f"http://127.0.0.1:{_free_port()}/v1", "connection refused"),
        ("http://faultfinder-test.invalid/v1", "cannot resolve the host name"),
    ],
)
def test_an_unreachable_endpoint_fails_at_once_and_says_so(url: str, why: str) -> None:
    slept: list[float] = []

    async def record_sleep(seconds: float) -> None:
        slept.append(seconds)

    llm = LLM(OpenAICompatBackend("m", base_url=url), sleep=record_sleep)
    with pytest.raises(errors.LLMCallError, match=why) as raised:
        asyncio.run(llm.chat("hi"))
    assert slept == []  # not retried
    # Nothing reached an endpoint: no call is counted.
    assert raised.value.sent is False and llm.usage.calls == 0


def test_a_call_that_timed_out_is_counted_as_a_call() -> None:
    """The request went out and the model worked on it (the embedded model's compute, an
    endpoint's bill): the cost line must not say '0 calls'."""
    from faultfinder.llm.doubles import FunctionBackend
    from faultfinder.llm.scopes import UsageScope, track_usage
    from faultfinder.usage import Budget

    async def slow(request: Any) -> str:
        await asyncio.sleep(5)
        return "late"

    llm = LLM(FunctionBackend(slow), timeout=0.1, budget=Budget(max_calls=1))

    async def go() -> UsageScope:
        with track_usage() as scope:
            with pytest.raises(errors.LLMCallError, match="no complete reply") as raised:
                await llm.chat("what went wrong in this run?", purpose="judge")
            assert raised.value.sent is True
            # ... and it counts against --max-calls like any call that went out.
            with pytest.raises(errors.BudgetExceededError):
                await llm.chat("again")
        return scope

    scope = asyncio.run(go())
    assert (llm.usage.calls, llm.usage.completion_tokens) == (1, 0)
    assert llm.usage.prompt_tokens > 0 and llm.usage.estimated
    (record,) = scope.calls
    assert record.purpose == "judge" and record.usage.calls == 1 and not record.parsed
    assert "no reply" in (record.parse_error or "")


@pytest.mark.parametrize(
    ("reported", "expected"),
    [
        ({"prompt_tokens": 5, "completion_tokens": 7}, (5, 7)),
        ({"prompt_tokens": -5, "completion_tokens": 7}, (0, 7)),
        ({"prompt_tokens": "many", "completion_tokens": None}, (0, 0)),
        ({"prompt_tokens": True, "completion_tokens": 1.5}, (0, 0)),
        ("lots", (0, 0)),
        (None, (0, 0)),
    ],
)
def test_reported_usage_keeps_only_plausible_counts(reported: Any, expected: Any) -> None:
    usage = reported_usage(reported)
    assert (usage.prompt_tokens, usage.completion_tokens) == expected


def test_cli_timeout_option_and_fast_failure(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from faultfinder.cli import main

    trace = tmp_path / "t.json"
    trace.write_text(
        Trace(
            id="t", task="q", steps=[Step(index=0, agent="a"), Step(index=1, agent="b")]
        ).model_dump_json(),
        encoding="utf-8",
    )
    url = f"http://127.0.0.1:{_free_port()}/v1"
    started = time.monotonic()
    args = ["attribute", str(trace), "--model", "openai:m", "--base-url", url]
    result = CliRunner().invoke(main, [*args, "--cache", "none", "--timeout", "30", "--json"])
    assert time.monotonic() - started < 10
    assert "connection refused" in result.output
    assert "Traceback" not in result.output
