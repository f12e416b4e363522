"""The recording proxy: an OpenAI-compatible endpoint that forwards to any upstream and
writes each chat-completion call as a step of a run.

Point a program's ``OPENAI_BASE_URL`` at ``<proxy>/v1`` (or ``<proxy>/agent/<name>/v1``
to name the calling agent). Chat completions are recorded, streamed or not, tool calls
and usage included; other endpoints (``/v1/models``...) are forwarded unrecorded.

In replay mode a :class:`~faultfinder.replay.replayer.ReplayPlan` decides per call
whether the answer comes from the recording, from an edit, or live from the upstream.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
from pydantic import BaseModel, Field

from faultfinder.errors import ConfigError
from faultfinder.redact import KEY_HEADERS
from faultfinder.replay.httpserver import (
    LOOPBACK,
    HttpServer,
    Request,
    Response,
    error_response,
    json_response,
)
from faultfinder.replay.matching import AGENT_HEADER, Matcher, split_agent_path
from faultfinder.replay.recorder import Origin, RecordedCall, RunStore, utcnow
from faultfinder.replay.replayer import Decision, ReplayPlan
from faultfinder.replay.sse import (
    DONE,
    CompletionBuilder,
    SSEParser,
    event_data,
    is_usage_only,
    stream_bytes,
)

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


NO_UPSTREAM = (
    "faultfinder replay: this call would go live, but no upstream was named; pass "
    "--upstream URL (or --trust-run to use the one recorded in the run directory)"
)


class ProxyConfig(BaseModel):
    """Where the proxy listens and where it forwards."""

    upstream: str | None
    """Base URL of the model endpoint, usually ending in /v1 (e.g. http://127.0.0.1:8080/v1).
    None (a replay with no upstream named): every live call is refused without any
    connection, so no request, and no key, leaves the proxy."""
    api_key_env: str | None = None
    """Environment variable holding the upstream's key; when unset, the client's own
    Authorization header is forwarded. Keys are never written to the recording."""
    host: str = LOOPBACK
    """Interface to bind; loopback unless you deliberately expose the proxy."""
    port: int = Field(default=0, ge=0, le=65535)
    """Port to bind; 0 picks a free one."""
    stream_usage: bool = True
    """Ask the upstream for token usage on streamed calls (stream_options.include_usage)
    and hide that extra chunk from clients that did not ask for it."""
    timeout: float = Field(default=600.0, gt=0)
    """Seconds to wait for the upstream's reply."""


class RecordingProxy:
    """Forwards to the upstream, records calls into a :class:`RunStore`, replays on demand."""

    def __init__(
        self, config: ProxyConfig, store: RunStore, plan: ReplayPlan | None = None
    ) -> None:
        self.config = config
        self.store = store
        self.plan = plan
        self.matcher = plan.matcher if plan is not None else Matcher()
        self.redactor = store.redactor
        self.upstream_key: str | None = None
        if config.api_key_env:
            self.upstream_key = os.environ.get(config.api_key_env)
            if not self.upstream_key:
                raise ConfigError(
                    f"--api-key-env {config.api_key_env}: that environment variable is empty; "
                    "set it, or leave the option out to forward the client's own key."
                )
            self.redactor.add(self.upstream_key)
        self.stop_requested = asyncio.Event()
        self.in_flight = 0
        self._server = HttpServer(self.handle, config.host, config.port)
        self._client: httpx.AsyncClient | None = None

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> RecordingProxy:
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.config.timeout, connect=30.0))
        await self._server.start()
        return self

    async def close(self) -> None:
        await self._server.close()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> RecordingProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def url(self) -> str:
        return self._server.url

    @property
    def base_url(self) -> str:
        """What to put in OPENAI_BASE_URL."""
        return self._server.url + "/v1"

    # --- routing -------------------------------------------------------------------------

    async def handle(self, request: Request) -> Response:
        path_agent, path = split_agent_path(request.path)
        self.redactor.learn_headers(request.headers)
        self.redactor.learn_query(request.query)
        if request.method == "POST" and path.rstrip("/").endswith("/chat/completions"):
            self.in_flight += 1
            try:
                return await self._chat(request, path_agent, path)
            finally:
                self.in_flight -= 1
        return await self._passthrough(request, path)

    def _upstream_url(self, path: str, query: str) -> str:
        assert self.config.upstream is not None
        base = self.config.upstream.rstrip("/")
        rest = path[3:] if path.startswith("/v1/") or path == "/v1" else path
        return base + rest + (f"?{query}" if query else "")

    def _headers(self, request: Request) -> dict[str, str]:
        headers = {
            k: v
            for k, v in request.headers
            if k not in _HOP_BY_HOP and not k.startswith("x-faultfinder-")
        }
        if self.upstream_key:
            for key in KEY_HEADERS:
                headers.pop(key, None)
            headers["authorization"] = f"Bearer {self.upstream_key}"
        headers["accept-encoding"] = "identity"
        return headers

    async def _passthrough(self, request: Request, path: str) -> Response:
        assert self._client is not None
        if self.config.upstream is None:
            return error_response(502, NO_UPSTREAM, headers=[("x-should-retry", "false")])
        try:
            upstream = await self._client.request(
                request.method,
                self._upstream_url(path, request.query),
                content=request.body or None,
                headers=self._headers(request),
            )
        except httpx.HTTPError as exc:
            return error_response(502, f"faultfinder proxy: upstream unreachable: {exc}")
        headers = [(k, v) for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP]
        headers = [(k, v) for k, v in headers if k.lower() != "content-encoding"]
        return Response(upstream.status_code, headers, upstream.content)

    # --- chat completions ------------------------------------------------------------------

    async def _chat(self, request: Request, path_agent: str | None, path: str) -> Response:
        started_at, started = utcnow(), time.perf_counter()
        try:
            body = json.loads(request.body or b"{}")
        except json.JSONDecodeError as exc:
            return error_response(400, f"faultfinder proxy: request body is not JSON: {exc}")
        if not isinstance(body, dict):
            return error_response(400, "faultfinder proxy: request body must be a JSON object")
        agent, source = self.matcher.agent(request.header(AGENT_HEADER), path_agent, body)
        call = self.store.next_call_index()
        stream = bool(body.get("stream"))
        decision = (
            self.plan.decide(agent, body, self.redactor.request(body))
            if self.plan is not None
            else Decision("live", "recorded", body=body)
        )

        def record(
            response: dict[str, Any] | None,
            status: int = 200,
            error: str | None = None,
            sent: dict[str, Any] | None = None,
        ) -> None:
            asked = sent if sent is not None else body
            clean = self.redactor.request(asked)
            self.store.append(
                RecordedCall(
                    call=call,
                    agent=agent,
                    agent_source=source,
                    path=request.path,
                    request=clean,
                    request_hash=self.matcher.hash(clean),
                    response=self.redactor.data(response) if response is not None else None,
                    status=status,
                    error=self.redactor.text(error) if error else None,
                    stream=stream,
                    origin=decision.origin,
                    replay_of=decision.step,
                    note=decision.note,
                    started_at=started_at,
                    ended_at=utcnow(),
                    latency_s=time.perf_counter() - started,
                )
            )

        if decision.action == "reject":
            record(None, decision.status, decision.message)
            if decision.stop:
                self.stop_requested.set()
            return error_response(
                decision.status,
                decision.message,
                "faultfinder_replay",
                headers=[("x-should-retry", "false")],
            )
        if decision.action == "serve":
            assert decision.response is not None
            record(decision.response)
            self._check_stop()
            return self._serve(decision.response, body, stream)
        sent = decision.body if decision.body is not None else body
        if self.config.upstream is None:
            record(None, 502, NO_UPSTREAM, sent)
            return error_response(502, NO_UPSTREAM, headers=[("x-should-retry", "false")])
        if stream:
            return await self._live_stream(request, path, sent, body, record, decision.origin)
        return await self._live(request, path, sent, record)

    def _serve(self, response: dict[str, Any], body: dict[str, Any], stream: bool) -> Response:
        if not stream:
            return json_response(200, response)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        events = stream_bytes(response, include_usage=include_usage)

        async def chunks() -> AsyncIterator[bytes]:
            for event in events:
                yield event

        return Response(200, _SSE_HEADERS, chunks())

    def _check_stop(self) -> None:
        if self.plan is not None and self.plan.should_stop:
            self.stop_requested.set()

    def _live_done(self) -> None:
        if self.plan is not None:
            self.plan.live_finished()
            self._check_stop()

    async def _live(
        self, request: Request, path: str, sent: dict[str, Any], record: Any
    ) -> Response:
        assert self._client is not None
        try:
            upstream = await self._client.post(
                self._upstream_url(path, request.query),
                content=json.dumps(sent).encode("utf-8"),
                headers={**self._headers(request), "content-type": "application/json"},
            )
        except httpx.HTTPError as exc:
            message = f"faultfinder proxy: upstream {self.config.upstream} unreachable: {exc}"
            record(None, 502, message, sent)
            return error_response(502, message)
        content = upstream.content
        headers = [("content-type", upstream.headers.get("content-type", "application/json"))]
        if upstream.status_code != 200:
            record(None, upstream.status_code, _error_text(content), sent)
            return Response(upstream.status_code, headers, content)
        try:
            payload = json.loads(content)
        except json.JSONDecodeError:
            record(None, 502, "upstream reply is not JSON", sent)
            return Response(upstream.status_code, headers, content)
        if not isinstance(payload, dict) or not payload.get("choices"):
            record(None, 502, "upstream reply has no choices", sent)
        else:
            record(payload, sent=sent)
            self._live_done()
        return Response(200, headers, content)

    async def _live_stream(
        self,
        request: Request,
        path: str,
        sent: dict[str, Any],
        asked: dict[str, Any],
        record: Any,
        origin: Origin,
    ) -> Response:
        assert self._client is not None
        client_wants_usage = bool((asked.get("stream_options") or {}).get("include_usage"))
        forwarded = dict(sent)
        if self.config.stream_usage and not client_wants_usage:
            forwarded["stream_options"] = {
                **(sent.get("stream_options") or {}),
                "include_usage": True,
            }
        upstream_request = self._client.build_request(
            "POST",
            self._upstream_url(path, request.query),
            content=json.dumps(forwarded).encode("utf-8"),
            headers={**self._headers(request), "content-type": "application/json"},
        )
        try:
            upstream = await self._client.send(upstream_request, stream=True)
        except httpx.HTTPError as exc:
            message = f"faultfinder proxy: upstream {self.config.upstream} unreachable: {exc}"
            record(None, 502, message, sent)
            return error_response(502, message)
        if upstream.status_code != 200:
            content = await upstream.aread()
            await upstream.aclose()
            record(None, upstream.status_code, _error_text(content), sent)
            ctype = upstream.headers.get("content-type", "application/json")
            return Response(upstream.status_code, [("content-type", ctype)], content)

        async def relay() -> AsyncIterator[bytes]:
            parser = SSEParser()
            builder = CompletionBuilder()
            recorded = False

            def record_reply() -> None:
                nonlocal recorded
                record(builder.completion(), sent=sent)
                self._live_done()
                recorded = True

            def forward(events: list[bytes]) -> list[bytes]:
                out: list[bytes] = []
                for event in events:
                    keep, done = _inspect_event(event, builder, client_wants_usage)
                    if done and builder.chunks and not recorded:
                        # Write the step before the client sees the end of the stream: a
                        # program may exit as soon as it has its last reply.
                        record_reply()
                    if keep:
                        out.append(event)
                return out

            try:
                async for data in upstream.aiter_bytes():
                    for event in forward(parser.feed(data)):
                        yield event
                for event in forward(parser.flush()):
                    yield event
            finally:
                await upstream.aclose()
                if not recorded:
                    complete = builder.choices and all(
                        c["finish_reason"] is not None for c in builder.choices.values()
                    )
                    # A stream cut short (client gone, upstream died) is not a reply.
                    if builder.chunks and complete:
                        record_reply()
                    else:
                        record(None, 502, "stream ended before the reply was complete", sent)

        return Response(200, _SSE_HEADERS, relay())


_SSE_HEADERS = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]


def _inspect_event(event: bytes, builder: CompletionBuilder, keep_usage: bool) -> tuple[bool, bool]:
    """(forward this event?, is it the end marker?)."""
    data = event_data(event)
    if data is None:
        return True, False
    if data.strip() == DONE:
        return True, True
    try:
        chunk = json.loads(data)
    except json.JSONDecodeError:
        return True, False
    if isinstance(chunk, dict):
        builder.add(chunk)
        if is_usage_only(chunk) and not keep_usage:
            return False, False
    return True, False


def _error_text(content: bytes) -> str:
    try:
        payload = json.loads(content)
        message = payload.get("error", {}).get("message") if isinstance(payload, dict) else None
        if message:
            return f"upstream error: {message}"
    except (json.JSONDecodeError, AttributeError):
        pass
    return "upstream error: " + content[:300].decode("utf-8", errors="replace")
