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

This module routes requests; a model call is decided, answered and recorded by
:mod:`faultfinder.replay.proxy_calls` (``ProxyConfig`` and ``NO_UPSTREAM`` are
re-exported here). The URLs and headers of what goes upstream and comes back are in
:mod:`faultfinder.replay.proxy_upstream` (``upstream_url`` and ``relayed_headers`` are
re-exported here); how streams are relayed and replayed, in
:mod:`faultfinder.replay.proxy_streams`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any, Self

import httpx
from pydantic import BaseModel

from faultfinder.errors import ConfigError
from faultfinder.http_bodies import BodyTooLargeError, limit_body
from faultfinder.llm import json_text
from faultfinder.loopback import direct_to_loopback
from faultfinder.replay.apis import Chains, WireAdapter, adapter_for
from faultfinder.replay.canonical import adapter_of, remember_calls
from faultfinder.replay.httpserver import (
    HttpServer,
    Request,
    Response,
    from_a_web_page,
    json_response,
)
from faultfinder.replay.matching import Matcher, split_agent_path
from faultfinder.replay.proxy_background import BackgroundCalls, polled_id
from faultfinder.replay.proxy_calls import NO_UPSTREAM, ModelCallProxy, ProxyConfig
from faultfinder.replay.proxy_upstream import (
    check_upstream,
    relayed_headers,
    reply_of,
    too_large,
    upstream_url,
)
from faultfinder.replay.recorder import RunStore
from faultfinder.replay.replayer import ReplayPlan
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


class RecordingProxy(ModelCallProxy):
    """Forwards to the upstream, records calls into a :class:`RunStore`, replays on demand.
    It routes each request: a model call to its base class's ``_model_call``, a poll or
    cancel of a background call, a stored reply fetched again, any other path."""

    def __init__(
        self, config: ProxyConfig, store: RunStore, plan: ReplayPlan | None = None
    ) -> None:
        self.config = config
        self.store = store
        self.plan = plan
        self.matcher = plan.matcher if plan is not None else Matcher()
        self.redactor = store.redactor
        self.upstream_key = None
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
        self.replies = {}
        self.finished = {}
        for recorded in plan.recorded if plan is not None else []:
            if recorded.response and recorded.response.get("id"):
                reply_id = str(recorded.response["id"])
                self.replies[reply_id] = recorded.response
                if recorded.request.get("background"):
                    self.finished[reply_id] = adapter_of(recorded)
        self.passthrough: list[Passthrough] = []
        """Requests on paths that are not model calls, in arrival order."""
        self.background = BackgroundCalls()
        self.stop_requested = asyncio.Event()
        self.in_flight = 0
        self._server = HttpServer(self.handle, config.host, config.port)
        self._client = None

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> Self:
        upstreams = [self.config.upstream, *self.config.upstreams.values()]
        for url in upstreams:
            check_upstream(url)
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(self.config.timeout, connect=30.0),
            mounts=direct_to_loopback(upstreams),
        )
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

    async def _passthrough(self, request: Request, path: str) -> Response:
        assert self._client is not None
        what = f"{request.method} {request.path}"
        entry = Passthrough(method=request.method, path=request.path)
        self.passthrough.append(entry)
        upstream_base = self.config.upstream
        if upstream_base is None or not self.config.passthrough:
            # Only --upstream helps here: --trust-run forwards model calls, not these.
            message = NO_PASSTHROUGH.format(what=what)
            if self.plan is not None:
                self.plan.blocked(LiveRequest(method=request.method, path=request.path))
            return self._error(None, 502, message, headers=[("x-should-retry", "false")])
        entry.forwarded = True
        response, upstream = await self._forward(request, upstream_base, path, None, read=False)
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
        *,
        read: bool = True,
    ) -> tuple[Response, httpx.Response | None]:
        """``request`` sent as it came to ``base`` (counted live whatever happens, as
        ``live``: by default a request that is not a model call), and the answer relayed;
        the upstream's reply too, None when it was unreachable or went on past
        ``max_reply``. With ``read`` its body is read (bounded) first, for the caller to
        look at; without, it is relayed as it arrives (a file's download: nothing kept)."""
        assert self._client is not None
        url = self._upstream_url(base, path, request.query)
        live = live or LiveRequest(method=request.method, path=request.path)
        upstream = None
        outgoing = self._client.build_request(
            request.method,
            url,
            content=request.body or None,
            headers=self._headers(request, adapter),
        )
        try:
            upstream = await self._client.send(outgoing, stream=True)
            if read:
                limit_body(upstream, self.config.max_reply, reply_of(self.redactor.url(url)))
                await upstream.aread()
        except BodyTooLargeError as exc:
            assert upstream is not None
            live.status = upstream.status_code
            self._sent_live(live)
            headers = [("x-should-retry", "false")]
            return self._error(adapter, 502, too_large(exc), headers=headers), None
        except httpx.HTTPError as exc:
            self._sent_live(live)
            message = f"faultfinder proxy: upstream {self.redactor.url(url)} unreachable: {exc}"
            return self._error(adapter, 502, message), None
        live.status = upstream.status_code
        self._sent_live(live)
        body = upstream.content if read else _relayed(upstream)
        return Response(upstream.status_code, relayed_headers(upstream), body), upstream

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
                payload: Any = json_text.loads(upstream.content)
            except json_text.JSONTextError:
                payload = None
            self.background.polled(reply_id, payload)
        return response


async def _relayed(upstream: httpx.Response) -> AsyncIterator[bytes]:
    """An upstream's body as it arrives, the upstream closed after (or when the client
    goes away)."""
    try:
        async for chunk in upstream.aiter_bytes():
            yield chunk
    finally:
        await upstream.aclose()
