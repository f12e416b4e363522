"""Sending a verdict to the server the user named (``faultfinder export --url``): the
endpoint and keys of each target, retries of an unavailable server, what a refusal means
for that tool, and the receipt printed after. The payloads are
:mod:`faultfinder.writeback`'s.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
import warnings
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx

from faultfinder.errors import ConfigError, FaultfinderError, FaultfinderWarning
from faultfinder.http_bodies import BodyTooLargeError, limit_body
from faultfinder.llm import json_text
from faultfinder.loopback import direct_to_loopback, url_problem
from faultfinder.redact import Redactor
from faultfinder.replay.httpserver import is_loopback
from faultfinder.writeback import OTLP_HEADER_VARIABLES, TIMEOUT, otlp_headers


class ExportUnavailableError(FaultfinderError):
    """The server could not take the verdict now (no answer, a timeout, 429, 5xx) and
    kept failing through the retries: the same export may work later."""


ATTEMPTS = 3
"""Tries of one export when the server is unavailable: 429, 502, 503, 504 (the statuses
OTLP/HTTP names as retryable), no connection or a timeout."""
RETRYABLE = frozenset({429, 502, 503, 504})
ATTEMPT_DEADLINE = 60.0
"""Seconds one attempt may take in all, from connecting to the last byte of the answer
(httpx's own timeouts, :data:`~faultfinder.writeback.TIMEOUT`, are per read)."""
LONGEST_WAIT = 30.0
"""A Retry-After longer than this is not waited for: the export stops and says so."""
MAX_ANSWER = 1024 * 1024
"""Bytes of a server's answer read, at most. An answer to one verdict is an id or an
error message (a few hundred bytes); what comes after this much is not read, so a server
sending an endless body cannot fill the memory. Its status and headers still count."""


def _request_parts(
    target: str, url: str
) -> tuple[str, dict[str, str], httpx.BasicAuth | None, list[str]]:
    """Endpoint, headers, auth and the secret values they carry, for ``target`` at ``url``."""
    base = url.rstrip("/")
    if problem := url_problem(base):  # the reason, never the URL, which may hold a key
        raise ConfigError(f"--url is {problem}; give http(s)://HOST[:PORT]")
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
    extra = otlp_headers()  # a hosted backend's key: never written anywhere
    return endpoint, {**extra, **headers}, None, list(extra.values())


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
    client: httpx.AsyncClient | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> httpx.Response:
    """POST ``payload`` to the target's endpoint under ``url``; the response on success.

    A server that is unavailable (see :data:`ATTEMPTS`) is tried again, after its
    Retry-After or 1 s, 2 s; the export is idempotent (Langfuse's score id, Phoenix's
    identifier, one OTLP span id), so a retry never adds a second verdict. Each attempt
    ends within :data:`ATTEMPT_DEADLINE`, however slowly the server sends. A host name
    that does not resolve is not tried again: it is ``--url``'s mistake. Redirects are
    not followed (the keys would go along to a URL the user did not name). Errors say
    what the status means for this target, with every key scrubbed from them.
    ``client``, when given, is the caller's to close."""
    endpoint, headers, auth, keys = _request_parts(target, url)
    _warn_if_in_clear(url, keys)
    return asyncio.run(_send(target, url, endpoint, headers, auth, keys, payload, client, sleep))


async def _send(
    target: str,
    url: str,
    endpoint: str,
    headers: dict[str, str],
    auth: httpx.BasicAuth | None,
    keys: list[str],
    payload: dict[str, Any],
    client: httpx.AsyncClient | None,
    sleep: Callable[[float], None],
) -> httpx.Response:
    scrub = Redactor(keys)
    http = client or httpx.AsyncClient(
        timeout=httpx.Timeout(TIMEOUT, connect=10.0), mounts=direct_to_loopback([url])
    )
    body = json.dumps(payload).encode()
    try:
        for attempt in range(1, ATTEMPTS + 1):
            wait: float | None = float(2 ** (attempt - 1))
            try:
                # httpx's timeouts are per read: a server sending a byte now and then
                # never trips them, so the whole attempt has a deadline of its own.
                async with asyncio.timeout(ATTEMPT_DEADLINE):
                    response = await _post(http, endpoint, body, headers, auth)
            except TimeoutError:
                problem = (
                    f"no whole answer from {endpoint} within {ATTEMPT_DEADLINE:g} s "
                    "(it was too slow to send it)"
                )
            except httpx.HTTPError as exc:
                _raise_if_not_resolved(url, exc)
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
            sleep(wait)  # this loop serves this export alone: nothing waits on it
    finally:
        if client is None:
            await http.aclose()
    later = f" (it asks to wait {wait:g} s)" if wait is not None and wait > LONGEST_WAIT else ""
    raise ExportUnavailableError(
        scrub.text(f"{target}: {problem}; tried {attempt} time(s){later}. Export again later.")
    )


async def _post(
    http: httpx.AsyncClient,
    endpoint: str,
    body: bytes,
    headers: dict[str, str],
    auth: httpx.BasicAuth | None,
) -> httpx.Response:
    """The server's answer to ``body``, its body read up to :data:`MAX_ANSWER` bytes
    (cut there, and the connection closed, when it sends more)."""
    # Asked unencoded, so what is cut is text; a server encoding it anyway is decoded
    # chunk by chunk within the same bound (a small gzip body can expand a thousandfold).
    asked = {**headers, "accept-encoding": "identity"}
    request = http.build_request("POST", endpoint, content=body, headers=asked)
    answer = await http.send(
        request, auth=auth if auth is not None else httpx.USE_CLIENT_DEFAULT, stream=True
    )
    # A transport that read the body already (a test's mock) gives it whole, decoded.
    kept = bytearray()
    try:
        if answer.is_stream_consumed:
            kept += answer.content[:MAX_ANSWER]
        else:
            limit_body(answer, MAX_ANSWER, f"the answer of {endpoint}")
            async for chunk in answer.aiter_bytes():
                kept += chunk
    except BodyTooLargeError:
        pass  # cut there: it is read only for an id or a reason
    finally:
        await answer.aclose()
    return httpx.Response(
        answer.status_code,
        headers=[(k, v) for k, v in answer.headers.items() if k not in _FRAMING],
        content=bytes(kept),
        request=request,
    )


_FRAMING = frozenset({"content-length", "content-encoding", "transfer-encoding"})
"""Headers that describe the body as sent, not as kept (decoded, perhaps cut)."""


_NO_SUCH_HOST = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}
"""getaddrinfo's answers that the name does not exist (or has no address): not a passing
failure, unlike EAI_AGAIN (the resolver could not be reached), which is tried again."""


