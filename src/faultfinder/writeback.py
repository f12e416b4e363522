"""Write an attribution back where the user looks at traces: Phoenix, Langfuse, or OTLP.

The decisive step's span id comes from the imported trace (``Step.metadata['span_id']``,
set by the OTLP, Phoenix, Langfuse importers and the collector). Every call goes to the URL
the user names; keys come from the environment and are never written anywhere.

- **Phoenix**: one span annotation (``POST /v1/span_annotations``) on the decisive step's
  span, named ``faultfinder``, ``annotator_kind`` LLM, label ``decisive error``, the reason
  as explanation; ``PHOENIX_API_KEY`` (optional) is sent as a bearer token. Phoenix keys an
  annotation on (name, span, identifier), so a verdict naming another span than an earlier
  one of the same method adds an annotation rather than moving it; the earlier one stays
  (removing it would mean deleting from the user's Phoenix), and the new one's metadata
  says it supersedes it (:func:`phoenix_payload`).
- **Langfuse**: one categorical score (``POST /api/public/scores``) on the trace and the
  decisive observation; basic auth with ``LANGFUSE_PUBLIC_KEY`` / ``LANGFUSE_SECRET_KEY``.
  Its ``id`` is derived from the trace and the method, so exporting again replaces the
  score (Langfuse upserts a score by id) instead of adding another.
- **OTLP**: a ``faultfinder.attribution`` span, child of the decisive span in the same
  trace, carrying a ``faultfinder.verdict`` event (OTLP/JSON, written to a file or posted
  to ``URL/v1/traces``): spans cannot be changed once exported, so the verdict is a child.
  Headers (a hosted backend's key) come from ``OTEL_EXPORTER_OTLP_TRACES_HEADERS``, else
  ``OTEL_EXPORTER_OTLP_HEADERS``, as OpenTelemetry's exporters read them
  (:func:`otlp_headers`).
"""

from __future__ import annotations

import os
import re
import secrets
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from faultfinder.errors import ConfigError
from faultfinder.judging.method import Attribution
from faultfinder.traces.schema import Step, Trace

TIMEOUT = 30.0
TARGETS = ("phoenix", "langfuse", "otlp")


def _same_trace(attribution: Attribution, trace: Trace) -> bool:
    """The attribution was made on ``trace``: the same id, or (the file renamed since) the
    same source trace id after the file stem."""
    if attribution.trace_id == trace.id:
        return True
    source = trace.metadata.get("trace_id")
    return isinstance(source, str) and attribution.trace_id.rsplit("/", 1)[-1] == source


def decisive_step(attribution: Attribution, trace: Trace) -> Step:
    """The step the attribution names; an error when it was made on another trace, or
    names no step or one outside the trace."""
    if not _same_trace(attribution, trace):
        raise ConfigError(
            f"The attribution is for trace {attribution.trace_id}, not {trace.id}: export "
            "needs the trace it was made on."
        )
    if attribution.step is None:
        raise ConfigError(
            f"The attribution for {attribution.trace_id} names no step (status "
            f"{attribution.status}); there is nothing to write back."
        )
    if not 0 <= attribution.step < len(trace.steps):
        raise ConfigError(
            f"The attribution names step {attribution.step}, outside trace {trace.id} "
            f"(steps 0..{len(trace.steps) - 1}): is it the same trace?"
        )
    step = trace.steps[attribution.step]
    if attribution.agent is not None and step.agent != attribution.agent:
        # Every method pairs its step with the agent that took it (judging/pairing.py), so
        # another agent at that index means the file changed since (late spans rewritten
        # by the collector, a partial export): the verdict would land on an unrelated span.
        raise ConfigError(
            f"The attribution names {attribution.agent} at step {attribution.step}, but step "
            f"{attribution.step} of {trace.id} is by {step.agent}: the trace changed since it "
            "was attributed (spans added or reordered). Run `faultfinder attribute` on this "
            "file again, then export."
        )
    return step


