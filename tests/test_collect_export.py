"""The live collector (`faultfinder collect`) and the verdict write-back (`faultfinder export`),
against loopback clients and fakes only."""

from __future__ import annotations

import gzip
import json
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from export_fakes import FakeLangfuse, FakePhoenix, serving
from faultfinder.cli import main
from faultfinder.collect.collector import Collector, CollectorConfig
from faultfinder.judging.method import Attribution
from faultfinder.replay.httpserver import ServerThread
from faultfinder.traces.io import trace_from_dict, write_trace
from faultfinder.traces.loader import load_trace, load_traces
from faultfinder.writeback import langfuse_payload, otlp_payload, phoenix_payload
from otel_helpers import TRACE, export, genai_current, span
from polling import wait_for

FIXTURES = Path(__file__).parent / "fixtures" / "otel"


def collector(tmp_path: Path, **kw: Any) -> ServerThread:
    config = CollectorConfig(
        out_dir=tmp_path / "out", port=0, quiet_seconds=kw.pop("quiet", 0.2), **kw
    )

    async def factory() -> Collector:
        return await Collector(config).start()

    return ServerThread(factory)


def test_json_export_is_written_once_the_trace_is_finished(tmp_path: Path) -> None:
    doc = genai_current()
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    root, children = spans[0], spans[1:]
    with collector(tmp_path) as server:
        url = server.url + "/v1/traces"

        def send(batch: list[dict[str, Any]]) -> httpx.Response:
            body = {
                "resourceSpans": [{**doc["resourceSpans"][0], "scopeSpans": [{"spans": batch}]}]
            }
            return httpx.post(url, json=body)

        assert send(children).status_code == 200
        time.sleep(0.5)  # children without their root: not finished, however quiet
        assert server.server.written == []
        assert send([root]).status_code == 200  # exporters send the root when it ends
        assert wait_for(lambda: server.server.written)
    target = tmp_path / "out" / f"{TRACE}.json"
    trace = trace_from_dict(json.loads(target.read_text()))
    assert [s.agent for s in trace.steps] == ["Planner", "Coder"]
    assert trace.metadata["complete"] is True


def test_protobuf_gzip_and_flush_on_shutdown(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.proto")
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from otel_helpers import to_base64_ids

    doc = genai_current()
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"] = doc["resourceSpans"][0]["scopeSpans"][0][
        "spans"
    ][1:]
    body = ParseDict(to_base64_ids(doc), ExportTraceServiceRequest()).SerializeToString()
    with collector(tmp_path, quiet=30) as server:
        response = httpx.post(
            server.url + "/v1/traces",
            content=gzip.compress(body),
            headers={"content-type": "application/x-protobuf", "content-encoding": "gzip"},
        )
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/x-protobuf"
        assert server.server.written == []
    # no root span ever came: written at shutdown, marked incomplete
    trace = load_trace(tmp_path / "out" / f"{TRACE}.json")
    assert trace.metadata["complete"] is False and len(trace.steps) == 2


def test_late_span_rewrites_the_trace(tmp_path: Path) -> None:
    doc = genai_current()
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    with collector(tmp_path) as server:
        url = server.url + "/v1/traces"
        httpx.post(url, json={"resourceSpans": [{"scopeSpans": [{"spans": spans[:3]}]}]})
        assert wait_for(lambda: len(server.server.written) == 1)
        httpx.post(url, json={"resourceSpans": [{"scopeSpans": [{"spans": spans[3:]}]}]})
        assert wait_for(lambda: len(server.server.written) == 2)
    assert len(load_trace(tmp_path / "out" / f"{TRACE}.json").steps) == 2


