"""The one HTTP server under abuse: slow and idle clients are cut off, oversized bodies get
413, it binds loopback unless told otherwise (with a warning)."""

from __future__ import annotations

import itertools
import socket
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.replay.httpserver import (
    HttpLimits,
    HttpServer,
    Request,
    Response,
    ServerThread,
    json_response,
)
from faultfinder.replay.proxy import ProxyConfig, RecordingProxy
from faultfinder.replay.recorder import RunStore

LIMITS = HttpLimits(idle_timeout=0.5, header_timeout=0.5, body_timeout=0.5, max_body=1000)


async def echo(request: Request) -> Response:
    return json_response(200, {"size": len(request.body)})


def serve(limits: HttpLimits = LIMITS) -> ServerThread:
    async def factory() -> HttpServer:
        return await HttpServer(echo, limits=limits).start()

    return ServerThread(factory)


def connect(thread: ServerThread) -> socket.socket:
    port = int(thread.url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    return sock


def read_all(sock: socket.socket) -> tuple[bytes, float]:
    """Everything until the server closes, and how long that took."""
    started = time.perf_counter()
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data, time.perf_counter() - started
        data += chunk


def test_a_client_trickling_its_head_gets_408_and_is_cut_off() -> None:
    with serve() as thread:
        sock = connect(thread)
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        for _ in range(3):  # slowloris: one more header line now and then
            time.sleep(0.2)
            try:
                sock.sendall(b"X-Slow: 1\r\n")
            except OSError:
                break
        data, waited = read_all(sock)
    assert data.startswith(b"HTTP/1.1 408"), data
    assert waited < 3


def test_a_body_that_never_arrives_gets_408() -> None:
    with serve() as thread:
        sock = connect(thread)
        sock.sendall(b'POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"a"')
        data, waited = read_all(sock)
    assert data.startswith(b"HTTP/1.1 408") and waited < 3


def test_a_client_trickling_its_body_gets_408_at_the_body_deadline() -> None:
    """The body deadline runs from the end of the head, not from the last byte: a byte
    every 0.1 s never looks idle, and is still cut off."""
    with serve() as thread:
        sock = connect(thread)
        started = time.perf_counter()
        sock.sendall(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
        for _ in range(40):  # 4 s of drip, far past the 0.5 s body deadline
            time.sleep(0.1)
            try:
                sock.sendall(b"a")
            except OSError:
                break
        data, _ = read_all(sock)
        waited = time.perf_counter() - started
    assert data.startswith(b"HTTP/1.1 408"), data
    assert waited < 2.5  # cut off mid-drip, not once the client fell silent


def test_an_idle_connection_is_closed() -> None:
    with serve() as thread:
        sock = connect(thread)
        sock.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
        data, waited = read_all(sock)  # the reply, then the close after idle_timeout
    assert data.startswith(b"HTTP/1.1 200") and 0.3 < waited < 3


def test_a_client_that_stops_reading_is_cut_off() -> None:
    size = 64 * 1024 * 1024  # far more than the socket buffers hold

    async def big(request: Request) -> Response:
        return Response(200, [("content-type", "text/plain")], b"x" * size)

    async def factory() -> HttpServer:
        limits = HttpLimits(write_timeout=0.5)
        return await HttpServer(big, limits=limits).start()

    with ServerThread(factory) as thread:
        sock = connect(thread)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(2)  # read nothing, well past write_timeout
        assert not thread.server._connections
        data, _ = read_all(sock)
    assert data.startswith(b"HTTP/1.1 200") and len(data) < size


def test_connections_over_the_cap_get_503() -> None:
    async def factory() -> HttpServer:
        return await HttpServer(echo, limits=HttpLimits(max_connections=2)).start()

    with ServerThread(factory) as thread:
        held = [connect(thread), connect(thread)]
        for sock in held:  # each connection is served, so it counts
            sock.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        extra = connect(thread)
        refused, _ = read_all(extra)
        held[0].close()
        time.sleep(0.2)
        again = connect(thread)
        again.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
        answered = again.recv(65536)
    assert refused.startswith(b"HTTP/1.1 503") and b"too many open connections" in refused
    assert answered.startswith(b"HTTP/1.1 200")


def test_oversized_bodies_get_413_declared_or_chunked() -> None:
    with serve() as thread:
        sock = connect(thread)
        sock.sendall(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n")
        declared, _ = read_all(sock)
        sock = connect(thread)
        sock.sendall(b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        sock.sendall(b"%x\r\n%s\r\n" % (1500, b"a" * 1500))
        chunked, _ = read_all(sock)
        sock = connect(thread)
        sock.sendall(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789")
        fine, _ = read_all(sock)
    assert declared.startswith(b"HTTP/1.1 413") and b"request body over 1000 bytes" in declared
    assert chunked.startswith(b"HTTP/1.1 413")
    assert fine.startswith(b"HTTP/1.1 200") and b'"size": 10' in fine


def _head(size: int) -> bytes:
    """A GET whose head (request line, headers, blank line) is ``size`` bytes."""
    start, end = b"GET /x HTTP/1.1\r\nHost: x\r\nX-Pad: ", b"\r\n\r\n"
    return start + b"a" * (size - len(start) - len(end)) + end


def _pieces(head: bytes, split: str, limit: int) -> list[bytes]:
    cuts = {
        "whole": [],
        "under-then-rest": [limit - 100],
        "at-limit-then-rest": [limit],
        "small-pieces": list(range(1000, len(head), 1000)),
    }[split]
    edges = [0, *[c for c in cuts if c < len(head)], len(head)]
    return [head[a:b] for a, b in itertools.pairwise(edges)]


@pytest.mark.parametrize(
    "split", ["whole", "under-then-rest", "at-limit-then-rest", "small-pieces"]
)
def test_the_head_limit_holds_however_the_head_is_split(split: str) -> None:
    """h11 measured only a head still incomplete after a read: one that ended inside the
    next read (up to the limit plus 64 KiB) got through. Now every byte counts."""
    limit = 16 * 1024
    limits = HttpLimits(header_timeout=5, max_head=limit)
    answers = {}
    with serve(limits) as thread:
        for size in (limit, limit + 1, 70_000):
            sock = connect(thread)
            try:
                for piece in _pieces(_head(size), split, limit):
                    sock.sendall(piece)
                    time.sleep(0.02)  # so the server reads each piece on its own
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # refused and closed before the whole head was sent
            answers[size], _ = read_all(sock)
    assert answers[limit].startswith(b"HTTP/1.1 200"), answers[limit][:80]
    for size in (limit + 1, 70_000):
        assert answers[size].startswith(b"HTTP/1.1 431"), (size, answers[size][:80])


def test_the_proxy_answers_413_instead_of_dropping_the_connection(tmp_path: Path) -> None:
    async def factory() -> RecordingProxy:
        proxy = RecordingProxy(ProxyConfig(upstream="http://127.0.0.1:9/v1"), RunStore(tmp_path))
        return await proxy.start()

    with ServerThread(factory) as thread:
        sock = connect(thread)
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999999\r\n\r\n"
        )
        data, _ = read_all(sock)
        assert thread.server._server.addresses == {"127.0.0.1"}
    assert data.startswith(b"HTTP/1.1 413")


def test_binding_anything_but_loopback_warns(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["record", "--upstream", "http://127.0.0.1:9/v1", "--out", str(tmp_path), "--host",
         "0.0.0.0", "--quiet", "--", sys.executable, "-c", "pass"],
    )  # fmt: skip
    assert "warning: binding 0.0.0.0" in result.output
    quiet = CliRunner().invoke(
        main,
        ["record", "--upstream", "http://127.0.0.1:9/v1", "--out", str(tmp_path), "--quiet",
         "--", sys.executable, "-c", "pass"],
    )  # fmt: skip
    assert "warning" not in quiet.output
