"""MLflow Tracing traces → canonical traces.

A trace as ``Trace.to_json()`` writes it (what ``mlflow.get_trace(...)`` returns and the
MLflow UI downloads): ``{"info": {...}, "data": {"spans": [...]}}``
(https://mlflow.org/docs/latest/genai/tracing/concepts/trace and .../concepts/span). Spans
are read in MLflow 3's layout (OpenTelemetry-like: ``trace_id`` / ``span_id`` /
``parent_span_id`` in base64, ``start_time_unix_nano``, ``status.code``) and in MLflow 2's
(``context.trace_id`` / ``context.span_id`` in hex, ``parent_id``, ``start_time``,
``status_code``). A JSON list of traces or JSON lines of them are read too.

Span attribute values are JSON text: ``mlflow.spanType`` gives the kind (``LLM`` /
``CHAT_MODEL`` → model call, ``AGENT`` → agent, ``TOOL`` → tool; ``CHAIN`` and the others
are structure), ``mlflow.spanInputs`` / ``mlflow.spanOutputs`` the payloads (for a model
call the request with its ``messages`` and the chat completion), ``mlflow.chat.tokenUsage``
the tokens. ``info.trace_id`` (MLflow 2: ``request_id``) names the trace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from faultfinder.errors import TraceFormatError
from faultfinder.traces.importers._common import check_options, fail
from faultfinder.traces.importers._semconv import build_trace
from faultfinder.traces.importers._spans import (
    Span,
    _otlp_span,
    check_keys,
    flatten,
    keep_raw,
    maybe_json,
    parse_time,
)
from faultfinder.traces.importers.otlp import decode_text, json_lines, read_bytes, sniff, stem_of
from faultfinder.traces.io import parse_json
from faultfinder.traces.schema import Trace

_TRACE_KEYS = frozenset({"info", "data"})
_DATA_KEYS = frozenset({"spans", "request", "response"})
_V2_SPAN_KEYS = frozenset(
    {
        "name",
        "context",
        "parent_id",
        "start_time",
        "end_time",
        "status_code",
        "status_message",
        "attributes",
        "events",
        "span_type",
    }
)
_KINDS = {"LLM": "llm", "CHAT_MODEL": "llm", "AGENT": "agent", "TOOL": "tool"}


def _decoded(attributes: dict[str, Any]) -> dict[str, Any]:
    """MLflow writes every attribute value as JSON text: decode each (text that is not
    JSON stays as it is)."""
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if isinstance(value, str):
            decoded = maybe_json(value) if value[:1] in "[{" else _json_scalar(value)
            out[key] = decoded
        else:
            out[key] = value
    return out


def _json_scalar(text: str) -> Any:
    """A JSON string or number written as text (``"\\"LLM\\""``, ``"6"``); else the text."""
    import json

    try:
        return json.loads(text)
    except ValueError:
        return text


def _hex(value: Any) -> Any:
    return value[2:] if isinstance(value, str) and value.startswith("0x") else value


def _v2_span(raw: dict[str, Any], *, path: str | Path, where: str) -> Span:
    """An MLflow 2 span (``context``, ``parent_id``, ``start_time`` in nanoseconds)."""
    check_keys(raw, _V2_SPAN_KEYS, path=path, where=where)
    context = raw.get("context")
    if not isinstance(context, dict):
        fail(path, f"{where}.context", "expected an object with trace_id and span_id")
    trace_id, span_id = _hex(context.get("trace_id")), _hex(context.get("span_id"))
    if not isinstance(trace_id, str) or not isinstance(span_id, str) or not span_id:
        fail(path, f"{where}.context", "trace_id and span_id must be strings")
    attrs = raw.get("attributes") or {}
    if not isinstance(attrs, dict):
        fail(path, f"{where}.attributes", "expected an object")
    name = raw.get("name")
    if name is not None and not isinstance(name, str):
        fail(path, f"{where}.name", "expected a string")
    code = str(raw.get("status_code") or "").upper()
    return Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_id=_hex(raw.get("parent_id")) or None,
        name=name or "",
        start=parse_time(raw.get("start_time"), path=path, where=f"{where}.start_time"),
        end=parse_time(raw.get("end_time"), path=path, where=f"{where}.end_time"),
        attributes=attrs,
        status="error" if code == "ERROR" else "ok" if code == "OK" else None,
        status_message=raw.get("status_message") or None,
    )


def span_of(raw: Any, *, path: str | Path, where: str) -> Span:
    """One MLflow span, its attributes decoded and its kind and payloads as hints."""
    if not isinstance(raw, dict):
        fail(path, where, "expected a span object")
    if "context" in raw:
        span = _v2_span(raw, path=path, where=where)
    else:
        span = _otlp_span(raw, {}, None, path=path, where=where)
    span.attributes = _decoded(span.attributes)
    a = span.attributes
    kind = a.get("mlflow.spanType", raw.get("span_type"))
    hints: dict[str, Any] = {"kind": _KINDS.get(str(kind))}
    inputs, outputs = a.get("mlflow.spanInputs"), a.get("mlflow.spanOutputs")
    hints["input"], hints["output"] = inputs, outputs
    if hints["kind"] == "llm":
        usage = a.get("mlflow.chat.tokenUsage")
        if not isinstance(usage, dict) and isinstance(outputs, dict):
            openai = outputs.get("usage")
            usage = (
                {"input_tokens": openai.get("prompt_tokens"),
                 "output_tokens": openai.get("completion_tokens")}
                if isinstance(openai, dict)
                else None
            )  # fmt: skip
        if isinstance(usage, dict):
            hints["usage"] = {
                "input": usage.get("input_tokens"),
                "output": usage.get("output_tokens"),
            }
        model = a.get("mlflow.llm.model") or a.get("model")
        if not model and isinstance(inputs, dict):
            model = inputs.get("model")
        hints["model"] = model if isinstance(model, str) else None
        if isinstance(inputs, dict):
            request = {k: v for k, v in inputs.items() if k not in ("messages", "model")}
            hints["request"] = request or None
    elif hints["kind"] == "tool":
        hints["tool_name"] = span.name
    # The payloads are read from the hints; the flat attributes keep the rest.
    span.attributes = flatten(
        {k: v for k, v in a.items() if k not in ("mlflow.spanInputs", "mlflow.spanOutputs")}
    )
    span.hints.update({k: v for k, v in hints.items() if v is not None})
    span.raw = keep_raw(raw)
    return span


def _traces(path: Path) -> list[tuple[Any, str]]:
    text = decode_text(read_bytes(path), path)
    lines = json_lines(text, path)
    if lines is not None:
        return [(value, f"(line {n})") for n, value in lines]
    whole = parse_json(text, path)
    if isinstance(whole, list):
        return [(t, f"[{n}]") for n, t in enumerate(whole)]
    return [(whole, "")]


def is_trace(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("info"), dict)
        and isinstance(value.get("data"), dict)
        and isinstance(value["data"].get("spans"), list)
    )


def trace_of(value: Any, *, path: Path, where: str) -> Trace:
    if not is_trace(value):
        fail(path, where or "(root)", "expected an MLflow trace {info, data: {spans}}")
    check_keys(value, _TRACE_KEYS, path=path, where=where)
    check_keys(value["data"], _DATA_KEYS, path=path, where=f"{where}.data".lstrip("."))
    info = value["info"]
    ident = info.get("trace_id") or info.get("request_id")
    if ident is not None and not isinstance(ident, str):
        fail(path, f"{where}.info.trace_id".lstrip("."), "expected a string")
    at = f"{where}.data.spans".lstrip(".")
    spans = [
        span_of(s, path=path, where=f"{at}[{n}]") for n, s in enumerate(value["data"]["spans"])
    ]
    trace = build_trace(
        spans, path=path, fmt=MlflowImporter.name, trace_id=f"{stem_of(path)}/{ident or 'trace'}"
    )
    trace.metadata["mlflow"] = keep_raw(info)  # trace info, tags and metadata as written
    others = {k: v for k, v in value["data"].items() if k != "spans"}
    if others:
        trace.metadata["mlflow_data"] = keep_raw(others)
    return trace


class MlflowImporter:
    name: ClassVar[str] = "mlflow"
    summary: ClassVar[str] = "MLflow Tracing traces (Trace.to_json(): {info, data: {spans}})"

    def detect(self, path: Path) -> bool:
        path = Path(path)
        if not path.is_file():
            return False
        head = sniff(path)
        if b'"spans"' not in head or b'"info"' not in head:
            return False
        try:
            records = _traces(path)
        except (TraceFormatError, RecursionError):
            return False
        return bool(records) and is_trace(records[0][0])

    def load(self, path: Path, **options: Any) -> list[Trace]:
        check_options(self.name, options, {})
        path = Path(path)
        return [trace_of(value, path=path, where=where) for value, where in _traces(path)]
