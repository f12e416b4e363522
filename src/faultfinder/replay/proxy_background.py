"""Model calls answered later: the Responses API's background mode.

A request with ``background: true`` is answered at once with the response ``queued`` (or
``in_progress``) and no output; the program then polls ``GET /v1/responses/<id>`` until
the response is completed, or cancels it (``POST /v1/responses/<id>/cancel``). The proxy
holds such a call here, by reply id, and records it when a poll brings the finished
response: the step is the create request with the response the completing poll
returned, timed from the create to that poll. A response that fails or is cancelled is a
failed call, with the reason (one that ended ``failed`` keeps that response, which a
replay answers the create with); one the program never fetched to completion is recorded
as failed when the proxy closes, saying so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from faultfinder.replay.apis import WireAdapter
from faultfinder.replay.report import LiveRequest

PENDING = frozenset({"queued", "in_progress"})
"""Statuses of a background response that is not finished yet."""

NEVER_FINISHED = (
    "background response (background: true) still {status} when the run ended: the "
    "program never fetched it to completion (GET /v1/responses/{id})"
)


UNFINISHED = "background response "
"""How the error of a background call that never brought a reply begins: cancelled, failed
with no response kept, or never fetched to completion (:meth:`BackgroundCalls.polled`,
:data:`NEVER_FINISHED`)."""


def never_answered(request: dict[str, Any], error: str | None, has_reply: bool) -> bool:
    """Whether a recorded failed call is a background call the program cancelled, or
    left, before it finished: the program got a ``queued`` answer and no reply was kept,
    so recording the run again records the same."""
    return (
        bool(request.get("background")) and not has_reply and (error or "").startswith(UNFINISHED)
    )


def pending_id(adapter: WireAdapter, body: dict[str, Any], payload: Any) -> str | None:
    """The reply id of a background call's first answer (queued or in progress), or None
    when ``payload`` is not one."""
    if adapter.name != "responses" or not body.get("background") or not isinstance(payload, dict):
        return None
    if payload.get("status") not in PENDING or not payload.get("id"):
        return None
    return str(payload["id"])


def polled_id(method: str, path: str) -> tuple[str, bool] | None:
    """``(reply id, is a cancel)`` of ``GET .../responses/<id>`` or
    ``POST .../responses/<id>/cancel`` (agent prefix removed), else None."""
    parts = path.rstrip("/").split("/")
    if method == "POST" and len(parts) >= 3 and parts[-1] == "cancel" and parts[-3] == "responses":
        return parts[-2], True
    if method == "GET" and len(parts) >= 2 and parts[-2] == "responses":
        return parts[-1], False
    return None


@dataclass
class PendingCall:
    """A background call waiting for its finished response."""

    adapter: WireAdapter
    status: str
    """Its status as last seen (queued, in_progress)."""
    live: LiveRequest
    """The create as it went upstream (its API, agent, step), for the report's lines of
    the polls and cancel that are part of it."""
    finish: Callable[[dict[str, Any]], None]
    """Record the call with its finished response (a step)."""
    fail: Callable[[str, dict[str, Any] | None], None]
    """Record the call as failed, with the reason and, for a response that ended
    ``failed``, that response (what the program got, for a replay to answer with)."""


class BackgroundCalls:
    """Background calls by reply id, until a poll finishes them."""

    def __init__(self) -> None:
        self._pending: dict[str, PendingCall] = {}

    def hold(self, reply_id: str, call: PendingCall) -> None:
        self._pending[reply_id] = call

    def get(self, reply_id: str) -> PendingCall | None:
        return self._pending.get(reply_id)

    def polled(self, reply_id: str, payload: Any) -> None:
        """A poll (or cancel) of ``reply_id`` answered ``payload`` (200): a finished
        response is recorded as the call's step, a failed, cancelled or unreadable one
        as a failed call; a pending one keeps waiting."""
        call = self._pending.get(reply_id)
        if call is None:
            return
        status = payload.get("status") if isinstance(payload, dict) else None
        if status in PENDING:
            call.status = str(status)
            return
        del self._pending[reply_id]
        if call.adapter.reply_ok(payload):
            call.finish(payload)
            return
        error = payload.get("error") if isinstance(payload, dict) else None
        detail = error.get("message") if isinstance(error, dict) else None
        call.fail(
            f"{UNFINISHED}{status or 'unreadable'}"
            + (f": {detail}" if detail else "")
            + (" (cancelled by the program)" if status == "cancelled" else ""),
            payload if status == "failed" and isinstance(payload, dict) else None,
        )

    def close(self) -> None:
        """Record every call still pending as failed (the run is over)."""
        pending, self._pending = self._pending, {}
        for reply_id, call in pending.items():
            call.fail(NEVER_FINISHED.format(status=call.status, id=reply_id), None)
