"""OpenTelemetry traces (OTLP) → canonical traces, one per trace id.

Reads OTLP/JSON (one ``ExportTraceServiceRequest`` / ``TracesData`` object, a list of them,
or JSON lines as the collector's file exporter writes them), optionally gzipped, and
OTLP/protobuf (a serialised ``ExportTraceServiceRequest``), decoded with the
``opentelemetry-proto`` package (extra ``faultfinder[otel]``). The GenAI and OpenInference
semantic conventions are mapped by ``_semconv``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

from faultfinder.errors import ConfigError, TraceFormatError
from faultfinder.traces.importers._common import check_options, fail
from faultfinder.traces.importers._semconv import build_traces
from faultfinder.traces.importers._spans import Span, keep_raw, maybe_json, spans_from_otlp
from faultfinder.traces.io import MAX_DECOMPRESSED, field_at, head_bytes, parse_json, split_lines
from faultfinder.traces.io import read_bytes as read_bytes  # the other readers import it here
from faultfinder.traces.schema import Trace

MAX_FILE = MAX_DECOMPRESSED
"""Decompressed size limit (``traces.io``): a gzip bomb stops here instead of filling memory."""
_SNIFF = 1 << 16
_MARKERS = (b'"resourceSpans"', b'"resource_spans"', b'\\"resourceSpans\\"')


def sniff(path: Path) -> bytes:
    """The first 64 KiB of the file (decompressed when gzipped), b'' when unreadable."""
    return head_bytes(path, _SNIFF)


def is_json_text(head: bytes) -> bool:
    return head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b"[")


def decode_text(data: bytes, path: Path) -> str:
    """UTF-8 text (a byte-order mark dropped); other bytes are an error naming the line."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        fail(f"{path}:{line}", "(file)", f"not UTF-8 text: byte 0x{data[exc.start]:02x}")


def decode_protobuf(data: bytes, *, path: Path | str) -> dict[str, Any]:
    """An ``ExportTraceServiceRequest`` in protobuf wire format as its JSON mapping."""
    try:
        from google.protobuf.json_format import MessageToDict
        from google.protobuf.message import DecodeError
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )
    except ImportError:
        raise ConfigError(
            "Reading OTLP/protobuf needs the opentelemetry-proto package: "
            "pip install 'faultfinder[otel]'."
        ) from None
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(data)
    except DecodeError as exc:
        fail(path, "(protobuf)", f"not an ExportTraceServiceRequest: {exc}")
    return dict(MessageToDict(request))


def _protobuf_spans(data: bytes, path: Path) -> list[Span]:
    return spans_from_otlp(decode_protobuf(data, path=path), path=path)


def json_lines(text: str, path: Path) -> list[tuple[int, Any]] | None:
    """(line number, value) of each line when ``text`` is JSON lines (several non-blank
    lines, the first a JSON value on its own), parsed strictly; None for one JSON document."""
    lines = [(n, ln) for n, ln in enumerate(split_lines(text), start=1) if ln.strip()]
    if len(lines) < 2:
        return None
    try:
        parse_json(lines[0][1], path, line=lines[0][0])
    except TraceFormatError:
        return None
    return [(n, parse_json(line, path, line=n)) for n, line in lines]


_REQUEST_KEYS = ("resourceSpans", "resource_spans")
_ENVELOPE_DEPTH = 4


def find_requests(value: Any, where: str = "", depth: int = 0) -> list[tuple[Any, str]]:
    """The OTLP requests in one JSON value, with where each sits: the value itself, the
    items of a list, or objects under another key (an envelope such as ``{"timestamp": ...,
    "data": {"resourceSpans": [...]}}``, also when ``data`` holds the request as JSON text).
    Nothing found: an empty list."""
    if isinstance(value, str) and depth and value.lstrip()[:1] == "{" and "esource" in value:
        value = maybe_json(value)
    if isinstance(value, dict):
        if any(k in value for k in _REQUEST_KEYS):
            return [(value, where)]
        if depth >= _ENVELOPE_DEPTH:
            return []
        return [
            found
            for key, inner in value.items()
            for found in find_requests(inner, field_at(where, str(key)), depth + 1)
        ]
    if isinstance(value, list) and depth < _ENVELOPE_DEPTH:
        return [
            found
            for n, inner in enumerate(value)
            for found in find_requests(inner, field_at(where, n), depth + 1)
        ]
    return []


def envelope_of(where: str) -> str:
    """The envelope path of a request, list positions generalised (``[3].data`` → ``data``)."""
    return re.sub(r"\[\d+\]", "[]", where).removeprefix("[]").lstrip(".")


