"""The one HTTP/1.1 server of faultfinder (asyncio + h11), behind the recording proxy,
``serve-local`` and the test fake upstream (:mod:`faultfinder.testing.fake_openai`).

It keeps connections alive, reads whole request bodies, and sends either a complete
body or a stream of chunks (chunked transfer encoding, as SSE needs). It binds to
loopback unless told otherwise, and bounds what a client can hold (:class:`HttpLimits`):
a connection idle between requests is closed, a request head or body that does not
arrive in time gets 408 and a closed connection, an oversized body gets 413, an
oversized or malformed head gets 431/400.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import h11

from faultfinder.loopback import LOOPBACK as LOOPBACK
from faultfinder.loopback import is_loopback as is_loopback


def host_name(header: str) -> str:
    """The host of a Host header without its port (``[::1]:8080`` -> ``::1``), lower-cased."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    if value.count(":") == 1:
        return value.split(":", 1)[0]
    return value


def from_a_web_page(request: Request, bound: str) -> tuple[int, str] | None:
    """(status, reason) when ``request``, made to a server bound on ``bound``, looks sent
    by a web page in the user's browser rather than by a program; None otherwise.

    A page reaches a loopback server by DNS rebinding (its own name resolved to 127.0.0.1:
    the Host header names it) or by a cross-origin request (a form, a no-cors ``fetch``):
    browsers then send an ``Origin`` header, which programs and SDKs do not. So, on
    loopback, the Host must name this machine and an Origin must be a loopback one. A
    server bound beyond loopback takes any request (its user was warned that anyone who
    reaches it can use it)."""
    if not is_loopback(bound):
        return None
    host = request.header("host")
    if host is not None:
        name = host_name(host)
        if not (is_loopback(name) or name == bound.lower()):
            return 400, (
                f"Host header {host!r} does not name this loopback server; use 127.0.0.1 "
                "or localhost"
            )
    origin = request.header("origin")
    if origin is not None and not is_loopback(host_name(origin.partition("://")[2])):
        return 403, f"a request from the web page {origin!r} is refused"
    return None


MAX_BODY = 64 * 1024 * 1024
"""Requests larger than this are refused (413); long agent histories stay far below it."""


@dataclass(frozen=True)
class HttpLimits:
    """What one client connection may take from the server."""

    idle_timeout: float = 60.0
    """Seconds a kept-alive connection may wait for its next request before it is closed."""
    header_timeout: float = 10.0
    """Seconds from a request's first byte to the end of its head (408 after that)."""
    body_timeout: float = 60.0
    """Seconds from the end of the head to the end of the body (408 after that)."""
    max_body: int = MAX_BODY
    """Largest request body in bytes (413 above it)."""
    max_head: int = 64 * 1024
    """Largest request head (request line and headers) in bytes (431 above it), however
    the head is split into reads."""
    write_timeout: float = 60.0
    """Seconds a client may leave the server's output unread (the socket's buffers full)
    before the connection is closed: one that stops reading cannot hold it open."""
    max_connections: int = 256
    """Open client connections at most; one more is answered 503 and closed."""


