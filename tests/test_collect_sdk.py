"""`faultfinder collect` fed by the OpenTelemetry SDK's own OTLP/HTTP exporter (protobuf,
each of its compressions), over loopback only: what a user's instrumented program sends."""

from __future__ import annotations

import json
import logging
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.traces.io import write_trace
from faultfinder.traces.loader import load_trace
from polling import wait_for
from test_collect_export import collector, verdict

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def team_spans() -> list[ReadableSpan]:
    """A two-agent run, as an instrumented program's tracer records it (GenAI semconv)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "team"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("team")
    with tracer.start_as_current_span("invoke_agent team"):
        for agent, reply in (("Planner", "Ask the Coder to add 2 and 3."), ("Coder", "5")):
            with tracer.start_as_current_span(f"chat {agent}") as span:
                span.set_attribute("gen_ai.operation.name", "chat")
                span.set_attribute("gen_ai.request.model", "gpt-4o")
                span.set_attribute("gen_ai.agent.name", agent)
                output = [{"role": "assistant", "parts": [{"type": "text", "content": reply}]}]
                span.set_attribute("gen_ai.output.messages", json.dumps(output))
    provider.shutdown()
    return list(memory.get_finished_spans())


def send(url: str, spans: list[ReadableSpan], compression: Compression) -> SpanExportResult:
    exporter = OTLPSpanExporter(endpoint=url, compression=compression, timeout=10)
    try:
        return exporter.export(spans)
    finally:
        exporter.shutdown()


@pytest.mark.parametrize("compression", list(Compression))
def test_every_compression_of_the_sdk_exporter_is_collected(
    tmp_path: Path, compression: Compression
) -> None:
    spans = team_spans()
    with collector(tmp_path) as server:
        result = send(server.url + "/v1/traces", spans, compression)
        assert result is SpanExportResult.SUCCESS
        assert wait_for(lambda: server.server.written)
    trace = load_trace(server.server.written[-1])
    assert [s.agent for s in trace.steps] == ["Planner", "Coder"]
    assert trace.metadata["complete"] is True


def test_a_raw_deflate_body_is_read_and_a_broken_one_is_400(tmp_path: Path) -> None:
    """Some clients send a raw deflate stream under `content-encoding: deflate`."""
    import zlib

    import httpx

    from otel_helpers import genai_current

    body = json.dumps(genai_current()).encode()
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    raw = packer.compress(body) + packer.flush()
    headers = {"content-type": "application/json", "content-encoding": "deflate"}
    with collector(tmp_path, max_body=len(body)) as server:
        url = server.url + "/v1/traces"
        assert httpx.post(url, content=raw, headers=headers).status_code == 200
        cut = httpx.post(url, content=zlib.compress(body)[:-8], headers=headers)
        assert cut.status_code == 400 and "truncated" in cut.json()["message"]
        big = httpx.post(url, content=zlib.compress(body + b" "), headers=headers)
        assert big.status_code == 400 and f"{len(body)} bytes" in big.json()["message"]
        assert wait_for(lambda: server.server.written)


def test_a_verdict_sent_back_to_a_new_collector_never_replaces_the_trace(
    tmp_path: Path,
) -> None:
    """`collect`, then `export --to otlp --url` to the collector running again: the verdict's
    one span must not overwrite the trace file of the earlier run (spans this run never had)."""
    spans = team_spans()
    trace_id = format(spans[0].context.trace_id, "032x")
    out = tmp_path / "out"
    with collector(tmp_path) as server:
        assert send(server.url + "/v1/traces", spans, Compression.Gzip) is SpanExportResult.SUCCESS
        assert wait_for(lambda: server.server.written)
    collected = out / f"{trace_id}.json"
    before = collected.read_text()
    trace = load_trace(collected)
    write_trace(trace, tmp_path / "attributed.json")
    (tmp_path / "v.json").write_text(verdict(trace.id, step=1, agent="Coder").model_dump_json())
    export = ["export", str(tmp_path / "v.json"), str(tmp_path / "attributed.json")]
    for n in (1, 2):  # two more runs: the second keeps the first one's late file too
        with collector(tmp_path) as server:
            result = CliRunner().invoke(main, [*export, "--to", "otlp", "--url", server.url])
            assert result.exit_code == 0, result.output
        assert collected.read_text() == before
        late = load_trace(out / f"{trace_id}.late-{n}.json")
        assert late.metadata["late_for"] == f"collected/{trace_id}"
        assert late.metadata["complete"] is False


def test_a_refused_export_is_explained_on_both_sides(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A mistyped endpoint: the exporter logs the status with its reason phrase (not
    "unknown"), and the collector says which request it refused and why."""
    with collector(tmp_path) as server, caplog.at_level(logging.WARNING):
        result = send(server.url + "/v1/trace", team_spans(), Compression.NoCompression)
        assert result is SpanExportResult.FAILURE
        refusals = list(server.server.refusals)
    assert "reason: Not Found" in caplog.text
    assert refusals == ["404 POST /v1/trace: unknown path /v1/trace; use /v1/traces"]


def test_the_command_prints_what_it_refused_and_exits_0_on_sigterm(tmp_path: Path) -> None:
    """The command in its own process: a probe (GET), a mistyped endpoint and a head too
    large for the HTTP server are named on stderr with their status and reason; a deflate
    export is written; SIGTERM exits 0."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    out = tmp_path / "out"
    command = [sys.executable, "-m", "faultfinder", "collect", "--out", str(out)]
    process = subprocess.Popen(
        [*command, "--port", str(port), "--quiet-seconds", "0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_for(lambda: _answers(url), seconds=20)
        spans = team_spans()
        assert send(url + "/v1/trace", spans, Compression.Gzip) is SpanExportResult.FAILURE
        assert send(url + "/v1/traces", spans, Compression.Deflate) is SpanExportResult.SUCCESS
        assert wait_for(lambda: list(out.glob("*.json")))
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            head = b"POST /v1/traces HTTP/1.1\r\nx-big: "  # refused by the HTTP server itself
            sock.sendall(head + b"a" * (64 * 1024 + 1 - len(head)))
            assert sock.recv(12) == b"HTTP/1.1 431"
    finally:
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=20)
    assert process.returncode == 0, stderr
    assert "refused: 405 GET /v1/traces: use POST" in stderr
    assert "refused: 404 POST /v1/trace: unknown path /v1/trace; use /v1/traces" in stderr
    assert "refused: 431 (request unread): request head too large" in stderr
    assert f"wrote {out}" in stdout


def _answers(url: str) -> bool:
    try:
        httpx.get(url + "/v1/traces", timeout=1)
    except httpx.HTTPError:
        return False
    return True
