"""Phoenix (Arize) span exports → canonical traces, one per trace id.

Phoenix keeps OpenInference spans. Read shapes: its REST API's span objects
(``{name, context: {trace_id, span_id}, span_kind, parent_id, start_time, end_time,
status_code, status_message, attributes, events}``) as a JSON list, a ``{"data": [...]}``
page or JSON lines; the spans dataframe (``get_spans_dataframe()``) saved as JSON lines
(columns ``context.span_id``, ``attributes.llm.input_messages``...) or as parquet, which
needs ``pyarrow``. Attributes are flattened to OpenInference's dotted keys and mapped like
OTLP spans.

The OpenTelemetry SDK's own JSON layout is read here too (it has the same ``context`` and
``parent_id``): what ``ReadableSpan.to_json()`` returns and ``ConsoleSpanExporter`` prints
(``{name, context: {trace_id, span_id, trace_state}, kind, parent_id, start_time, end_time,
status: {status_code, description}, attributes, events, links, resource: {attributes,
schema_url}}``), as a JSON list, JSON lines or the exporter's default output (indented
objects one after another). Its ``0x`` id prefixes are dropped, so its ids are those of the
same spans exported as OTLP; ``status`` gives the error status and ``resource`` the
resource attributes (``service.name``) as in OTLP.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, ClassVar

from faultfinder.errors import ConfigError, TraceFormatError
from faultfinder.traces.importers._common import check_options, fail
from faultfinder.traces.importers._semconv import build_traces
from faultfinder.traces.importers._spans import (
    Span,
    SpanEvent,
    check_keys,
    flatten,
    keep_raw,
    key_values,
    maybe_json,
    parse_time,
)
from faultfinder.traces.importers.otlp import decode_text, json_lines, read_bytes, sniff, stem_of
from faultfinder.traces.io import parse_json
from faultfinder.traces.schema import Trace

_PARQUET_MAGIC = b"PAR1"
# Top-level fields of a span (REST object or dataframe row); others are warned about.
_TOP_KEYS = frozenset(
    [
        "id",
        "name",
        "span_kind",
        "parent_id",
        "start_time",
        "end_time",
        "status_code",
        "status_message",
        "events",
        "context.trace_id",
        "context.span_id",
        "conversation",
        "latency_ms",
        "cumulative_token_count_total",
        "cumulative_token_count_prompt",
        "cumulative_token_count_completion",
        "span_id",
        "trace_id",
        "trace_rowid",
        "project_name",
        # the OpenTelemetry SDK's layout (ReadableSpan.to_json)
        "context.trace_state",
        "kind",
        "status",
        "links",
        "resource",
    ]
)
_BLANKS = re.compile(r"[ \t\r\n]*")
_SDK_STATUS_KEYS = frozenset(["status_code", "description"])
_SDK_RESOURCE_KEYS = frozenset(["attributes", "schema_url"])


def _record_fields(record: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(top-level fields, attributes) of one record, for nested and dataframe layouts."""
    top: dict[str, Any] = {}
    attrs: dict[str, Any] = {}
    for key, value in record.items():
        if key == "attributes" and isinstance(value, dict):
            attrs.update(value)
        elif key.startswith("attributes."):
            attrs[key.removeprefix("attributes.")] = (
                maybe_json(value) if key.endswith(("messages", "tools")) else value
            )
        elif key == "context" and isinstance(value, dict):
            top.update({f"context.{k}": v for k, v in value.items()})
        else:
            top[key] = value
    return top, attrs


def is_phoenix_record(record: Any) -> bool:
    if not isinstance(record, dict):
        return False
    top, _ = _record_fields(record)
    return "context.span_id" in top and "context.trace_id" in top


def span_of(record: Any, *, path: str | Path, where: str) -> Span:
    if not isinstance(record, dict):
        fail(path, where, "expected a span object")
    top, attrs = _record_fields(record)
    for key in ("context.trace_id", "context.span_id"):
        if not isinstance(top.get(key), str) or not top[key]:
            fail(path, f"{where}.{key}", "missing or not a string")
    check_keys(top, _TOP_KEYS, path=path, where=where)
    for key in ("name", "span_kind", "parent_id", "status_code", "status_message"):
        if top.get(key) is not None and not isinstance(top[key], str):
            fail(path, f"{where}.{key}", f"expected a string, got {type(top[key]).__name__}")
    attrs = flatten({k: v for k, v in attrs.items() if v is not None})
    kind = top.get("span_kind")
    if isinstance(kind, str) and "openinference.span.kind" not in attrs:
        attrs["openinference.span.kind"] = kind
    events = []
    raw_events = maybe_json(top.get("events")) or []
    for n, ev in enumerate(raw_events if isinstance(raw_events, list) else []):
        if isinstance(ev, dict):
            events.append(
                SpanEvent(
                    name=str(ev.get("name") or ""),
                    time=parse_time(ev.get("timestamp"), path=path, where=f"{where}.events[{n}]"),
                    attributes=flatten(ev.get("attributes") or {}),
                )
            )
    code, message = _status(top, path=path, where=where)
    resource, context = _resource(top.get("resource"), path=path, where=f"{where}.resource")
    raw = {k: v for k, v in record.items() if k != "resource"} if context else record
    return Span(
        trace_id=_hex(top["context.trace_id"]),
        span_id=_hex(top["context.span_id"]),
        parent_id=_hex(top.get("parent_id") or "") or None,
        name=str(top.get("name") or ""),
        start=parse_time(top.get("start_time"), path=path, where=f"{where}.start_time"),
        end=parse_time(top.get("end_time"), path=path, where=f"{where}.end_time"),
        attributes=attrs,
        events=events,
        status="error" if code == "ERROR" else "ok" if code == "OK" else None,
        status_message=message,
        resource=resource,
        raw=keep_raw(raw),
        context=keep_raw(context) if context else None,
    )


