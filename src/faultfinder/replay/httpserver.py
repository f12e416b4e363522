"""A small asyncio HTTP/1.1 server (h11), enough for an OpenAI-compatible endpoint.

It keeps connections alive, reads whole request bodies, and sends either a complete
body or a stream of chunks (chunked transfer encoding, as SSE needs). It binds to
loopback unless told otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import h11

LOOPBACK = "127.0.0.1"
MAX_BODY = 64 * 1024 * 1024
"""Requests larger than this are refused (413); long agent histories stay far below it."""


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


def json_response(
    status: int, payload: Any, headers: list[tuple[str, str]] | None = None
) -> Response:
    """A JSON response."""
    data = json.dumps(payload).encode("utf-8")
    return Response(status, [("content-type", "application/json"), *(headers or [])], data)


def error_response(status: int, message: str, kind: str = "faultfinder_proxy_error") -> Response:
    """An error in the OpenAI error format, so SDKs show ``message`` to the user."""
    return json_response(status, {"error": {"message": message, "type": kind, "code": status}})


class HttpServer:
    """Serves ``handler`` on ``host:port`` (port 0 picks a free one) until closed."""

    def __init__(self, handler: Handler, host: str = LOOPBACK, port: int = 0) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> HttpServer:
        self._server = await asyncio.start_server(self._connection, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

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
        if task is not None:
            self._connections.add(task)
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request = await self._read_request(conn, reader)
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
        except (ConnectionError, asyncio.CancelledError, h11.RemoteProtocolError):
            pass
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError, RuntimeError):
                await writer.wait_closed()

    async def _read_request(
        self, conn: h11.Connection, reader: asyncio.StreamReader
    ) -> Request | None:
        request: Request | None = None
        chunks: list[bytes] = []
        size = 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(65536)
                conn.receive_data(data)
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
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > MAX_BODY:
                    raise h11.RemoteProtocolError("request body too large")
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
            writer.write(conn.send(h11.Response(status_code=response.status, headers=headers)))
            if response.body:
                writer.write(conn.send(h11.Data(data=response.body)))
            writer.write(conn.send(h11.EndOfMessage()))
            await writer.drain()
            return
        # No content-length: h11 picks chunked encoding for HTTP/1.1 clients.
        writer.write(conn.send(h11.Response(status_code=response.status, headers=headers)))
        await writer.drain()
        iterator = response.body
        try:
            async for chunk in iterator:
                if chunk:
                    writer.write(conn.send(h11.Data(data=chunk)))
                    await writer.drain()
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                await aclose()
        writer.write(conn.send(h11.EndOfMessage()))
        await writer.drain()


_MANAGED = {"content-length", "transfer-encoding", "connection"}


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
