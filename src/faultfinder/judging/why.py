"""Why a case has no usable answer, in one line, for every place that shows results.

A verdict that is not answered (``unparsed``, ``error``, ``budget-exceeded``) says why
somewhere in its record: ``error`` for a failure, ``details['step_unparsed']`` when the
step broke the agent/step rule (``judging/pairing.py``), ``details['parse_error']`` or the
parse error of the last unreadable reply when the answer could not be read. ``attribute``,
``demo`` and ``eval``'s progress lines print this one line, so the reason is never only in
``--json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

ANSWERED = frozenset({"ok", "no-error-found"})
"""Statuses that are answers (nothing to explain)."""


class _Call(Protocol):
    parsed: bool
    parse_error: str | None
    reply: str


class _Result(Protocol):
    @property
    def status(self) -> str: ...

    @property
    def error(self) -> str | None: ...

    @property
    def details(self) -> dict[str, Any]: ...

    @property
    def calls(self) -> Sequence[_Call]: ...


def _short(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def why(result: _Result) -> str | None:
    """One line saying why ``result`` is not an answer; None when it is one."""
    if result.status in ANSWERED:
        return None
    if result.error:
        return _short(result.error)
    details = result.details or {}
    for key in ("step_unparsed", "parse_error", "unparsed_reason"):
        value = details.get(key)
        if isinstance(value, str) and value.strip():
            return _short(value)
    unreadable = [c for c in result.calls if not c.parsed]
    if unreadable:
        last = unreadable[-1]
        reason = last.parse_error or "the reply could not be read"
        return _short(f"{reason} (reply: {last.reply!r})")
    if result.status == "unparsed":
        return "no readable answer in the model's replies (see --json for every reply)"
    return None
