"""The program's output in the run directory (``stdout.txt``, ``stderr.txt``), kept free
of secrets while it is written.

Each piece is scrubbed with the secrets known when it is written (``capture.tee``). A secret
can be learned later, while the program still runs: a key the program printed before its
first model call is known only once that call's headers reach the proxy. So the files
already written are scrubbed again, in place, as soon as the redactor learns anything
new (:func:`rescrub_while_running`), and once more when the program ends
(:func:`rescrub_file`): a recorder killed mid-run leaves behind no secret it had learned.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

from faultfinder.redact import Redactor

OUTPUT_FILES = ("stdout.txt", "stderr.txt")
"""The program's output, kept in the run directory."""

RESCRUB_POLL_S = 0.1
"""How often a running program's output files are checked for newly learned secrets."""


def rescrub_open(sink: IO[bytes], redactor: Redactor) -> None:
    """Scrub an output file that is still being written, through its own handle (opened
    ``w+b``), and leave the handle at its end, where the next line goes. Rewritten only
    when something changes."""
    sink.flush()
    sink.seek(0)
    data = sink.read()
    clean = redactor.text(data.decode("utf-8", errors="replace")).encode("utf-8")
    if clean != data:
        sink.seek(0)
        sink.write(clean)
        sink.truncate()
        sink.flush()
        os.fsync(sink.fileno())


async def rescrub_while_running(
    sinks: Sequence[IO[bytes]], redactor: Redactor, also: Callable[[], None] | None = None
) -> None:
    """Until cancelled: scrub ``sinks`` again whenever ``redactor`` learns a secret, and
    call ``also`` (the run's other files: ``RunStore.rescrub``). Runs on the event loop
    that writes them (``capture.tee``), so a rewrite never interleaves with a write."""
    seen = redactor.generation
    while True:
        await asyncio.sleep(RESCRUB_POLL_S)
        if redactor.generation != seen:
            seen = redactor.generation
            for sink in sinks:
                rescrub_open(sink, redactor)
            if also is not None:
                also()


def replace_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, synced, then renamed."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(path)


def rescrub_file(path: Path, redactor: Redactor) -> None:
    """Scrub a file of the run again with every secret learned so far: a key the program
    printed before its first model call is known only once that call's headers arrive.
    The file is rewritten only when something changes."""
    if not path.is_file():
        return
    text = path.read_bytes().decode("utf-8", errors="replace")
    clean = redactor.text(text)
    if clean != text:
        replace_file(path, clean)
