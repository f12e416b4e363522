"""`faultfinder export` (and the recording proxy's upstream client) on awkward networks:
a server that sends its answer a byte at a time, a host name that does not resolve, and
an HTTP(S)_PROXY in the environment. Loopback servers only; DNS answers come from a
stand-in for the system resolver."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from click.testing import CliRunner

from faultfinder import writeback_http
from faultfinder.cli import main
from faultfinder.errors import ConfigError
from faultfinder.replay.httpserver import HttpServer, Request, Response, ServerThread, json_response
from faultfinder.replay.proxy import ProxyConfig, RecordingProxy
from faultfinder.replay.recorder import RunStore
from faultfinder.testing.fake_openai import FakeOpenAIServer
from faultfinder.writeback_http import ExportUnavailableError, send
from raw_http import raw_server
from test_export_apis import files

ANSWER_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"


@contextmanager
def dripping(where: str, gap: float = 0.05) -> Iterator[tuple[str, list[float]]]:
    """A loopback server that reads each request, then sends a 200 one byte every ``gap``
    seconds: all of it (``where="head"``) or the body only (``"body"``), ~6 s in all.
    Yields its URL and when each connection was accepted."""
    body = b"{" + b'"pad": "' + b"a" * 100 + b'"}'
    head = ANSWER_HEAD % len(body) + b"x-pad: " + b"b" * 60 + b"\r\n\r\n"
    accepted: list[float] = []

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        if where == "body":
            conn.sendall(head)
        for byte in head + body if where == "head" else body:
            if stop.is_set():
                return
            conn.sendall(bytes([byte]))
            time.sleep(gap)

    with raw_server(answer, accepted) as url:
        yield url, accepted


@pytest.mark.parametrize("where", ["head", "body"])
def test_a_server_dripping_its_answer_cannot_stretch_an_attempt(
    monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """httpx's timeouts are per read (30 s), so a server sending one byte every few seconds
    held `export` for as long as it kept dripping. Each attempt now has a deadline of its
    own; the export is tried again, then fails with 'export again later'."""
    monkeypatch.setattr(writeback_http, "ATTEMPT_DEADLINE", 0.5, raising=False)
    waits: list[float] = []
    started = time.monotonic()
    with (
        dripping(where) as (url, accepted),
        pytest.raises(ExportUnavailableError, match=r"within 0\.5 s.*tried 3 time"),
    ):
        send("otlp", url, {"resourceSpans": []}, sleep=waits.append)
    assert time.monotonic() - started < 4  # the drip lasts ~6 s per attempt
    assert len(accepted) == 3 and waits == [1.0, 2.0]


@contextmanager
def resolver(monkeypatch: pytest.MonkeyPatch, host: str, errno: int) -> Iterator[list[str]]:
    """The system resolver, answering ``errno`` for ``host``; yields the look-ups of it."""
    real = socket.getaddrinfo
    asked: list[str] = []

    def getaddrinfo(name: Any, *args: Any, **kwargs: Any) -> Any:
        if (name.decode() if isinstance(name, bytes) else name) == host:  # anyio: IDNA bytes
            asked.append(name)
            raise socket.gaierror(errno, f"stand-in resolver: error {errno}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield asked


def test_a_host_name_that_does_not_resolve_is_a_mistake_not_an_outage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A typo in --url's host was tried three times and ended in exit 4, 'export again
    later', which a script retries forever. It is a configuration error: exit 1 at once,
    saying to check the host name."""
    _, args = files(tmp_path)
    with resolver(monkeypatch, "colector.example", socket.EAI_NONAME) as asked:
        result = CliRunner().invoke(
            main, ["export", *args, "--to", "otlp", "--url", "http://colector.example:4318"]
        )
    assert result.exit_code == 1, result.output
    assert "'colector.example' does not resolve" in result.output
    assert "Check it for a typo" in result.output and "Export again later" not in result.output
    assert len(asked) == 1


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://[::1", "Invalid IPv6 URL"),
        ("http://127.0.0.1:abc", "its port is not a number"),
        ("http://127.0.0.1:99999999", "out of range"),
        ("https://u:sk-Zx81@:4318", "names no host"),
    ],
)
def test_a_url_that_is_not_one_is_a_configuration_error(
    tmp_path: Path, url: str, reason: str
) -> None:
    """Each of these stopped `export` with a traceback (ValueError, httpx's InvalidURL, an
    OverflowError from connect) instead of a one-line error: a usage error naming the
    option (exit 2, docs/exit-codes.md), the URL unquoted. `send` from Python refuses
    them too (ConfigError)."""
    _, args = files(tmp_path)
    result = CliRunner().invoke(main, ["export", *args, "--to", "otlp", "--url", url])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert "Error: Invalid value for '--url'" in result.output and reason in result.output
    assert "sk-Zx81" not in result.output
    with pytest.raises(ConfigError, match=re.escape(reason)) as refused:
        send("otlp", url, {"resourceSpans": []})
    assert "sk-Zx81" not in str(refused.value)


