"""The model-call half of the recording proxy: a model call decided (by the replay plan,
in a replay), then answered from the recording or an edit, or sent upstream, and
recorded as a step of the run, or as a failed call.

:class:`ModelCallProxy` is the base of :class:`~faultfinder.replay.proxy.RecordingProxy`,
which routes requests and holds the state declared here; what goes upstream is built by
:mod:`faultfinder.replay.proxy_upstream`, streams by
:mod:`faultfinder.replay.proxy_streams`, background-mode calls are held by
:mod:`faultfinder.replay.proxy_background`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
from pydantic import BaseModel, Field

from faultfinder.http_bodies import MAX_REPLY, BodyTooLargeError, limit_body
from faultfinder.llm import json_text
from faultfinder.redact import Redactor
from faultfinder.replay.apis import Chains, SSEEvent, WireAdapter
from faultfinder.replay.endpoint import Endpoint
from faultfinder.replay.failures import replayed_headers
from faultfinder.replay.httpserver import (
    LOOPBACK,
    Request,
    Response,
    error_response,
    json_response,
)
from faultfinder.replay.matching import AGENT_HEADER, Matcher
from faultfinder.replay.proxy_background import BackgroundCalls, PendingCall, pending_id
from faultfinder.replay.proxy_streams import relay, replayed
from faultfinder.replay.proxy_upstream import (
    error_reply,
    relayed_headers,
    reply_content_type,
    reply_of,
    too_large,
    upstream_error_text,
    upstream_headers,
    upstream_url,
)
from faultfinder.replay.recorder import RecordedCall, RunStore, utcnow
from faultfinder.replay.replayer import Decision, ReplayPlan
from faultfinder.replay.report import LiveRequest

__all__ = ["NO_UPSTREAM", "ModelCallProxy", "ProxyConfig", "replayed_error"]

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
    """Seconds to wait for the upstream's reply, and between two chunks of a stream."""
    max_reply: int = Field(default=MAX_REPLY, gt=0)
    """Bytes of one upstream reply (streamed or not, decoded) read at most; past them the
    call fails, naming the bound, and is recorded as a failed call (see docs/replay.md)."""


