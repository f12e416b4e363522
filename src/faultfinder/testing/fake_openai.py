"""A loopback fake of the OpenAI chat-completions API, for tests and benchmarks.

It runs faultfinder's own HTTP server (:mod:`faultfinder.replay.httpserver`, the one
behind the proxy) on its own event loop in a background thread, so hundreds of
concurrent requests with a fixed latency cost one coroutine each. It binds to 127.0.0.1
only.

    with FakeOpenAIServer(reply="Agent Name: A\\nStep Number: 1", latency=0.5) as server:
        backend = OpenAICompatBackend("fake", base_url=server.base_url)

``reply`` is a string, or a callable receiving the full JSON request body and returning
a string, ``{"text": ..., "tool_calls": [{"name", "arguments"}], "usage": {...},
"finish_reason": ...}``, or a complete chat-completion dict (one with ``"choices"``).
A spec's ``"stream_error": {"error": {...}, "done": bool}`` breaks a streamed reply off
with that error chunk (:func:`faultfinder.testing.fake_chat.chat_stream`).
The callable may be async, and may raise :class:`ReplyError` to answer with an HTTP error.

What a Chat Completions answer looks like (completion, chunks, errors) is
:mod:`faultfinder.testing.fake_chat`; this module decides when and whether to answer
(routing, faults, latency, the prefix cache) and records what it received.

Besides Chat Completions the server speaks every API mounted on it (:class:`FakeAPI`):
the Responses API (:mod:`faultfinder.testing.fake_responses`) and, when its module is
present, Anthropic's Messages API (``faultfinder.testing.fake_messages.FakeMessages``).
For those the reply callable gets the request in canonical chat form (``messages``,
chat-style ``tools``) with ``"api"`` naming the API and ``"raw"`` holding the body as
sent, so one scripted model can play a team whatever API its agents speak.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import itertools
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from faultfinder.llm import json_text
from faultfinder.replay.httpserver import (
    LOOPBACK,
    HttpLimits,
    HttpServer,
    Request,
    Response,
    ServerThread,
    json_response,
)
from faultfinder.testing.fake_chat import SSE_HEADERS, chat_completion, chat_error, chat_stream
from faultfinder.testing.prefix_cache import PrefixCache, prompt_text

ReplyValue = str | dict[str, Any]
ReplyCallable = Callable[[dict[str, Any]], "ReplyValue | Awaitable[ReplyValue]"]


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
    api: str | None = None
    """The model API of a model call ('chat', 'responses', ...); None for other paths."""


class FakeAPI(Protocol):
    """A model API the fake serves besides Chat Completions (one module each: see
    :mod:`faultfinder.testing.fake_responses`). Mount one with
    :meth:`FakeOpenAIServer.mount`; :func:`default_apis` lists those mounted by default."""

    name: str
    """The API's adapter name ('responses', 'messages')."""

    def handles(self, method: str, path: str) -> bool:
        """Is ``method path`` (agent prefix removed) a model call of this API?"""
        ...

    def check(self, body: dict[str, Any]) -> str | None:
        """Why the server refuses the request (answered 400), or None."""
        ...

    def canonical(self, body: dict[str, Any]) -> dict[str, Any]:
        """What the reply callable gets: the request in canonical chat form, with "api"
        and "raw" (the body as sent)."""
        ...

    def is_complete(self, value: Any) -> bool:
        """Is a callable's answer already a complete reply of this API (sent as is)?"""
        ...

    def build(
        self, body: dict[str, Any], spec: dict[str, Any], model: str, cached: int | None
    ) -> dict[str, Any]:
        """The complete reply for ``spec`` (``text``, ``tool_calls``, ``usage``...)."""
        ...

    def remember(self, body: dict[str, Any], response: dict[str, Any]) -> None:
        """Keep a reply sent as is (for APIs whose later requests can name it)."""
        ...

    def stream(self, response: dict[str, Any]) -> list[bytes]:
        """The reply as a stream: encoded events, each sent as its own write."""
        ...

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """An error in the API's own format."""
        ...


