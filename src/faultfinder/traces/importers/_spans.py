"""Spans: the one shape every tracing format (OTLP, Phoenix, Langfuse) is read into.

A :class:`Span` holds what the semantic-convention mapper (``_semconv``) needs: ids, parent,
name, times, flat attributes (``llm.input_messages.0.message.role`` style keys), events and
the source's own hints (Langfuse observation types, for example). This module also decodes
OTLP/JSON: ``AnyValue`` wrappers, hex or base64 ids, camelCase or snake_case keys and
attributes written as a plain object instead of a key/value list.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import json
import re
import warnings
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from faultfinder.errors import TraceFormatError, TraceFormatWarning
from faultfinder.traces.importers._common import fail, without_credentials
from faultfinder.traces.io import field_at, is_strict


@dataclass
class SpanEvent:
    """A span event (``gen_ai.choice``, an exception...)."""

    name: str
    time: datetime | None = None
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass
class Span:
    """One span (or Langfuse observation), format-independent."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start: datetime | None = None
    end: datetime | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    """Flat attributes: nested objects and lists are flattened into dotted keys."""
    events: list[SpanEvent] = field(default_factory=list)
    status: str | None = None
    """'ok', 'error' or None (unset)."""
    status_message: str | None = None
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str | None = None
    hints: dict[str, Any] = field(default_factory=dict)
    """Source-specific facts the mapper reads before the attributes: ``kind`` ('llm',
    'agent', 'tool', 'chain'), ``input`` / ``output`` (messages or text), ``model``,
    ``usage`` ({'input', 'output'}), ``agent`` (a name), ``tool_calls`` (list of dicts)."""
    raw: dict[str, Any] | None = None
    """The source record as read (credentials removed): kept in the trace verbatim, so
    whatever the mapping does not use (an unknown attribute, a damaged field) is not lost."""
    context: dict[str, Any] | None = None
    """What the record came with (OTLP resource and scope, an envelope's other fields),
    kept once per trace."""


def keep_raw(value: Any) -> Any:
    """A source record to keep verbatim in a trace, credentials removed: keys that name a
    secret (``api_key``, ``authorization``, ``OPENAI_API_KEY``...), the values of OTLP
    ``{key, value}`` pairs whose key does (``HF_TOKEN``, ``http.request.header.cookie``),
    secret fields in JSON held in strings, credentials in URLs (``https://user:pass@``,
    ``?key=``) and key-shaped tokens anywhere (:func:`_common.without_credentials`)."""
    return without_credentials(value)


# --- attribute values -------------------------------------------------------------------

_ANY_KEYS = {
    "stringValue": "s",
    "string_value": "s",
    "boolValue": "b",
    "bool_value": "b",
    "intValue": "i",
    "int_value": "i",
    "doubleValue": "d",
    "double_value": "d",
    "arrayValue": "a",
    "array_value": "a",
    "kvlistValue": "k",
    "kvlist_value": "k",
    "bytesValue": "y",
    "bytes_value": "y",
}


_TYPES: dict[str, tuple[type, ...]] = {
    "s": (str,),
    "b": (bool,),
    "i": (int, str),
    "d": (int, float, str),
    "a": (dict, list),
    "k": (dict, list),
    "y": (str,),
}


def any_value(value: Any, *, path: str | Path, where: str, strict: bool = False) -> Any:
    """An OTLP ``AnyValue`` as a Python value.

    ``strict`` (inside a ``{key, value}`` list, where the protocol requires an AnyValue):
    exactly one known kind, of the right JSON type, else a TraceFormatError. Otherwise (an
    attribute object written directly) a dict that is not a wrapper is a plain value.
    """
    if not isinstance(value, dict):
        if strict and value is not None:
            fail(path, where, f"expected an AnyValue object, got {type(value).__name__}")
        return value
    if not value:
        return None
    tagged = [(k, v) for k, v in value.items() if k in _ANY_KEYS]
    if len(tagged) != 1 or len(value) != 1:
        if strict:
            other = next((k for k in value if k not in _ANY_KEYS), next(iter(value)))
            close = difflib.get_close_matches(str(other), list(_ANY_KEYS), n=1, cutoff=0.75)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            fail(path, f"{where}.{other}", f"not an AnyValue kind{hint}")
        # Not an AnyValue wrapper: a plain object written directly (some exporters do).
        return {str(k): v for k, v in value.items()}
    key, inner = tagged[0]
    tag = _ANY_KEYS[key]
    if inner is None:
        return None
    if not isinstance(inner, _TYPES[tag]) or (tag in "id" and isinstance(inner, bool)):
        fail(path, f"{where}.{key}", f"expected {_KIND_NAMES[tag]}, got {type(inner).__name__}")
    if tag == "i":
        try:
            return int(str(inner))
        except (TypeError, ValueError):
            fail(path, f"{where}.{key}", f"not an integer: {str(inner)[:40]!r}")
    if tag == "d":
        try:
            return float(str(inner))
        except (TypeError, ValueError):
            fail(path, f"{where}.{key}", f"not a number: {str(inner)[:40]!r}")
    if tag == "a":
        values = inner.get("values", []) if isinstance(inner, dict) else inner
        if not isinstance(values, list):
            fail(path, f"{where}.{key}.values", "expected a list")
        return [
            any_value(v, path=path, where=f"{where}.{key}.values[{n}]", strict=strict)
            for n, v in enumerate(values)
        ]
    if tag == "k":
        values = inner.get("values", []) if isinstance(inner, dict) else inner
        return key_values(values, path=path, where=f"{where}.{key}.values")
    return inner


