"""A loopback fake of the OpenAI chat-completions API, for tests and benchmarks.

It is a small asyncio HTTP/1.1 server (keep-alive, chunked SSE) running in a background
thread, so hundreds of concurrent requests with a fixed latency cost one coroutine each.
It binds to 127.0.0.1 only.

    with FakeOpenAIServer(reply="Agent Name: A\\nStep Number: 1", latency=0.5) as server:
        backend = OpenAICompatBackend("fake", base_url=server.base_url)

``reply`` is a string, or a callable receiving the full JSON request body and returning
a string, ``{"text": ..., "tool_calls": [{"name", "arguments"}], "usage": {...},
"finish_reason": ...}``, or a complete chat-completion dict (one with ``"choices"``).
The callable may be async, and may raise :class:`ReplyError` to answer with an HTTP error.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import json
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

ReplyValue = str | dict[str, Any]
ReplyCallable = Callable[[dict[str, Any]], "ReplyValue | Awaitable[ReplyValue]"]

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    413: "Payload Too Large",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


class ReplyError(Exception):
    """Raised by a reply callable to answer with an HTTP error instead of a completion."""

    def __init__(
        self, status: int, message: str = "", headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message or f"HTTP {status}")
        self.status = status
        self.message = message or f"fake error {status}"
        self.headers = dict(headers or {})


@dataclass
class RecordedRequest:
    """One request the server received."""

    method: str
    """HTTP method."""
    path: str
    """Request path without the query string, e.g. '/v1/chat/completions'."""
    headers: dict[str, str]
    """Header names lower-cased."""
    body: dict[str, Any] | None = None
    """The parsed JSON body (None for GET or an unparseable body)."""
    received_at: float = field(default_factory=time.perf_counter)
    """time.perf_counter() when the request was read."""


def _approx_tokens(text: str) -> int:
    return (len(text) + 3) // 4


def _messages_text(body: dict[str, Any]) -> str:
    parts: list[str] = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "\n".join(parts)


class FakeOpenAIServer:
    """An OpenAI-compatible server on 127.0.0.1 with scripted replies and faults."""

    def __init__(
        self,
        reply: str | ReplyCallable = "OK",
        *,
        latency: float = 0.0,
        fail_first: int = 0,
        fail_status: int = 429,
        retry_after: float | str | None = None,
        stream_support: bool = True,
        stream_linger: float = 0.0,
        model: str = "fake-model",
        port: int = 0,
    ) -> None:
        self.reply = reply
        self.latency = latency
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.retry_after = retry_after
        self.stream_support = stream_support
        # Seconds between '[DONE]' and the end of a streamed body, as some upstreams take.
        self.stream_linger = stream_linger
        self.model = model
        self.requests: list[RecordedRequest] = []
        self.port: int | None = None
        self._requested_port = port
        self.max_in_flight = 0
        self._in_flight = 0
        self._failures_sent = 0
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._connections: set[asyncio.Task[None]] = set()

    # --- lifecycle ---------------------------------------------------------------

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("FakeOpenAIServer is not running; use it as a context manager")
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """Received POST /chat/completions requests (including failed ones)."""
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def start(self) -> FakeOpenAIServer:
        self._thread = threading.Thread(target=self._run, name="fake-openai", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self._startup_error is not None:
            raise RuntimeError(f"fake server failed to start: {self._startup_error}")
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is None or self._thread is None:
            return
        if loop.is_running():
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
        self._thread.join(10)
        self._loop = None
        self.port = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            self._server = loop.run_until_complete(
                asyncio.start_server(self._handle, "127.0.0.1", self._requested_port, backlog=1024)
            )
            self.port = self._server.sockets[0].getsockname()[1]
        except BaseException as exc:
            self._startup_error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    # --- HTTP ----------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while True:
                keep_alive = await self._serve_one(reader, writer)
                if not keep_alive:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            # Shutdown cancels idle keep-alive connections; that is the normal end.
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, version = ([*lines[0].split(" "), "", "", ""])[:3]
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        raw = await self._read_body(reader, headers)
        keep_alive = headers.get("connection", "").lower() != "close" and version == "HTTP/1.1"
        path = path.split("?", 1)[0]

        if method == "GET" and path.rstrip("/").endswith("/models"):
            self.requests.append(RecordedRequest(method, path, headers))
            await self._send_json(writer, 200, self._models(), keep_alive=keep_alive)
            return keep_alive
        if not path.rstrip("/").endswith("/chat/completions"):
            self.requests.append(RecordedRequest(method, path, headers))
            await self._send_error(writer, 404, f"no route {method} {path}", keep_alive)
            return keep_alive
        if method != "POST":
            self.requests.append(RecordedRequest(method, path, headers))
            await self._send_error(writer, 405, "use POST", keep_alive)
            return keep_alive
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as exc:
            self.requests.append(RecordedRequest(method, path, headers))
            await self._send_error(writer, 400, f"invalid JSON: {exc}", keep_alive)
            return keep_alive
        self.requests.append(RecordedRequest(method, path, headers, body))

        self._in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            if self.latency > 0:
                await asyncio.sleep(self.latency)
            await self._chat(writer, body, keep_alive)
        finally:
            self._in_flight -= 1
        return keep_alive

    async def _read_body(self, reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    # Trailers (normally none) end with an empty line.
                    while (await reader.readuntil(b"\r\n")) != b"\r\n":
                        pass
                    return b"".join(chunks)
                chunks.append(await reader.readexactly(size))
                await reader.readexactly(2)
        length = int(headers.get("content-length", "0") or 0)
        return await reader.readexactly(length) if length else b""

    async def _chat(
        self, writer: asyncio.StreamWriter, body: dict[str, Any], keep_alive: bool
    ) -> None:
        if self._failures_sent < self.fail_first:
            self._failures_sent += 1
            extra = {} if self.retry_after is None else {"Retry-After": str(self.retry_after)}
            await self._send_error(
                writer, self.fail_status, "fake failure", keep_alive, extra_headers=extra
            )
            return
        stream = bool(body.get("stream"))
        if stream and not self.stream_support:
            await self._send_error(writer, 400, "streaming is not supported here", keep_alive)
            return
        try:
            value = await self._reply_value(body)
        except ReplyError as exc:
            await self._send_error(
                writer, exc.status, exc.message, keep_alive, extra_headers=exc.headers
            )
            return
        completion = self._completion(body, value)
        if stream:
            await self._send_stream(writer, body, completion, keep_alive)
        else:
            await self._send_json(writer, 200, completion, keep_alive=keep_alive)

    async def _reply_value(self, body: dict[str, Any]) -> ReplyValue:
        if isinstance(self.reply, str):
            return self.reply
        result = self.reply(body)
        if inspect.isawaitable(result):
            result = await result
        return result

    def _models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {"id": self.model, "object": "model", "created": 0, "owned_by": "faultfinder"}
            ],
        }

    def _completion(self, body: dict[str, Any], value: ReplyValue) -> dict[str, Any]:
        if isinstance(value, dict) and "choices" in value:
            return value
        spec: dict[str, Any] = {"text": value} if isinstance(value, str) else dict(value)
        text = str(spec.get("text") or "")
        tool_calls = [
            {
                "id": call.get("id") or f"call_{i}",
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": call["arguments"]
                    if isinstance(call.get("arguments"), str)
                    else json.dumps(call.get("arguments", {})),
                },
            }
            for i, call in enumerate(spec.get("tool_calls") or [])
        ]
        message: dict[str, Any] = {"role": "assistant", "content": text if text else None}
        if tool_calls:
            message["tool_calls"] = tool_calls
        finish = spec.get("finish_reason") or ("tool_calls" if tool_calls else "stop")
        completion: dict[str, Any] = {
            "id": f"chatcmpl-fake-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
        usage = spec.get("usage", "auto")
        if usage == "auto":
            prompt = _approx_tokens(_messages_text(body))
            produced = _approx_tokens(text + "".join(json.dumps(c) for c in tool_calls))
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": produced,
                "total_tokens": prompt + produced,
            }
        if usage is not None:
            completion["usage"] = usage
        return completion

    async def _send_json(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        payload: dict[str, Any],
        *,
        keep_alive: bool,
        extra_headers: dict[str, str] | None = None,
    ) -> None:
        data = json.dumps(payload).encode("utf-8")
        headers = {
            "Content-Type": "application/json",
            "Content-Length": str(len(data)),
            "Connection": "keep-alive" if keep_alive else "close",
            **(extra_headers or {}),
        }
        writer.write(self._head(status, headers) + data)
        await writer.drain()

    async def _send_error(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        message: str,
        keep_alive: bool,
        extra_headers: dict[str, str] | None = None,
    ) -> None:
        payload = {
            "error": {"message": message, "type": "fake_error", "param": None, "code": status}
        }
        await self._send_json(
            writer, status, payload, keep_alive=keep_alive, extra_headers=extra_headers
        )

    async def _send_stream(
        self,
        writer: asyncio.StreamWriter,
        body: dict[str, Any],
        completion: dict[str, Any],
        keep_alive: bool,
    ) -> None:
        headers = {
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "Transfer-Encoding": "chunked",
            "Connection": "keep-alive" if keep_alive else "close",
        }
        writer.write(self._head(200, headers))
        for chunk in self._chunks(body, completion):
            event = f"data: {json.dumps(chunk)}\n\n".encode()
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
        done = b"data: [DONE]\n\n"
        writer.write(b"%x\r\n%s\r\n" % (len(done), done))
        if self.stream_linger:
            await writer.drain()
            await asyncio.sleep(self.stream_linger)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    def _chunks(self, body: dict[str, Any], completion: dict[str, Any]) -> list[dict[str, Any]]:
        choice = completion["choices"][0]
        message = choice.get("message") or {}
        base = {
            "id": completion.get("id", "chatcmpl-fake"),
            "object": "chat.completion.chunk",
            "created": completion.get("created", int(time.time())),
            "model": completion.get("model", self.model),
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        chunks = [chunk({"role": "assistant", "content": ""})]
        text = message.get("content") or ""
        # Split on word boundaries so clients reassemble several pieces, as with real servers.
        pieces = [p for p in text.replace(" ", " \0").split("\0") if p]
        chunks.extend(chunk({"content": piece}) for piece in pieces)
        for i, call in enumerate(message.get("tool_calls") or []):
            function = call["function"]
            chunks.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": i,
                                "id": call["id"],
                                "type": "function",
                                "function": {"name": function["name"], "arguments": ""},
                            }
                        ]
                    }
                )
            )
            chunks.append(
                chunk(
                    {"tool_calls": [{"index": i, "function": {"arguments": function["arguments"]}}]}
                )
            )
        chunks.append(chunk({}, choice.get("finish_reason") or "stop"))
        options = body.get("stream_options") or {}
        if options.get("include_usage") and completion.get("usage") is not None:
            chunks.append({**base, "choices": [], "usage": completion["usage"]})
        return chunks

    @staticmethod
    def _head(status: int, headers: dict[str, str]) -> bytes:
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
        lines.extend(f"{name}: {value}" for name, value in headers.items())
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def main(argv: list[str] | None = None) -> None:
    """Run the fake server in its own process (no GIL shared with the client under test)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m faultfinder.testing",
        description="A loopback fake OpenAI-compatible server with a fixed reply.",
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free)")
    parser.add_argument("--reply", default="OK", help="reply text for every request")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each reply")
    parser.add_argument("--fail-first", type=int, default=0, help="fail this many requests")
    parser.add_argument("--fail-status", type=int, default=429, help="status of failures")
    parser.add_argument("--retry-after", default=None, help="Retry-After header on failures")
    args = parser.parse_args(argv)
    server = FakeOpenAIServer(
        args.reply,
        latency=args.latency,
        fail_first=args.fail_first,
        fail_status=args.fail_status,
        retry_after=args.retry_after,
        port=args.port,
    )
    with server:
        print(server.base_url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
