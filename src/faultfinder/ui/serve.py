"""How `faultfinder ui` listens: the Starlette app served by the project's own HTTP server
(:mod:`faultfinder.replay.httpserver`, the one behind the proxy and ``serve-local``)
through a small ASGI bridge.

uvicorn only times out a connection that stays idle *after* a response: a client that
sends part of a request head, or a body it never finishes, holds its connection for as
long as it likes, and ``limit_concurrency`` of them answer every real request with 503.
The project's server bounds every phase of a request (:class:`HttpLimits`): a connection
idle between requests is closed, a head must arrive within a deadline of its first byte
and a body within one of the head (else 408 and the connection is closed). The UI's
responses are small and complete (pages, JSON, a file of at most 5 MB), so the bridge
collects each one whole and hands it over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from starlette.types import ASGIApp, Message

from faultfinder.replay.httpserver import HttpLimits, HttpServer, Request, Response
from faultfinder.ui.app import MAX_EDIT_BODY

MAX_HEAD = 16 * 1024
"""Largest request head (request line and headers) in bytes; 431 above it."""
UI_LIMITS = HttpLimits(
    idle_timeout=5.0,
    header_timeout=10.0,
    body_timeout=30.0,
    max_body=MAX_EDIT_BODY,
    max_head=MAX_HEAD,
)
"""What one browser connection may take from the UI's server."""
_TEXT = [("content-type", "text/plain; charset=utf-8"), ("x-content-type-options", "nosniff")]
logger = logging.getLogger("faultfinder")


def asgi_handler(app: ASGIApp, server: Callable[[], tuple[str, int]]) -> Any:
    """A handler for :class:`HttpServer` that answers each request with ``app``
    (``server``: the address the server listens on, for the ASGI scope)."""

    async def handle(request: Request) -> Response:
        path, _, query = request.target.partition("?")
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "server": server(),
            "client": None,
            "scheme": "http",
            "method": request.method,
            "root_path": "",
            "path": unquote(path),
            "raw_path": path.encode("latin-1"),
            "query_string": query.encode("latin-1"),
            "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in request.headers],
            "state": {},
        }
        status: int | None = None
        headers: list[tuple[str, str]] = []
        chunks: list[bytes] = []
        body_sent = False
        finished = asyncio.Event()

        async def receive() -> Message:
            nonlocal body_sent
            if not body_sent:
                body_sent = True
                return {"type": "http.request", "body": request.body, "more_body": False}
            await finished.wait()  # the whole body was read: the next news is the end
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers.extend(
                    (bytes(k).decode("latin-1"), bytes(v).decode("latin-1"))
                    for k, v in message.get("headers", [])
                )
            elif message["type"] == "http.response.body":
                chunks.append(bytes(message.get("body", b"")))
                if not message.get("more_body", False):
                    finished.set()

        try:
            await app(scope, receive, send)
        except Exception:
            # The page's user sees a plain 500; whoever runs the UI sees why, as a server
            # log would show it (Starlette re-raises after sending its own 500).
            logger.exception("ui: %s %s failed", request.method, path)
            if status is None or not finished.is_set():
                return Response(500, list(_TEXT), b"internal error")
        finally:
            finished.set()
        if status is None:
            return Response(500, list(_TEXT), b"no response")
        return Response(status, headers, b"".join(chunks))

    return handle


def ui_server(app: ASGIApp, host: str, port: int, limits: HttpLimits = UI_LIMITS) -> HttpServer:
    """An (unstarted) server answering with ``app`` on ``host:port``."""
    holder: list[HttpServer] = []
    server = HttpServer(
        asgi_handler(app, lambda: (holder[0].host, holder[0].port)), host, port, limits
    )
    holder.append(server)
    return server


async def serve(app: ASGIApp, host: str, port: int, started: Callable[[HttpServer], None]) -> None:
    """Serve ``app`` until SIGINT or SIGTERM; ``started`` is called once it listens (an
    OSError from binding is raised before that)."""
    server = await ui_server(app, host, port).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        started(server)
        await stop.wait()
    finally:
        await server.close()