_KIND_NAMES = {
    "s": "a string",
    "b": "a boolean",
    "i": "an integer",
    "d": "a number",
    "a": "an array",
    "k": "a key/value list",
    "y": "base64 text",
}


def key_values(items: Any, *, path: str | Path, where: str) -> dict[str, Any]:
    """OTLP attributes (a list of ``{key, value}``, or a plain object) as a dict."""
    if items is None:
        return {}
    if isinstance(items, dict):
        return {str(k): any_value(v, path=path, where=f"{where}.{k}") for k, v in items.items()}
    if not isinstance(items, list):
        fail(path, where, f"expected a list of key/value pairs, got {type(items).__name__}")
    out: dict[str, Any] = {}
    for n, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            fail(path, f"{where}[{n}]", "expected an object with a string 'key'")
        check_keys(item, _KEYVALUE, path=path, where=f"{where}[{n}]")
        out[item["key"]] = any_value(
            item.get("value"), path=path, where=f"{where}[{n}].value", strict=True
        )
    return out


def flatten(attributes: dict[str, Any]) -> dict[str, Any]:
    """Nested objects and lists of objects flattened into dotted keys.

    ``{"llm": {"input_messages": [{"message": {"role": "user"}}]}}`` becomes
    ``{"llm.input_messages.0.message.role": "user"}``; lists of scalars stay lists.
    """
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for n, v in enumerate(value):
                walk(f"{prefix}.{n}", v)
        else:
            out[prefix] = value

    for key, value in attributes.items():
        walk(key, value)
    return out


# --- ids and times ----------------------------------------------------------------------

_HEX = re.compile(r"^[0-9a-fA-F]+$")


def norm_id(value: Any, *, path: str | Path, where: str, size: int) -> str | None:
    """A trace or span id as lower-case hex, from hex or base64 (protobuf's JSON mapping).

    ``size`` is the id's length in bytes (16 for traces, 8 for spans); empty means none.
    """
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        fail(path, where, f"expected an id string, got {type(value).__name__}")
    text = value.strip()
    if len(text) == 2 * size and _HEX.match(text):
        return text.lower()
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) == size:
        return raw.hex()
    if _HEX.match(text):
        return text.lower()  # an odd-length hex id: keep it, ids are only compared
    fail(path, where, f"id {text[:40]!r} is neither {2 * size} hex digits nor base64")


def from_nanos(value: Any, *, path: str | Path, where: str) -> datetime | None:
    """Unix nanoseconds (int or decimal string) as an aware datetime; 0 or missing is None."""
    if value is None or value == "" or value == 0 or value == "0":
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        fail(path, where, f"expected Unix nanoseconds, got {type(value).__name__}")
    try:
        nanos = int(value)
    except (TypeError, ValueError):
        fail(path, where, f"expected Unix nanoseconds, got {value!r}")
    try:
        return datetime.fromtimestamp(nanos / 1e9, tz=UTC)
    except (OverflowError, OSError, ValueError):
        fail(path, where, f"time {nanos} is out of range")


