"""What the HTTP server under `faultfinder collect` refuses on its own (a body over the limit,
a slow client, an oversized head, one connection too many) is answered as OTLP/HTTP wants
and shown to the user as the collector's own refusals are: a "refused:" line with the
status and the reason. Real collector over loopback; the SDK's own exporter where it fits."""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from faultfinder.collect.collector import PROTOBUF
from polling import wait_for
from test_collect_export import collector

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.sdk.trace.export import SpanExportResult

from test_collect_sdk import send, team_spans


def connect(url: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=5)


def answer(sock: socket.socket) -> tuple[bytes, bytes]:
    """The head and body of what the server sends before it closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head, body


def status_message(body: bytes) -> str:
    status = Status()
    status.ParseFromString(body)
    return status.message


def test_a_batch_over_the_body_limit_is_refused_visibly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK exporter's batch is larger than --max-body allows: 413 to the exporter, and
    the collector says which request and why."""
    with collector(tmp_path, max_body=200) as server, caplog.at_level(logging.WARNING):
        result = send(server.url + "/v1/traces", team_spans(), Compression.NoCompression)
        refusals = list(server.server.refusals)
    assert result is SpanExportResult.FAILURE and "code: 413" in caplog.text
    assert refusals == ["413 POST /v1/traces: request body over 200 bytes"]


def test_server_refusals_are_status_messages_and_refusal_lines(tmp_path: Path) -> None:
    proto = f"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: {PROTOBUF}\r\n"
    with collector(tmp_path, max_body=1000, read_timeout=0.3) as server:
        with connect(server.url) as sock:  # declares a body over the limit
            sock.sendall(f"{proto}content-length: 5000\r\n\r\n".encode())
            too_large = answer(sock)
        with connect(server.url) as sock:  # its body stops halfway
            sock.sendall(f"{proto}content-length: 10\r\n\r\n01234".encode())
            slow_body = answer(sock)
        with connect(server.url) as sock:  # its head never ends
            sock.sendall(proto.encode())
            slow_head = answer(sock)
        with connect(server.url) as sock:  # a head one byte over the server's 64 KiB
            start = f"{proto}x-big: ".encode()  # (sent whole, read whole: no reset)
            sock.sendall(start + b"a" * (64 * 1024 + 1 - len(start)))
            big_head = answer(sock)
        refusals = list(server.server.refusals)
    assert too_large[0].startswith(b"HTTP/1.1 413 ") and PROTOBUF.encode() in too_large[0]
    assert status_message(too_large[1]) == "request body over 1000 bytes"
    assert slow_body[0].startswith(b"HTTP/1.1 408 ") and PROTOBUF.encode() in slow_body[0]
    assert status_message(slow_body[1]) == "request body not received in time"
    assert slow_head[0].startswith(b"HTTP/1.1 408 ")
    assert big_head[0].startswith(b"HTTP/1.1 431 ")
    assert refusals == [
        "413 POST /v1/traces: request body over 1000 bytes",
        "408 POST /v1/traces: request body not received in time",
        "408 (request unread): request head not received in time",
        "431 (request unread): request head too large",
    ]


def test_one_connection_too_many_is_a_refusal_line(tmp_path: Path) -> None:
    with collector(tmp_path) as server:
        http = server.server._server  # the cap is the server's (256); two make the test
        http.limits = replace(http.limits, max_connections=1)
        with connect(server.url) as held:
            held.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # stays open
            time.sleep(0.2)
            with connect(server.url) as extra:
                head, body = answer(extra)
        assert wait_for(lambda: server.server.refusals)
        refusals = list(server.server.refusals)
    assert head.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in head
    assert b"too many open connections" in body
    assert refusals == ["503 (request unread): too many open connections; try again"]


def test_a_bug_while_answering_is_a_500_refusal_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import faultfinder.collect.collector as module

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("reader broke")

    monkeypatch.setattr(module, "spans_from_otlp", broken)
    with collector(tmp_path) as server:
        answer = httpx.post(server.url + "/v1/traces", json={"resourceSpans": []})
        refusals = list(server.server.refusals)
    assert answer.status_code == 500
    assert answer.json() == {"message": "internal error: RuntimeError: reader broke"}
    assert refusals == ["500 POST /v1/traces: internal error: RuntimeError: reader broke"]
