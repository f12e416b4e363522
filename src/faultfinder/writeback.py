"""Write an attribution back where the user looks at traces: Phoenix, Langfuse, or OTLP.

The decisive step's span id comes from the imported trace (``Step.metadata['span_id']``,
set by the OTLP, Phoenix, Langfuse importers and the collector). Every call goes to the URL
the user names; keys come from the environment and are never written anywhere.

- **Phoenix**: one span annotation (``POST /v1/span_annotations``) on the decisive step's
  span, named ``faultfinder``, ``annotator_kind`` LLM, label ``decisive error``, the reason
  as explanation; ``PHOENIX_API_KEY`` (optional) is sent as a bearer token.
- **Langfuse**: one categorical score (``POST /api/public/scores``) on the trace and the
  decisive observation; basic auth with ``LANGFUSE_PUBLIC_KEY`` / ``LANGFUSE_SECRET_KEY``.
  Its ``id`` is derived from the trace and the method, so exporting again replaces the
  score (Langfuse upserts a score by id) instead of adding another.
- **OTLP**: a ``faultfinder.attribution`` span, child of the decisive span in the same
  trace, carrying a ``faultfinder.verdict`` event (OTLP/JSON, written to a file or posted
  to ``URL/v1/traces``): spans cannot be changed once exported, so the verdict is a child.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx

from faultfinder.errors import ConfigError, FaultfinderError, FaultfinderWarning
from faultfinder.judging.method import Attribution
from faultfinder.redact import Redactor
from faultfinder.replay.httpserver import is_loopback
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


def phoenix_payload(attribution: Attribution, trace: Trace) -> dict[str, Any]:
    step = decisive_step(attribution, trace)
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
                "metadata": _label(attribution, step),
                "identifier": f"faultfinder:{attribution.method}",
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
    """The trace's and the decisive step's ids, which OTLP can link a span to only when
    they are its own: 32 and 16 hex digits, not all zero. Another source's ids (Langfuse's
    UUIDs or names) would be sent as they are and name nothing the receiver holds."""
    sid = span_id_of(step)
    tid = source_trace_id(trace)
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


def payload_for(target: str, attribution: Attribution, trace: Trace) -> dict[str, Any]:
    if target == "phoenix":
        return phoenix_payload(attribution, trace)
    if target == "langfuse":
        return langfuse_payload(attribution, trace)
    if target == "otlp":
        return otlp_payload(attribution, trace)
    raise ConfigError(f"Unknown export target {target!r}. Available: {', '.join(TARGETS)}.")


class ExportUnavailableError(FaultfinderError):
    """The server could not take the verdict now (no answer, a timeout, 429, 5xx) and
    kept failing through the retries: the same export may work later."""


ATTEMPTS = 3
"""Tries of one export when the server is unavailable: 429, 502, 503, 504 (the statuses
OTLP/HTTP names as retryable), no connection or a timeout."""
RETRYABLE = frozenset({429, 502, 503, 504})
LONGEST_WAIT = 30.0
"""A Retry-After longer than this is not waited for: the export stops and says so."""


def _request_parts(
    target: str, url: str
) -> tuple[str, dict[str, str], httpx.BasicAuth | None, list[str]]:
    """Endpoint, headers, auth and the secret values they carry, for ``target`` at ``url``."""
    base = url.rstrip("/")
    if not base.lower().startswith(("http://", "https://")):
        raise ConfigError(f"--url {url!r}: give an http:// or https:// URL.")
    headers = {"content-type": "application/json"}
    if target == "phoenix":
        key = os.environ.get("PHOENIX_API_KEY")
        if key:
            headers["authorization"] = f"Bearer {key}"
        return f"{base}/v1/span_annotations?sync=true", headers, None, [key or ""]
    if target == "langfuse":
        public, secret = (
            os.environ.get("LANGFUSE_PUBLIC_KEY"),
            os.environ.get("LANGFUSE_SECRET_KEY"),
        )
        if not public or not secret:
            raise ConfigError(
                "Set LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY to write scores to Langfuse."
            )
        auth = httpx.BasicAuth(public, secret)
        return f"{base}/api/public/scores", headers, auth, [public, secret]
    endpoint = base if base.endswith("/v1/traces") else f"{base}/v1/traces"
    return endpoint, headers, None, []


def _warn_if_in_clear(url: str, keys: list[str]) -> None:
    """Keys sent by plain http to another machine can be read on the way: say so."""
    parts = urlsplit(url)
    if any(keys) and parts.scheme.lower() == "http" and not is_loopback(parts.hostname or ""):
        warnings.warn(
            FaultfinderWarning(
                f"--url {parts.scheme}://{parts.hostname}: the keys go unencrypted over plain "
                "http to another machine; use https unless the network is yours."
            ),
            stacklevel=2,
        )


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "").strip()
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None  # an HTTP date: the backoff is used instead


def send(
    target: str,
    url: str,
    payload: dict[str, Any],
    *,
    client: httpx.Client | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> httpx.Response:
    """POST ``payload`` to the target's endpoint under ``url``; the response on success.

    A server that is unavailable (see :data:`ATTEMPTS`) is tried again, after its
    Retry-After or 1 s, 2 s; the export is idempotent (Langfuse's score id, Phoenix's
    identifier, one OTLP span id), so a retry never adds a second verdict. Redirects are
    not followed (the keys would go along to a URL the user did not name). Errors say
    what the status means for this target, with every key scrubbed from them."""
    endpoint, headers, auth, keys = _request_parts(target, url)
    _warn_if_in_clear(url, keys)
    scrub = Redactor(keys)
    own = client is None
    http = client or httpx.Client(timeout=httpx.Timeout(TIMEOUT, connect=10.0))
    body = json.dumps(payload).encode()
    try:
        for attempt in range(1, ATTEMPTS + 1):
            wait: float | None = float(2 ** (attempt - 1))
            try:
                response = http.post(
                    endpoint,
                    content=body,
                    headers=headers,
                    auth=auth if auth is not None else httpx.USE_CLIENT_DEFAULT,
                )
            except httpx.HTTPError as exc:
                problem = f"no answer from {endpoint}: {type(exc).__name__}: {exc}"
            else:
                if response.status_code < 300:
                    if target == "otlp":
                        _check_partial_success(endpoint, response, scrub)
                    return response
                if response.status_code not in RETRYABLE:
                    failed = _refusal(target, endpoint, response, body, keys)
                    if response.status_code >= 500:  # the server failed, not the request
                        raise ExportUnavailableError(scrub.text(failed))
                    raise FaultfinderError(scrub.text(failed))
                problem = _unavailable(endpoint, response)
                asked = _retry_after(response)
                wait = wait if asked is None else asked
            if attempt == ATTEMPTS or wait is None or wait > LONGEST_WAIT:
                break
            sleep(wait)
    finally:
        if own:
            http.close()
    later = f" (it asks to wait {wait:g} s)" if wait is not None and wait > LONGEST_WAIT else ""
    raise ExportUnavailableError(
        scrub.text(f"{target}: {problem}; tried {attempt} time(s){later}. Export again later.")
    )


def _check_partial_success(endpoint: str, response: httpx.Response, scrub: Redactor) -> None:
    """OTLP/HTTP answers 200 even when it rejects spans, saying so in ``partialSuccess``
    (``rejectedSpans`` > 0, with an ``errorMessage``): the verdict is the one span sent, so
    a rejection is a failure, not to be retried (the specification forbids it). A
    message with nothing rejected is a warning from the receiver, passed on."""
    try:
        answer = response.json()
    except ValueError:
        return  # an empty or non-JSON body: a plain success
    partial = answer.get("partialSuccess") if isinstance(answer, dict) else None
    if not isinstance(partial, dict):
        return
    message = str(partial.get("errorMessage") or "")
    try:
        rejected = int(partial.get("rejectedSpans") or 0)  # int64: a string in JSON
    except (TypeError, ValueError):
        rejected = 0
    if rejected > 0:
        raise FaultfinderError(
            scrub.text(
                f"otlp: {endpoint} answered 200 but rejected the verdict span "
                f"(partialSuccess, {rejected} rejected): {message or 'no reason given'}"
            )
        )
    if message:
        warnings.warn(
            FaultfinderWarning(
                scrub.text(f"otlp: {endpoint} accepted the span and said: {message}")
            ),
            stacklevel=3,
        )


def _said(response: httpx.Response) -> str:
    """The server's own words, on one line and short."""
    text = " ".join(response.text.split())
    return text[:300] + ("..." if len(text) > 300 else "")


