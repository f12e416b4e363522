"""Langfuse traces → canonical traces.

Two file shapes: the UI's trace export ``{"trace": {...}, "observations": [...]}`` (the
top-level ``observations`` carry input/output; the copies inside ``trace`` do not), and a
page of the public API's v2 observations endpoint ``{"data": [...], "meta": {...}}`` (or
a plain list of observations). Observations are not in time order; the span tree orders them.

Observations ingested through OpenTelemetry keep their span attributes in
``metadata.attributes``; those are read with the same GenAI / OpenInference mapping as OTLP
files. Langfuse's own fields fill what the attributes lack: ``type`` (GENERATION → LLM call,
AGENT → agent, TOOL → tool), ``input`` / ``output``, ``model``, ``usageDetails``,
``modelParameters``, ``level``/``statusMessage``, and ``metadata.langgraph_node``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, ClassVar

from faultfinder.errors import FaultfinderError, TraceFormatError
from faultfinder.traces.importers._common import check_options, fail
from faultfinder.traces.importers._langgraph import graph_node_agent
from faultfinder.traces.importers._messages import message_list, output_messages
from faultfinder.traces.importers._semconv import build_trace
from faultfinder.traces.importers._spans import (
    Span,
    check_keys,
    flatten,
    keep_raw,
    maybe_json,
    parse_time,
)
from faultfinder.traces.importers.otlp import decode_text, read_bytes, sniff, stem_of
from faultfinder.traces.io import parse_json
from faultfinder.traces.schema import Trace

_KINDS = {"GENERATION": "llm", "AGENT": "agent", "TOOL": "tool"}
# Fields of an observation in the UI export and the v2 API; other keys are warned about.
_OBSERVATION_KEYS = frozenset(
    [
        "id",
        "traceId",
        "projectId",
        "type",
        "name",
        "startTime",
        "endTime",
        "completionStartTime",
        "parentObservationId",
        "isRootObservation",
        "level",
        "statusMessage",
        "version",
        "environment",
        "input",
        "output",
        "metadata",
        "model",
        "providedModelName",
        "internalModel",
        "internalModelId",
        "modelId",
        "modelParameters",
        "usage",
        "usageDetails",
        "costDetails",
        "providedCostDetails",
        "inputUsage",
        "outputUsage",
        "totalUsage",
        "inputCost",
        "outputCost",
        "totalCost",
        "calculatedInputCost",
        "calculatedOutputCost",
        "calculatedTotalCost",
        "unit",
        "promptId",
        "promptName",
        "promptVersion",
        "latency",
        "timeToFirstToken",
        "createdAt",
        "updatedAt",
        "toolCalls",
        "toolCallNames",
        "toolDefinitions",
        "usagePricingTierId",
        "usagePricingTierName",
        "bookmarked",
        "public",
        "userId",
        "sessionId",
        "traceName",
        "traceTags",
        "traceTimestamp",
        "tags",
    ]
)
_TEXT_FIELDS = (
    "type", "name", "startTime", "endTime", "parentObservationId", "traceId", "level",
    "statusMessage", "model", "providedModelName",
)  # fmt: skip


def observations_of(data: Any, path: Path) -> tuple[list[Any], dict[str, Any] | None, str]:
    """The observation list, the trace object (export files only) and the field path."""
    if isinstance(data, list):
        return data, None, ""
    if not isinstance(data, dict):
        fail(path, "(root)", "expected an object with 'observations' or 'data'")
    if isinstance(data.get("observations"), list):
        trace = data.get("trace") if isinstance(data.get("trace"), dict) else None
        return data["observations"], trace, "observations"
    if isinstance(data.get("data"), list):
        return data["data"], None, "data"
    fail(path, "(root)", "expected 'observations' (trace export) or 'data' (v2 observations API)")


def _is_observation(item: Any) -> bool:
    return isinstance(item, dict) and "id" in item and "type" in item and "startTime" in item


def span_of(obs: Any, *, path: Path, where: str, trace_id: str | None) -> Span:
    """One observation as a Span."""
    if not isinstance(obs, dict):
        fail(path, where, "expected an observation object")
    if not isinstance(obs.get("id"), str) or not obs["id"]:
        fail(path, f"{where}.id", "missing or not a string")
    check_keys(obs, _OBSERVATION_KEYS, path=path, where=where)
    for key in _TEXT_FIELDS:
        if obs.get(key) is not None and not isinstance(obs[key], str):
            fail(path, f"{where}.{key}", f"expected a string, got {type(obs[key]).__name__}")
    for key in ("usageDetails", "usage", "modelParameters"):
        if obs.get(key) is not None and not isinstance(obs[key], dict):
            fail(path, f"{where}.{key}", f"expected an object, got {type(obs[key]).__name__}")
    meta = maybe_json(obs.get("metadata"))
    meta = meta if isinstance(meta, dict) else {}
    attrs: dict[str, Any] = meta["attributes"] if isinstance(meta.get("attributes"), dict) else {}
    resource = meta.get("resourceAttributes")
    scope = meta.get("scope")
    usage = obs.get("usageDetails") or obs.get("usage") or {}
    hints: dict[str, Any] = {
        "kind": _KINDS.get(str(obs.get("type"))),
        "input": maybe_json(obs.get("input")),
        "output": maybe_json(obs.get("output")),
        "model": obs.get("model") or obs.get("providedModelName"),
        "usage": {
            "input": usage.get("input", usage.get("promptTokens")),
            "output": usage.get("output", usage.get("completionTokens")),
        }
        if isinstance(usage, dict)
        else {},
    }
    if isinstance(obs.get("modelParameters"), dict):
        hints["request"] = obs["modelParameters"]
    hints["agent"] = graph_node_agent(meta)
    out = hints["output"]
    if isinstance(out, dict) and out.get("type") == "tool" and "content" in out:
        hints["output"] = out["content"]  # a LangChain ToolMessage
        hints["call_id"] = out.get("tool_call_id")
    error = obs.get("level") == "ERROR"
    tid = obs.get("traceId") or trace_id or "trace"
    return Span(
        trace_id=str(tid),
        span_id=obs["id"],
        parent_id=obs.get("parentObservationId") or None,
        name=str(obs.get("name") or ""),
        start=parse_time(obs.get("startTime"), path=path, where=f"{where}.startTime"),
        end=parse_time(obs.get("endTime"), path=path, where=f"{where}.endTime"),
        attributes=flatten(attrs),
        status="error" if error else None,
        status_message=obs.get("statusMessage") if error else None,
        resource=resource if isinstance(resource, dict) else {},
        scope=scope.get("name") if isinstance(scope, dict) else None,
        hints={k: v for k, v in hints.items() if v is not None},
        raw=keep_raw(obs),
    )


def _mark_tools(spans: list[Span]) -> None:
    """Plain spans named after a tool an earlier generation asked for are tool executions
    (LangChain's callback records tools as SPAN observations)."""
    requested: set[str] = set()
    for span in sorted(spans, key=lambda s: s.start.timestamp() if s.start else 0):
        if span.hints.get("kind") == "llm":
            outputs, _ = output_messages(span)
            for m in outputs or []:
                requested.update(c["function"]["name"] for c in m.get("tool_calls", []))
        elif not span.hints.get("kind") and span.name in requested and not span.attributes:
            span.hints["kind"] = "tool"
            span.hints["kind_inferred"] = "named after a tool call an earlier generation made"


def traces_from(data: Any, path: Path, fmt: str) -> list[Trace]:
    observations, trace, where = observations_of(data, path)
    trace_id = trace.get("id") if trace else None
    spans = [
        span_of(o, path=path, where=f"{where}[{n}]" if where else f"[{n}]", trace_id=trace_id)
        for n, o in enumerate(observations)
    ]
    _mark_tools(spans)
    groups: dict[str, list[Span]] = {}
    for span in spans:
        groups.setdefault(span.trace_id, []).append(span)
    task = None
    if trace is not None:
        found = message_list(maybe_json(trace.get("input")))
        task = next((m["content"] for m in found or [] if m["role"] == "user"), None)
    out = []
    for tid, group in groups.items():
        result = build_trace(
            group, path=path, fmt=fmt, trace_id=f"{stem_of(path)}/{tid}", task=task
        )
        skip = ("data", "observations", "trace")
        page = {k: v for k, v in data.items() if k not in skip} if isinstance(data, dict) else {}
        if page:  # a page's meta (cursor...), as written
            result.metadata["langfuse_page"] = keep_raw(page)
        if trace is not None:
            result.metadata["langfuse_trace"] = keep_raw(
                {k: v for k, v in trace.items() if k != "observations"}
            )
        out.append(result)
    return out


class LangfuseImporter:
    name: ClassVar[str] = "langfuse"
    summary: ClassVar[str] = (
        "Langfuse trace export {trace, observations} or v2 observations API pages {data, meta}"
    )

    def detect(self, path: Path) -> bool:
        path = Path(path)
        if not path.is_file():
            return False
        head = sniff(path)
        if b'"observations"' not in head and b'"parentObservationId"' not in head:
            return False
        try:
            data = parse_json(decode_text(read_bytes(path), path), path)
            observations, _, _ = observations_of(data, path)
        except (TraceFormatError, RecursionError):
            return False
        return bool(observations) and all(_is_observation(o) for o in observations)

    def load(self, path: Path, **options: Any) -> list[Trace]:
        check_options(self.name, options, {})
        path = Path(path)
        data = parse_json(decode_text(read_bytes(path), path), path)
        return traces_from(data, path, self.name)


FETCH_FIELDS = "core,basic,io,usage,metadata,model"
MAX_PAGES = 100
READ_TIMEOUT = 30.0
"""Seconds each wait on the server may take (httpx's timeouts are per read)."""
PAGE_DEADLINE = 60.0
"""Seconds one page may take in all, from connecting to its last byte: a server sending
a byte now and then never trips :data:`READ_TIMEOUT`, so each page has a deadline of its
own, as each attempt of ``export`` has."""


def fetch_observations(host: str, trace_id: str, *, client: Any = None) -> dict[str, Any]:
    """All observations of one trace from Langfuse's v2 observations API, as one page
    ``{"data": [...]}``. Keys: ``LANGFUSE_PUBLIC_KEY`` / ``LANGFUSE_SECRET_KEY`` (basic auth).
    Each page is read within :data:`~faultfinder.http_bodies.MAX_REPLY` bytes and
    :data:`PAGE_DEADLINE` seconds. ``client``, an ``httpx.AsyncClient`` when given, is the
    caller's to close."""
    import os

    from faultfinder.errors import ConfigError
    from faultfinder.redact import Redactor

    public, secret = os.environ.get("LANGFUSE_PUBLIC_KEY"), os.environ.get("LANGFUSE_SECRET_KEY")
    if not public or not secret:
        raise ConfigError("Set LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY to read from Langfuse.")
    endpoint = host.rstrip("/") + "/api/public/v2/observations"
    # A host's user info is no one's to see.
    shown = Redactor([public, secret]).url(endpoint) or endpoint
    data = asyncio.run(_fetch(host, endpoint, shown, trace_id, (public, secret), client))
    if not data:
        raise FaultfinderError(f"langfuse: trace {trace_id} has no observations at {shown}")
    return {"data": data}


async def _fetch(
    host: str, endpoint: str, shown: str, trace_id: str, auth: tuple[str, str], client: Any
) -> list[Any]:
    """Every page's observations, cursor by cursor, each page within its deadline."""
    import httpx

    from faultfinder.loopback import direct_to_loopback

    # A self-hosted Langfuse on loopback is reached directly, not through HTTP_PROXY.
    http = client or httpx.AsyncClient(timeout=READ_TIMEOUT, mounts=direct_to_loopback([host]))
    data: list[Any] = []
    cursor: str | None = None
    try:
        for _ in range(MAX_PAGES):
            params = {"traceId": trace_id, "fields": FETCH_FIELDS, "limit": "100"}
            if cursor:
                params["cursor"] = cursor
            try:
                async with asyncio.timeout(PAGE_DEADLINE):
                    page = await _page(http, endpoint, shown, params, auth)
            except TimeoutError:
                raise FaultfinderError(
                    f"langfuse: no whole page from {shown} within {PAGE_DEADLINE:g} s "
                    "(it was too slow to send it)"
                ) from None
            data.extend(page["data"])
            meta: dict[str, Any] = page["meta"] if isinstance(page.get("meta"), dict) else {}
            cursor = meta.get("cursor")
            if not cursor:
                break
    finally:
        if client is None:
            await http.aclose()
    return data


async def _page(
    http: Any, endpoint: str, shown: str, params: dict[str, str], auth: tuple[str, str]
) -> dict[str, Any]:
    """One page of the observations API, its body read within the bound."""
    import httpx

    from faultfinder.http_bodies import MAX_REPLY, BodyTooLargeError, limit_body

    request = http.build_request("GET", endpoint, params=params)
    try:
        response = await http.send(request, auth=auth, stream=True)
        try:
            limit_body(response, MAX_REPLY, f"the page of {shown}")
            await response.aread()
        finally:
            await response.aclose()
    except BodyTooLargeError as exc:
        raise FaultfinderError(f"langfuse: {exc}") from None
    except httpx.HTTPError as exc:
        raise FaultfinderError(f"langfuse: request to {shown} failed: {exc}") from None
    if response.status_code != 200:
        raise FaultfinderError(
            f"langfuse: {shown} answered {response.status_code}: {response.text[:300]}"
        )
    try:
        page = response.json()
    except (ValueError, RecursionError):  # not JSON; an int over 4,300 digits; too deep
        page = None
    if not isinstance(page, dict) or not isinstance(page.get("data"), list):
        raise FaultfinderError(f"langfuse: {shown} did not return a v2 observations page")
    return page


def load_from_langfuse(host: str, trace_id: str, *, client: Any = None) -> list[Trace]:
    """The trace ``trace_id`` fetched from the Langfuse at ``host``."""
    page = fetch_observations(host, trace_id, client=client)
    return traces_from(page, Path(f"langfuse-{trace_id}"), LangfuseImporter.name)
