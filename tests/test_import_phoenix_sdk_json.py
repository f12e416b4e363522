"""Spans in the OpenTelemetry SDK's own JSON layout (`ReadableSpan.to_json()`, what
`ConsoleSpanExporter` prints) import like the OTLP export of the same spans: the same steps,
error statuses, agents, service name and ids (no `0x` prefix), so a verdict made on one
import can be written back with the other.

The layout is produced by the real SDK: spans made in this process and written by
`ConsoleSpanExporter` to a StringIO (fast), and a real instrumented program (the OpenAI
Agents SDK team, traced by OpenInference, whose tool fails) run against the loopback fake
upstream, exporting the same spans to faultfinder's collector by OTLP/HTTP and to files in
the SDK layout (slow).
"""

from __future__ import annotations

import io
import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.errors import TraceFormatError, TraceFormatWarning
from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import Trace
from otel_programs import QUESTION, Run, agents_upstream, run_program

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.exporter.otlp.proto.common")

from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import Status, StatusCode

HEX32 = re.compile(r"^[0-9a-f]{32}$")
HEX16 = re.compile(r"^[0-9a-f]{16}$")


def load_quietly(path: Path) -> Trace:
    """The one trace in ``path``; any TraceFormatWarning (an ignored key) fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", TraceFormatWarning)
        (trace,) = load_traces(path)
    return trace


def _without_sources(value: Any) -> Any:
    """A step's dump without the source records (those are each format's own text)."""
    if isinstance(value, dict):
        return {k: _without_sources(v) for k, v in value.items() if k != "source"}
    if isinstance(value, list):
        return [_without_sources(v) for v in value]
    return value


def comparable(trace: Trace) -> dict[str, Any]:
    """What must not depend on the layout the spans were written in."""
    return {
        "steps": [_without_sources(s.model_dump()) for s in trace.steps],
        "agents": [a.model_dump() for a in trace.agents],
        "task": trace.task,
        "final_answer": trace.final_answer,
        "trace_id": trace.metadata["trace_id"],
        "service": trace.metadata.get("service"),
        "handoffs": trace.metadata.get("handoffs"),
    }


def check_ids(trace: Trace) -> None:
    assert HEX32.match(trace.metadata["trace_id"]), trace.metadata["trace_id"]
    assert trace.id.endswith("/" + trace.metadata["trace_id"])
    for step in trace.steps:
        assert HEX16.match(step.metadata["span_id"]) and step.source_id == step.metadata["span_id"]
        for tool in step.metadata.get("tool_spans", []):
            assert HEX16.match(tool["span_id"])


# --- spans made here with the real SDK ----------------------------------------------------


def sdk_spans() -> list[ReadableSpan]:
    """A model call asking for `add`, the tool failing, the model answering: OpenInference
    attributes set by hand, spans, ids, times, status and resource by the real SDK."""
    provider = TracerProvider(resource=Resource.create({"service.name": "calc-service"}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test.sdk-json")
    user = {"llm.input_messages.0.message.role": "user"}
    user["llm.input_messages.0.message.content"] = QUESTION
    call = {
        **user,
        "openinference.span.kind": "LLM",
        "llm.model_name": "m",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call_1",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "add",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"a": 2}',
    }
    answer = {
        **user,
        "openinference.span.kind": "LLM",
        "llm.model_name": "m",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "I could not add.",
    }
    root = {"openinference.span.kind": "CHAIN", "input.value": QUESTION}
    with tracer.start_as_current_span("workflow", attributes=root) as workflow:
        with tracer.start_as_current_span("chat", attributes=call):
            pass
        tool = {"openinference.span.kind": "TOOL", "tool.name": "add", "input.value": '{"a": 2}'}
        with tracer.start_as_current_span("add", attributes=tool) as span:
            span.record_exception(ValueError("operand out of range"))
            span.set_status(Status(StatusCode.ERROR, "operand out of range"))
        with tracer.start_as_current_span("chat", attributes=answer):
            pass
        workflow.set_attribute("output.value", "I could not add.")
    provider.shutdown()
    return list(memory.get_finished_spans())


LAYOUTS = {"console": "run.log", "lines": "run.jsonl", "list": "run.json"}
"""Each layout in a file named as a user would (console output saved as ``.json`` is read
too: see test_console_output_saved_as_json_is_recognised)."""


def write_layout(spans: list[ReadableSpan], layout: str, path: Path) -> Path:
    """The spans as the SDK writes them: ConsoleSpanExporter's default output (indented
    objects one after another), one object a line, or a JSON list of `to_json()`."""
    out = io.StringIO()
    if layout == "console":
        ConsoleSpanExporter(out=out).export(spans)
    elif layout == "lines":
        ConsoleSpanExporter(out=out, formatter=lambda s: s.to_json(indent=None) + "\n").export(
            spans
        )
    else:
        json.dump([json.loads(s.to_json()) for s in spans], out, indent=2)
    path.write_text(out.getvalue(), encoding="utf-8")
    return path


def write_otlp(spans: list[ReadableSpan], path: Path) -> Path:
    """The same spans as the OTLP exporters encode them, in OTLP/JSON."""
    path.write_text(MessageToJson(encode_spans(spans), indent=None) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("layout", ["console", "lines", "list"])
def test_sdk_json_spans_import_like_their_otlp_export(tmp_path: Path, layout: str) -> None:
    spans = sdk_spans()
    (tmp_path / "otlp").mkdir()
    otlp = load_quietly(write_otlp(spans, tmp_path / "otlp" / "run.json"))
    sdk = load_quietly(write_layout(spans, layout, tmp_path / LAYOUTS[layout]))
    assert otlp.source.format == "otlp" and sdk.source.format == "phoenix"
    assert otlp.id == sdk.id == f"run/{otlp.metadata['trace_id']}"
    assert comparable(sdk) == comparable(otlp)
    check_ids(sdk)
    # the failed tool call is an error in both, with the status description
    assert [(r.name, r.status, r.content) for r in sdk.steps[0].tool_results] == [
        ("add", "error", "operand out of range")
    ]
    # the resource is read: service.name names the agent (no agent span) and the trace
    assert [s.agent for s in sdk.steps] == ["calc-service", "calc-service"]
    assert sdk.metadata["service"] == "calc-service"
    # the resource is kept once, as OTLP's is, not on every span's source record
    (source,) = sdk.metadata["sources"]
    assert source["resource"]["attributes"]["service.name"] == "calc-service"
    assert "resource" not in sdk.steps[0].metadata["source"]


def test_sdk_status_of_the_wrong_type_names_the_field(tmp_path: Path) -> None:
    record = json.loads(sdk_spans()[0].to_json())
    record["status"] = "ERROR"
    path = tmp_path / "spans.json"
    path.write_text(json.dumps([record]), encoding="utf-8")
    with pytest.raises(TraceFormatError) as err:
        load_traces(path)
    assert err.value.field == "[0].status"


def test_damaged_object_in_console_output_is_an_error(tmp_path: Path) -> None:
    """ConsoleSpanExporter's output with one object cut short is refused, not read in part."""
    path = write_layout(sdk_spans(), "console", tmp_path / "spans.log")
    path.write_text(path.read_text().replace("}\n{", "}\n{ ,", 1), encoding="utf-8")
    with pytest.raises(TraceFormatError):
        load_traces(path, format="phoenix")


