"""The recording proxy: forwards a program's model calls to any upstream and writes each
one as a step of a run, whatever API it speaks.

Point a program's ``OPENAI_BASE_URL`` at ``<proxy>/v1`` (or ``<proxy>/agent/<name>/v1``
to name the calling agent), ``ANTHROPIC_BASE_URL`` at ``<proxy>``. Model calls of every
API with an adapter (:mod:`faultfinder.replay.apis`: Chat Completions, Responses,
Messages) are recorded, streamed or not, with tool calls, usage and, for streams, the
events as sent. Requests on other paths (``/v1/models``, embeddings, files...) are not
model calls: they are forwarded unrecorded and counted (:attr:`RecordingProxy.passthrough`).
A Responses call in background mode is recorded when a poll of it brings the finished
response (:mod:`faultfinder.replay.proxy_background`); its polls go to its upstream.

In replay mode a :class:`~faultfinder.replay.replayer.ReplayPlan` decides per call
whether the answer comes from the recording, from an edit, or live from the upstream;
every request that reaches the upstream, model call or not, is reported to the plan.

The URLs and headers of what goes upstream and comes back are in
:mod:`faultfinder.replay.proxy_upstream` (``upstream_url`` and ``relayed_headers`` are
re-exported here); how streams are relayed and replayed, in
:mod:`faultfinder.replay.proxy_streams`.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from typing import Any, Self

import httpx
from pydantic import BaseModel, Field

from faultfinder.errors import ConfigError
from faultfinder.replay.apis import Chains, WireAdapter, adapter_for
from faultfinder.replay.canonical import adapter_of, remember_calls
from faultfinder.replay.endpoint import Endpoint
from faultfinder.replay.httpserver import (
    LOOPBACK,
    HttpServer,
    Request,
    Response,
    error_response,
    from_a_web_page,
    json_response,
)
from faultfinder.replay.matching import AGENT_HEADER, Matcher, split_agent_path
from faultfinder.replay.proxy_background import (
    BackgroundCalls,
    PendingCall,
    pending_id,
    polled_id,
)
from faultfinder.replay.proxy_streams import relay, replayed
from faultfinder.replay.proxy_upstream import (
    relayed_headers,
    reply_content_type,
    upstream_error_text,
    upstream_headers,
    upstream_url,
)
from faultfinder.replay.recorder import RecordedCall, RunStore, utcnow
from faultfinder.replay.replayer import Decision, ReplayPlan
from faultfinder.replay.report import LiveRequest

__all__ = [
    "NO_PASSTHROUGH",
    "NO_UPSTREAM",
    "Passthrough",
    "ProxyConfig",
    "RecordingProxy",
    "relayed_headers",
    "upstream_url",
]

NO_UPSTREAM = (
    "faultfinder replay: this call would go live, but no upstream was named; pass "
    "--upstream URL (or --trust-run to use the one recorded in the run directory)"
)
NO_PASSTHROUGH = (
    "faultfinder replay: {what} is not a model call, so the recording cannot answer it, "
    "and it is forwarded only to an upstream named on the command line (--upstream URL)"
)


class Passthrough(BaseModel):
    """A request on a path that is not a model call."""

    method: str
    path: str
    status: int | None = None
    """What the upstream answered (None: not forwarded, or unreachable)."""
    forwarded: bool = False


class ProxyConfig(BaseModel):
    """Where the proxy listens and where it forwards."""

    upstream: str | None
    """Base URL of the model endpoint, usually ending in /v1 (e.g. http://127.0.0.1:8080/v1).
    None (a replay with no upstream named): every live call is refused without any
    connection, so no request, and no key, leaves the proxy."""
    upstreams: dict[str, str] = Field(default_factory=dict)
    """Per-API upstreams by adapter name ('messages': 'https://api.anthropic.com/v1'),
    for programs whose APIs live at different endpoints; others go to ``upstream``."""
    passthrough: bool = True
    """Forward requests that are not model calls (models list, embeddings...). A replay
    turns this off unless the upstream was named on the command line."""
    api_key_env: str | None = None
    """Environment variable holding the upstream's key; when unset, the client's own
    credential header is forwarded. Keys are never written to the recording."""
    host: str = LOOPBACK
    """Interface to bind; loopback unless you deliberately expose the proxy."""
    port: int = Field(default=0, ge=0, le=65535)
    """Port to bind; 0 picks a free one."""
    stream_usage: bool = True
    """Ask the upstream for token usage on streamed calls where the API needs asking
    (Chat Completions' stream_options.include_usage) and hide that extra event from
    clients that did not ask for it."""
    timeout: float = Field(default=600.0, gt=0)
    """Seconds to wait for the upstream's reply."""


class RecordingProxy(Endpoint):
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
        # Credentials in an upstream URL (user info, ?api-key=...) are secrets of the run.
        for base in (config.upstream, *config.upstreams.values()):
            self.redactor.url(base)
        # Replies by id, for requests that name an earlier reply (previous_response_id):
        # in a replay, the recording's replies are known from the start.
        self.chains = remember_calls(plan.recorded) if plan is not None else Chains()
        self.replies: dict[str, dict[str, Any]] = {}
        """Replies by id (recorded ones in a replay), for a program that fetches a stored
        reply again (``GET /v1/responses/<id>``)."""
        self.finished: dict[str, WireAdapter] = {}
        """Background-mode calls answered (recorded ones in a replay) by reply id: a poll
        or cancel of one is part of that call, answered from the recording in a replay."""
        for recorded in plan.recorded if plan is not None else []:
            if recorded.response and recorded.response.get("id"):
                reply_id = str(recorded.response["id"])
                self.replies[reply_id] = recorded.response
                if recorded.request.get("background"):
                    self.finished[reply_id] = adapter_of(recorded)
        self.passthrough: list[Passthrough] = []
        """Requests on paths that are not model calls, in arrival order."""
        self.background = BackgroundCalls()
        """Background-mode calls waiting for a poll to bring their finished response."""
        self.stop_requested = asyncio.Event()
        self.in_flight = 0
        self._server = HttpServer(self.handle, config.host, config.port)
        self._client: httpx.AsyncClient | None = None

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> Self:
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.config.timeout, connect=30.0))
        return await super().start()

    async def close(self) -> None:
        await super().close()
        self.background.close()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # --- routing -------------------------------------------------------------------------

    async def handle(self, request: Request) -> Response:
        path_agent, path = split_agent_path(request.path)
        adapter = adapter_for(request.method, path)
        refused = from_a_web_page(request, self.config.host)
        if refused is not None:
            # Nothing goes upstream: with --api-key-env the proxy adds the user's key.
            status, reason = refused
            return self._error(
                adapter, status, reason, "invalid_request_error", [("x-should-retry", "false")]
            )
        self.redactor.learn_headers(request.headers)
        self.redactor.learn_query(request.query)
        self.store.rescrub()  # a key learned now leaves the calls recorded before it
        stored = self._stored_reply(request.method, path)
        if stored is not None:
            return json_response(200, stored)
        polled = polled_id(request.method, path)
        if polled is not None and self.background.get(polled[0]) is not None:
            return await self._poll(request, path, *polled)
        if polled is not None and polled[0] in self.finished and self.plan is None:
            # Recording: not a request left unrecorded, and a replay answers it.
            finished = self.finished[polled[0]]
            base = self._upstream_base(finished)
            if base is not None:
                return (await self._forward(request, base, path, finished))[0]
        if adapter is not None:
            self.in_flight += 1
            try:
                return await self._model_call(adapter, request, path_agent, path)
            finally:
                self.in_flight -= 1
        return await self._passthrough(request, path)

    def _stored_reply(self, method: str, path: str) -> dict[str, Any] | None:
        """In a replay, a reply the recording holds, fetched again by id
        (``GET <model call path>/<reply id>``), or a finished background response
        cancelled (which changes nothing, so the reply is sent as it is); never sent
        upstream."""
        if self.plan is None:
            return None
        polled = polled_id(method, path)
        if polled is not None and polled[1]:
            return self.replies.get(polled[0]) if polled[0] in self.finished else None
        if method != "GET":
            return None
        parent, _, reply_id = path.rstrip("/").rpartition("/")
        stored = self.replies.get(reply_id)
        # A reply created with store: false was never fetchable; the upstream answers that.
        if stored is None or stored.get("store") is False or adapter_for("POST", parent) is None:
            return None
        return stored

    def _upstream_base(self, adapter: WireAdapter | None) -> str | None:
        if adapter is not None and adapter.name in self.config.upstreams:
            return self.config.upstreams[adapter.name]
        return self.config.upstream

    def _upstream_url(self, base: str, path: str, query: str) -> str:
        return upstream_url(base, path, query)

    def _headers(self, request: Request, adapter: WireAdapter | None) -> dict[str, str]:
        return upstream_headers(request, adapter, self.upstream_key)

    def _error(
        self,
        adapter: WireAdapter | None,
        status: int,
        message: str,
        kind: str = "faultfinder_proxy_error",
        headers: list[tuple[str, str]] | None = None,
    ) -> Response:
        if adapter is None:
            return error_response(status, message, kind, headers)
        return json_response(status, adapter.error_body(status, message, kind), headers)

    async def _passthrough(self, request: Request, path: str) -> Response:
        assert self._client is not None
        what = f"{request.method} {request.path}"
        entry = Passthrough(method=request.method, path=request.path)
        self.passthrough.append(entry)
        upstream_base = self.config.upstream
        if upstream_base is None or not self.config.passthrough:
            message = NO_UPSTREAM if upstream_base is None else NO_PASSTHROUGH.format(what=what)
            if self.plan is not None:
                self.plan.blocked(LiveRequest(method=request.method, path=request.path))
            return self._error(None, 502, message, headers=[("x-should-retry", "false")])
        entry.forwarded = True
        response, upstream = await self._forward(request, upstream_base, path, None)
        if upstream is not None:
            entry.status = upstream.status_code
        return response

    async def _forward(
        self,
        request: Request,
        base: str,
        path: str,
        adapter: WireAdapter | None,
        live: LiveRequest | None = None,
    ) -> tuple[Response, httpx.Response | None]:
        """``request`` sent as it came to ``base`` (counted live whatever happens, as
        ``live``: by default a request that is not a model call), and the answer relayed;
        the upstream's reply too, None when it was unreachable."""
        assert self._client is not None
        url = self._upstream_url(base, path, request.query)
        live = live or LiveRequest(method=request.method, path=request.path)
        try:
            upstream = await self._client.request(
                request.method,
                url,
                content=request.body or None,
                headers=self._headers(request, adapter),
            )
        except httpx.HTTPError as exc:
            self._sent_live(live)
            message = f"faultfinder proxy: upstream {self.redactor.url(url)} unreachable: {exc}"
            return self._error(adapter, 502, message), None
        live.status = upstream.status_code
        self._sent_live(live)
        return Response(upstream.status_code, relayed_headers(upstream), upstream.content), upstream

    async def _poll(self, request: Request, path: str, reply_id: str, cancel: bool) -> Response:
        """A poll or cancel of a background call the proxy holds: part of that model call
        (and reported as such), so it goes to the call's upstream whatever the passthrough
        setting, and the reply that finishes the response records the call."""
        call = self.background.get(reply_id)
        assert call is not None
        base = self._upstream_base(call.adapter)
        if base is None:
            return self._error(
                call.adapter, 502, NO_UPSTREAM, headers=[("x-should-retry", "false")]
            )
        live = call.live.model_copy(
            update={
                "method": request.method,
                "path": request.path,
                "status": None,
                "background": "cancel" if cancel else "poll",
            }
        )
        response, upstream = await self._forward(request, base, path, call.adapter, live)
        if upstream is not None and upstream.status_code == 200:
            try:
                payload: Any = json.loads(upstream.content)
            except json.JSONDecodeError:
                payload = None
            self.background.polled(reply_id, payload)
        return response

    def _sent_live(self, live: LiveRequest) -> None:
        if self.plan is not None:
            self.plan.sent_live(live)

    # --- model calls -----------------------------------------------------------------------

    async def _model_call(
        self, adapter: WireAdapter, request: Request, path_agent: str | None, path: str
    ) -> Response:
        started_at, started = utcnow(), time.perf_counter()
        try:
            body = json.loads(request.body or b"{}")
        except json.JSONDecodeError as exc:
            return self._error(adapter, 400, f"faultfinder proxy: request body is not JSON: {exc}")
        if not isinstance(body, dict):
            return self._error(
                adapter, 400, "faultfinder proxy: request body must be a JSON object"
            )
        canonical = adapter.canonical_request(body, self.chains)
        agent, source = self.matcher.agent(request.header(AGENT_HEADER), path_agent, canonical)
        call = self.store.next_call_index()
        stream = adapter.is_stream(body)
        decision = (
            self.plan.decide(agent, body, self.redactor.request(canonical), adapter)
            if self.plan is not None
            else Decision("live", "recorded", body=body)
        )

        def record(
            response: dict[str, Any] | None,
            status: int = 200,
            error: str | None = None,
            sent: dict[str, Any] | None = None,
            events: list[bytes] | None = None,
            writes: list[int] | None = None,
        ) -> None:
            asked = sent if sent is not None else body
            clean = self.redactor.request(asked)
            self.store.append(
                RecordedCall(
                    call=call,
                    agent=agent,
                    agent_source=source,
                    path=request.path,
                    api=adapter.name,
                    request=clean,
                    request_hash=self.matcher.hash(
                        self.redactor.request(adapter.canonical_request(asked, self.chains))
                    ),
                    response=self.redactor.data(response) if response is not None else None,
                    events=None if events is None else [e.decode("utf-8") for e in events],
                    writes=writes,
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
            if response is not None and status == 200:
                adapter.remember(self.chains, body, response)
                if response.get("id"):
                    self.replies[str(response["id"])] = response
                    if body.get("background"):
                        self.finished[str(response["id"])] = adapter
            elif self.plan is not None:
                # Not a step: the program's retry of this request takes its place.
                self.plan.call_failed(decision)

        if decision.action == "reject":
            record(None, decision.status, decision.message)
            if decision.stop:
                self.stop_requested.set()
            return self._error(
                adapter,
                decision.status,
                decision.message,
                "faultfinder_replay",
                headers=[("x-should-retry", "false")],
            )
        if decision.action == "serve":
            assert decision.response is not None
            recorded = decision.recorded
            # A recorded stream is sent again as it was; an edited reply (or a stream asked
            # of a call recorded without one) is streamed afresh by the adapter.
            replay_events = (
                recorded.events
                if recorded is not None and decision.origin == "cached" and recorded.events
                else None
            )
            if stream and replay_events is not None:
                record(
                    decision.response,
                    events=[e.encode("utf-8") for e in replay_events],
                    writes=recorded.writes if recorded is not None else None,
                )
            else:
                record(decision.response)
            self._check_stop()
            if not stream:
                return json_response(200, decision.response)
            writes = recorded.writes if recorded is not None else None
            return replayed(adapter, decision.response, body, replay_events, writes)
        # The plan applied the edits and live overrides; what goes upstream may also ask
        # for stream usage, and a chained request is made self-contained in a replay.
        sent = decision.body if decision.body is not None else body
        forwarded = adapter.for_upstream(
            sent,
            self.chains,
            overrides={},
            stream_usage=self.config.stream_usage,
            expand=self.plan is not None,
        )
        base = self._upstream_base(adapter)
        if base is None:
            record(None, 502, NO_UPSTREAM, sent)
            return self._error(adapter, 502, NO_UPSTREAM, headers=[("x-should-retry", "false")])
        live = LiveRequest(
            method=request.method,
            path=request.path,
            api=adapter.name,
            agent=agent,
            step=decision.step,
            origin=decision.origin,
        )
        url = self._upstream_url(base, path, request.query)
        headers = {**self._headers(request, adapter), "content-type": "application/json"}
        upstream = await self._send_live(
            adapter, url, headers, forwarded, live, stream, sent, record
        )
        if isinstance(upstream, Response):
            return upstream
        if not stream:
            return self._live_reply(adapter, upstream, sent, record, decision, live)

        def finished(reply: dict[str, Any], events: list[bytes], writes: list[int]) -> None:
            record(reply, sent=sent, events=events, writes=writes)
            self._live_done(decision)

        def cut() -> None:
            record(None, 502, "stream ended before the reply was complete", sent)

        streamed = relay(upstream, adapter, body, finished, cut)
        streamed.headers = relayed_headers(upstream, streamed.headers)
        return streamed

    def _check_stop(self) -> None:
        if self.plan is not None and self.plan.should_stop:
            self.stop_requested.set()

    def _live_done(self, decision: Decision) -> None:
        if self.plan is not None:
            self.plan.live_finished(decision)
            self._check_stop()

    async def _send_live(
        self,
        adapter: WireAdapter,
        url: str,
        headers: dict[str, str],
        forwarded: dict[str, Any],
        live: LiveRequest,
        stream: bool,
        sent: dict[str, Any],
        record: Callable[..., None],
    ) -> httpx.Response | Response:
        """Send a live call upstream and tell the plan it went. An unreachable upstream
        or an error status is recorded here and answered (a :class:`Response`); a 200
        reply comes back as the upstream's (its body still open when ``stream``). An error
        reaches the client with the upstream's headers (``retry-after``,
        ``x-should-retry``, request ids), so the program's SDK retries as it would without
        the proxy."""
        assert self._client is not None
        upstream_request = self._client.build_request(
            "POST", url, content=json.dumps(forwarded).encode("utf-8"), headers=headers
        )
        try:
            upstream = await self._client.send(upstream_request, stream=stream)
        except httpx.HTTPError as exc:
            message = f"faultfinder proxy: upstream {self.redactor.url(url)} unreachable: {exc}"
            self._sent_live(live)
            record(None, 502, message, sent)
            return self._error(adapter, 502, message)
        live.status = upstream.status_code
        self._sent_live(live)
        if upstream.status_code != 200:
            content = await upstream.aread()
            await upstream.aclose()
            record(None, upstream.status_code, upstream_error_text(content), sent)
            return Response(
                upstream.status_code,
                relayed_headers(upstream, reply_content_type(upstream)),
                content,
            )
        return upstream

    def _live_reply(
        self,
        adapter: WireAdapter,
        upstream: httpx.Response,
        sent: dict[str, Any],
        record: Callable[..., None],
        decision: Decision,
        live: LiveRequest,
    ) -> Response:
        """A live 200 reply, recorded when it is a complete reply of the API, and passed
        on to the client as the upstream sent it, headers and all."""
        content = upstream.content
        headers = relayed_headers(upstream, reply_content_type(upstream))
        try:
            payload = json.loads(content)
        except json.JSONDecodeError:
            record(None, 502, "upstream reply is not JSON", sent)
            return Response(upstream.status_code, headers, content)
        reply_id = pending_id(adapter, sent, payload)
        if reply_id is not None:
            # Background mode: the call is recorded when a poll brings the finished reply.
            def finish(final: dict[str, Any]) -> None:
                record(final, sent=sent)
                self._live_done(decision)

            def fail(error: str) -> None:
                record(None, 502, error, sent)

            status = str(payload.get("status"))
            pending = PendingCall(adapter, status, live, finish, fail)
            self.background.hold(reply_id, pending)
        elif not adapter.reply_ok(payload):
            record(None, 502, f"upstream reply is not a complete {adapter.name} reply", sent)
        else:
            record(payload, sent=sent)
            self._live_done(decision)
        return Response(200, headers, content)