def test_a_resolver_that_cannot_answer_now_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """EAI_AGAIN (no DNS server reachable) may pass: tried again, then 'export again later'."""
    waits: list[float] = []
    with (
        resolver(monkeypatch, "collector.example", socket.EAI_AGAIN) as asked,
        pytest.raises(ExportUnavailableError, match="tried 3 time"),
    ):
        send("otlp", "http://collector.example:4318", {"resourceSpans": []}, sleep=waits.append)
    assert len(asked) == 3 and waits == [1.0, 2.0]
    with resolver(monkeypatch, "c.example", socket.EAI_NONAME), pytest.raises(ConfigError):
        send("otlp", "http://c.example:4318", {"resourceSpans": []}, sleep=waits.append)


@contextmanager
def recording_server() -> Iterator[tuple[str, list[Request]]]:
    """A loopback server that answers every request 200 ``{}`` and keeps it: a stand-in
    for the user's HTTP proxy, or for an OTLP receiver."""
    seen: list[Request] = []

    async def keep(request: Request) -> Response:
        seen.append(request)
        return json_response(200, {})

    async def factory() -> HttpServer:
        return await HttpServer(keep).start()

    with ServerThread(factory) as thread:
        yield thread.url, seen


def proxy_environment(monkeypatch: pytest.MonkeyPatch, proxy_url: str) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, proxy_url)
        monkeypatch.setenv(name.lower(), proxy_url)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)


def test_export_to_loopback_bypasses_the_users_proxy_but_not_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With HTTP_PROXY set (and no NO_PROXY), httpx sent an export to a collector on
    127.0.0.1 to the user's proxy, which cannot reach this machine's loopback and was
    handed the verdict (and any key). Loopback now goes direct; other hosts still go
    through the proxy, as the user asked."""
    with recording_server() as (proxy_url, via_proxy), recording_server() as (url, received):
        proxy_environment(monkeypatch, proxy_url)
        port = url.rsplit(":", 1)[1]
        for base in (url, f"http://localhost:{port}"):
            send("otlp", base, {"resourceSpans": []})
        assert [r.path for r in received] == ["/v1/traces", "/v1/traces"] and not via_proxy
        send("otlp", "http://collector.example:4318", {"resourceSpans": []})
    assert [r.target for r in via_proxy] == ["http://collector.example:4318/v1/traces"]


def test_the_recording_proxy_reaches_a_loopback_upstream_directly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proxy's upstream client honoured HTTP_PROXY for a loopback upstream (a local
    model server, the fake upstream): the call went to the user's proxy, not the model."""
    with recording_server() as (proxy_url, via_proxy), FakeOpenAIServer(reply="hello") as upstream:
        proxy_environment(monkeypatch, proxy_url)

        async def factory() -> RecordingProxy:
            config = ProxyConfig(upstream=upstream.base_url)
            return await RecordingProxy(config, RunStore(tmp_path)).start()

        with ServerThread(factory) as proxy, httpx.Client(trust_env=False) as direct:
            client = openai.OpenAI(
                base_url=proxy.url + "/v1", api_key="unused", http_client=direct, max_retries=0
            )
            reply = client.chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": "hi"}]
            )
    assert reply.choices[0].message.content == "hello"
    assert len(upstream.chat_requests) == 1 and not via_proxy


@contextmanager
def endless_answer(gzip: bool = False) -> Iterator[tuple[str, list[int]]]:
    """A loopback server answering 200 with a chunked body that never ends (it stops
    sending after 64 MiB, or a gzip stream of zeros that would expand to that much, and
    then holds the connection open). Yields its URL and the bytes sent per connection."""
    import zlib

    sent: list[int] = []
    piece = b"x" * 65536
    if gzip:
        packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        piece = packer.compress(b"\0" * (64 << 20)) + packer.flush(zlib.Z_SYNC_FLUSH)
    encoding = b"content-encoding: gzip\r\n" if gzip else b""

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            + encoding
            + b"transfer-encoding: chunked\r\n\r\n"
        )
        sent.append(0)
        while not stop.is_set() and sent[-1] < 64 << 20:
            conn.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            sent[-1] += len(piece) if not gzip else 64 << 20
        stop.wait(10)  # the body's last chunk never comes

    with raw_server(answer) as url:
        yield url, sent


@pytest.mark.parametrize("gzip", [False, True])
def test_an_endless_answer_is_read_only_up_to_the_bound(
    monkeypatch: pytest.MonkeyPatch, gzip: bool
) -> None:
    """The export read a server's whole answer, however large: an answer that does not
    end filled the memory until the attempt's deadline, and the export then failed as
    'unavailable' though the server had said 200. Now the answer is read up to
    MAX_ANSWER bytes (decoded, for a gzip body, within the same bound): the status
    counts, and what the server sent beyond the bound is not read."""
    monkeypatch.setattr(writeback_http, "ATTEMPT_DEADLINE", 3.0)
    started = time.monotonic()
    with endless_answer(gzip) as (url, sent):
        response = send("otlp", url, {"resourceSpans": []}, sleep=lambda _: None)
    assert response.status_code == 200
    assert len(response.content) == writeback_http.MAX_ANSWER
    assert response.content[:1] == (b"\0" if gzip else b"x")
    assert len(sent) == 1 and time.monotonic() - started < 3.0