def parse_time(value: Any, *, path: str | Path, where: str) -> datetime | None:
    """An ISO-8601 time, or a Unix time as a number, as an aware datetime.

    Numbers are read by magnitude: seconds, milliseconds (pandas' JSON), microseconds or
    nanoseconds (OTLP)."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        magnitude = abs(value)
        scale = (
            1e9 if magnitude < 1e11 else 1e6 if magnitude < 1e14 else 1e3 if magnitude < 1e17 else 1
        )
        return from_nanos(int(value * scale), path=path, where=where)
    if not isinstance(value, str):
        fail(path, where, f"expected a time, got {type(value).__name__}")
    text = value.strip().replace("Z", "+00:00")
    if text.isdigit():
        return from_nanos(text, path=path, where=where)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        fail(path, where, f"not an ISO-8601 time: {value[:40]!r}")
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# --- OTLP/JSON ---------------------------------------------------------------------------


def _both(*camel: str) -> frozenset[str]:
    """Each key in camelCase and in snake_case (protobuf's JSON mapping accepts both)."""
    return frozenset(k for c in camel for k in (c, re.sub(r"(?<!^)([A-Z])", r"_\1", c).lower()))


_KEYVALUE = frozenset({"key", "value"})
_EXPORT = _both("resourceSpans")
_RESOURCE_SPANS = _both("resource", "scopeSpans", "instrumentationLibrarySpans", "schemaUrl")
_RESOURCE = _both("attributes", "droppedAttributesCount", "entityRefs")
_SCOPE_SPANS = _both("scope", "instrumentationLibrary", "spans", "schemaUrl")
_SCOPE = _both("name", "version", "attributes", "droppedAttributesCount")
_SPAN = _both(
    "traceId", "spanId", "parentSpanId", "traceState", "flags", "name", "kind",
    "startTimeUnixNano", "endTimeUnixNano", "attributes", "droppedAttributesCount",
    "events", "droppedEventsCount", "links", "droppedLinksCount", "status",
)  # fmt: skip
_EVENT = _both("timeUnixNano", "name", "attributes", "droppedAttributesCount")
_STATUS_KEYS = _both("code", "message")


def check_keys(
    obj: dict[str, Any], known: Collection[str], *, path: str | Path, where: str
) -> None:
    """Warn (TraceFormatWarning) about keys a reader does not know and ignores; under
    ``--strict`` they are a TraceFormatError."""
    for key in obj:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), list(known), n=1, cutoff=0.75)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        place = field_at(where, str(key))
        if is_strict():
            raise TraceFormatError(str(path), place, f"unknown key{hint} (--strict)")
        warnings.warn(
            TraceFormatWarning(f"{path}: field '{place}': unknown key, ignored{hint}"),
            stacklevel=3,
        )


def _get(obj: dict[str, Any], camel: str) -> Any:
    """``obj[camel]``, or its snake_case spelling."""
    if camel in obj:
        return obj[camel]
    return obj.get(re.sub(r"(?<!^)([A-Z])", r"_\1", camel).lower())


_STATUS = {1: "ok", 2: "error", "STATUS_CODE_OK": "ok", "STATUS_CODE_ERROR": "error"}


def spans_from_otlp(data: Any, *, path: str | Path, where: str = "") -> list[Span]:
    """Every span of one OTLP ``ExportTraceServiceRequest`` (or ``TracesData``) object."""
    if not isinstance(data, dict):
        fail(path, where or "(root)", "expected an object with 'resourceSpans'")
    check_keys(data, _EXPORT, path=path, where=where)
    resource_spans = _get(data, "resourceSpans")
    if not isinstance(resource_spans, list):
        fail(path, field_at(where, "resourceSpans"), "expected a list")
    spans: list[Span] = []
    for r, rs in enumerate(resource_spans):
        at = field_at(where, "resourceSpans", r)
        if not isinstance(rs, dict):
            fail(path, at, "expected an object")
        check_keys(rs, _RESOURCE_SPANS, path=path, where=at)
        resource_obj = _get(rs, "resource") or {}
        if not isinstance(resource_obj, dict):
            fail(path, f"{at}.resource", "expected an object")
        check_keys(resource_obj, _RESOURCE, path=path, where=f"{at}.resource")
        resource = key_values(
            _get(resource_obj, "attributes") if isinstance(resource_obj, dict) else None,
            path=path,
            where=f"{at}.resource.attributes",
        )
        scope_spans = _get(rs, "scopeSpans")
        if scope_spans is None:
            scope_spans = _get(rs, "instrumentationLibrarySpans") or []
        if not isinstance(scope_spans, list):
            fail(path, f"{at}.scopeSpans", "expected a list")
        for s, ss in enumerate(scope_spans):
            sat = f"{at}.scopeSpans[{s}]"
            if not isinstance(ss, dict):
                fail(path, sat, "expected an object")
            check_keys(ss, _SCOPE_SPANS, path=path, where=sat)
            scope_obj = _get(ss, "scope") or _get(ss, "instrumentationLibrary") or {}
            if not isinstance(scope_obj, dict):
                fail(path, f"{sat}.scope", "expected an object")
            check_keys(scope_obj, _SCOPE, path=path, where=f"{sat}.scope")
            if scope_obj.get("name") is not None and not isinstance(scope_obj["name"], str):
                fail(path, f"{sat}.scope.name", "expected a string")
            scope = scope_obj.get("name") if isinstance(scope_obj, dict) else None
            raw_spans = _get(ss, "spans") or []
            if not isinstance(raw_spans, list):
                fail(path, f"{sat}.spans", "expected a list")
            context = keep_raw(
                {
                    "resource": {k: v for k, v in rs.items() if k not in _SCOPE_LISTS},
                    "scope": {k: v for k, v in ss.items() if k not in ("spans",)},
                }
            )
            for n, raw in enumerate(raw_spans):
                span = _otlp_span(raw, resource, scope, path=path, where=f"{sat}.spans[{n}]")
                span.context = context
                spans.append(span)
    return spans