def span_id_of(step: Step) -> str:
    span = step.metadata.get("span_id")
    if not isinstance(span, str) or not span:
        raise ConfigError(
            f"Step {step.index} has no span id: the trace was not imported from spans "
            "(OTLP, Phoenix, Langfuse or the collector), so there is no span to annotate."
        )
    return span


def source_trace_id(trace: Trace) -> str:
    tid = trace.metadata.get("trace_id")
    if not isinstance(tid, str) or not tid:
        raise ConfigError(f"Trace {trace.id} has no source trace id (metadata.trace_id).")
    return tid


def _label(attribution: Attribution, step: Step) -> dict[str, Any]:
    return {
        "agent": attribution.agent,
        "step": attribution.step,
        "step_agent": step.agent,
        "method": attribution.method,
        "model": attribution.model,
    }


def phoenix_payload(
    attribution: Attribution, trace: Trace, *, now: datetime | None = None
) -> dict[str, Any]:
    """One span annotation on the decisive span. Its metadata says when it was exported
    and that it supersedes any earlier verdict of the same method on another span of the
    trace: Phoenix cannot move an annotation to another span, and keeps the old one."""
    step = decisive_step(attribution, trace)
    identifier = f"faultfinder:{attribution.method}"
    source = trace.metadata.get("trace_id")
    trace_id = source if isinstance(source, str) and source else trace.id
    moment = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    facts = {
        **_label(attribution, step),
        "trace_id": trace_id,
        "exported_at": moment,
        "supersedes": f"any '{identifier}' annotation exported before {moment} on another "
        f"span of trace {trace_id}: this is the current verdict of {attribution.method}",
    }
    return {
        "data": [
            {
                "span_id": span_id_of(step),
                "name": "faultfinder",
                "annotator_kind": "LLM",
                "result": {
                    "label": "decisive error",
                    "score": attribution.confidence,
                    "explanation": attribution.reason or "",
                },
                "metadata": facts,
                "identifier": identifier,
            }
        ]
    }


LANGFUSE_SCORE = "faultfinder.decisive_error"
_SCORE_IDS = uuid.UUID("5f0c1c52-7a4e-4c51-9d0e-6a2f3b8e41d7")
"""Namespace of the Langfuse score ids faultfinder derives (uuid5)."""


def langfuse_score_id(trace_id: str, method: str) -> str:
    """One score per trace and method: Langfuse upserts a score by ``id``
    (https://langfuse.com/faq/all/tracing-data-updates), so an export made again (a
    retry, a verdict re-run) replaces the earlier score instead of adding a second one,
    as Phoenix's ``identifier`` does for an annotation."""
    return str(uuid.uuid5(_SCORE_IDS, f"{trace_id}\n{LANGFUSE_SCORE}\n{method}"))


def langfuse_payload(attribution: Attribution, trace: Trace) -> dict[str, Any]:
    step = decisive_step(attribution, trace)
    trace_id = source_trace_id(trace)
    return {
        "id": langfuse_score_id(trace_id, attribution.method),
        "traceId": trace_id,
        "observationId": span_id_of(step),
        "name": LANGFUSE_SCORE,
        "dataType": "CATEGORICAL",
        "value": attribution.agent or step.agent,
        "comment": attribution.reason or "",
        "metadata": _label(attribution, step),
    }


def _attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    return {"key": key, "value": {"stringValue": "" if value is None else str(value)}}


_HEX = re.compile(r"[0-9a-fA-F]+")


def _otlp_ids(trace: Trace, step: Step) -> tuple[str, str]:
    """The trace's (the step's own, in a trace stitched from several) and the decisive
    step's ids, which OTLP can link a span to only when they are its own: 32 and 16 hex
    digits, not all zero. Another source's ids (Langfuse's UUIDs or names) would be sent
    as they are and name nothing the receiver holds."""
    sid = span_id_of(step)
    own = step.metadata.get("trace_id")  # a run stitched from several traces (AutoGen)
    tid = own if isinstance(own, str) and own else source_trace_id(trace)
    bad = [
        f"{what} {value!r} is not {digits} hex digits"
        for what, value, digits in (("trace id", tid, 32), ("span id", sid, 16))
        if len(value) != digits or not _HEX.fullmatch(value) or not value.strip("0")
    ]
    if bad:
        raise ConfigError(
            f"Trace {trace.id} does not carry OTLP ids ({'; '.join(bad)}), so an OTLP "
            "receiver could not place the verdict under its span. Export it to the tool "
            "it came from (--to langfuse or --to phoenix)."
        )
    return tid, sid


