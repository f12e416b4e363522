"""Names on the pages: shown clipped wherever they are named, and whole once per page.

A name (an agent, a tool, a method or model label, a trace id, a subtask) is untrusted
text like the rest of a trace, and the pages repeat it: an agent is named on each of its
steps, in the timeline, the answers and the graph. The templates show every name through
the ``name`` filter, which clips it (`faultfinder.shown.clip_name`: the first characters,
an ellipsis and the whole length) and notes the whole; ``base.html`` then lists each name
it clipped once, whole, at the foot of the page. Step content is not a name and is never
clipped here.

A name is also shown with its invisible characters escaped: a zero-width space, joiner or
word joiner, a soft hyphen, a byte-order mark, a Hangul filler or a tag character would
make two agents (``Coder`` and ``Co\u200bder``) look the same. Step content keeps them (a
zero-width joiner builds an emoji, a non-joiner spells Persian); its direction controls
are escaped for every text (`faultfinder.shown.safe`).
"""

from __future__ import annotations

import re
from typing import Any

from jinja2 import pass_context
from jinja2.runtime import Context

from faultfinder.shown import NAME_CHARS, clip_name, safe

_INVISIBLE = re.compile(
    "[\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160"
    "\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\u3164\ufeff\uffa0"
    "\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)
"""Characters that show nothing: Unicode's format characters (category Cf), the Hangul
fillers and the combining grapheme joiner."""


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(name: str) -> str:
    """``name`` with every character that shows nothing written as its escape."""
    return _INVISIBLE.sub(_escape, name)


def shown_name(value: Any, limit: int = NAME_CHARS) -> str:
    """A name as the page's script shows it (with ``textContent``, past the templates):
    clipped with its length, invisible and control characters escaped."""
    return safe(visible(clip_name("" if value is None else str(value), limit)))


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
            out.append((visible(name if whole else clip_name(name)), whole))
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
    return visible(shown)
