"""How the recording proxy sends streamed replies, whatever the API.

- A live stream (:func:`relay`) reaches the client as the upstream writes it, minus the
  events the client did not ask for (:meth:`WireAdapter.visible`), while the adapter's
  accumulator adds the events up; the call is recorded the moment the stream says it is
  finished, before the client sees the end, since a program may exit as soon as it has
  its last reply. A stream cut short (client gone, upstream died) is not a reply.
- A recorded stream (:func:`replayed`) is sent again as it was, in the writes the
  upstream made; a reply with no recorded stream (an edited reply, or a stream asked of
  a call recorded without one) is streamed afresh by the adapter.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

from faultfinder.http_bodies import BodyTooLargeError
from faultfinder.replay.apis import SSEEvent, WireAdapter, encode_sse
from faultfinder.replay.httpserver import Response
from faultfinder.replay.sse import SSEParser

SSE_HEADERS = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]

Finished = Callable[[dict[str, Any], list[bytes], list[int]], None]
"""Called once with the complete reply, the raw events so far and their writes."""
Cut = Callable[[list[bytes], list[int], str | None], None]
"""Called once, instead, with the raw events and their writes of a stream that ended
without a complete reply, and why when the proxy ended it (None: the stream ended)."""


def relay(
    upstream: httpx.Response,
    adapter: WireAdapter,
    asked: dict[str, Any],
    finished: Finished,
    cut: Cut,
    too_large: Callable[[BodyTooLargeError], str],
) -> Response:
    """The client's response to a live stream ``upstream`` (open, status 200, its body
    bounded by :func:`~faultfinder.http_bodies.limit_body`): relayed as it arrives;
    ``finished`` gets the reply as soon as the stream completes it, ``cut`` is called
    instead when the stream ends without a complete reply (cut short, or ended by an
    error event). A stream that goes on past the bound is ended with an error event
    (the API's error body, which the SDKs raise), saying ``too_large``'s words."""

    async def chunks() -> AsyncIterator[bytes]:
        parser = SSEParser()
        accumulator = adapter.accumulator()
        events: list[bytes] = []
        writes: list[int] = []
        recorded = False

        def take(raw_events: list[bytes]) -> bytes:
            nonlocal recorded
            out: list[bytes] = []
            if raw_events:
                writes.append(len(raw_events))
            for raw in raw_events:
                event = SSEEvent.parse(raw)
                events.append(raw)
                accumulator.add(event)
                if accumulator.finished and not recorded:
                    # Recorded before the client sees the end (see the module docstring).
                    reply = accumulator.result()
                    if reply is not None:
                        finished(reply, list(events), list(writes))
                        recorded = True
                if adapter.visible(event, asked):
                    out.append(raw)
            return b"".join(out)

        why: str | None = None
        try:
            try:
                async for data in upstream.aiter_bytes():
                    chunk = take(parser.feed(data))
                    if chunk:
                        yield chunk
            except BodyTooLargeError as exc:
                why = too_large(exc)
            else:
                chunk = take(parser.flush())
                if chunk:
                    yield chunk
        finally:
            await upstream.aclose()
            if not recorded:
                reply = None if why is not None else accumulator.result()
                if reply is not None:
                    finished(reply, events, writes)
                else:
                    cut(events, writes, why)
        if why is not None and not recorded:
            yield encode_sse(adapter.error_body(502, why, "faultfinder_proxy_error"), "error")

    return Response(200, SSE_HEADERS, chunks())


def replayed(
    adapter: WireAdapter,
    response: dict[str, Any],
    body: dict[str, Any],
    events: list[str] | None,
    writes: list[int] | None,
) -> Response:
    """The stream of ``response`` for a client asking ``body``: the recorded ``events``
    in their ``writes`` when there are any, else the adapter's synthesised stream."""
    if events is not None:
        chunks = [
            b"".join(e for e in group if adapter.visible(SSEEvent.parse(e), body))
            for group in regroup(events, writes)
        ]
    else:
        chunks = adapter.synthesise(response, body)

    async def send() -> AsyncIterator[bytes]:
        for chunk in chunks:
            if chunk:
                yield chunk

    return Response(200, SSE_HEADERS, send())


def regroup(events: list[str], writes: list[int] | None) -> list[list[bytes]]:
    """Recorded events grouped as the upstream wrote them (one group per event when the
    grouping was not kept)."""
    raw = [e.encode("utf-8") for e in events]
    if not writes or sum(writes) != len(raw):
        return [[e] for e in raw]
    groups: list[list[bytes]] = []
    position = 0
    for count in writes:
        groups.append(raw[position : position + count])
        position += count
    return groups
