"""`faultfinder collect` against hostile or broken input: every test runs the real collector
over loopback HTTP (one runs the command in its own process and stops it with SIGTERM)."""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.collect.collector import PROTOBUF, file_stem
from faultfinder.traces.loader import load_trace, load_traces
from otel_helpers import TRACE, genai_current
from polling import wait_for
from test_collect_export import collector

OTHER = "1" * 32


def export(trace_id: str, *, root: bool = True, attrs: Any = None) -> dict[str, Any]:
    """A one-span export request (a root span unless ``root`` is false)."""
    span: dict[str, Any] = {
        "traceId": trace_id,
        "spanId": "a" * 16,
        "name": "agent",
        "attributes": attrs or [],
    }
    if not root:
        span["parentSpanId"] = "b" * 16
    return {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}


def post(url: str, content: bytes, **headers: str) -> httpx.Response:
    return httpx.post(
        url + "/v1/traces", content=content, headers={"content-type": "application/json", **headers}
    )


def test_a_trace_that_cannot_be_written_does_not_stop_the_others(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / f"{TRACE}.json.tmp").mkdir(parents=True)  # the write of TRACE fails
    with collector(tmp_path) as server:
        assert httpx.post(server.url + "/v1/traces", json=genai_current()).status_code == 200
        assert wait_for(lambda: server.server.errors)
        assert httpx.post(server.url + "/v1/traces", json=export(OTHER)).status_code == 200
        assert wait_for(lambda: server.server.written)
        assert httpx.post(server.url + "/v1/traces", json=export("2" * 32, root=False)).is_success
    (error,) = server.server.errors
    assert error.startswith(f"cannot write trace {TRACE}: ") and "skipped" in error
    # the other trace while running, and the open one at shutdown
    assert sorted(p.name for p in server.server.written) == [f"{OTHER}.json", f"{'2' * 32}.json"]
    assert load_trace(out / f"{'2' * 32}.json").metadata["complete"] is False


def test_an_overlong_trace_id_gets_a_bounded_file_name(tmp_path: Path) -> None:
    long_id = "c" * 601  # odd-length hex: read as `faultfinder import` reads it
    with collector(tmp_path, quiet=30) as server:
        assert post(server.url, json.dumps(export(long_id)).encode()).status_code == 200
        assert post(server.url, json.dumps(export(OTHER)).encode()).status_code == 200
    names = sorted(p.name for p in server.server.written)
    assert names == [f"{OTHER}.json", f"{file_stem(long_id)}.json"]
    assert len(file_stem(long_id)) == 32 + 1 + 16 and file_stem(long_id).startswith("c" * 32)
    trace = load_trace(tmp_path / "out" / f"{file_stem(long_id)}.json")
    assert trace.metadata["trace_id"] == long_id and server.server.errors == []


def test_client_mistakes_are_400_with_the_reason(tmp_path: Path) -> None:
    with collector(tmp_path) as server:
        url = server.url
        not_gzip = post(url, b"plain text", **{"content-encoding": "gzip"})
        assert not_gzip.status_code == 400 and "not gzip" in not_gzip.json()["message"]
        cut = gzip.compress(json.dumps(export(OTHER)).encode())[:-12]
        truncated = post(url, cut, **{"content-encoding": "gzip"})
        assert truncated.status_code == 400 and "truncated" in truncated.json()["message"]
        deep = post(url, b"[" * 100_000 + b"]" * 100_000)
        assert deep.status_code == 400 and "nested deeper than" in deep.json()["message"]
        attrs = [{"key": "note", "value": {"stringValue": "\ud800"}}]
        surrogate = post(url, json.dumps(export(OTHER, attrs=attrs)).encode())  # \ud800 escaped
        assert surrogate.status_code == 400 and "surrogate" in surrogate.json()["message"]
        assert "attributes" in surrogate.json()["message"]
        assert server.server.rejected == 4
        assert post(url, json.dumps(export(OTHER)).encode()).status_code == 200
        assert wait_for(lambda: server.server.written)
    assert server.server.errors == []


def test_a_refusal_is_a_status_message_in_the_encoding_of_the_request(tmp_path: Path) -> None:
    """OTLP/HTTP: a failure's body is a google.rpc.Status, protobuf-encoded for a protobuf
    request and JSON-encoded for a JSON one, with the content type to match."""
    pytest.importorskip("opentelemetry.proto")
    from google.rpc.status_pb2 import Status

    proto = {"content-type": PROTOBUF}
    with collector(tmp_path) as server:
        answers = {
            "path": httpx.post(server.url + "/v1/trace", content=b"", headers=proto),
            "body": post(server.url, b"\xff\xff", **proto),
            "origin": post(server.url, b"", **proto, origin="http://evil.example"),
        }
        as_json = post(server.url, b"{not json")
    messages = []
    for name, answer in answers.items():
        assert answer.headers["content-type"] == PROTOBUF, name
        status = Status()
        status.ParseFromString(answer.content)  # a JSON body would not parse as one
        messages.append(status.message)
    assert [a.status_code for a in answers.values()] == [404, 400, 403]
    assert messages[0] == "unknown path /v1/trace; use /v1/traces"
    assert "not an ExportTraceServiceRequest" in messages[1]
    assert "http://evil.example" in messages[2]
    # the collector's own lines say the same
    assert [line.split(": ", 1)[1] for line in server.server.refusals[:3]] == messages
    assert as_json.headers["content-type"] == "application/json"
    assert as_json.status_code == 400 and set(as_json.json()) == {"message"}
    assert "invalid JSON" in as_json.json()["message"]


