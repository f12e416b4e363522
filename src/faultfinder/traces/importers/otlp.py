"""OpenTelemetry traces (OTLP) → canonical traces, one per trace id.

Reads OTLP/JSON (one ``ExportTraceServiceRequest`` / ``TracesData`` object, a list of them,
or JSON lines as the collector's file exporter writes them), optionally gzipped, and
OTLP/protobuf (a serialised ``ExportTraceServiceRequest``), decoded with the
``opentelemetry-proto`` package (extra ``faultfinder[otel]``). The GenAI and OpenInference
semantic conventions are mapped by ``_semconv``.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any, ClassVar

from faultfinder.errors import ConfigError
from faultfinder.traces.importers import register_importer
from faultfinder.traces.importers._common import check_options, fail
from faultfinder.traces.importers._semconv import build_traces
from faultfinder.traces.importers._spans import Span, spans_from_otlp
from faultfinder.traces.schema import Trace

MAX_FILE = 512 * 1024 * 1024
"""Decompressed size limit: a gzip bomb stops here instead of filling memory."""
_SNIFF = 1 << 16
_MARKERS = (b'"resourceSpans"', b'"resource_spans"')


def read_bytes(path: Path, limit: int = MAX_FILE) -> bytes:
    """The file's bytes, gunzipped when it is gzip (by magic number, not by name)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        fail(path, "(file)", f"cannot read: {exc.strerror or exc}")
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = d.decompress(raw, limit + 1)
    except zlib.error as exc:
        fail(path, "(gzip)", f"corrupt gzip data: {exc}")
    if len(out) > limit:
        fail(path, "(gzip)", f"decompresses to more than {limit} bytes")
    return out


def sniff(path: Path) -> bytes:
    """The first 64 KiB of the file (decompressed when gzipped), b'' when unreadable."""
    try:
        with path.open("rb") as handle:
            head = handle.read(_SNIFF)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as handle:
                return handle.read(_SNIFF)
        return head
    except (OSError, EOFError, zlib.error):
        return b""


def is_json_text(head: bytes) -> bool:
    return head.lstrip()[:1] in (b"{", b"[")


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


def _json_spans(text: str, path: Path) -> list[Span]:
    stripped = text.strip()
    try:
        whole = json.loads(stripped)
    except json.JSONDecodeError:
        whole = None
    if whole is not None:
        items = whole if isinstance(whole, list) else [whole]
        return [
            s
            for n, item in enumerate(items)
            for s in spans_from_otlp(item, path=path, where=f"[{n}]." if len(items) > 1 else "")
        ]
    spans: list[Span] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            fail(f"{path}:{number}", "(json)", f"invalid JSON at column {exc.colno}: {exc.msg}")
        spans.extend(spans_from_otlp(item, path=f"{path}:{number}"))
    return spans


def read_otlp(path: Path) -> list[Span]:
    """Every span in an OTLP file (JSON, JSON lines or protobuf; gzipped or not)."""
    data = read_bytes(path)
    if is_json_text(data[:64]):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            fail(path, "(file)", f"not UTF-8 text: {exc}")
        return _json_spans(text, path)
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
    for suffix in (".gz", ".jsonl", ".json", ".pb", ".binpb", ".protobuf", ".bin"):
        name = name.removesuffix(suffix)
    return name or path.name


@register_importer
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
        spans = read_otlp(path)
        return build_traces(spans, path=path, fmt=self.name, id_prefix=stem_of(path))
