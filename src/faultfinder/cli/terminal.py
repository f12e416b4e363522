"""Printing helpers of the command line: trace text made safe to print (``safe``, from
:mod:`faultfinder.shown`) and counted nouns."""

from __future__ import annotations

from faultfinder.shown import safe

__all__ = ["plural", "safe"]


def plural(count: int, word: str) -> str:
    """'1 agent', '3 agents', '1 call', '0 calls'."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"