SECRETS = [
    {
        "key": "llm.invocation_parameters",
        "value": {"stringValue": '{"api_key":"sk-SECRET123","model":"gpt-4o"}'},
    },
    {"key": "http.request.header.authorization", "value": {"stringValue": "Bearer sk-SECRET456"}},
    {"key": "openai.api_key", "value": {"stringValue": "SECRET789xyz"}},
]


def test_raw_file_is_scrubbed_and_reads_back(tmp_path: Path) -> None:
    raw = tmp_path / "raw.otlp.jsonl"
    with collector(tmp_path, raw_file=raw) as server:
        assert httpx.post(server.url + "/v1/traces", json=export(OTHER, attrs=SECRETS)).is_success
    text = raw.read_text()
    assert "SECRET" not in text and "gpt-4o" in text and "http.request.header.authorization" in text
    assert "SECRET" not in (tmp_path / "out" / f"{OTHER}.json").read_text()
    (trace,) = load_traces(raw)
    assert trace.metadata["trace_id"] == OTHER


def test_raw_write_failure_keeps_the_spans(tmp_path: Path) -> None:
    raw = tmp_path / "raw.jsonl"
    with collector(tmp_path, raw_file=raw) as server:
        raw.unlink()
        raw.mkdir()  # appending to it now fails
        assert httpx.post(server.url + "/v1/traces", json=export(OTHER)).status_code == 200
        assert wait_for(lambda: server.server.written)
    (error,) = server.server.errors
    assert error.startswith(f"--raw {raw}: request not kept")
    assert (tmp_path / "out" / f"{OTHER}.json").exists()


def test_raw_in_a_missing_directory_fails_at_startup(tmp_path: Path) -> None:
    raw = tmp_path / "nowhere" / "raw.jsonl"
    result = CliRunner().invoke(
        main, ["collect", "--out", str(tmp_path / "out"), "--port", "0", "--raw", str(raw)]
    )
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"Error: --raw {raw}: cannot write: No such file or directory"
    ]


def test_collect_command_survives_hostile_spans_and_writes_all_on_sigterm(
    tmp_path: Path,
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "out"
    (out / f"{TRACE}.json.tmp").mkdir(parents=True)
    command = [sys.executable, "-m", "faultfinder", "collect", "--out", str(out)]
    process = subprocess.Popen(
        [*command, "--port", str(port), "--quiet-seconds", "30"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        assert wait_for(lambda: _listening(port), seconds=20)
        assert post(url, json.dumps(export("c" * 601)).encode()).status_code == 200
        assert httpx.post(url + "/v1/traces", json=genai_current()).status_code == 200
        assert post(url, b'{"resourceSpans": "\\ud800"}').status_code == 400
        assert post(url, json.dumps(export(OTHER)).encode()).status_code == 200
    finally:
        os.kill(process.pid, signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=20)
    # The trace that could not be written was acknowledged (200) and is lost: exit 1 says
    # so; every other trace is still written.
    assert process.returncode == 1, stderr
    assert "Traceback" not in stderr
    assert f"error: cannot write trace {TRACE}: " in stderr
    assert "could not be written" in stderr
    assert f"wrote {out / (OTHER + '.json')}" in stdout
    assert f"wrote {out / (file_stem('c' * 601) + '.json')}" in stdout


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


def test_an_export_of_no_spans_is_accepted(tmp_path: Path) -> None:
    raw = tmp_path / "raw.jsonl"
    with collector(tmp_path, raw_file=raw) as server:
        empty = httpx.post(  # a valid, empty ExportTraceServiceRequest
            server.url + "/v1/traces", content=b"", headers={"content-type": PROTOBUF}
        )
        assert empty.status_code == 200 and empty.content == b""
        assert post(server.url, b"{}").status_code == 200
        assert server.server.rejected == 0
    assert server.server.written == [] and not server.server.errors
    assert list((tmp_path / "out").iterdir()) == [] and raw.read_text() == ""


def test_a_multi_member_gzip_body_is_read_whole(tmp_path: Path) -> None:
    body = json.dumps(genai_current()).encode()
    third = len(body) // 3
    members = b"".join(gzip.compress(body[i : i + third]) for i in range(0, len(body), third))
    gz = {"content-encoding": "gzip"}
    with collector(tmp_path) as server:
        assert post(server.url, members, **gz).status_code == 200
        assert wait_for(lambda: server.server.written)
        # a member that is not gzip, or cut short, is still a 400
        junk = post(server.url, gzip.compress(body) + b"junk", **gz)
        assert junk.status_code == 400 and "not gzip" in junk.json()["message"]
        cut = post(server.url, gzip.compress(body) + gzip.compress(body)[:-5], **gz)
        assert cut.status_code == 400 and "truncated" in cut.json()["message"]
    assert len(load_trace(tmp_path / "out" / f"{TRACE}.json").steps) == 2
    # the bound on the decompressed size holds across members
    with collector(tmp_path, max_body=len(body) - 1) as server:
        over = post(server.url, members, **gz)
        assert over.status_code == 400 and f"{len(body) - 1} bytes" in over.json()["message"]


def test_the_body_limit_holds_for_an_uncompressed_body_too(tmp_path: Path) -> None:
    body = b"{" + b" " * 20_000 + b"}"  # a valid empty export, over the limit as sent
    with collector(tmp_path, max_body=10_000) as server:
        response = post(server.url, body)
        assert response.status_code == 413, response.text
        assert post(server.url, b"{}").status_code == 200