_SCOPE_LISTS = (
    "scopeSpans",
    "scope_spans",
    "instrumentationLibrarySpans",
    "instrumentation_library_spans",
)


def _otlp_span(
    raw: Any, resource: dict[str, Any], scope: Any, *, path: str | Path, where: str
) -> Span:
    if not isinstance(raw, dict):
        fail(path, where, "expected a span object")
    check_keys(raw, _SPAN, path=path, where=where)
    trace_id = norm_id(_get(raw, "traceId"), path=path, where=f"{where}.traceId", size=16)
    span_id = norm_id(_get(raw, "spanId"), path=path, where=f"{where}.spanId", size=8)
    if trace_id is None or span_id is None:
        fail(path, f"{where}.{'traceId' if trace_id is None else 'spanId'}", "missing")
    parent = norm_id(_get(raw, "parentSpanId"), path=path, where=f"{where}.parentSpanId", size=8)
    name = _get(raw, "name")
    if name is not None and not isinstance(name, str):
        fail(path, f"{where}.name", f"expected a string, got {type(name).__name__}")
    kind = _get(raw, "kind")
    if kind is not None and (isinstance(kind, bool) or not isinstance(kind, int | str)):
        fail(path, f"{where}.kind", f"expected a span kind, got {type(kind).__name__}")
    raw_events = _get(raw, "events") or []
    if not isinstance(raw_events, list):
        fail(path, f"{where}.events", "expected a list")
    events: list[SpanEvent] = []
    for e, ev in enumerate(raw_events):
        if not isinstance(ev, dict):
            fail(path, f"{where}.events[{e}]", "expected an object")
        check_keys(ev, _EVENT, path=path, where=f"{where}.events[{e}]")
        if ev.get("name") is not None and not isinstance(ev["name"], str):
            fail(path, f"{where}.events[{e}].name", "expected a string")
        events.append(
            SpanEvent(
                name=str(ev.get("name") or ""),
                time=from_nanos(_get(ev, "timeUnixNano"), path=path, where=f"{where}.events[{e}]"),
                attributes=flatten(
                    key_values(
                        _get(ev, "attributes"), path=path, where=f"{where}.events[{e}].attributes"
                    )
                ),
            )
        )
    status = _get(raw, "status") or {}
    if not isinstance(status, dict):
        fail(path, f"{where}.status", "expected an object")
    check_keys(status, _STATUS_KEYS, path=path, where=f"{where}.status")
    code = status.get("code")
    if code is not None and (isinstance(code, bool) or not isinstance(code, int | str)):
        fail(path, f"{where}.status.code", "expected a status code")
    if status.get("message") is not None and not isinstance(status["message"], str):
        fail(path, f"{where}.status.message", "expected a string")
    return Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_id=parent,
        name=str(name or ""),
        start=from_nanos(_get(raw, "startTimeUnixNano"), path=path, where=f"{where}.startTime"),
        end=from_nanos(_get(raw, "endTimeUnixNano"), path=path, where=f"{where}.endTime"),
        attributes=flatten(
            key_values(_get(raw, "attributes"), path=path, where=f"{where}.attributes")
        ),
        events=events,
        status=_STATUS.get(code) if isinstance(code, int | str) else None,
        status_message=status.get("message") or None,
        resource=resource,
        scope=str(scope) if scope else None,
        raw=keep_raw(raw),
    )


def maybe_json(value: Any) -> Any:
    """``value`` decoded when it is a string holding a JSON object or array, else unchanged
    (also when it nests too deep to decode, or escapes a lone UTF-16 surrogate, which no
    trace can be written with: untrusted text, kept as written)."""
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in ("{", "["):
            try:
                decoded = json.loads(text)
            except (ValueError, RecursionError):  # ValueError: an int over 4,300 digits
                return value
            if _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(decoded):
                return value
            return decoded
    return value


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""A JSON escape of a UTF-16 surrogate: the only way decoded text can get a lone one (a
pair decodes to the character it encodes)."""
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _has_lone_surrogate(value: Any) -> bool:
    """Whether a string or key anywhere in decoded JSON ``value`` holds a lone surrogate."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _LONE_SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
