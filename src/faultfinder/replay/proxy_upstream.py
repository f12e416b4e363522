"""What the recording proxy sends to an upstream, and what it passes back to the program.

The URL a request goes to (:func:`upstream_url`: the base URL's path and query kept), the
headers it takes (:func:`upstream_headers`: those of the connection dropped, the client's
credential replaced by ``--api-key-env``'s key), the headers the program gets with the
reply (:func:`relayed_headers`) and the text recorded for an upstream's error. Plain
functions of one request or reply, with no state:
:class:`~faultfinder.replay.proxy.RecordingProxy` decides what goes where and when.
``upstream_url`` and ``relayed_headers`` are importable from
:mod:`faultfinder.replay.proxy` too. :func:`direct_to_loopback` keeps the proxy's (and
``export``'s) loopback traffic away from the user's HTTP(S)_PROXY.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from faultfinder.errors import ConfigError
from faultfinder.http_bodies import BodyTooLargeError
from faultfinder.llm import json_text
from faultfinder.loopback import URL_FORM, url_problem
from faultfinder.replay.apis import WireAdapter
from faultfinder.replay.httpserver import Request
from faultfinder.replay.run_format import ERROR_HEADERS
from faultfinder.secret_names import KEY_HEADERS

__all__ = [
    "error_reply",
    "relayed_headers",
    "reply_content_type",
    "reply_of",
    "too_large",
    "upstream_error_text",
    "upstream_headers",
    "upstream_url",
]

_HOP_BY_HOP = {
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-connection",
    "accept-encoding",
}

_NOT_RELAYED = _HOP_BY_HOP | {"content-encoding", "proxy-authenticate"}
"""Upstream response headers the proxy does not pass on: those of the connection
(``connection``, ``transfer-encoding``, ``content-length``: the proxy's server sets its
own) and ``content-encoding`` (the body is read decoded)."""


def upstream_headers(
    request: Request, adapter: WireAdapter | None, upstream_key: str | None
) -> dict[str, str]:
    """The headers a request takes upstream: the client's, without those of the connection
    and faultfinder's own (``x-faultfinder-*``), asking for an unencoded body. With
    ``upstream_key`` (``--api-key-env``), the client's credential headers are replaced by
    that key, in the header ``adapter``'s API reads (a bearer token for other paths)."""
    headers = {
        k: v
        for k, v in request.headers
        if k not in _HOP_BY_HOP and not k.startswith("x-faultfinder-")
    }
    if upstream_key:
        for key in KEY_HEADERS:
            headers.pop(key, None)
        if adapter is not None:
            headers.update(adapter.auth_headers(upstream_key))
        else:
            headers["authorization"] = f"Bearer {upstream_key}"
    headers["accept-encoding"] = "identity"
    return headers


def check_upstream(base: str | None) -> None:
    """Refuse an upstream that is not a URL ('http://[::1', a port that is no number or out
    of range, no host) before the proxy starts, with the reason (ConfigError, never the
    URL, which may hold a key): the program would otherwise get only internal errors.
    The commands refuse such an option at once (exit 2); this catches the upstreams a
    run directory names and callers of the proxy from Python."""
    if base is None:
        return
    if problem := url_problem(base):
        raise ConfigError(f"the upstream is {problem}; give {URL_FORM}")


def upstream_url(base: str, path: str, query: str) -> str:
    """Where a request on ``path`` (as the client sent it, ``/v1`` and all) with ``query``
    goes, for an upstream whose base URL is ``base``: the path after the base's own path,
    and the base's query (``?api-version=...``, ``?api-key=...``) before the request's.
    A fragment of the base is dropped."""
    parts = urlsplit(base)
    rest = path[3:] if path.startswith("/v1/") or path == "/v1" else path
    joined = "&".join(q for q in (parts.query, query) if q)
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + rest, joined, ""))


def relayed_headers(
    upstream: httpx.Response, own: list[tuple[str, str]] | None = None
) -> list[tuple[str, str]]:
    """The headers a client gets with an upstream's reply: ``own`` (the proxy's), then
    every header of the upstream's but those of the connection (:data:`_NOT_RELAYED` and
    any its ``connection`` header names) and those ``own`` sets. They reach the program
    only: no header is written to the run."""
    own = list(own or [])
    dropped = set(_NOT_RELAYED) | {k.lower() for k, _ in own}
    for value in upstream.headers.get_list("connection", split_commas=True):
        dropped.add(value.strip().lower())
    kept = [(k.lower(), v) for k, v in upstream.headers.multi_items() if k.lower() not in dropped]
    return own + kept


def reply_content_type(upstream: httpx.Response) -> list[tuple[str, str]]:
    """The content type of an upstream's reply, as the proxy's own header (JSON unless it
    says otherwise)."""
    return [("content-type", upstream.headers.get("content-type", "application/json"))]


def reply_of(url: str | None) -> str:
    """An upstream's reply at ``url`` (its credentials scrubbed), named in an error."""
    return f"the reply of {url}" if url else "the upstream's reply"


def too_large(exc: BodyTooLargeError) -> str:
    """What the program is told, and the recording says, of an upstream's reply that went
    on past :attr:`~faultfinder.replay.proxy_calls.ProxyConfig.max_reply`."""
    return f"faultfinder proxy: {exc}; the call failed"


def upstream_error_text(content: bytes) -> str:
    """The error recorded for an upstream's error reply: its ``error.message``, else the
    start of its body."""
    try:
        payload = json_text.loads(content)
    except json_text.JSONTextError:
        payload = None
    error = payload.get("error") if isinstance(payload, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    if message:
        return f"upstream error: {message}"
    return "upstream error: " + content[:300].decode("utf-8", errors="replace")


def error_reply(
    content: bytes, headers: httpx.Headers
) -> tuple[dict[str, Any] | list[Any] | str, dict[str, str]]:
    """What is kept of an upstream's error reply, for a replay to send again: its body
    (the JSON the program's SDK parses, else its text) and the headers a client acts on
    (:data:`~faultfinder.replay.run_format.ERROR_HEADERS`). Unscrubbed: the caller
    scrubs both before writing them."""
    text = content.decode("utf-8", errors="replace")
    body: dict[str, Any] | list[Any] | str = text
    try:
        payload = json_text.loads(content)
    except json_text.JSONTextError:
        payload = None
    if isinstance(payload, (dict, list)):
        body = payload
    kept = {name: headers[name] for name in ERROR_HEADERS if name in headers}
    return body, kept