def default_apis() -> list[FakeAPI]:
    """The APIs a new fake server speaks besides Chat Completions: Responses, and
    Messages when ``faultfinder.testing.fake_messages`` is present."""
    from faultfinder.testing.fake_responses import FakeResponses

    apis: list[FakeAPI] = [FakeResponses()]
    try:
        module = importlib.import_module("faultfinder.testing.fake_messages")
    except ModuleNotFoundError as exc:
        if exc.name != "faultfinder.testing.fake_messages":
            raise
    else:
        apis.append(module.FakeMessages())
    return apis


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
        prefix_cache: PrefixCache | None = None,
    ) -> None:
        self.reply = reply
        # When set, 'auto' usage reports prompt_tokens_details.cached_tokens as a server
        # with automatic prefix caching would (faultfinder.testing.prefix_cache).
        self.prefix_cache = prefix_cache
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
        self._thread: ServerThread | None = None
        self.apis: list[FakeAPI] = default_apis()
        """APIs served besides Chat Completions (see :class:`FakeAPI`)."""

    def mount(self, api: FakeAPI) -> FakeOpenAIServer:
        """Serve ``api`` too (replacing a mounted API of the same name)."""
        self.apis = [a for a in self.apis if a.name != api.name] + [api]
        return self

    # --- lifecycle ---------------------------------------------------------------

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("FakeOpenAIServer is not running; use it as a context manager")
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def addresses(self) -> set[str]:
        """The interface addresses the server is bound to."""
        return set() if self._thread is None else set(self._thread.server.addresses)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """Received POST /chat/completions requests (including failed ones)."""
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    @property
    def model_requests(self) -> list[RecordedRequest]:
        """Received model calls of every API (including failed ones)."""
        return [r for r in self.requests if r.api is not None]

    def requests_of(self, api: str) -> list[RecordedRequest]:
        """Received model calls of one API ('chat', 'responses', 'messages')."""
        return [r for r in self.requests if r.api == api]

    def start(self) -> FakeOpenAIServer:
        async def serve() -> HttpServer:
            server = HttpServer(
                self._handle,
                LOOPBACK,
                self._requested_port,
                limits=HttpLimits(max_connections=1024),
                backlog=1024,
            )
            return await server.start()

        try:
            self._thread = ServerThread(serve).start()
        except RuntimeError as exc:
            raise RuntimeError(f"fake server failed to start: {exc}") from None
        self.port = self._thread.server.port
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.stop()
            self._thread = None
        self.port = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- HTTP ----------------------------------------------------------------------

    async def _handle(self, request: Request) -> Response:
        method, path = request.method, request.path
        headers = dict(request.headers)
        if method == "GET" and path.rstrip("/").endswith("/models"):
            self.requests.append(RecordedRequest(method, path, headers))
            return json_response(200, self._models())
        api = next((a for a in self.apis if a.handles(method, path)), None)
        if api is not None:
            return await self._api_call(api, request)
        for mounted in self.apis:
            retrieve = getattr(mounted, "retrieve", None)
            stored = retrieve(method, path) if retrieve is not None else None
            if stored is not None:
                self.requests.append(RecordedRequest(method, path, headers))
                return json_response(200, stored)
        if not path.rstrip("/").endswith("/chat/completions"):
            self.requests.append(RecordedRequest(method, path, headers))
            return chat_error(404, f"no route {method} {path}")
        if method != "POST":
            self.requests.append(RecordedRequest(method, path, headers))
            return chat_error(405, "use POST")
        try:
            body = json_text.loads(request.body or b"{}")
        except json_text.JSONTextError as exc:
            self.requests.append(RecordedRequest(method, path, headers, api="chat"))
            return chat_error(400, f"invalid JSON: {exc}")
        self.requests.append(RecordedRequest(method, path, headers, body, api="chat"))
        if not isinstance(body, dict):
            return chat_error(400, "the body must be a JSON object")
        self._in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self._in_flight)
        # A caching server serves what earlier *completed* requests computed: look the
        # prompt up on arrival, remember it once answered.
        prompt = prompt_text(body.get("messages") or [], body.get("tools"))
        cached = self.prefix_cache.lookup(prompt) if self.prefix_cache is not None else None
        try:
            if self.latency > 0:
                await asyncio.sleep(self.latency)
            response = await self._chat(body, cached)
        finally:
            self._in_flight -= 1
        if self.prefix_cache is not None and response.status == 200:
            self.prefix_cache.remember(prompt)
        return response

    async def _api_call(self, api: FakeAPI, request: Request) -> Response:
        """A model call of a mounted API: the same faults, latency and scripted replies
        as chat completions, in that API's wire format."""
        method, path, headers = request.method, request.path, dict(request.headers)

        def error(status: int, message: str, extra: dict[str, str] | None = None) -> Response:
            return json_response(
                status, api.error_body(status, message), list((extra or {}).items())
            )

        try:
            body = json_text.loads(request.body or b"{}")
        except json_text.JSONTextError as exc:
            self.requests.append(RecordedRequest(method, path, headers, api=api.name))
            return error(400, f"invalid JSON: {exc}")
        self.requests.append(RecordedRequest(method, path, headers, body, api=api.name))
        if not isinstance(body, dict):
            return error(400, "the body must be a JSON object")
        problem = api.check(body)
        if problem:
            return error(400, problem)
        self._in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            if self.latency > 0:
                await asyncio.sleep(self.latency)
            if self._failures_sent < self.fail_first:
                self._failures_sent += 1
                extra = {} if self.retry_after is None else {"Retry-After": str(self.retry_after)}
                return error(self.fail_status, "fake failure", extra)
            stream = bool(body.get("stream"))
            if stream and not self.stream_support:
                return error(400, "streaming is not supported here")
            try:
                value = await self._reply_value(api.canonical(body))
            except ReplyError as exc:
                return error(exc.status, exc.message, exc.headers)
            if api.is_complete(value):
                assert isinstance(value, dict)
                reply = value
                api.remember(body, reply)
            else:
                spec = {"text": value} if isinstance(value, str) else dict(value)
                reply = api.build(body, spec, self.model, None)
            accepted = getattr(api, "accepted", None)
            if accepted is not None:
                reply = accepted(body, reply)
        finally:
            self._in_flight -= 1
        if stream:
            events = api.stream(reply)

            async def send() -> AsyncIterator[bytes]:
                for event in events:
                    yield event
                if self.stream_linger:
                    await asyncio.sleep(self.stream_linger)

            return Response(200, SSE_HEADERS, send())
        return json_response(200, reply)

    async def _chat(self, body: dict[str, Any], cached: int | None = None) -> Response:
        if self._failures_sent < self.fail_first:
            self._failures_sent += 1
            extra = {} if self.retry_after is None else {"Retry-After": str(self.retry_after)}
            return chat_error(self.fail_status, "fake failure", extra)
        stream = bool(body.get("stream"))
        if stream and not self.stream_support:
            return chat_error(400, "streaming is not supported here")
        try:
            value = await self._reply_value(body)
        except ReplyError as exc:
            return chat_error(exc.status, exc.message, exc.headers)
        completion = chat_completion(body, value, model=self.model, ids=self._ids, cached=cached)
        if stream:
            error = value.get("stream_error") if isinstance(value, dict) else None
            chunks = chat_stream(body, completion, self.model, self.stream_linger, error)
            return Response(200, SSE_HEADERS, chunks)
        return json_response(200, completion)

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
