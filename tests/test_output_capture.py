"""The program's output reaches stdout.txt scrubbed as it is written, whatever the reads
cut: a secret split across reads, over several lines or in a line too long to hold is
never on disk, not even while the run goes on (docs/security.md)."""

from __future__ import annotations

import asyncio
import io
import itertools
import os
import sys
import time
from pathlib import Path

import pytest

from faultfinder.redact import REDACTED, Redactor
from faultfinder.replay.capture import MAX_LINE, tee
from faultfinder.replay.child import run_child
from faultfinder.replay.session import SessionOptions

TOKEN = "s3cr3t-token-value-42"
PEM = "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\n-----END KEY-----"
SHAPED = "sk-" + "abcdefghij" * 4


class Reads:
    """A stream whose reads return the given chunks, one each."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def read(self, size: int) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""


def split(text: str, *at: int) -> list[bytes]:
    data = text.encode("utf-8")
    cuts = [0, *at, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(cuts)]


def copied(chunks: list[bytes], redactor: Redactor) -> tuple[str, bytes]:
    sink = io.BytesIO()
    raw = asyncio.run(tee(Reads(chunks), sink, None, redactor))  # type: ignore[arg-type]
    return sink.getvalue().decode("utf-8"), raw


LONG = "a" * (MAX_LINE - 10)
CASES = {
    "split within a line": ("my token " + TOKEN + "\nnext\n", [9 + 5], TOKEN),
    "a secret over two lines": ("key: " + PEM + "\ndone\n", [5 + 25], PEM),
    "a line too long to hold": (LONG + TOKEN + "b" * 70000 + "\n", [MAX_LINE], TOKEN),
    "a key-shaped token in a long line": (
        "a " * (MAX_LINE // 2 - 10) + SHAPED + " b\n",
        [MAX_LINE],
        SHAPED,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_secret_cut_by_the_reads_is_never_written(case: str) -> None:
    text, at, secret = CASES[case]
    redactor = Redactor([TOKEN, PEM])
    written, raw = copied(split(text, *at), redactor)
    assert raw == text.encode("utf-8")  # the caller gets the output as printed
    assert secret[-10:] not in written and REDACTED in written
    assert written == redactor.text(text)  # as if scrubbed whole


def test_a_long_line_keeps_its_characters_whole() -> None:
    text = "é" * MAX_LINE + "\n"
    data = text.encode("utf-8")
    chunks = [data[i : i + 65535] for i in range(0, len(data), 65535)]  # odd: cuts a 'é'
    written, _ = copied(chunks, Redactor())
    assert written == text


PROGRAM = """
import os, sys, time
key = os.environ["PRIVATE_KEY"]
sys.stdout.write("key: " + key[:25]); sys.stdout.flush(); time.sleep(0.3)
sys.stdout.write(key[25:] + "\\nDONE\\n"); sys.stdout.flush()
time.sleep(60)
"""


def test_stdout_txt_holds_no_secret_while_the_program_runs(tmp_path: Path) -> None:
    """A private key printed over two lines, in two writes: the file, read while the
    program still runs (a recorder killed now leaves it as it is), has it scrubbed."""
    env = {**os.environ, "PRIVATE_KEY": PEM}
    command = [sys.executable, "-c", PROGRAM]

    async def run() -> str:
        stop = asyncio.Event()
        child = asyncio.create_task(
            run_child(command, env, tmp_path, SessionOptions(echo=False), stop=stop)
        )
        deadline = time.monotonic() + 30
        text = ""
        while "DONE" not in text and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            path = tmp_path / "stdout.txt"
            text = path.read_text(encoding="utf-8") if path.exists() else ""
        stop.set()
        await child
        return text

    text = asyncio.run(run())
    assert "DONE" in text
    assert "MIIEvQIBADANBgkqhkiG9w0B" not in text and text.startswith(f"key: {REDACTED}")