def _raise_if_not_resolved(url: str, exc: BaseException) -> None:
    """A ConfigError when ``exc`` came from a host name that does not resolve."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, socket.gaierror):
        cause = cause.__cause__ or cause.__context__
    if cause is not None and cause.errno in _NO_SUCH_HOST:
        host = urlsplit(url).hostname or "?"  # not the whole URL: it may hold a password
        raise ConfigError(
            f"--url: the host name {host!r} does not resolve ({cause.strerror}). Check it "
            "for a typo, or whether it is known only on another network (a VPN, a container "
            "network) or this machine is offline; an IP address works too."
        ) from None


def _check_partial_success(endpoint: str, response: httpx.Response, scrub: Redactor) -> None:
    """OTLP/HTTP answers 200 even when it rejects spans, saying so in ``partialSuccess``
    (``rejectedSpans`` > 0, with an ``errorMessage``): the verdict is the one span sent, so
    a rejection is a failure, not to be retried (the specification forbids it). A
    message with nothing rejected is a warning from the receiver, passed on."""
    try:
        answer = json_text.loads(response.content)
    except json_text.JSONTextError:
        return  # an empty or unreadable body: a plain success
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
            hint = (
                f"the receiver wants credentials: set {OTLP_HEADER_VARIABLES[1]} (or "
                f"{OTLP_HEADER_VARIABLES[0]}) to its headers, e.g. authorization=Bearer%20KEY"
                if not any(keys)
                else f"the headers of {' or '.join(OTLP_HEADER_VARIABLES)} were refused"
            )
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
        answer = json_text.loads(response.content)
    except json_text.JSONTextError:
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
