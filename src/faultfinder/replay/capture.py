"""The program's output, copied into the run directory (and onto the terminal) as it
comes, scrubbed of secrets before it is written.

Output is written in pieces, each scrubbed alone: the whole lines that have come (a line
ends at '\\n' or at '\\r', for progress bars), or, of a line longer than
:data:`MAX_LINE`, what comes before its last blank. A piece never ends inside something
the redactor would replace (:func:`safe_cut`): a known secret, a key-shaped token or a URL
that the cut would halve, or a known secret whose first part ends the output so far (a
private key printed over several lines, its rest still to come), is held back until it is
whole. Secrets learned later in the run are scrubbed from the files already written as
soon as they are learned, and again when the run ends (``output.py``).
"""

from __future__ import annotations

import asyncio
import codecs
from typing import IO

from faultfinder.redact import Redactor

READ_SIZE = 65536
"""Bytes read from the program at a time."""
MAX_LINE = 1 << 20
"""Characters of one line held before part of it is written."""
HOLD = 4096
"""Characters a line longer than :data:`MAX_LINE` with no blank keeps back when part of
it is written (only a key-shaped token longer than this could be halved)."""
MAX_HELD = 4 * MAX_LINE
"""Characters held at most: past this, even a piece :func:`safe_cut` finds no safe end for
(a URL or a token of megabytes, no blank) is written, all but its last :data:`HOLD`."""


async def tee(
    stream: asyncio.StreamReader | None,
    sink: IO[bytes],
    echo: IO[bytes] | None,
    redactor: Redactor,
) -> bytes:
    """Copy ``stream`` to ``sink`` (and ``echo``) piece by piece, scrubbed of the secrets
    known so far; returns what the program wrote, unscrubbed."""
    if stream is None:
        return b""
    parts: list[bytes] = []
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    while True:
        data = await stream.read(READ_SIZE)
        if data:
            parts.append(data)
            pending += decoder.decode(data)
            cut = safe_cut(pending, piece_end(pending), redactor)
            if not cut and len(pending) > MAX_HELD:  # one URL or token of megabytes
                cut = len(pending) - HOLD
        else:
            pending += decoder.decode(b"", final=True)
            cut = len(pending)
        if cut:
            clean = redactor.text(pending[:cut]).encode("utf-8")
            pending = pending[cut:]
            for out in (sink, echo):
                if out is not None:
                    out.write(clean)
                    out.flush()
        if not data:
            break
    return b"".join(parts)


def piece_end(text: str) -> int:
    """Where the next piece of ``text`` may end (0: nothing to write yet): after its last
    line end; in a line longer than :data:`MAX_LINE`, after its last blank, or else
    :data:`HOLD` characters before its end."""
    end = max(text.rfind("\n"), text.rfind("\r")) + 1
    if end or len(text) < MAX_LINE:
        return end
    blank = max(text.rfind(" "), text.rfind("\t")) + 1
    return blank or len(text) - HOLD


def safe_cut(text: str, cut: int, redactor: Redactor) -> int:
    """The last position at or before ``cut`` where ``text`` can be cut, and each part
    scrubbed alone, with nothing getting through: no secret, key-shaped token or URL the
    redactor finds in ``text`` crosses it, and no known secret starts before it and runs
    on past the end of ``text``."""
    if cut <= 0:
        return 0
    spans = redactor.spans(text)
    longest = max(map(len, redactor.secrets), default=0)
    while True:
        before = cut
        for start, end in spans:
            if start < cut < end:
                cut = start
        for position in range(max(0, len(text) - longest + 1), cut):
            tail = text[position:]
            if any(len(s) > len(tail) and s.startswith(tail) for s in redactor.secrets):
                cut = position
                break
        if cut == before:
            return cut
