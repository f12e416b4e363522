"""The JSON object or array a model's reply holds: the whole reply, its ``<json>`` block, a
code fence, or the first bracketed block in prose; else the same object written as a
Python literal (single quotes, ``True``/``None``), as Python-minded models write it. One
reader for every JSON answer (``docs/llm.md``); the field readers in
:mod:`faultfinder.judging.answers` build on it. Anything unreadable raises
:class:`faultfinder.llm.ParseError`, in linear time.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from faultfinder.llm import json_text
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
    return answer_object(text)[0]


def answer_object(text: str) -> tuple[Any, bool]:
    """:func:`extract_json`'s object, and whether the reply is written as that object:
    the whole reply, a ``<json>`` block, a code fence's content, or an object that opens a
    line and ends one. False for an object inside a sentence ('it returned {"ok": true}'),
    which may be quoted from a step rather than be the answer."""
    tagged = json_tagged(text)
    if tagged is not None:  # strictly shorter than ``text``: the recursion ends
        return answer_object(tagged)[0], True
    try:
        whole = json_text.loads(text)
    except json_text.JSONTextError:
        whole = None
    if isinstance(whole, dict | list):
        return whole, True
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
        last = i == len(candidates) - 1
        span = text_block if last else _first_block(candidate)
        if span is None:
            continue
        blob = candidate[span[0] : span[1] + 1]
        for attempt in (blob, re.sub(r",\s*([}\]])", r"\1", blob)):
            try:
                return json_text.loads(attempt), not last or _on_own_lines(text, *span)
            except json_text.JSONTextError:
                pass
    return _python_literal(text, candidates), True


def _on_own_lines(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end + 1]`` opens its line and ends one (blanks around it)."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    after = text[end + 1 : len(text) if line_end < 0 else line_end]
    return not text[line_start:start].strip() and not after.strip()


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
    """Index of the bracket closing the one at ``start`` (JSON strings skipped), or None."""
    closed = bracket_scan(text, start, quotes='"', opening="{[", closing="}]")
    return None if closed is None else closed[0]


def bracket_scan(
    text: str, start: int, *, quotes: str, opening: str, closing: str
) -> tuple[int, int] | None:
    """Index of the bracket closing the one at ``start``, skipping strings in any of
    ``quotes`` (with backslash escapes), and the deepest nesting on the way; None if it
    never closes. One linear pass."""
    depth = deepest = 0
    quote = ""
    escaped = False
    for i in range(start, len(text)):
        c = text[i]
        if quote:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == quote:
                quote = ""
        elif c in quotes:
            quote = c
        elif c in opening:
            depth += 1
            deepest = max(deepest, depth)
        elif c in closing:
            depth -= 1
            if depth == 0:
                return i, deepest
    return None


MAX_LITERAL_CHARS = 20_000
"""The longest object read as a Python literal (an answer, not a data dump)."""
MAX_LITERAL_DEPTH = 16
"""The deepest nesting of brackets read as a Python literal."""
MAX_STANDING_TRIES = 8
"""Line-opening brackets that never close looked past before giving up (each costs a scan
to the end of the text)."""
_LINE_OPENER = re.compile(r"^[ \t]*+([{\[])", re.MULTILINE)
_JSON_TYPES = (str, int, float, bool, type(None))


def _python_literal(text: str, candidates: list[str]) -> Any:
    """The object of the first of ``candidates`` (fence contents, then ``text``) that holds
    one standing on lines of its own, read as a Python literal: ``{'Agent Name': 'X',
    'Step Number': 12}``. An object inside a sentence ('it returned {'ok': True} twice')
    is quoted, not the answer, and is not read. Only what JSON can say is accepted
    (strings, numbers, True/False/None, lists, dicts with string keys); the text is parsed
    by :func:`ast.literal_eval`, which evaluates nothing, after bounds on its size and
    depth. Otherwise ParseError, naming what was wrong."""
    for candidate in candidates:
        found = _standing_block(candidate)
        if found is None:
            continue
        start, end, depth = found
        line = text.count("\n", 0, max(0, text.find(candidate)) + start) + 1
        blob = candidate[start : end + 1]
        if len(blob) > MAX_LITERAL_CHARS or depth > MAX_LITERAL_DEPTH:
            raise ParseError(
                f"the object on line {line} is not valid JSON, and too large to read as a "
                f"Python literal (over {MAX_LITERAL_CHARS} characters or "
                f"{MAX_LITERAL_DEPTH} levels deep)"
            )
        try:
            value = ast.literal_eval(blob)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:
            raise ParseError(
                f"the object on line {line} is neither valid JSON nor a Python literal "
                f"({_literal_problem(blob, exc)})"
            ) from None
        if not _json_like(value):
            raise ParseError(
                f"the object on line {line} holds values JSON cannot (a tuple, set, bytes, "
                "complex number, non-string key or an integer too long to write)"
            )
        return value
    raise ParseError("no valid JSON object in the answer")


_LITERAL_NODES: tuple[type[ast.AST], ...] = (
    *(ast.Expression, ast.Constant, ast.Dict, ast.List, ast.Tuple, ast.Set, ast.Load),
    *(ast.UnaryOp, ast.BinOp, ast.USub, ast.UAdd, ast.Add, ast.Sub),
)
"""The nodes :func:`ast.literal_eval` accepts (signed numbers, complex sums among them)."""


def _literal_problem(blob: str, exc: BaseException) -> str:
    """What keeps ``blob`` from being a Python literal, in words (never an object's id)."""
    if isinstance(exc, SyntaxError):
        return f"not Python syntax: {exc.msg[:80]}"
    try:
        tree = ast.parse(blob, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return type(exc).__name__
    odd = next((n for n in ast.walk(tree) if not isinstance(n, _LITERAL_NODES)), None)
    if odd is None:
        return str(exc)[:80]
    text = (ast.get_source_segment(blob, odd) or type(odd).__name__)[:40]
    if text in ("true", "false", "null"):
        return f"'{text}' mixes JSON into it: Python writes True, False, None"
    return f"'{text}' is not a value"


def _json_like(value: Any) -> bool:
    """Whether ``value`` holds only what JSON can say (its depth is already bounded)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_like(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_json_like(v) for v in value)
    if isinstance(value, int) and not isinstance(value, bool):
        try:  # a hex literal can be too long for str() (over 4,300 digits), as for JSON
            str(value)
        except ValueError:
            return False
    return isinstance(value, _JSON_TYPES)


def _standing_block(text: str) -> tuple[int, int, int] | None:
    """Start, end and depth of the first bracketed block (Python's quoting) that opens a
    line and ends one, or None; a bracket that never closes is looked past, up to
    ``MAX_STANDING_TRIES`` times."""
    for tried, m in enumerate(_LINE_OPENER.finditer(text)):
        if tried >= MAX_STANDING_TRIES:
            return None
        closed = _literal_close(text, m.start(1))
        if closed is None:
            continue
        end, depth = closed
        newline = text.find("\n", end)
        if not text[end + 1 : len(text) if newline < 0 else newline].strip():
            return m.start(1), end, depth
        return None  # the block goes on in a sentence: quoted, not the answer
    return None


def _literal_close(text: str, start: int) -> tuple[int, int] | None:
    """Index of the bracket closing the one at ``start``, skipping strings in single or
    double quotes, and the deepest nesting on the way; None if it never closes."""
    return bracket_scan(text, start, quotes="'\"", opening="{[(", closing="}])")
