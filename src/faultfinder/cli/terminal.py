"""Printing helpers of the command line: trace text made safe to print (``safe``, from
:mod:`faultfinder.shown`), names clipped as the web UI clips them (``shown_name``) and counted
nouns.

Every line a command prints that holds trace, model or results-file text goes through
``safe``; every name in it (an agent, a method or model label, a subset, a trace id) goes
through ``shown_name`` first, so a 100,000-character agent name is shown as its first
characters and its length, as on the UI's pages. ``--json`` output is left whole: JSON
escapes every control character itself and a script wants the whole name."""

from __future__ import annotations

from faultfinder.shown import clip_name, safe

__all__ = ["plural", "safe", "shown_name"]


def shown_name(value: object) -> str:
    """A name as the command line shows it: clipped (`faultfinder.shown.clip_name`, the
    first characters, an ellipsis and the whole length), its control and
    direction-changing characters escaped; ``-`` for none."""
    if value is None:
        return "-"
    return safe(clip_name(str(value)))


def plural(count: int, word: str) -> str:
    """'1 agent', '3 agents', '1 call', '0 calls'."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"
