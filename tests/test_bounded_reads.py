"""Every answer faultfinder reads from the network is read within a bound
(``faultfinder.http_bodies``): the recording proxy's upstream replies, streamed or not,
and its passthrough and polls; the Langfuse importer's API pages; the SDK backends'
replies. Each against a loopback server whose answer never ends (it stops after a cap
well past the bound and then holds the connection open), with the real SDKs and
clients; no model, no network."""

from __future__ import annotations

import json
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import openai
import pytest

from faultfinder.http_bodies import BodyTooLargeError, limit_body
from faultfinder.replay.httpserver import ServerThread
from faultfinder.replay.proxy import ProxyConfig, RecordingProxy
from faultfinder.replay.recorder import RunStore, load_calls
from raw_http import raw_server

BOUND = 1 << 20
CAP = 16 << 20
"""What the endless server sends at most before it holds the connection open: past the
bound, and past what an old client would read before its timeout gave up."""

CHUNK = json.dumps(
    {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "a" * 4000}, "finish_reason": None}],
    }
).encode()


@contextmanager
def endless(kind: str, gzip: bool = False) -> Iterator[tuple[str, list[int]]]:
    """A loopback server answering every request 200 with a body that never ends:
    ``json`` an object whose string never closes, ``sse`` chat-completion chunks (gzip:
    the JSON body compressed). Yields its URL and the bytes sent per connection."""
    sent: list[int] = []
    piece = b"data: " + CHUNK + b"\n\n" if kind == "sse" else b"x" * 65536
    if gzip:
        packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        piece = packer.compress(b'{"pad": "' + b"x" * (CAP - 9)) + packer.flush(zlib.Z_SYNC_FLUSH)
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: " + (
        b"text/event-stream\r\n" if kind == "sse" else b"application/json\r\n"
    )
    head += b"content-encoding: gzip\r\n\r\n" if gzip else b"\r\n"

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(head + (b"" if kind == "sse" or gzip else b'4\r\n{"a"\r\n'))
        sent.append(0)
        while not stop.is_set() and sent[-1] < CAP:
            conn.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            sent[-1] += CAP if gzip else len(piece)
        stop.wait(30)  # the body's last chunk never comes

    with raw_server(answer) as url:
        yield url, sent


@contextmanager
def proxy_to(upstream: str, run: Path) -> Iterator[openai.OpenAI]:
    """The recording proxy (its bound set to ``BOUND``, its wait to 10 s) in front of
    ``upstream``, and an OpenAI client pointed at it."""

    async def factory() -> RecordingProxy:
        config = ProxyConfig(upstream=upstream + "/v1", max_reply=BOUND, timeout=10.0)
        return await RecordingProxy(config, RunStore(run)).start()

    with ServerThread(factory) as proxy, httpx.Client(trust_env=False, timeout=30) as direct:
        yield openai.OpenAI(
            base_url=proxy.url + "/v1", api_key="unused", http_client=direct, max_retries=0
        )


ASK = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("gzip", [False, True])
def test_the_proxy_fails_a_reply_that_goes_on_past_its_bound(tmp_path: Path, gzip: bool) -> None:
    """The proxy read an upstream's whole reply, however long: a reply that never ended
    filled the memory until the upstream's timeout, and the program was then told the
    upstream was 'unreachable'. Now past ``max_reply`` bytes (decoded, for gzip) the call
    fails at once: the program gets a 502 naming the bound, not to be retried, and the
    run keeps a failed call saying the same, no step."""
    started = time.monotonic()
    with (
        endless("json", gzip) as (url, sent),
        proxy_to(url, tmp_path) as client,
        pytest.raises(openai.APIStatusError) as raised,
    ):
        client.chat.completions.create(**ASK)  # type: ignore[call-overload]
    assert raised.value.status_code == 502
    assert "went on past 1 MiB" in raised.value.message
    assert time.monotonic() - started < 8 and len(sent) == 1
    (failed,) = load_calls(tmp_path, include_failed=True)
    assert failed.status == 502 and "went on past 1 MiB" in (failed.error or "")
    assert load_calls(tmp_path) == []