def otlp_payload(
    attribution: Attribution, trace: Trace, *, now_ns: int | None = None
) -> dict[str, Any]:
    """An OTLP/JSON export with one child span of the decisive span carrying the verdict
    (the trace must carry OTLP's own ids: :func:`_otlp_ids`)."""
    step = decisive_step(attribution, trace)
    trace_id, span_id = _otlp_ids(trace, step)
    now = now_ns if now_ns is not None else time.time_ns()
    facts: dict[str, Any] = {
        "faultfinder.agent": attribution.agent,
        "faultfinder.step": attribution.step,
        "faultfinder.decisive_span_id": span_id,
        "faultfinder.method": attribution.method,
        "faultfinder.model": attribution.model,
    }
    if attribution.confidence is not None:
        facts["faultfinder.confidence"] = attribution.confidence
    span = {
        "traceId": trace_id,
        "spanId": secrets.token_hex(8),
        "parentSpanId": span_id,
        "name": "faultfinder.attribution",
        "kind": 1,
        "startTimeUnixNano": str(now),
        "endTimeUnixNano": str(now),
        "attributes": [_attr(k, v) for k, v in facts.items()],
        "events": [
            {
                "timeUnixNano": str(now),
                "name": "faultfinder.verdict",
                "attributes": [
                    *(_attr(k, v) for k, v in facts.items()),
                    _attr("faultfinder.reason", attribution.reason or ""),
                ],
            }
        ],
    }
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [_attr("service.name", "faultfinder")]},
                "scopeSpans": [{"scope": {"name": "faultfinder"}, "spans": [span]}],
            }
        ]
    }


OTLP_HEADER_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
"""Where an OTLP export's headers come from: the first of these that is set and not empty
(the traces-only one wins, as in OpenTelemetry's exporters; the two are not merged)."""
_HEADER_NAME = re.compile(r"[!#-'*+.0-9A-Z^-z|~-]+")


def otlp_headers(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The headers an OTLP export sends, read as OpenTelemetry's exporters read them:
    ``key=value`` entries separated by commas, each key and value URL-decoded (an
    unencoded space in a value is accepted, as the Python SDK does), keys lowercased. An
    entry that cannot be a header is an error naming the variable, the entry's place and
    its key, never its value (it is likely a key)."""
    env = os.environ if environ is None else environ
    variable = next((v for v in OTLP_HEADER_VARIABLES if env.get(v, "").strip()), None)
    if variable is None:
        return {}
    headers: dict[str, str] = {}
    for place, entry in enumerate(env[variable].split(","), start=1):
        if not entry.strip():
            continue
        name, equals, value = entry.partition("=")
        name, value = unquote(name).strip().lower(), unquote(value).strip()
        problem = None
        if not equals or not _HEADER_NAME.fullmatch(name):
            problem = "is not key=value with a header name before '='"
        elif any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            problem = f"(key {name!r}) has a control character in its value"
        elif not value.isascii():  # httpx sends ASCII header values only
            problem = f"(key {name!r}) has a character that is not ASCII in its value"
        if problem is not None:
            raise ConfigError(
                f"{variable}: entry {place} {problem}. Write it as key=value pairs "
                "separated by commas, URL-encoding a ',' or '=' in a value (the "
                "OpenTelemetry exporters' format), e.g. authorization=Bearer%20KEY."
            )
        headers[name] = value
    return headers


def payload_for(target: str, attribution: Attribution, trace: Trace) -> dict[str, Any]:
    if target == "phoenix":
        return phoenix_payload(attribution, trace)
    if target == "langfuse":
        return langfuse_payload(attribution, trace)
    if target == "otlp":
        return otlp_payload(attribution, trace)
    raise ConfigError(f"Unknown export target {target!r}. Available: {', '.join(TARGETS)}.")
