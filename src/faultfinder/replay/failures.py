"""Recorded calls that failed, as a replay sees them: those whose error reply was kept,
to answer again in recorded order, and those with nothing to answer with.

A recording keeps every failed model call (not a step). One the upstream answered with
an error status carries that reply (:attr:`RecordedCall.error_body`), and a replay
answers the same request with it again: among the identical requests of one agent, the
failures come before the step they came before while recording, in recorded order, so a
429 and then the reply to its retry come back as they came. A failure with no reply kept
(recorded by an older faultfinder, an unreachable upstream, a stream cut short) can only
be named when a request matches nothing else.

Plain state for :class:`~faultfinder.replay.replayer.ReplayPlan`, keyed as its steps
are: (agent, normalised request hash).
"""

from __future__ import annotations

import bisect
import email.utils
import math
from datetime import UTC

from faultfinder.replay.run_format import RecordedCall

__all__ = ["RecordedFailures", "replayed_headers"]

Key = tuple[str, str]


class RecordedFailures:
    """A recording's failed calls by (agent, request hash)."""

    def __init__(self) -> None:
        self._queued: dict[Key, list[list[RecordedCall]]] = {}
        """Failures with their error reply, grouped by the step of the same request they
        came before (the last group: after every such step), each group in recorded
        order; a group is used up as its failures are answered again."""
        self._without_reply: dict[Key, RecordedCall] = {}
        """The first failure with no error reply kept, per request."""

    def add(self, key: Key, call: RecordedCall, step_calls: list[int]) -> None:
        """Keep the failed ``call`` of request ``key``, whose recorded steps arrived as
        calls ``step_calls`` (ascending)."""
        if not call.replayable_error:
            self._without_reply.setdefault(key, call)
            return
        groups = self._queued.setdefault(key, [[] for _ in range(len(step_calls) + 1)])
        groups[bisect.bisect_left(step_calls, call.call)].append(call)

    def holds(self, key: Key) -> bool:
        """Was request ``key`` recorded as a failed call?"""
        return key in self._queued or key in self._without_reply

    def without_reply(self, key: Key) -> RecordedCall | None:
        """A failure of request ``key`` that has no reply to answer with, if any."""
        return self._without_reply.get(key)

    def next(self, key: Key, ordinal: int, before: int | None) -> RecordedCall | None:
        """The next failure of request ``key`` recorded before its step ``ordinal`` (or,
        with ``ordinal`` the number of its steps, after them all) and not yet answered
        again, taken; only one recorded before call ``before`` when it is given (step
        ``at``'s call: from there on, the upstream answers)."""
        groups = self._queued.get(key)
        if groups is None or ordinal >= len(groups):
            return None
        group = groups[ordinal]
        while group:
            failure = group.pop(0)
            if before is None or failure.call < before:
                return failure
        return None


def replayed_headers(failure: RecordedCall) -> dict[str, str]:
    """The headers a recorded error reply is sent again with: those kept with it, but a
    ``retry-after`` given as an HTTP date, which is in the past by the time of a replay,
    as the whole seconds it was ahead of the error's arrival (rounded up; 0 when it was
    already past), so a client waits as long as it did, and gives up where it gave up
    (the OpenAI SDK does not retry past two minutes)."""
    headers = dict(failure.error_headers or {})
    value = headers.get("retry-after")
    if value is None:
        return headers
    try:
        float(value)
        return headers  # seconds: as meaningful now as when recorded
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return headers  # neither seconds nor a date: sent as it came
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    arrived = failure.ended_at
    if arrived.tzinfo is None:
        arrived = arrived.replace(tzinfo=UTC)
    ahead = (when - arrived).total_seconds()
    headers["retry-after"] = str(max(0, math.ceil(ahead)))
    return headers
