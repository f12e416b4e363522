"""Ways to damage a JSON trace file, each with what reading the result must do.

Used by :mod:`faultfinder.testing.fuzz`; a mutation picks one JSON file of a seed input,
changes it in one way and says whether readers must refuse it ('error'), flag it unless the
new value is kept verbatim ('flag'), read it as the seed ('same'), or merely not crash
('any').
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from faultfinder.traces.importers._common import is_credential_key
from faultfinder.traces.io import MAX_NESTING

Expect = Literal["error", "flag", "same", "any"]
"""What a mutation must cause: an error; an error or a warning unless the value is kept
verbatim; the same traces as the seed; anything but a crash."""


@dataclass
class Mutation:
    """One damaged input and what reading it must do."""

    name: str
    files: dict[str, bytes]
    expect: Expect
    keep: Any = None
    """For 'flag': the new value, accepted silently only if it appears verbatim."""
    char: str | None = None
    """For 'same' with an inserted character: it must survive into the trace."""


# Distinctive values, so a verbatim search cannot find them by chance.
_VALUES: list[Any] = [918273, 918.273, "fz918273", ["fz918273"], {"fz": 918273}, True, None]
_RAW_TOKENS = ["NaN", "Infinity", "-Infinity", "1e999", "9" * 25, "-" + "7" * 5000]
_SEPARATORS = ["\u2028", "\u2029", "\u0085", "\x1c", "\x1d", "\x1e", "\x0b", "\x0c"]
_SENTINEL = "\u0000fz-token\u0000"


def nodes(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from nodes(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from nodes(v, (*path, i))


def _set(doc: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = new
    return doc


def _rename(doc: Any, path: tuple[Any, ...], new_key: str) -> None:
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    items = list(parent.items())
    parent.clear()
    for k, v in items:
        parent[new_key if k == path[-1] else k] = v


def _typo(key: str, rng: random.Random) -> str:
    if len(key) >= 3 and rng.random() < 0.5:
        i = rng.randrange(len(key) - 1)
        swapped = key[:i] + key[i + 1] + key[i] + key[i + 2 :]
        if swapped != key:
            return swapped
    if len(key) >= 4 and rng.random() < 0.5:
        i = rng.randrange(len(key))
        return key[:i] + key[i + 1 :]
    i = rng.randrange(len(key) + 1)
    return key[:i] + rng.choice(string.ascii_lowercase) + key[i:]


def json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


class _Doc:
    """One JSON file of the seed: a single value, or JSONL lines."""

    def __init__(self, name: str, raw: bytes) -> None:
        self.name = name
        self.jsonl = name.endswith(".jsonl")
        text = raw.decode("utf-8")
        if self.jsonl:
            self.values = [json.loads(line) for line in text.split("\n") if line.strip()]
        else:
            self.values = [json.loads(text)]

    def dump(self, values: list[Any], *, ascii_only: bool = False) -> bytes:
        if self.jsonl:
            lines = [json.dumps(v, ensure_ascii=ascii_only) for v in values]
            return ("\n".join(lines) + "\n").encode("utf-8")
        return json.dumps(values[0], ensure_ascii=ascii_only, indent=1).encode("utf-8")


def _copy_values(doc: _Doc) -> list[Any]:
    values: list[Any] = json.loads(json.dumps(doc.values))
    return values


def mutate(files: dict[str, bytes], rng: random.Random) -> Mutation:
    """Damage one JSON file of ``files`` in one randomly chosen way."""
    names = sorted(n for n in files if n.endswith((".json", ".jsonl")))
    name = rng.choice(names)
    doc = _Doc(name, files[name])
    kind = rng.choice(list(MUTATIONS))
    mutation = MUTATIONS[kind](doc, files[name], rng)
    if mutation is None:  # not applicable to this file: fall back to a key rename
        mutation = _m_rename(doc, files[name], rng) or Mutation("noop", {}, "same")
    out = dict(files)
    out.update(mutation.files)
    mutation.files = out
    return mutation


def _where(doc: _Doc, line: int, path: tuple[Any, ...]) -> str:
    place = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
    return f"{doc.name}{f':{line + 1}' if doc.jsonl else ''}{place}"


def _pick_line(doc: _Doc, rng: random.Random) -> tuple[list[Any], int]:
    values = _copy_values(doc)
    return values, rng.randrange(len(values))


def _m_rename(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    values, line = _pick_line(doc, rng)
    keys = [(p, v) for p, v in nodes(values[line]) if p and isinstance(p[-1], str)]
    if not keys:
        return None
    path, _ = rng.choice(keys)
    new_key = _typo(path[-1], rng)
    parent = values[line]
    for part in path[:-1]:
        parent = parent[part]
    if new_key in parent:
        return None
    _rename(values[line], path, new_key)
    secret = is_credential_key(path[-1]) or is_credential_key(new_key)
    return Mutation(
        f"rename {_where(doc, line, path)} -> {new_key!r}",
        {doc.name: doc.dump(values)},
        "any" if secret else "flag",
        keep=new_key,
    )


def _m_retype(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    values, line = _pick_line(doc, rng)
    candidates = [(p, v) for p, v in nodes(values[line]) if p]
    if not candidates:
        return None
    path, old = rng.choice(candidates)
    choices = [v for v in _VALUES if json_type(v) != json_type(old)]
    new = rng.choice(choices)
    values[line] = _set(values[line], path, new)
    # Credentials are dropped on purpose, so their values cannot be kept.
    secret = any(isinstance(p, str) and is_credential_key(p) for p in path)
    expect: Expect = "any" if new is None or secret else "flag"
    return Mutation(
        f"retype {_where(doc, line, path)} {json_type(old)}->{json_type(new)}",
        {doc.name: doc.dump(values)},
        expect,
        keep=(path[-1], new),
    )


def _m_token(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    values, line = _pick_line(doc, rng)
    scalars = [p for p, v in nodes(values[line]) if p and not isinstance(v, dict | list)]
    if not scalars:
        return None
    values[line] = _set(values[line], rng.choice(scalars), _SENTINEL)
    token = rng.choice(_RAW_TOKENS)
    text = doc.dump(values).decode("utf-8").replace(json.dumps(_SENTINEL), token, 1)
    return Mutation(f"token {token[:8]}", {doc.name: text.encode("utf-8")}, "error")


def _m_nesting(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    values, line = _pick_line(doc, rng)
    places = [p for p, _ in nodes(values[line]) if p]
    if not places:
        return None
    depth = rng.choice([MAX_NESTING + 1, 2 * MAX_NESTING, 900, 5000, 200_000])
    values[line] = _set(values[line], rng.choice(places), _SENTINEL)
    text = doc.dump(values).decode("utf-8")
    text = text.replace(json.dumps(_SENTINEL), "[" * depth + "]" * depth, 1)
    return Mutation(f"nesting {depth}", {doc.name: text.encode("utf-8")}, "error")


def _m_duplicate(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    values, line = _pick_line(doc, rng)
    objects = [p for p, v in nodes(values[line]) if isinstance(v, dict) and v]
    if not objects:
        return None
    path = rng.choice(objects)
    target = values[line]
    for part in path:
        target = target[part]
    key = rng.choice(list(target))
    target[_SENTINEL] = "fz918273"
    text = doc.dump(values).decode("utf-8").replace(json.dumps(_SENTINEL), json.dumps(key), 1)
    return Mutation(f"duplicate {key!r}", {doc.name: text.encode("utf-8")}, "error")


def _holds_credential(path: tuple[Any, ...], text: str) -> bool:
    """Whether ``text`` (at ``path``) is scrubbed as a credential: under a credential key,
    or JSON text with one (AG2's logged ``json_state``: ``{"api_key": ...}``)."""
    if any(isinstance(p, str) and is_credential_key(p) for p in path):
        return True
    try:
        inner = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return any(isinstance(k, str) and is_credential_key(k) for p, _ in nodes(inner) for k in p)


def _m_separator(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    values, line = _pick_line(doc, rng)
    strings = [
        (p, v)
        for p, v in nodes(values[line])
        if p and isinstance(v, str) and len(v) >= 2 and not v.lstrip().startswith("ChatCompl")
    ]
    if not strings:
        return None
    path, old = rng.choice(strings)
    if _holds_credential(path, old):
        return None
    char = rng.choice(_SEPARATORS)
    at = rng.randrange(1, len(old))
    values[line] = _set(values[line], path, old[:at] + char + old[at:])
    return Mutation(
        f"separator U+{ord(char):04X} in {_where(doc, line, path)}",
        {doc.name: doc.dump(values)},
        "same",
        char=char,
        keep=(path[-1], old[:at] + char + old[at:]),
    )


def _m_repr(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    """Damage the inside of a ``ChatCompletion(...)`` repr string (read by a parser)."""
    values, line = _pick_line(doc, rng)
    reprs = [
        (p, v)
        for p, v in nodes(values[line])
        if p and isinstance(v, str) and v.lstrip().startswith("ChatCompl")
    ]
    if not reprs:
        return None
    path, old = rng.choice(reprs)
    at = rng.randrange(len(old))
    new = rng.choice(
        [
            old[:at] + old[at + 1 :],
            old[:at] + rng.choice("()[]{},='\"\\=.:") + old[at:],
            old[:at] + "(" * rng.choice([50, 300, 5000]) + old[at:],
            old[:at] + "=" + "9" * 5000 + old[at:],
            old[:at],
        ]
    )
    values[line] = _set(values[line], path, new)
    return Mutation(f"repr {_where(doc, line, path)}", {doc.name: doc.dump(values)}, "any")


def _m_bytes(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    at = rng.randrange(len(raw) + 1)
    bad = rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80", b"\xf0\x9f"])
    return Mutation("invalid utf-8", {doc.name: raw[:at] + bad + raw[at:]}, "error")


def _m_truncate(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    return Mutation("truncate", {doc.name: raw[: rng.randrange(len(raw))]}, "any")


def _m_damage_line(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    if not doc.jsonl or len(doc.values) < 2:
        return None
    lines = doc.dump(doc.values).decode("utf-8").split("\n")
    n = rng.randrange(1, len(doc.values))
    cut = rng.randrange(1, max(2, len(lines[n])))
    lines[n] = lines[n][:cut] + rng.choice(["", "}", "]", ",", '{"x":'])
    try:  # a cut that still leaves valid JSON is a different message, not damage
        json.loads(lines[n])
        expect: Expect = "any"
    except ValueError:
        expect = "error"
    return Mutation("damage later line", {doc.name: "\n".join(lines).encode("utf-8")}, expect)


def _m_reencode(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    style = rng.choice(["crlf", "bom", "ascii", "reorder", "compact"])
    values = _copy_values(doc)
    if style == "crlf":
        data = raw.replace(b"\n", b"\r\n")
    elif style == "bom":
        data = b"\xef\xbb\xbf" + raw
    elif style == "ascii":
        data = doc.dump(values, ascii_only=True)
    elif style == "reorder":
        for _, node in nodes(values):
            if isinstance(node, dict):
                items = list(node.items())
                rng.shuffle(items)
                node.clear()
                node.update(items)
        data = doc.dump(values)
    else:
        data = doc.dump(values).replace(b"\n ", b"\n")
    return Mutation(f"re-encode {style}", {doc.name: data}, "same")


def _m_empty(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    return Mutation("empty file", {doc.name: rng.choice([b"", b"\n", b"  \n\n"])}, "error")


MUTATIONS: dict[str, Callable[[_Doc, bytes, random.Random], Mutation | None]] = {
    "rename": _m_rename,
    "retype": _m_retype,
    "token": _m_token,
    "nesting": _m_nesting,
    "duplicate": _m_duplicate,
    "separator": _m_separator,
    "repr": _m_repr,
    "bytes": _m_bytes,
    "truncate": _m_truncate,
    "damage-line": _m_damage_line,
    "reencode": _m_reencode,
    "empty": _m_empty,
}
"""Kinds of damage, chosen uniformly per input."""