def test_console_output_saved_as_json_is_recognised(tmp_path: Path) -> None:
    """ConsoleSpanExporter's output (objects one after another, not one JSON document) in
    a ``.json`` file is found by detection, as under any other name; when no reader
    recognises such a file, the JSON error (file, line, column) is the one shown."""
    spans = sdk_spans()
    logged = load_quietly(write_layout(spans, "console", tmp_path / "run.log"))
    saved = load_quietly(write_layout(spans, "console", tmp_path / "spans.json"))
    assert saved.source.format == "phoenix"
    assert comparable(saved) == comparable(logged)
    result = CliRunner().invoke(main, ["import", str(tmp_path / "spans.json"), "--out",
                                       str(tmp_path / "out.jsonl")])  # fmt: skip
    assert result.exit_code == 0, result.output
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": 1}\n{"b": 2}\n', encoding="utf-8")
    with pytest.raises(TraceFormatError) as err:
        load_traces(bad)
    assert "line 2" in str(err.value) and "Extra data" in str(err.value)


# --- a real instrumented program --------------------------------------------------------


@pytest.fixture(scope="module")
def team_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The OpenAI Agents SDK team whose tool fails, its spans sent by OTLP/HTTP to the
    collector and written in the SDK's layout, run once."""
    for module in (
        "agents",
        "openinference.instrumentation.openai_agents",
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    ):
        pytest.importorskip(module)
    base = tmp_path_factory.mktemp("sdk-json")
    return run_program(["agents_team_sdk_json.py", QUESTION], agents_upstream, base)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["spans.log", "spans.jsonl", "spans.json"])
def test_agents_team_sdk_json_matches_its_otlp_export(team_run: Run, name: str) -> None:
    otlp = load_quietly(team_run.raw)
    sdk = load_quietly(team_run.raw.parent / name)
    assert sdk.source.format == "phoenix"
    assert comparable(sdk) == comparable(otlp)
    check_ids(sdk)
    assert [s.agent for s in sdk.steps] == ["Triage", "Math tutor", "Math tutor"]
    assert [a.name for a in sdk.agents] == ["Triage", "Math tutor"]
    # the tool raised: an error result in both imports (it was "success" in the SDK's)
    (result,) = sdk.steps[1].tool_results
    assert (result.name, result.status) == ("add", "error")
    assert sdk.metadata["service"] == "math-team"
    assert len(sdk.steps) == team_run.llm_requests == 3


@pytest.mark.slow
def test_verdict_on_the_otlp_import_exports_onto_the_sdk_json_import(
    team_run: Run, tmp_path: Path
) -> None:
    """`attribute` on the OTLP export, `export --to otlp` with the SDK-layout file of the
    same run: the same trace, and the written span has valid OTLP ids."""
    replies = tmp_path / "replies.json"
    reply = "Agent Name: Math tutor\nStep Number: 1\nReason for Mistake: the tool failed."
    replies.write_text(json.dumps([reply]), encoding="utf-8")
    runner = CliRunner()
    args = ["attribute", str(team_run.raw), "--method", "all-at-once"]
    args += ["--model", f"scripted:{replies}", "--cache", "none", "--json"]
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    verdict = tmp_path / "verdict.json"
    verdict.write_text(result.output[result.output.index("{") :], encoding="utf-8")
    out = tmp_path / "verdict.otlp.json"
    args = ["export", str(verdict), str(team_run.raw.parent / "spans.json")]
    result = runner.invoke(main, [*args, "--to", "otlp", "--out", str(out)])
    assert result.exit_code == 0, result.output
    (span,) = json.loads(out.read_text())["resourceSpans"][0]["scopeSpans"][0]["spans"]
    otlp = load_quietly(team_run.raw)
    assert span["traceId"] == otlp.metadata["trace_id"] and HEX32.match(span["traceId"])
    assert span["parentSpanId"] == otlp.steps[1].metadata["span_id"]
    assert HEX16.match(span["parentSpanId"])
