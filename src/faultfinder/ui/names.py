"""Names on the pages: shown clipped wherever they are named, and whole once per page.

A name (an agent, a tool, a method or model label, a trace id, a subtask) is untrusted
text like the rest of a trace, and the pages repeat it: an agent is named on each of its
steps, in the timeline, the answers and the graph. The templates show every name through
the ``name`` filter, which clips it (`faultfinder.shown.clip_name`: the first characters,
an ellipsis and the whole length) and notes the whole; ``base.html`` then lists each name
it clipped once, whole, at the foot of the page. Step content is not a name and is never
clipped here.
"""

from __future__ import annotations

from typing import Any

from jinja2 import pass_context
from jinja2.runtime import Context

from faultfinder.shown import NAME_CHARS, clip_name

LISTED_CHARS = 1_000_000
"""The page's list of whole names holds at most this many characters; a name past it is
listed clipped, with a note (the file it came from still holds it)."""


class ClippedNames:
    """The names one page showed clipped, in the order first shown."""

    def __init__(self) -> None:
        self.names: dict[str, None] = {}

    def add(self, name: str) -> None:
        self.names.setdefault(name, None)

    def __len__(self) -> int:
        return len(self.names)

    def listing(self) -> list[tuple[str, bool]]:
        """(name, whole): each name whole while the list stays within `LISTED_CHARS`,
        clipped (whole False) past it."""
        out: list[tuple[str, bool]] = []
        used = 0
        for name in list(self.names):
            used += len(name)
            whole = used <= LISTED_CHARS
            out.append((name if whole else clip_name(name), whole))
        return out


@pass_context
def name_filter(context: Context, value: Any, limit: int = NAME_CHARS, count: bool = True) -> str:
    """``{{ agent|name }}``: the name clipped to ``limit`` characters (``count``: with its
    whole length, as every label but a drawing's shows it), noted for the page's list of
    whole names when it was clipped."""
    text = "" if value is None else str(value)
    shown = clip_name(text, limit, count=count)
    if shown != text:
        noted = context.get("clipped_names")
        if isinstance(noted, ClippedNames):
            noted.add(text)
    return shown
