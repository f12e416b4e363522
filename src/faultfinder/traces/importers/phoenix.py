"""Phoenix (Arize) span exports → canonical traces, one per trace id.

Phoenix keeps OpenInference spans. Read shapes: its REST API's span objects
(``{name, context: {trace_id, span_id}, span_kind, parent_id, start_time, end_time,
status_code, status_message, attributes, events}``) as a JSON list, a ``{"data": [...]}``
page or JSON lines; the spans dataframe (``get_spans_dataframe()``) saved as JSON lines
(columns ``context.span_id``, ``attributes.llm.input_messages``...) or as parquet, which
needs ``pyarrow``. Attributes are flattened to OpenInference's dotted keys and mapped like
OTLP spans.
"""

from __future__ import annotations

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
    ]
)


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
    status = str(top.get("status_code") or "").upper()
    return Span(
        trace_id=top["context.trace_id"],
        span_id=top["context.span_id"],
        parent_id=top.get("parent_id") or None,
        name=str(top.get("name") or ""),
        start=parse_time(top.get("start_time"), path=path, where=f"{where}.start_time"),
        end=parse_time(top.get("end_time"), path=path, where=f"{where}.end_time"),
        attributes=attrs,
        events=events,
        status="error" if status == "ERROR" else "ok" if status == "OK" else None,
        status_message=top.get("status_message") or None,
        raw=keep_raw(record),
    )


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
    whole = parse_json(text, path)
    items = whole.get("data") if isinstance(whole, dict) else whole
    if not isinstance(items, list):
        return [(whole, "[0]")], {}
    page = {k: v for k, v in whole.items() if k != "data"} if isinstance(whole, dict) else {}
    return [(r, f"[{n}]") for n, r in enumerate(items)], page


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