def test_bad_requests_are_refused(tmp_path: Path) -> None:
    with collector(tmp_path) as server:
        base = server.url
        assert httpx.post(base + "/v1/metrics", json={}).status_code == 404
        assert httpx.get(base + "/v1/traces").status_code == 405
        assert (
            httpx.post(
                base + "/v1/traces", content=b"x", headers={"content-type": "text/plain"}
            ).status_code
            == 415
        )
        bad = httpx.post(
            base + "/v1/traces",
            json={"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "1"}]}]}]},
        )
        assert bad.status_code == 400 and "traceId" in bad.json()["message"]
        assert (
            httpx.post(
                base + "/v1/traces",
                content=b"{not json",
                headers={"content-type": "application/json"},
            ).status_code
            == 400
        )
        assert server.server.rejected == 2
        assert server.server.config.host == "127.0.0.1"


def test_gzip_bomb_is_refused(tmp_path: Path) -> None:
    with collector(tmp_path, max_body=10_000) as server:
        bomb = gzip.compress(b"{" + b" " * 1_000_000 + b"}")
        response = httpx.post(
            server.url + "/v1/traces",
            content=bomb,
            headers={"content-type": "application/json", "content-encoding": "gzip"},
        )
        assert response.status_code == 400 and "10000 bytes" in response.json()["message"]


def test_slow_and_idle_clients_are_disconnected(tmp_path: Path) -> None:
    with collector(tmp_path, read_timeout=0.3) as server:
        port = int(server.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")  # headers never finish
            start = time.monotonic()
            answer = b""
            while chunk := sock.recv(1024):  # until closed by the server
                answer += chunk
            assert time.monotonic() - start < 3
        assert answer.startswith(b"HTTP/1.1 408 ")
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            start = time.monotonic()  # sends nothing at all: closed, no request to answer
            assert sock.recv(1024) == b"" and time.monotonic() - start < 3


def test_collect_command_writes_traces(tmp_path: Path) -> None:
    """The command itself, stopped by --max-traces once a posted trace is written."""
    import threading

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "traces"

    def post() -> None:
        for _ in range(100):
            try:
                httpx.post(f"http://127.0.0.1:{port}/v1/traces", json=genai_current())
                return
            except httpx.ConnectError:
                time.sleep(0.05)

    thread = threading.Thread(target=post)
    thread.start()
    result = CliRunner().invoke(
        main,
        [
            "collect",
            "--out",
            str(out),
            "--port",
            str(port),
            "--quiet-seconds",
            "0.1",
            "--max-traces",
            "1",
        ],
    )
    thread.join()
    assert result.exit_code == 0, result.output
    assert f"wrote {out / (TRACE + '.json')}" in result.output
    assert len(load_traces(out)) == 1


def test_max_traces_counts_runs_not_late_fragments_and_warns_of_empty_ones(
    tmp_path: Path,
) -> None:
    # OUT already holds TRACE's file (an earlier run), so TRACE's spans go to a late
    # fragment: that is not one of the runs --max-traces waits for. The run that follows,
    # a trace whose one span is not a model call, an agent or a tool, is, and is written
    # with the warning `import` gives for a trace with nothing to attribute.
    import threading

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "traces"
    out.mkdir()
    (out / f"{TRACE}.json").write_text("{}", encoding="utf-8")
    other = "1" * 32
    plain = export([dict(span("aa" * 8, None, "GET /", 0, {"http.method": "GET"}), traceId=other)])

    def post() -> None:
        for payload in (genai_current(), plain):
            for _ in range(100):
                try:
                    httpx.post(f"http://127.0.0.1:{port}/v1/traces", json=payload)
                    break
                except httpx.ConnectError:
                    time.sleep(0.05)
            time.sleep(0.5)  # the first is written before the second comes

    thread = threading.Thread(target=post)
    thread.start()
    result = CliRunner().invoke(
        main,
        ["collect", "--out", str(out), "--port", str(port), "--quiet-seconds", "0.1",
         "--max-traces", "1"],
    )  # fmt: skip
    thread.join()
    assert result.exit_code == 0, result.output
    assert f"wrote {out / (TRACE + '.late-1.json')}" in result.output
    assert f"wrote {out / (other + '.json')}" in result.output
    (warning,) = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert warning.startswith(f"warning: {out / (other + '.json')} has no steps: none of its 1")
    assert "nothing to attribute" in warning


# --- export ------------------------------------------------------------------------------


def verdict(trace_id: str, step: int = 1, agent: str = "Math tutor") -> Attribution:
    return Attribution(
        agent=agent,
        step=step,
        reason="added 4 instead of 3",
        confidence=0.8,
        trace_id=trace_id,
        method="all-at-once",
        config={},
        model="scripted",
        prompt_version="x",
        with_ground_truth=False,
        observability="full",
    )


def real_trace() -> Any:
    (trace,) = load_traces(FIXTURES / "openai-agents-openinference.otlp.jsonl")
    return trace


def test_export_to_phoenix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = real_trace()
    write_trace(trace, tmp_path / "t.json")
    (tmp_path / "a.json").write_text(verdict(trace.id).model_dump_json())
    monkeypatch.setenv("PHOENIX_API_KEY", "px-secret")
    fake = FakePhoenix(spans={s.metadata["span_id"] for s in trace.steps}, api_key="px-secret")
    with serving(fake) as url:
        result = CliRunner().invoke(
            main,
            [
                "export",
                str(tmp_path / "a.json"),
                str(tmp_path / "t.json"),
                "--to",
                "phoenix",
                "--url",
                url,
            ],
        )
    assert result.exit_code == 0, result.output
    (request,) = fake.requests
    assert (
        request.path == "/v1/span_annotations"
        and request.header("authorization") == "Bearer px-secret"
    )
    (annotation,) = json.loads(request.body)["data"]
    assert annotation["span_id"] == trace.steps[1].metadata["span_id"]
    assert annotation["annotator_kind"] == "LLM"
    assert annotation["result"] == {
        "label": "decisive error",
        "score": 0.8,
        "explanation": "added 4 instead of 3",
    }


def test_export_to_langfuse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeLangfuse(public_key="pk-1", secret_key="sk-1")
    trace = real_trace()
    write_trace(trace, tmp_path / "t.json")
    (tmp_path / "a.json").write_text(verdict(trace.id).model_dump_json())
    with serving(fake) as url:
        args = [
            "export",
            str(tmp_path / "a.json"),
            str(tmp_path / "t.json"),
            "--to",
            "langfuse",
            "--url",
            url,
        ]
        monkeypatch.delenv("LANGFUSE_SECRET_KEY", raising=False)
        assert "LANGFUSE_SECRET_KEY" in CliRunner().invoke(main, args).output
        monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-1")
        monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-1")
        result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (request,) = fake.requests
    assert request.path == "/api/public/scores"
    assert (request.header("authorization") or "").startswith("Basic ")
    score = json.loads(request.body)
    assert score["traceId"] == trace.metadata["trace_id"]
    assert score["observationId"] == trace.steps[1].metadata["span_id"]
    assert (score["dataType"], score["value"]) == ("CATEGORICAL", "Math tutor")


def test_export_otlp_event_reaches_the_collector(tmp_path: Path) -> None:
    """The verdict as an OTLP span: posted to our own collector, it lands in the same trace,
    as a child of the decisive step's span."""
    trace = real_trace()
    write_trace(trace, tmp_path / "t.json")
    (tmp_path / "a.json").write_text(verdict(trace.id).model_dump_json())
    with collector(tmp_path) as server:
        result = CliRunner().invoke(
            main,
            [
                "export",
                str(tmp_path / "a.json"),
                str(tmp_path / "t.json"),
                "--to",
                "otlp",
                "--url",
                server.url,
            ],
        )
        assert result.exit_code == 0, result.output
        entry = server.server.traces[trace.metadata["trace_id"]]
        (span,) = entry.spans
    assert span.name == "faultfinder.attribution"
    assert span.parent_id == trace.steps[1].metadata["span_id"]
    (event,) = span.events
    assert event.name == "faultfinder.verdict"
    assert (
        event.attributes["faultfinder.step"] == 1
        and event.attributes["faultfinder.agent"] == "Math tutor"
    )


def test_export_payloads_refuse_what_they_cannot_name(tmp_path: Path) -> None:
    from faultfinder.errors import ConfigError

    trace = real_trace()
    with pytest.raises(ConfigError, match="outside trace"):
        phoenix_payload(verdict(trace.id, step=9), trace)
    no_step = verdict(trace.id).model_copy(update={"step": None, "status": "unparsed"})
    with pytest.raises(ConfigError, match="names no step"):
        langfuse_payload(no_step, trace)
    (ww,) = load_traces(Path(__file__).parent / "fixtures" / "baselines" / "five_steps.json")
    with pytest.raises(ConfigError, match="no span id"):
        otlp_payload(verdict(ww.id, step=1, agent=ww.steps[1].agent), ww)
    result = CliRunner().invoke(
        main,
        [
            "export",
            str(FIXTURES / "ag2-groupchat.db"),
            str(FIXTURES / "ag2-groupchat.db"),
            "--to",
            "otlp",
            "--out",
            str(tmp_path / "x"),
        ],
    )
    assert result.exit_code == 1 and "not an attribution" in result.output


def test_export_to_otlp_refuses_ids_that_are_not_otlp_ids(tmp_path: Path) -> None:
    """A Langfuse trace's ids ('t-1', 'o2') name nothing an OTLP receiver holds: sent as
    they were, the verdict landed nowhere. It is refused, pointing at --to langfuse."""
    (trace,) = load_traces(FIXTURES.parent / "importers" / "langfuse" / "observations-page.json")
    write_trace(trace, tmp_path / "t.json")
    (tmp_path / "a.json").write_text(verdict(trace.id, step=1, agent="Leader").model_dump_json())
    with collector(tmp_path) as server:
        result = CliRunner().invoke(
            main,
            ["export", str(tmp_path / "a.json"), str(tmp_path / "t.json"), "--to", "otlp",
             "--url", server.url],
        )  # fmt: skip
        assert server.server.traces == {}
    assert result.exit_code == 1, result.output
    assert "trace id 't-1' is not 32 hex digits" in result.output
    assert "span id 'o3' is not 16 hex digits" in result.output
    assert "--to langfuse" in result.output


def test_export_refuses_a_trace_changed_since_the_verdict(tmp_path: Path) -> None:
    """The same trace id, but the step the verdict names is now another agent's (late spans
    rewrote the file): the verdict would land on an unrelated span, so export refuses."""
    trace = real_trace()
    write_trace(trace, tmp_path / "t.json")
    step = trace.steps[1]
    other = next(s.agent for s in trace.steps if s.agent != step.agent)
    (tmp_path / "a.json").write_text(verdict(trace.id, step=1, agent=other).model_dump_json())
    result = CliRunner().invoke(
        main,
        ["export", str(tmp_path / "a.json"), str(tmp_path / "t.json"), "--to", "otlp",
         "--out", str(tmp_path / "v.json")],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert f"step 1 of {trace.id} is by {step.agent}" in result.output
    assert "attribute" in result.output and not (tmp_path / "v.json").exists()


def test_a_web_page_cannot_post_spans(tmp_path: Path) -> None:
    """A page in the user's browser reaches a loopback collector by a cross-origin POST
    (Origin header) or DNS rebinding (a foreign Host): refused, nothing written."""
    with collector(tmp_path) as server:
        url = server.url + "/v1/traces"
        page = httpx.post(url, json=genai_current(), headers={"origin": "https://evil.example"})
        rebound = httpx.post(url, json=genai_current(), headers={"host": "attacker.example"})
        local = httpx.post(url, json=genai_current(), headers={"origin": "http://localhost:3000"})
        assert (page.status_code, rebound.status_code, local.status_code) == (403, 400, 200)
        assert wait_for(lambda: len(server.server.written) == 1)


def test_collect_refuses_an_empty_host(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["collect", "--out", str(tmp_path), "--host", ""])
    assert result.exit_code == 2 and "empty" in result.output


def test_collect_exits_1_when_a_received_trace_could_not_be_written(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "traces"
    # the trace cannot be written (its temporary file is a folder); a folder at the file
    # itself would be left alone, the spans going to a .late-1.json file
    (out / f"{TRACE}.json.tmp").mkdir(parents=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "faultfinder", "collect", "--out", str(out), "--port",
         str(port), "--quiet-seconds", "0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        for _ in range(200):
            try:
                answer = httpx.post(f"http://127.0.0.1:{port}/v1/traces", json=genai_current())
                break
            except httpx.ConnectError:
                time.sleep(0.05)
        assert answer.status_code == 200
        time.sleep(1.0)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 1, stderr
    assert "cannot write trace" in stderr and "could not be written" in stderr


def test_export_out_into_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    trace = real_trace()
    write_trace(trace, tmp_path / "t.json")
    (tmp_path / "a.json").write_text(verdict(trace.id).model_dump_json())
    target = tmp_path / "missing" / "v.json"
    result = CliRunner().invoke(
        main,
        ["export", str(tmp_path / "a.json"), str(tmp_path / "t.json"), "--to", "otlp",
         "--out", str(target)],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "cannot write it" in result.output and "Traceback" not in result.output


def test_a_span_received_twice_is_counted_not_overwritten(tmp_path: Path) -> None:
    """An exporter retry or two exports of one span: the collected trace says so
    (`duplicate_spans`, a differing copy's record kept), as the import of a file does."""
    doc = genai_current()
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    again = json.loads(json.dumps(spans[-1]))
    again["name"] = again["name"] + " (second copy)"
    with collector(tmp_path) as server:
        url = server.url + "/v1/traces"
        httpx.post(url, json=doc)
        httpx.post(url, json={"resourceSpans": [{"scopeSpans": [{"spans": [again]}]}]})
        assert wait_for(lambda: len(server.server.written) >= 1)
        time.sleep(0.5)
    collected = load_trace(tmp_path / "out" / f"{TRACE}.json")
    assert collected.metadata["duplicate_spans"] == 1
    (kept,) = collected.metadata["duplicate_spans_differing"]
    assert {kept["name"], collected.steps[-1].metadata["source"]["name"]} == {
        spans[-1]["name"],
        again["name"],
    }