class ModelCallProxy(Endpoint):
    """Model calls through the proxy: decided, answered or sent upstream, and recorded.
    The subclass (:class:`~faultfinder.replay.proxy.RecordingProxy`) sets every attribute
    declared here in its ``__init__``."""

    config: ProxyConfig
    store: RunStore
    plan: ReplayPlan | None
    matcher: Matcher
    redactor: Redactor
    upstream_key: str | None
    chains: Chains
    replies: dict[str, dict[str, Any]]
    """Replies by id (recorded ones in a replay), for a program that fetches a stored
    reply again (``GET /v1/responses/<id>``)."""
    finished: dict[str, WireAdapter]
    """Background-mode calls answered (recorded ones in a replay) by reply id: a poll
    or cancel of one is part of that call, answered from the recording in a replay."""
    background: BackgroundCalls
    """Background-mode calls waiting for a poll to bring their finished response."""
    stop_requested: asyncio.Event
    _client: httpx.AsyncClient | None

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

    def _sent_live(self, live: LiveRequest) -> None:
        if self.plan is not None:
            self.plan.sent_live(live)

    # --- model calls -----------------------------------------------------------------------

    async def _model_call(
        self, adapter: WireAdapter, request: Request, path_agent: str | None, path: str
    ) -> Response:
        started_at, started = utcnow(), time.perf_counter()
        try:
            body = json_text.loads(request.body or b"{}")
        except json_text.JSONTextError as exc:
            return self._error(
                adapter, 400, f"faultfinder proxy: the request body is unreadable: {exc}"
            )
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
        for secret in decision.learned:
            # What the recording scrubbed from this request: never written here either.
            self.redactor.add(secret)

        def record(
            response: dict[str, Any] | None,
            status: int = 200,
            error: str | None = None,
            sent: dict[str, Any] | None = None,
            events: list[bytes] | None = None,
            writes: list[int] | None = None,
            reply: tuple[Any, dict[str, str]] | None = None,
        ) -> None:
            asked = sent if sent is not None else body
            clean = self.redactor.request(asked)
            error_body, error_headers = reply if reply is not None else (None, None)
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
                    error_body=self.redactor.data(error_body),
                    error_headers=self.redactor.data(error_headers),
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
            # Scrubbed as what is written: it quotes the request (a divergence's diff).
            return self._error(
                adapter,
                decision.status,
                self.redactor.text(decision.message),
                "faultfinder_replay",
                headers=[("x-should-retry", "false")],
            )
        if decision.action == "error":
            # A call that failed while recording, answered with the same error again.
            failure = decision.recorded
            assert failure is not None and failure.error_body is not None
            reply = (failure.error_body, replayed_headers(failure))
            why = failure.error or decision.message
            if failure.status < 400 and failure.events is not None:
                return self._error_event(adapter, failure, body, stream, why, record)
            if failure.request.get("background") and isinstance(failure.error_body, dict):
                return self._failed_response(adapter, failure.error_body, stream, why, record)
            record(None, failure.status, why, reply=reply)
            return replayed_error(failure.status, *reply)
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

        def cut(events: list[bytes], writes: list[int], why: str | None) -> None:
            error = error_event(events) if why is None else None
            if error is None:
                record(None, 502, why or "stream ended before the reply was complete", sent)
                return
            why = f"the stream ended with an error event: {error_message(error)}"
            reply: tuple[Any, dict[str, str]] = (error, {})
            record(None, 200, why, sent, events=events, writes=writes, reply=reply)

        streamed = relay(upstream, adapter, body, finished, cut, too_large)
        streamed.headers = relayed_headers(upstream, streamed.headers)
        return streamed

    def _error_event(
        self,
        adapter: WireAdapter,
        failure: RecordedCall,
        body: dict[str, Any],
        stream: bool,
        why: str,
        record: Callable[..., None],
    ) -> Response:
        """A recorded stream that ended with an error event, sent again as it was; asked
        without streaming, its error as a 502 the client is told not to retry."""
        if not stream:
            record(None, 502, why, reply=(failure.error_body, {}))
            return replayed_error(502, failure.error_body, {"x-should-retry": "false"})
        events = [e.encode("utf-8") for e in failure.events or []]
        record(None, 200, why, events=events, writes=failure.writes, reply=(failure.error_body, {}))
        return replayed(adapter, {}, body, failure.events, failure.writes)

    def _failed_response(
        self,
        adapter: WireAdapter,
        response: dict[str, Any],
        stream: bool,
        why: str,
        record: Callable[..., None],
    ) -> Response:
        """A background-mode call whose response ended ``failed``, answered with that
        response at once (as a finished one is, so a polling loop ends), and its polls and
        cancel from it; asked as a stream, its error as a 502 not to be retried."""
        if stream:
            error = response.get("error") or {"message": why}
            record(None, 502, why, reply=({"error": error}, {}))
            return replayed_error(502, {"error": error}, {"x-should-retry": "false"})
        record(None, 200, why, reply=(response, {}))
        if response.get("id"):
            self.replies[str(response["id"])] = response
            self.finished[str(response["id"])] = adapter
        return json_response(200, response)

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
        (the proxy's own 502, kept as an error reply) or an error status is recorded here
        and answered (a :class:`Response`); a 200 reply comes back as the upstream's (its
        body still open when ``stream``). An error reaches the client with the upstream's
        headers (``retry-after``, ``x-should-retry``, request ids), so the program's SDK
        retries as it would without the proxy."""
        assert self._client is not None
        upstream_request = self._client.build_request(
            "POST", url, content=json.dumps(forwarded).encode("utf-8"), headers=headers
        )
        upstream = None
        try:
            upstream = await self._client.send(upstream_request, stream=True)
            limit_body(upstream, self.config.max_reply, reply_of(self.redactor.url(url)))
            if not stream or upstream.status_code != 200:
                await upstream.aread()
        except BodyTooLargeError as exc:
            assert upstream is not None
            live.status = upstream.status_code
            self._sent_live(live)
            message = too_large(exc)
            # Kept as an error reply, so a replay answers the same request with it again.
            error = adapter.error_body(502, message, "faultfinder_proxy_error")
            said = {"content-type": "application/json", "x-should-retry": "false"}
            record(None, 502, message, sent, reply=(error, said))
            return json_response(502, error, [("x-should-retry", "false")])
        except httpx.HTTPError as exc:
            message = f"faultfinder proxy: upstream {self.redactor.url(url)} unreachable: {exc}"
            self._sent_live(live)
            # The program gets the proxy's own 502 (its SDK retries it); kept as an error
            # reply, so a replay answers the same request with it again.
            error = adapter.error_body(502, message, "faultfinder_proxy_error")
            record(None, 502, message, sent, reply=(error, {"content-type": "application/json"}))
            return json_response(502, error)
        live.status = upstream.status_code
        self._sent_live(live)
        if upstream.status_code != 200:
            content = upstream.content
            kept = error_reply(content, upstream.headers)
            record(None, upstream.status_code, upstream_error_text(content), sent, reply=kept)
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
            payload = json_text.loads(content)
        except json_text.JSONTextError as exc:
            record(None, 502, f"upstream reply is unreadable: {exc}", sent)
            return Response(upstream.status_code, headers, content)
        reply_id = pending_id(adapter, sent, payload)
        if reply_id is not None:
            # Background mode: the call is recorded when a poll brings the finished reply.
            def finish(final: dict[str, Any]) -> None:
                record(final, sent=sent)
                self._live_done(decision)

            def fail(error: str, failed: dict[str, Any] | None) -> None:
                if failed is None:
                    record(None, 502, error, sent)
                else:
                    # What the program got (200s, the last one saying failed), kept to be
                    # answered again: the response itself, at 200.
                    record(None, 200, error, sent, reply=(failed, {}))

            status = str(payload.get("status"))
            pending = PendingCall(adapter, status, live, finish, fail)
            self.background.hold(reply_id, pending)
        elif not adapter.reply_ok(payload):
            record(None, 502, f"upstream reply is not a complete {adapter.name} reply", sent)
        else:
            record(payload, sent=sent)
            self._live_done(decision)
        return Response(200, headers, content)


def error_event(events: list[bytes]) -> dict[str, Any] | None:
    """The data of the error event that ended a stream, if one did: Anthropic's and the
    Responses API's ``error`` event, the Responses API's ``response.failed``, or Chat
    Completions' error chunk (``data: {"error": {...}}``, no ``choices``), which OpenAI
    and OpenAI-compatible servers send once a stream has begun, some then ``[DONE]``."""
    for raw in reversed(events):
        data = SSEEvent.parse(raw).data
        if not isinstance(data, dict):
            continue
        if data.get("type") in ("error", "response.failed"):
            return data
        if "type" not in data and isinstance(data.get("error"), dict) and not data.get("choices"):
            return data
    return None


def error_message(error: dict[str, Any]) -> str:
    """An error event's message: under ``error`` (Anthropic's, Chat Completions' error
    chunk), at its top level (the Responses API's ``error`` event) or under the failed
    response's ``error`` (``response.failed``)."""
    detail = error.get("error")
    response = error.get("response")
    if detail is None and isinstance(response, dict):
        detail = response.get("error")
    message = detail.get("message") if isinstance(detail, dict) else None
    return str(message or detail or error.get("message") or "no message")


def replayed_error(status: int, body: Any, headers: dict[str, str]) -> Response:
    """A recorded error reply sent again: its status, its body (JSON, or the text it was)
    and the headers kept with it, a JSON content type when none was kept."""
    content = body.encode("utf-8") if isinstance(body, str) else json.dumps(body).encode("utf-8")
    kept = [(name, value) for name, value in headers.items() if name != "content-type"]
    kind = headers.get("content-type", "application/json")
    return Response(status, [("content-type", kind), *kept], content)
