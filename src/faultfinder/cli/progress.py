"""A line on stderr per finished model call, so a long run on a slow model is never
silent (``attribute``, ``graph``, ``demo``, ``check``, ``debug``)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

import click

from faultfinder.llm.client import LLM
from faultfinder.llm.scopes import CallRecord


def with_progress(llm: LLM, progress: bool | None) -> LLM:
    """``llm`` printing a line per finished call on stderr when ``progress`` (None: when
    stderr is a terminal)."""
    if progress if progress is not None else sys.stderr.isatty():
        llm.on_call = CallProgress()
    return llm


class CallProgress:
    """Prints one line per finished model call on stderr: count, elapsed time, purpose,
    reply tokens, so a long run on a slow model is never silent."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream
        self.calls = 0
        self.started = time.perf_counter()

    def __call__(self, record: CallRecord) -> None:
        self.calls += 1
        elapsed = time.perf_counter() - self.started
        how = "cached" if record.cached else f"{record.usage.completion_tokens} reply tokens"
        unread = "" if record.parsed is not False else ", unreadable: re-asking"
        click.echo(
            f"[call {self.calls}, {elapsed:.1f} s] {record.purpose or 'model call'} "
            f"({how}{unread})",
            file=self.stream or sys.stderr,
        )
