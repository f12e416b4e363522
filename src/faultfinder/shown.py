"""Text from a trace or a model, made safe to show on a terminal or a web page, and names
clipped to a length that can be shown wherever they are named.

Trace content is untrusted: an agent name or a reply can hold escape sequences (one sets
the terminal's title, another rewrites the screen) or Unicode controls that reorder what is
shown (a right-to-left override makes ``exe.txt`` read ``txt.exe``, in a terminal and in a
browser alike). Every such character is shown as its escape (``\\x1b``, ``\\u202e``)
instead; newlines and tabs stay. A leaf: the CLI prints through it, and the web UI's
templates pass every value through it before escaping the HTML.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ufff9-\ufffb]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(text: str) -> str:
    """``text`` with every control and direction-changing character escaped."""
    return _UNSAFE.sub(_escape, text)


NAME_CHARS = 80
"""A name (an agent, a tool, a method or model label, a trace id) is shown with at most
this many of its characters. Names are untrusted too: an importer that took a system
prompt for an agent's name makes a 100,000-character name, repeated wherever the agent is
named."""


def clip_name(text: str, limit: int = NAME_CHARS, *, count: bool = True) -> str:
    """``text`` whole when it has at most ``limit`` characters; else its first ``limit``,
    an ellipsis marking the cut and, with ``count``, how long the whole is:
    ``Researcher… (100,012 chars)``."""
    if len(text) <= limit:
        return text
    return text[:limit] + "\u2026" + (f" ({len(text):,} chars)" if count else "")
