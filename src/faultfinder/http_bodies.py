"""Bodies read from the network, bounded: every HTTP client of faultfinder (the recording
proxy's upstream client, the Langfuse importer's API reads, the LLM layer's SDK clients,
``export``) reads an answer through :func:`limit_body`, so a server that sends an endless
or enormous body fails the one read that met it instead of filling the memory.

A body encoded with gzip or deflate is decoded here, chunk by chunk, within the same
bound (a small gzip body can expand a thousandfold); what is sent, encoded, is bounded
too (at twice the limit), so a body that decodes to little cannot go on forever. Works on
the responses of ``httpx`` and of the SDKs' ``httpx2`` alike: they share the interface
used here.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from faultfinder.errors import FaultfinderError

__all__ = ["MAX_REPLY", "BodyTooLargeError", "limit_body", "limit_hook", "size_text"]

MAX_REPLY = 64 * 1024 * 1024
"""Bytes of one answer read, at most, where a whole answer is needed (a model's reply,
streamed or not; a page of an API): far over any real one (a model's reply is bounded by
its output tokens, a few MiB at the very most), and small enough for the memory."""


def size_text(size: int) -> str:
    """``size`` bytes in words: "64 MiB", "1 KiB", else "1000 bytes"."""
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} bytes"


class BodyTooLargeError(FaultfinderError):
    """An answer went on past the bound it was read within: it was not read further."""

    def __init__(self, what: str, limit: int) -> None:
        self.what = what
        self.limit = limit
        super().__init__(
            f"{what} went on past {size_text(limit)}, the most faultfinder reads of one; "
            "it was not read further"
        )


def limit_body(response: Any, limit: int, what: str) -> None:
    """Make reading ``response``'s body (not read yet: sent with ``stream=True``, or in a
    client's response hook) raise :class:`BodyTooLargeError` naming ``what`` once more
    than ``limit`` bytes of it came, after giving exactly ``limit`` (a caller that wants
    the start of a long body can keep it). Its gzip or deflate encoding is undone here,
    within the bound, and its ``content-encoding`` header dropped so that the client does
    not decode it again; another encoding (br, zstd, several) stays the client's to
    decode, and only what is sent is bounded."""
    encoding = response.headers.get("content-encoding", "").strip().lower()
    ours = encoding in ("", "identity", "gzip", "deflate")
    stream = response.stream
    bases = tuple(
        b for b in type(stream).__mro__[1:] if b.__name__ in ("SyncByteStream", "AsyncByteStream")
    )
    kind = _bounded_classes.get(bases)
    if kind is None:
        kind = _bounded_classes[bases] = type("BoundedStream", (_BoundedStream, *bases), {})
    response.stream = kind(stream, encoding if ours else "", limit, what)
    if ours and "content-encoding" in response.headers:
        del response.headers["content-encoding"]


def limit_hook(limit: int, what: str) -> Callable[[Any], Awaitable[None]]:
    """An async client's response hook that bounds every body it reads (:func:`limit_body`)."""

    async def hook(response: Any) -> None:
        limit_body(response, limit, what)

    return hook


_bounded_classes: dict[tuple[type, ...], type] = {}
"""The bounded stream's class per library (its byte-stream base classes, which the
clients check a response's stream against)."""


class _BoundedStream:
    """A response's byte stream, decoded and cut at the limit (see :func:`limit_body`)."""

    def __init__(self, stream: Any, encoding: str, limit: int, what: str) -> None:
        self._stream = stream
        self._decoder = Decoder(encoding)
        self._limit = limit
        self._what = what
        self._given = 0
        self._over = False

    def _take(self, chunk: bytes) -> bytes:
        out = self._decoder.decode(chunk, self._limit + 1 - self._given)
        self._given += len(out)
        if self._given > self._limit or self._decoder.read > 2 * self._limit:
            self._over = True
            return out[: max(len(out) - (self._given - self._limit), 0)]
        return out

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._stream:
            if out := self._take(chunk):
                yield out
            if self._over:
                raise BodyTooLargeError(self._what, self._limit)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            if out := self._take(chunk):
                yield out
            if self._over:
                raise BodyTooLargeError(self._what, self._limit)

    def close(self) -> None:
        self._stream.close()

    async def aclose(self) -> None:
        await self._stream.aclose()


class Decoder:
    """A body's gzip or deflate encoding undone chunk by chunk, each at most as long as
    asked; another encoding (or a body that is not what it says) is kept as it came."""

    def __init__(self, encoding: str) -> None:
        kind = encoding.strip().lower()
        wbits = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}.get(kind)
        self._zlib = None if wbits is None else zlib.decompressobj(wbits)
        self._raw_deflate = kind == "deflate"  # a zlib header, or raw deflate (as httpx)
        self.read = 0
        """Encoded bytes taken in."""

    def decode(self, chunk: bytes, room: int) -> bytes:
        self.read += len(chunk)
        if self._zlib is None or room <= 0:
            return chunk[: max(room, 0)]
        try:
            return self._zlib.decompress(self._zlib.unconsumed_tail + chunk, room)
        except zlib.error:
            if self._raw_deflate and self.read == len(chunk):
                self._raw_deflate = False
                self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
                self.read = 0
                return self.decode(chunk, room)
            self._zlib = None
            return chunk[:room]
