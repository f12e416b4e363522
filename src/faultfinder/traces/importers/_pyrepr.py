"""A safe reader for Python ``repr`` text such as ``ChatCompletion(id='x', choices=[...])``.

Recorded traces often store an ``openai`` response object as its ``repr`` string. Evaluating
that text would run arbitrary code from a data file, so this module reads it with a small
tokenizer and a recursive-descent parser for the subset of Python literal syntax a ``repr``
produces:

    value := call | name | string+ | number | list | tuple | dict
    call  := name '(' [arg (',' arg)*] [','] ')'       arg := NAME '=' value | value
    name  := NAME ('.' NAME)*                           (None, True, False are constants)

Calls become :class:`Call` objects (nothing is ever called or imported); other bare names
become :class:`Name`. Errors carry the character offset where reading failed.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

MAX_DEPTH = 200
"""Nesting limit: deeper input is rejected instead of exhausting the Python stack."""


class ReprSyntaxError(ValueError):
    """The text is not a repr this reader understands."""

    def __init__(self, message: str, position: int) -> None:
        self.message = message
        self.position = position
        super().__init__(f"{message} at char {position}")


@dataclass(frozen=True)
class Call:
    """``Name(arg, key=value)`` as written in the repr."""

    name: str
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Name:
    """A bare identifier other than None/True/False (an enum member, a constant...)."""

    name: str


@dataclass(frozen=True)
class Token:
    kind: str
    """NAME, STRING, NUMBER, PUNCT or END."""
    value: Any
    position: int


_CONSTANTS: dict[str, Any] = {"None": None, "True": True, "False": False}
_NUMBER = re.compile(
    r"-?(?:(?:\d[\d_]*)?\.\d[\d_]*(?:[eE][+-]?\d+)?|\d[\d_]*\.?(?:[eE][+-]?\d+)?|inf|nan)"
)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_STRING_PREFIX = re.compile(r"(?i)(?:rb|br|r|b|u)?(?='|\")")
_PUNCT = set("()[]{},=:.")
_SPECIAL = {q: re.compile(f"[\\\\\n{q}]") for q in ("'", '"')}
"""Characters that end a run of ordinary string content, per opening quote."""
_SIMPLE_ESCAPES = {
    "\\": "\\",
    "'": "'",
    '"': '"',
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
}


def tokenize(text: str) -> list[Token]:
    """Split repr text into tokens; strings are decoded, numbers converted."""
    tokens: list[Token] = []
    pos, end = 0, len(text)
    while pos < end:
        ch = text[pos]
        if ch.isspace():
            pos += 1
            continue
        prefix = _STRING_PREFIX.match(text, pos)
        if prefix is not None:
            raw = "r" in prefix.group(0).lower()
            value, after = _read_string(text, prefix.end(), raw)
            tokens.append(Token("STRING", value, pos))
            pos = after
            continue
        number = _NUMBER.match(text, pos)
        if number is not None and (ch.isdigit() or ch in "-." or _ends_word(text, number.end())):
            tokens.append(Token("NUMBER", _to_number(number.group(0), pos), pos))
            pos = number.end()
            continue
        name = _NAME.match(text, pos)
        if name is not None:
            tokens.append(Token("NAME", name.group(0), pos))
            pos = name.end()
            continue
        if ch in _PUNCT:
            tokens.append(Token("PUNCT", ch, pos))
            pos += 1
            continue
        raise ReprSyntaxError(f"unexpected character {ch!r}", pos)
    tokens.append(Token("END", None, end))
    return tokens


def _ends_word(text: str, position: int) -> bool:
    return position >= len(text) or not (text[position].isalnum() or text[position] == "_")


MAX_INT_DIGITS = 19
"""Longest integer a repr may hold (as in JSON trace files): larger is an error."""


def _to_number(literal: str, pos: int) -> int | float:
    """A number token's value. NaN, infinities and integers past 19 digits are refused:
    they cannot be kept faithfully in a JSON trace."""
    cleaned = literal.replace("_", "")
    if any(c in cleaned for c in ".eE") or cleaned.lstrip("-") in ("inf", "nan"):
        value = float(cleaned)
        if value != value or value in (float("inf"), float("-inf")):
            raise ReprSyntaxError(f"number {literal[:20]} is not finite", pos)
        return value
    if len(cleaned.lstrip("-")) > MAX_INT_DIGITS:
        raise ReprSyntaxError(f"integer with {len(cleaned)} digits is too large", pos)
    return int(cleaned)


def _read_string(text: str, pos: int, raw: bool) -> tuple[str, int]:
    """Decode the string literal whose opening quote is at ``pos``; return (value, end)."""
    start = pos
    quote = text[pos]
    delimiter = quote * 3 if text.startswith(quote * 3, pos) else quote
    pos += len(delimiter)
    out: list[str] = []
    special = _SPECIAL[quote]
    while True:
        # Copy the run of ordinary characters in one slice; long outputs are mostly that.
        match = special.search(text, pos)
        stop = match.start() if match else len(text)
        out.append(text[pos:stop])
        pos = stop
        if pos >= len(text):
            raise ReprSyntaxError("unterminated string", start)
        if text.startswith(delimiter, pos):
            return "".join(out), pos + len(delimiter)
        ch = text[pos]
        if ch == "\n" and len(delimiter) == 1:
            raise ReprSyntaxError("line break inside a string", pos)
        if ch != "\\":
            out.append(ch)
            pos += 1
            continue
        if pos + 1 >= len(text):
            raise ReprSyntaxError("unterminated string", start)
        if raw:
            out.append(text[pos : pos + 2])
            pos += 2
            continue
        decoded, pos = _read_escape(text, pos)
        out.append(decoded)


def _read_escape(text: str, pos: int) -> tuple[str, int]:
    """Decode the backslash escape at ``pos`` (which holds the backslash)."""
    kind = text[pos + 1]
    if kind in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[kind], pos + 2
    if kind == "\n":
        return "", pos + 2
    if kind in "xuU":
        width = {"x": 2, "u": 4, "U": 8}[kind]
        digits = text[pos + 2 : pos + 2 + width]
        if len(digits) != width or not all(c in "0123456789abcdefABCDEF" for c in digits):
            raise ReprSyntaxError(f"bad \\{kind} escape", pos)
        code = int(digits, 16)
        if code > 0x10FFFF:
            raise ReprSyntaxError(f"\\{kind} escape out of range", pos)
        return chr(code), pos + 2 + width
    if kind in "01234567":
        digits = kind
        for c in text[pos + 2 : pos + 4]:
            if c not in "01234567":
                break
            digits += c
        return chr(int(digits, 8)), pos + 1 + len(digits)
    if kind == "N" and text.startswith("{", pos + 2):
        close = text.find("}", pos + 3)
        if close < 0:
            raise ReprSyntaxError("bad \\N{...} escape", pos)
        try:
            return unicodedata.lookup(text[pos + 3 : close]), close + 1
        except KeyError:
            raise ReprSyntaxError("unknown character name in \\N{...}", pos) from None
    # Python keeps unknown escapes verbatim (backslash included).
    return "\\" + kind, pos + 2


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.i = 0

    def peek(self) -> Token:
        return self.tokens[self.i]

    def next(self) -> Token:
        token = self.tokens[self.i]
        if token.kind != "END":
            self.i += 1
        return token

    def is_punct(self, char: str) -> bool:
        token = self.peek()
        return token.kind == "PUNCT" and token.value == char

    def expect(self, char: str) -> None:
        token = self.next()
        if token.kind != "PUNCT" or token.value != char:
            raise ReprSyntaxError(f"expected {char!r}, found {_describe(token)}", token.position)

    def value(self, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise ReprSyntaxError("nesting too deep", self.peek().position)
        token = self.next()
        if token.kind == "STRING":
            parts = [token.value]
            while self.peek().kind == "STRING":  # implicit concatenation 'a' 'b'
                parts.append(self.next().value)
            return "".join(parts)
        if token.kind == "NUMBER":
            return token.value
        if token.kind == "NAME":
            name = token.value
            while self.is_punct("."):
                self.next()
                part = self.next()
                if part.kind != "NAME":
                    raise ReprSyntaxError(
                        f"expected a name after '.', found {_describe(part)}", part.position
                    )
                name += "." + part.value
            if self.is_punct("("):
                self.next()
                return self.call(name, depth)
            if name in _CONSTANTS:
                return _CONSTANTS[name]
            return Name(name)
        if token.kind == "PUNCT" and token.value == "[":
            return self.sequence("]", depth)
        if token.kind == "PUNCT" and token.value == "(":
            return self.sequence(")", depth)
        if token.kind == "PUNCT" and token.value == "{":
            return self.mapping(depth)
        raise ReprSyntaxError(f"expected a value, found {_describe(token)}", token.position)

    def sequence(self, close: str, depth: int) -> list[Any]:
        items: list[Any] = []
        while not self.is_punct(close):
            items.append(self.value(depth + 1))
            if not self.is_punct(close):
                self.expect(",")
        self.next()
        return items

    def mapping(self, depth: int) -> dict[Any, Any]:
        items: dict[Any, Any] = {}
        while not self.is_punct("}"):
            key_token = self.peek()
            key = self.value(depth + 1)
            if isinstance(key, list | dict | Call):
                raise ReprSyntaxError("unhashable dict key", key_token.position)
            self.expect(":")
            items[key] = self.value(depth + 1)
            if not self.is_punct("}"):
                self.expect(",")
        self.next()
        return items

    def call(self, name: str, depth: int) -> Call:
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        while not self.is_punct(")"):
            token = self.peek()
            following = self.tokens[self.i + 1] if self.i + 1 < len(self.tokens) else token
            if token.kind == "NAME" and following.kind == "PUNCT" and following.value == "=":
                self.next()
                self.next()
                kwargs[token.value] = self.value(depth + 1)
            else:
                if kwargs:
                    raise ReprSyntaxError("positional argument after keyword", token.position)
                args.append(self.value(depth + 1))
            if not self.is_punct(")"):
                self.expect(",")
        self.next()
        return Call(name, args, kwargs)


def _describe(token: Token) -> str:
    if token.kind == "END":
        return "end of text"
    if token.kind == "STRING":
        return "a string"
    return repr(token.value)


def parse_repr(text: str) -> Any:
    """The value ``text`` spells, as plain Python data plus Call/Name nodes."""
    parser = _Parser(tokenize(text))
    result = parser.value()
    token = parser.peek()
    if token.kind != "END":
        raise ReprSyntaxError(f"unexpected {_describe(token)} after the value", token.position)
    return result