def test_the_proxy_ends_a_stream_that_goes_on_past_its_bound(tmp_path: Path) -> None:
    """A stream that never ended was relayed and accumulated for ever (the events kept to
    be recorded grew with it). Now past ``max_reply`` bytes the proxy ends it with an
    error event the SDK raises, naming the bound, and records a failed call, not a
    reply cut short as if it were whole."""
    with endless("sse") as (url, _), proxy_to(url, tmp_path) as client:
        stream = client.chat.completions.create(**ASK, stream=True)  # type: ignore[call-overload]
        with pytest.raises(openai.APIError, match="went on past 1 MiB"):
            for _ in stream:
                pass
    (failed,) = load_calls(tmp_path, include_failed=True)
    assert failed.status == 502 and "went on past 1 MiB" in (failed.error or "")
    assert failed.response is None and load_calls(tmp_path) == []


def test_the_bound_gives_the_start_of_a_long_body_then_fails() -> None:
    """What a caller cutting a long answer keeps (``export``): exactly the bound, then
    the error; a body within the bound is read whole."""
    for size, over in ((BOUND + 1, True), (BOUND, False)):
        answer = httpx.Response(200, stream=httpx.ByteStream(b"y" * size))
        limit_body(answer, BOUND, "the answer")
        kept = bytearray()
        raised = False
        try:
            for chunk in answer.iter_bytes():
                kept += chunk
        except BodyTooLargeError as exc:
            raised = True
            assert str(exc).startswith("the answer went on past 1 MiB")
        assert len(kept) == BOUND and raised is over


def test_a_langfuse_page_that_goes_on_past_the_bound_fails_naming_the_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`import --from-langfuse` read each API page whole: a page that never ended filled
    the memory until the read timeout. Now a page past the bound fails the import (exit
    1) with an error naming the bound and the URL, without the credentials of the host
    or the keys."""
    from click.testing import CliRunner

    from faultfinder import http_bodies
    from faultfinder.cli import main

    monkeypatch.setattr(http_bodies, "MAX_REPLY", BOUND)
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-test")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-test")
    started = time.monotonic()
    with endless("json") as (url, sent):
        host = url.replace("http://", "http://someone:hunter2@")
        out = tmp_path / "t.json"
        args = ["import", "--from-langfuse", "t-1", "--langfuse-host", host, "--out", str(out)]
        result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    assert "went on past 1 MiB" in result.output and "/api/public/v2/observations" in result.output
    assert not any(s in result.output for s in ("hunter2", "sk-test", "pk-test"))
    assert time.monotonic() - started < 8 and len(sent) == 1 and not out.exists()


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("gzip", [False, True])
def test_an_sdk_backends_reply_that_goes_on_past_the_bound_fails_that_call(
    monkeypatch: pytest.MonkeyPatch, kind: str, gzip: bool
) -> None:
    """The SDK backends read an endpoint's reply whole (the SDKs bound nothing but the
    time between reads): a reply that never ended filled the memory until the timeout,
    then was retried as a passing fault. Now the call fails past the bound with an error
    of that call naming it, not retried (the endpoint would send as much again)."""
    import asyncio

    from faultfinder.errors import LLMCallError
    from faultfinder.llm import sdk
    from faultfinder.llm.anthropic_messages import AnthropicBackend
    from faultfinder.llm.base import ChatRequest
    from faultfinder.llm.openai_compat import OpenAICompatBackend

    monkeypatch.setattr(sdk, "MAX_REPLY", BOUND)
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=20)
    started = time.monotonic()
    with endless("json", gzip) as (url, sent):
        make = OpenAICompatBackend if kind == "openai" else AnthropicBackend
        backend = make("m", base_url=url + "/v1", api_key="k", timeout=10)
        with pytest.raises(LLMCallError) as raised:
            asyncio.run(backend.complete(request))
    assert type(raised.value) is LLMCallError
    assert f"the reply of {kind}:m went on past 1 MiB" in str(raised.value)
    assert time.monotonic() - started < 8 and len(sent) == 1


def test_the_proxy_relays_a_long_passthrough_body_whole(tmp_path: Path) -> None:
    """A request that is not a model call (a file's download) is relayed as it arrives,
    kept nowhere, so the bound on replies does not cut it: 3 MiB through a proxy whose
    bound is 1 MiB arrive whole."""
    from faultfinder.replay.httpserver import HttpServer, Request, Response

    content = bytes(range(256)) * (3 * BOUND // 256)

    async def serve(request: Request) -> Response:
        return Response(200, [("content-type", "application/octet-stream")], content)

    async def upstream() -> HttpServer:
        return await HttpServer(serve).start()

    with ServerThread(upstream) as server, proxy_to(server.url, tmp_path) as client:
        got = client.files.content("file-1").read()
    assert got == content
