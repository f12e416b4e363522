"""Server-sent events: split a byte stream into events as they arrive.

Parsing an event's fields is :class:`faultfinder.replay.apis.SSEEvent`; what the events
of each API add up to, and how a complete reply is streamed, is each adapter's business
(:mod:`faultfinder.replay.apis`).
"""

from __future__ import annotations


class SSEParser:
    """Splits a byte stream into SSE events; feed bytes as they arrive."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        """Complete events (each including its blank-line terminator) found so far."""
        self._buffer += data.replace(b"\r\n", b"\n")
        events: list[bytes] = []
        while b"\n\n" in self._buffer:
            event, self._buffer = self._buffer.split(b"\n\n", 1)
            events.append(event + b"\n\n")
        return events

    def flush(self) -> list[bytes]:
        """Whatever is left when the stream ends (an unterminated last event)."""
        rest, self._buffer = self._buffer, b""
        return [rest + b"\n\n"] if rest.strip() else []


__all__ = ["SSEParser"]
