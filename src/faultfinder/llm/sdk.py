"""What the SDK-based backends (``openai_compat``, ``anthropic_messages``) share: one
client per event loop, and reading why a call failed."""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import socket
import time
from collections.abc import Callable, Mapping
from typing import Generic, Protocol, TypeVar


class _Closable(Protocol):
    async def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)


class ClientPerLoop(Generic[C]):
    """One SDK client per event loop. An SDK's connection pool is tied to the loop it
    first ran on; eval runs and tests use several loops in turn, so a client is made
    anew when the running loop changes."""

    def __init__(self, make: Callable[[], C]) -> None:
        self._make = make
        self._client: C | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def get(self) -> C:
        loop = asyncio.get_running_loop()
        if self._client is not None and self._loop is loop:
            return self._client
        stale, stale_loop = self._client, self._loop
        client = self._make()
        self._client, self._loop = client, loop
        if stale is not None and stale_loop is not None and stale_loop.is_closed():
            # Its connections belong to a finished loop, so closing them fails; trying
            # still marks the client closed, which stops the SDK from scheduling the same
            # failing close on this loop when the client is garbage-collected.
            with contextlib.suppress(Exception):
                await stale.close()
        return client


def parse_retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date)."""
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        try:
            return max(float(ms) / 1000.0, 0.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    current = time.time() if now is None else now
    return max(when.timestamp() - current, 0.0)


def unreachable(exc: BaseException) -> str | None:
    """Why a connection failed for good (refused, unknown host), or None if it may pass."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError):
            return "connection refused (nothing is listening there)"
        if isinstance(current, socket.gaierror):
            return f"cannot resolve the host name ({current.strerror or current})"
        text = str(current)
        if "Connection refused" in text or "[Errno 111]" in text:
            return "connection refused (nothing is listening there)"
        if "Name or service not known" in text or "nodename nor servname" in text:
            return "cannot resolve the host name"
        current = current.__cause__ or current.__context__
    return None
