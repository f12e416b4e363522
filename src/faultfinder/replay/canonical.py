"""Recorded calls as canonical calls, whatever API each spoke (see
:mod:`faultfinder.replay.apis`).

A Responses request may name an earlier reply (``previous_response_id``) instead of
repeating the conversation; its canonical form resolves that through the replies seen
before it in the same run, so requests are resolved in arrival order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from faultfinder.replay.apis import CanonicalReply, Chains, WireAdapter, adapter_named
from faultfinder.usage import Usage


class RecordedCall(Protocol):
    """What this module reads of a recorded call (``faultfinder.replay.recorder.
    RecordedCall``, which imports this module: typed here by its shape, not imported)."""

    call: int
    api: str
    request: dict[str, Any]
    response: dict[str, Any] | None

    @property
    def ok(self) -> bool: ...


def adapter_of(call: RecordedCall) -> WireAdapter:
    """The adapter of the API a recorded call spoke."""
    return adapter_named(call.api)


def remember_calls(calls: Iterable[RecordedCall], chains: Chains | None = None) -> Chains:
    """``chains`` (a new store by default) knowing every successful call's reply."""
    chains = chains if chains is not None else Chains()
    for call in sorted(calls, key=lambda c: c.call):
        if call.ok and call.response is not None:
            adapter_of(call).remember(chains, call.request, call.response)
    return chains


def canonical_requests(calls: Sequence[RecordedCall]) -> list[dict[str, Any]]:
    """The canonical request of each call (same order as ``calls``), chains resolved
    through the replies that arrived before it."""
    chains = Chains()
    by_arrival = sorted(range(len(calls)), key=lambda i: calls[i].call)
    out: dict[int, dict[str, Any]] = {}
    for position in by_arrival:
        call = calls[position]
        adapter = adapter_of(call)
        out[position] = adapter.canonical_request(call.request, chains)
        if call.ok and call.response is not None:
            adapter.remember(chains, call.request, call.response)
    return [out[i] for i in range(len(calls))]


def canonical_reply(call: RecordedCall) -> CanonicalReply | None:
    """The reply of a successful call as one assistant message (None for a failure)."""
    if call.response is None:
        return None
    return adapter_of(call).canonical_reply(call.response)


def reply_usage(reply: CanonicalReply | None) -> Usage | None:
    """The tokens a reply reports, as one call's :class:`Usage` (its adapter's reading of
    the API's own ``usage``: a Messages prompt is input + cache reads + cache writes);
    None when the reply reports no usage, which is unknown, not 0. What a recorded step
    says it used, and what the UI counts for a replay's live calls."""
    if reply is None or reply.prompt_tokens is None:
        return None
    return Usage(
        prompt_tokens=reply.prompt_tokens,
        completion_tokens=reply.completion_tokens or 0,
        cached_prompt_tokens=reply.cached_tokens or 0,
        # None: the reply did not say, so its 0 is not a measured 0% cached.
        cache_reported=reply.cached_tokens is not None,
        cache_write_prompt_tokens=reply.cache_write_tokens or 0,
        calls=1,
    )