def _item_spans(item: Any, path: str | Path, base: str, envelopes: set[str]) -> list[Span]:
    """Spans of one JSON document or line: its OTLP requests wherever they sit."""
    found = find_requests(item, base)
    if not found:  # not a request anywhere: the strict reader says what is wrong
        return spans_from_otlp(item, path=path, where=base)
    spans: list[Span] = []
    for request, where in found:
        envelope = envelope_of(where[len(base) :])
        if envelope:
            envelopes.add(envelope)
        spans += spans_from_otlp(request, path=path, where=where)
    if any(where != base for _, where in found):
        shell = keep_raw(_shell(item))  # the envelope's own fields, kept with the spans
        for span in spans:
            span.context = {**(span.context or {}), "envelope": shell}
    return spans


_MARK = "(OTLP request)"


def _shell(value: Any, depth: int = 0) -> Any:
    """An envelope with each OTLP request in it replaced by a marker."""
    if isinstance(value, str) and depth and value.lstrip()[:1] == "{" and "esource" in value:
        parsed = maybe_json(value)
        if isinstance(parsed, dict) and any(k in parsed for k in _REQUEST_KEYS):
            return _MARK
    if isinstance(value, dict):
        if any(k in value for k in _REQUEST_KEYS):
            return _MARK
        if depth < _ENVELOPE_DEPTH:
            return {k: _shell(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list) and depth < _ENVELOPE_DEPTH:
        return [_shell(v, depth + 1) for v in value]
    return value


def _json_spans(text: str, path: Path, envelopes: set[str]) -> list[Span]:
    """Spans of JSON lines, or of one JSON document (an export, a list of them, or either
    inside an envelope)."""
    records = json_lines(text, path)
    if records is not None:
        return [s for n, item in records for s in _item_spans(item, f"{path}:{n}", "", envelopes)]
    whole = parse_json(text, path)
    if whole == []:
        return []
    if isinstance(whole, list) and len(whole) > 1:
        return [
            s for n, item in enumerate(whole) for s in _item_spans(item, path, f"[{n}]", envelopes)
        ]
    if isinstance(whole, list):  # a list of one export: its errors name its place, [0]
        return _item_spans(whole[0], path, "[0]", envelopes)
    return _item_spans(whole, path, "", envelopes)


def read_otlp(path: Path, envelopes: set[str] | None = None) -> list[Span]:
    """Every span in an OTLP file (JSON, JSON lines or protobuf; gzipped or not). The
    envelope paths requests were found under are added to ``envelopes``."""
    data = read_bytes(path)
    if is_json_text(data[:64].lstrip(b"\xef\xbb\xbf")):
        return _json_spans(decode_text(data, path), path, set() if envelopes is None else envelopes)
    return _protobuf_spans(data, path)


def looks_like_protobuf(path: Path) -> bool:
    """True when the file parses as an ExportTraceServiceRequest holding at least one span
    with well-formed ids (random bytes rarely do)."""
    head = sniff(path)
    if not head or is_json_text(head):
        return False
    try:
        spans = read_otlp(path)
    except Exception:
        return False
    return bool(spans) and all(len(s.trace_id) == 32 and len(s.span_id) == 16 for s in spans)


def stem_of(path: Path) -> str:
    name = path.name
    for suffix in (
        ".gz",
        ".jsonl",
        ".json",
        ".pb",
        ".binpb",
        ".protobuf",
        ".bin",
        ".db",
        ".sqlite",
        ".log",
    ):
        name = name.removesuffix(suffix)
    return name or path.name


class OtlpImporter:
    name: ClassVar[str] = "otlp"
    summary: ClassVar[str] = (
        "OpenTelemetry OTLP/JSON (.json, JSON lines, gzip) or OTLP/protobuf; GenAI and "
        "OpenInference conventions"
    )

    def detect(self, path: Path) -> bool:
        path = Path(path)
        if not path.is_file():
            return False
        head = sniff(path)
        if is_json_text(head):
            return any(m in head for m in _MARKERS)
        return looks_like_protobuf(path)

    def load(self, path: Path, **options: Any) -> list[Trace]:
        check_options(self.name, options, {})
        path = Path(path)
        envelopes: set[str] = set()
        spans = read_otlp(path, envelopes)
        traces = build_traces(spans, path=path, fmt=self.name, id_prefix=stem_of(path))
        if envelopes:  # say where the requests were found
            for trace in traces:
                trace.metadata["otlp_under"] = sorted(envelopes)
        return traces
