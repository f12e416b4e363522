"""The JSON object or array a model's reply holds: the whole reply, its ``<json>`` block, a
code fence, or the first bracketed block in prose. One reader for every JSON answer
(``docs/llm.md``); the field readers in :mod:`faultfinder.judging.answers` build on it.
Anything unreadable raises :class:`faultfinder.llm.ParseError`, in linear time.
"""

from __future__ import annotations

import json
import re
from typing import Any

from faultfinder.llm.client import ParseError

_FENCE = re.compile(r"^[ \t]*```[\w-]*[ \t]*\n(.*?)\n[ \t]*```", re.MULTILINE | re.DOTALL)
"""A Markdown code fence: opening and closing on lines of their own. A JSON string cannot
hold a raw newline, so a fence quoted inside a JSON value never matches."""
# Possessive blanks: '.*?' could take them too, and retrying each split of a long run of
# blanks before a fence that never closes is quadratic.
_INLINE_FENCE = re.compile(r"```(?:json)?\s*+(.*?)```", re.DOTALL)
_JSON_TAG = re.compile(r"<json>(.*?)</json>", re.DOTALL | re.IGNORECASE)
"""The ``<json></json>`` tags ECHO's prompts ask the answer to be wrapped in."""


def json_tagged(text: str) -> str | None:
    """The content of the last complete ``<json>...</json>`` block of ``text`` (the answer,
    when prose before it quotes JSON of its own), or None when there is none."""
    blocks = _JSON_TAG.findall(text)
    return blocks[-1] if blocks else None


def extract_json(text: str) -> Any:
    """The JSON object or array ``text`` holds: the whole text when it is one; else the
    content of its last ``<json></json>`` block, when it has one; else the first in a code
    fence, then the first in the text (prose around it and trailing commas tolerated)."""
    tagged = json_tagged(text)
    if tagged is not None:  # strictly shorter than ``text``: the recursion ends
        return extract_json(tagged)
    try:
        whole = json.loads(text)
    except (json.JSONDecodeError, RecursionError):  # RecursionError: nested too deep
        whole = None
    if isinstance(whole, dict | list):
        return whole
    text_block = _first_block(text)
    candidates = [m.group(1) for m in _FENCE.finditer(text)]
    inline = None if candidates else _INLINE_FENCE.search(text)
    # '```json {...}``` on one line', unless those backticks are inside the text's first
    # bracketed block (code quoted in a string of the answer itself).
    if inline is not None and (
        text_block is None or not text_block[0] < inline.start() < text_block[1]
    ):
        candidates.append(inline.group(1))
    candidates.append(text)
    for i, candidate in enumerate(candidates):
        span = text_block if i == len(candidates) - 1 else _first_block(candidate)
        if span is None:
            continue
        blob = candidate[span[0] : span[1] + 1]
        for attempt in (blob, re.sub(r",\s*([}\]])", r"\1", blob)):
            try:
                return json.loads(attempt)
            except (json.JSONDecodeError, RecursionError):
                pass
    raise ParseError("no valid JSON object in the answer")


MAX_OPEN_BRACKETS = 64
"""Unclosed brackets :func:`_first_block` looks past before giving up (each costs a scan
to the end of the text, so the bound keeps a reply of '[[[[...' linear)."""


def _first_block(text: str) -> tuple[int, int] | None:
    """Start and end index of the first bracketed block that closes, or None."""
    tried = 0
    for start, char in enumerate(text):
        if char not in "{[":
            continue
        end = closing_bracket(text, start)
        if end is not None:
            return start, end
        tried += 1
        if tried >= MAX_OPEN_BRACKETS:
            return None
    return None


def closing_bracket(text: str, start: int) -> int | None:
    """Index of the bracket closing the one at ``start`` (strings skipped), or None."""
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i
    return None