def _unavailable(endpoint: str, response: httpx.Response) -> str:
    code = response.status_code
    what = "rate-limited" if code == 429 else "unavailable"
    return f"{endpoint} is {what} ({code}): {_said(response)}"


def _refusal(
    target: str, endpoint: str, response: httpx.Response, body: bytes, keys: list[str]
) -> str:
    """One line: what the server refused and what to do about it."""
    code, said = response.status_code, _said(response)
    head = f"{target}: {endpoint} answered {code}"
    if 300 <= code < 400:
        where = response.headers.get("location", "?")
        return (
            f"{head}, a redirect to {where}: export does not follow redirects (the keys "
            "would go along); give the URL it redirects to as --url."
        )
    if code == 401:
        if target == "langfuse":
            hint = (
                "the keys were refused: use the public and secret key of the project that "
                "holds the trace, with --url the host they belong to (EU "
                "https://cloud.langfuse.com, US https://us.cloud.langfuse.com, or yours)"
            )
        elif target == "phoenix":
            hint = (
                "this Phoenix needs an API key: set PHOENIX_API_KEY"
                if not any(keys)
                else "PHOENIX_API_KEY was refused: use an API key of this Phoenix"
            )
        else:
            hint = "the receiver wants credentials, which export does not send"
        return f"{head} (not authenticated): {hint}. It said: {said}"
    if code == 403:
        return (
            f"{head} (forbidden): the key may not write here (a viewer's key or read-only "
            f"mode in Phoenix, suspended ingestion in Langfuse). It said: {said}"
        )
    if code == 404:
        if target == "phoenix" and "do not exist" in said:
            return (
                f"{head}: this Phoenix holds no span with the decisive step's id. Is --url "
                "the Phoenix the trace was exported from, and have its spans arrived? "
                f"It said: {said}"
            )
        return (
            f"{head} (not found): is --url the {target} server's base URL (without "
            f"/v1 or /api/public)? It said: {said}"
        )
    if code == 413:
        return (
            f"{head} (too large): the request was {len(body)} bytes, more than the server "
            f"(or a proxy before it) accepts. It said: {said}"
        )
    if code >= 500:
        return f"{head} (server error): {said}"
    return f"{head} (the request was refused): {said}"


def receipt(target: str, payload: dict[str, Any], response: httpx.Response) -> str:
    """What was written where, with the id the server gave it (when it gave one)."""
    try:
        answer = response.json()
    except ValueError:
        answer = None
    if target == "langfuse":
        given = answer.get("id") if isinstance(answer, dict) else None
        return (
            f"score {given or payload['id']} on trace {payload['traceId']}, observation "
            f"{payload['observationId']}"
        )
    if target == "phoenix":
        (annotation,) = payload["data"]
        data = answer.get("data") if isinstance(answer, dict) else None
        given = data[0].get("id") if isinstance(data, list) and data else None
        named = f"annotation {given}" if isinstance(given, str) else "an annotation"
        return f"{named} on span {annotation['span_id']}"
    (span,) = payload["resourceSpans"][0]["scopeSpans"][0]["spans"]
    return f"span {span['spanId']} under span {span['parentSpanId']} of trace {span['traceId']}"