class _Refused(Exception):
    """A request refused before it reached the handler: answer ``status`` and close.
    ``request`` is its head (no body) when that was read."""

    def __init__(self, status: int, message: str, request: Request | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.request = request


@dataclass
class Request:
    """One HTTP request with its whole body."""

    method: str
    target: str
    headers: list[tuple[str, str]]
    """Header (lower-cased name, value) pairs, in order."""
    body: bytes = b""

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), if present."""
        lowered = name.lower()
        return next((v for k, v in self.headers if k == lowered), None)

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def query(self) -> str:
        return self.target.split("?", 1)[1] if "?" in self.target else ""


@dataclass
class Response:
    """A response: ``body`` is bytes, or an async iterator of chunks for a streamed reply."""

    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes | AsyncIterator[bytes] = b""


Handler = Callable[[Request], Awaitable[Response]]
RefusalHook = Callable[[int, str, "Request | None"], Response]
"""Answers a request the server refused before the handler saw it: (status, reason, the
request's head when it was read) -> the response to send."""


def json_response(
    status: int, payload: Any, headers: list[tuple[str, str]] | None = None
) -> Response:
    """A JSON response."""
    data = json.dumps(payload).encode("utf-8")
    return Response(status, [("content-type", "application/json"), *(headers or [])], data)


def error_response(
    status: int,
    message: str,
    kind: str = "faultfinder_proxy_error",
    headers: list[tuple[str, str]] | None = None,
) -> Response:
    """An error in the OpenAI error format, so SDKs show ``message`` to the user."""
    payload = {"error": {"message": message, "type": kind, "code": status}}
    return json_response(status, payload, headers)


class HttpServer:
    """Serves ``handler`` on ``host:port`` (port 0 picks a free one) until closed."""

    def __init__(
        self,
        handler: Handler,
        host: str = LOOPBACK,
        port: int = 0,
        limits: HttpLimits | None = None,
        backlog: int = 128,
        on_refusal: RefusalHook | None = None,
    ) -> None:
        self.handler = handler
        self.on_refusal = on_refusal
        """Shapes (and may note) the answer to a refusal made here, before the handler: a
        body too large, a slow client, a bad or oversized head, too many connections."""
        self.host = host
        self.port = port
        self.limits = limits or HttpLimits()
        self.backlog = backlog
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> HttpServer:
        self._server = await asyncio.start_server(
            self._connection, self.host, self.port, backlog=self.backlog
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def addresses(self) -> set[str]:
        """The interface addresses the server is bound to (empty when not running)."""
        if self._server is None:
            return set()
        return {str(sock.getsockname()[0]) for sock in self._server.sockets}

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    async def __aenter__(self) -> HttpServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if len(self._connections) >= self.limits.max_connections:
            await self._too_many(writer)
            return
        if task is not None:
            self._connections.add(task)
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_head)
        try:
            while True:
                try:
                    request = await self._read_request(conn, reader)
                except _Refused as refused:
                    await self._refuse(conn, writer, refused)
                    break
                if request is None:
                    break
                try:
                    response = await self.handler(request)
                except Exception as exc:
                    response = error_response(500, f"internal error: {type(exc).__name__}: {exc}")
                await self._send(conn, writer, response)
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    break
                try:
                    conn.start_next_cycle()
                except h11.LocalProtocolError:
                    break
        except (ConnectionError, asyncio.CancelledError, h11.ProtocolError):
            pass
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError, RuntimeError):
                await writer.wait_closed()

    async def _too_many(self, writer: asyncio.StreamWriter) -> None:
        """Answer 503 to a connection over ``max_connections`` without reading it, and close."""
        response = self._refusal(503, "too many open connections; try again", None)
        body = response.body if isinstance(response.body, bytes) else b""
        lines = [f"HTTP/1.1 503 {_phrase(503).decode()}"]
        lines += [f"{k}: {v}" for k, v in response.headers if k.lower() not in _MANAGED]
        lines += [f"content-length: {len(body)}", "retry-after: 1", "connection: close"]
        head = "\r\n".join(lines) + "\r\n\r\n"
        with contextlib.suppress(ConnectionError, TimeoutError):
            writer.write(head.encode("latin-1") + body)
            async with asyncio.timeout(1.0):
                await writer.drain()
        writer.close()
        with contextlib.suppress(ConnectionError, asyncio.CancelledError, RuntimeError):
            await writer.wait_closed()

    async def _drain(self, writer: asyncio.StreamWriter) -> None:
        """Wait for the client to take what was written, within ``write_timeout``."""
        try:
            async with asyncio.timeout(self.limits.write_timeout):
                await writer.drain()
        except TimeoutError:
            # close() would wait for the unread output to drain; drop it instead.
            writer.transport.abort()
            raise ConnectionError("the client stopped reading the response") from None

    def _refusal(self, status: int, message: str, request: Request | None) -> Response:
        """The answer to a request refused here: ``on_refusal``'s, else an OpenAI-format error."""
        if self.on_refusal is not None:
            return self.on_refusal(status, message, request)
        return error_response(status, f"faultfinder: {message}")

    async def _refuse(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, refused: _Refused
    ) -> None:
        """Answer a refused request (when the protocol state still allows) and close."""
        response = self._refusal(refused.status, refused.message, refused.request)
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        response.headers.append(("connection", "close"))
        with contextlib.suppress(h11.ProtocolError, ConnectionError):
            await self._send(conn, writer, response)

    async def _read_request(
        self, conn: h11.Connection, reader: asyncio.StreamReader
    ) -> Request | None:
        """The next request, or None when the client closed (or idled out) between
        requests. Raises :class:`_Refused` for a request that breaks the limits."""
        limits = self.limits
        loop = asyncio.get_running_loop()
        request: Request | None = None
        chunks: list[bytes] = []
        size = 0
        deadline: float | None = None
        phase = "idle"
        # h11 bounds only a head still incomplete after a read, so a longer one that ends
        # inside a read got through: the head's bytes are counted here, whatever the reads.
        head_bytes = len(conn.trailing_data[0])  # the start of a pipelined request
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                status = exc.error_status_hint
                message = "request head too large" if status == 431 else f"bad request: {exc}"
                raise _Refused(status, message, request) from None
            if event is h11.NEED_DATA:
                if phase == "idle":
                    timeout: float | None = limits.idle_timeout
                else:
                    assert deadline is not None
                    timeout = max(deadline - loop.time(), 0.0)
                try:
                    async with asyncio.timeout(timeout):
                        data = await reader.read(65536)
                except TimeoutError:
                    if phase == "idle":
                        return None
                    raise _Refused(408, f"request {phase} not received in time", request) from None
                if phase == "idle" and data:
                    phase, deadline = "head", loop.time() + limits.header_timeout
                conn.receive_data(data)
                if request is None:
                    head_bytes += len(data)
                if not data and conn.their_state is not h11.DONE:
                    return None
                continue
            if isinstance(event, h11.Request):
                request = Request(
                    method=event.method.decode("ascii"),
                    target=event.target.decode("latin-1"),
                    headers=[
                        (k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in event.headers
                    ],
                )
                head_bytes -= len(conn.trailing_data[0])  # what came after the head
                if head_bytes > limits.max_head:
                    raise _Refused(431, "request head too large", request)
                declared = request.header("content-length")
                if declared and declared.isdigit() and int(declared) > limits.max_body:
                    raise _Refused(413, f"request body over {limits.max_body} bytes", request)
                phase, deadline = "body", loop.time() + limits.body_timeout
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > limits.max_body:
                    raise _Refused(413, f"request body over {limits.max_body} bytes", request)
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                if request is None:
                    return None
                request.body = b"".join(chunks)
                return request
            elif isinstance(event, h11.ConnectionClosed):
                return None

    async def _send(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, response: Response
    ) -> None:
        headers = [(k, v) for k, v in response.headers if k.lower() not in _MANAGED]
        if isinstance(response.body, bytes):
            headers.append(("content-length", str(len(response.body))))
        head = h11.Response(
            status_code=response.status, headers=headers, reason=_phrase(response.status)
        )
        if isinstance(response.body, bytes):
            writer.write(conn.send(head))
            if response.body:
                writer.write(conn.send(h11.Data(data=response.body)))
            writer.write(conn.send(h11.EndOfMessage()))
            await self._drain(writer)
            return
        # No content-length: h11 picks chunked encoding for HTTP/1.1 clients.
        writer.write(conn.send(head))
        await self._drain(writer)
        iterator = response.body
        try:
            async for chunk in iterator:
                if chunk:
                    writer.write(conn.send(h11.Data(data=chunk)))
                    await self._drain(writer)
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                await aclose()
        writer.write(conn.send(h11.EndOfMessage()))
        await self._drain(writer)


_MANAGED = {"content-length", "transfer-encoding", "connection"}


def _phrase(status: int) -> bytes:
    """The standard reason phrase of ``status`` (clients such as the OpenTelemetry
    exporters log it beside the code), empty for a code without one."""
    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


class ServerThread:
    """Runs an async server factory on its own event loop in a background thread.

    For synchronous callers (tests, benchmarks): ``with ServerThread(factory) as t: t.url``.
    ``factory`` is an async callable returning an object with ``url`` and ``close()``.
    """

    def __init__(self, factory: Callable[[], Awaitable[Any]]) -> None:
        self.factory = factory
        self.server: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return str(self.server.url)

    def start(self) -> ServerThread:
        self._thread = threading.Thread(target=self._run, name="faultfinder-server", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise RuntimeError(f"server failed to start: {self._error}") from self._error
        return self

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self.loop = loop
        asyncio.set_event_loop(loop)
        try:
            self.server = loop.run_until_complete(self.factory())
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    def call(self, coro: Awaitable[Any], timeout: float = 30) -> Any:
        """Run ``coro`` on the server's loop and wait for its result."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def stop(self) -> None:
        if self.loop is None or self._thread is None:
            return
        if self.server is not None:
            self.call(self.server.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)
        self.loop = None

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