def _hex(value: str) -> str:
    """An id without the ``0x`` the OpenTelemetry SDK writes before it (``0x6b4e...``)."""
    return value[2:] if value.startswith(("0x", "0X")) else value


def _status(top: dict[str, Any], *, path: str | Path, where: str) -> tuple[str, str | None]:
    """(upper-case status code, message): Phoenix's ``status_code`` / ``status_message``,
    else the SDK layout's ``status: {status_code, description}``."""
    code = str(top.get("status_code") or "").upper()
    message = top.get("status_message") or None
    status = top.get("status")
    if status is None:
        return code, message
    if not isinstance(status, dict):
        fail(path, f"{where}.status", f"expected an object, got {type(status).__name__}")
    check_keys(status, _SDK_STATUS_KEYS, path=path, where=f"{where}.status")
    for key in _SDK_STATUS_KEYS:
        if status.get(key) is not None and not isinstance(status[key], str):
            got = type(status[key]).__name__
            fail(path, f"{where}.status.{key}", f"expected a string, got {got}")
    # "UNSET", "OK" or "ERROR" (StatusCode.name); also "STATUS_CODE_ERROR" as OTLP spells it
    return (
        code or str(status.get("status_code") or "").upper().removeprefix("STATUS_CODE_"),
        message or status.get("description") or None,
    )


def _resource(
    value: Any, *, path: str | Path, where: str
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The SDK layout's ``resource`` as (its attributes, the context to keep once per trace
    as OTLP's resource is); ({}, None) when there is none."""
    if value is None:
        return {}, None
    if not isinstance(value, dict):
        fail(path, where, f"expected an object, got {type(value).__name__}")
    check_keys(value, _SDK_RESOURCE_KEYS, path=path, where=where)
    attributes = key_values(value.get("attributes"), path=path, where=f"{where}.attributes")
    return attributes, {"resource": value}


def _records(path: Path) -> list[tuple[Any, str]]:
    """(record, field path) pairs from a JSON, JSON lines or parquet file."""
    return _read(path)[0]


def _read(path: Path) -> tuple[list[tuple[Any, str]], dict[str, Any]]:
    """(record, field path) pairs, and a REST page's other fields (``next_cursor``...)."""
    if sniff(path).startswith(_PARQUET_MAGIC):
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ConfigError(
                "Reading a parquet span export needs pyarrow: pip install pyarrow."
            ) from None
        try:
            rows = pq.read_table(path).to_pylist()
        except Exception as exc:
            fail(path, "(parquet)", f"cannot read: {exc}")
        return [(_plain(r), f"[{n}]") for n, r in enumerate(rows)], {}
    text = decode_text(read_bytes(path), path)
    records = json_lines(text, path)
    if records is not None:
        return [(value, f"(line {n})") for n, value in records], {}
    try:
        whole = parse_json(text, path)
    except TraceFormatError:
        stream = _object_stream(text, path)
        if stream is None:
            raise
        return [(value, f"(object at line {n})") for n, value in stream], {}
    items = whole.get("data") if isinstance(whole, dict) else whole
    if not isinstance(items, list):
        return [(whole, "[0]")], {}
    page = {k: v for k, v in whole.items() if k != "data"} if isinstance(whole, dict) else {}
    return [(r, f"[{n}]") for n, r in enumerate(items)], page


def _object_stream(text: str, path: Path) -> list[tuple[int, Any]] | None:
    """(line number, value) of each object when ``text`` is JSON objects one after another
    (``ConsoleSpanExporter``'s default output: indented objects, each followed by a line
    break), each parsed strictly; None when it is not (fewer than two objects, anything
    else between or around them)."""
    decoder = json.JSONDecoder()
    found: list[tuple[int, Any]] = []
    pos, line = 0, 1
    while True:
        blanks = _BLANKS.match(text, pos)
        start = blanks.end() if blanks else pos
        if start == len(text):
            break
        line += text.count("\n", pos, start)
        if text[start] != "{":
            return None
        try:
            _, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):  # ValueError: an int over 4,300 digits
            return None
        found.append((line, parse_json(text[start:end], path, line=line)))
        line += text.count("\n", start, end)
        pos = end
    return found if len(found) > 1 else None


def _plain(value: Any) -> Any:
    """Parquet values (datetimes, numpy-like scalars) as JSON-ready data."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


class PhoenixImporter:
    name: ClassVar[str] = "phoenix"
    summary: ClassVar[str] = (
        "Phoenix span exports (REST API spans, spans dataframe as JSON lines or parquet)"
    )

    def detect(self, path: Path) -> bool:
        path = Path(path)
        if not path.is_file():
            return False
        head = sniff(path)
        if head.startswith(_PARQUET_MAGIC):
            return b"context.span_id" in path.read_bytes()[-65536:]
        if b"span_id" not in head or b"trace_id" not in head:
            return False
        try:
            records = _records(path)
        except (TraceFormatError, ConfigError, RecursionError):
            return False
        return bool(records) and is_phoenix_record(records[0][0])

    def load(self, path: Path, **options: Any) -> list[Trace]:
        check_options(self.name, options, {})
        path = Path(path)
        records, page = _read(path)
        spans = [span_of(r, path=path, where=w) for r, w in records]
        traces = build_traces(spans, path=path, fmt=self.name, id_prefix=stem_of(path))
        if page:
            for trace in traces:
                trace.metadata["phoenix_page"] = keep_raw(page)
        return traces
