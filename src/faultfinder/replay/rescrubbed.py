"""Recorded requests holding ``[REDACTED]``, matched by what stands in its place.

A call is recorded scrubbed of the secrets known when it completes, and scrubbed again
when a later one is learned (``RunStore.rescrub``): a prompt that quoted a key which only
a later call's headers revealed, say. Its ``request_hash`` stays that of the request as
the proxy matched it, but the request on disk now says ``[REDACTED]`` where the secret
was, and that is what a replay reads and hashes. The same program sends the secret again
in a replay, where it is not known yet either, so the call would match nothing and be
refused as the program's divergence.

:class:`RedactedRequests` matches such a call after all: a recorded normalised request
with ``[REDACTED]`` in it is a pattern in which each ``[REDACTED]`` stands for any text
(one character at least) within one string, and a replayed request that matches no
recorded one exactly is tried against the patterns of its agent's recorded requests.
Everything else (keys, list lengths, numbers, strings without ``[REDACTED]``) must be the
same. What filled the holes is what the recording scrubbed: the replay learns it as a
secret, so its branch does not write it either. Tried only when nothing matches exactly,
so exact matching is unchanged.

Whether the text in a hole is the recorded secret cannot be checked (the recording keeps
nothing derived from it), so harmless text there is scrubbed too, wherever the branch
writes it: over-scrubbing, chosen over writing a secret whenever the program stops before
it reveals the secret again (docs/replay.md, Normalisation and volatile content).

The replayed request is the program's and can be large (a prompt quoting a document), and
every call after an edit is tried against every pattern of its agent: a string is matched
by finding each literal part after the previous one (the leftmost place is the one that
leaves the most room for the rest), in time linear in its length, however many holes it
has. A regular expression with a lazy group per hole backtracked polynomially (a string
with three holes and a 2,000-character prompt took minutes), on the proxy's event loop.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from faultfinder.redact import REDACTED

__all__ = ["RedactedRequests", "likely_fills"]


def _holds_redacted(value: Any) -> bool:
    """Whether a string anywhere in ``value`` (a normalised request) says ``[REDACTED]``."""
    if isinstance(value, str):
        return REDACTED in value
    if isinstance(value, dict):
        return any(_holds_redacted(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_redacted(v) for v in value)
    return False


def _fill_string(parts: list[str], text: str) -> list[str] | None:
    """The texts that fill the holes between ``parts`` (a recorded string split at each
    ``[REDACTED]``) so that it reads ``text``, each one character at least; None when no
    filling does. Each middle part is taken at its leftmost place after the previous one:
    if any filling works, that one does."""
    first, *middle, last = parts
    end = len(text) - len(last)  # where the last part must start
    if not text.startswith(first) or not text.endswith(last) or end < len(first) + 1:
        return None
    fills: list[str] = []
    position = len(first)
    for part in middle:
        # At least one character before it and after it (the holes either side).
        found = text.find(part, position + 1, end - 1)
        if found < 0:
            return None
        fills.append(text[position:found])
        position = found + len(part)
    if end - position < 1:
        return None
    fills.append(text[position:end])
    return fills


def _fill(recorded: Any, replayed: Any, fills: list[str]) -> bool:
    """Whether ``replayed`` is ``recorded`` with its holes filled; the fills appended to
    ``fills`` in the order the recorded request's JSON text (keys sorted) holds them."""
    if isinstance(recorded, str):
        if REDACTED not in recorded:
            return bool(recorded == replayed)
        if not isinstance(replayed, str):
            return False
        found = _fill_string(recorded.split(REDACTED), replayed)
        if found is None:
            return False
        fills.extend(found)
        return True
    if isinstance(recorded, dict):
        return (
            isinstance(replayed, dict)
            and recorded.keys() == replayed.keys()
            and all(_fill(recorded[k], replayed[k], fills) for k in sorted(recorded))
        )
    if isinstance(recorded, list):
        return (
            isinstance(replayed, list)
            and len(recorded) == len(replayed)
            and all(_fill(a, b, fills) for a, b in zip(recorded, replayed, strict=True))
        )
    # A number, a boolean or null: the same JSON (1 is not 1.0, nor true), as hashed.
    return json.dumps(recorded) == json.dumps(replayed)


class RedactedRequests:
    """The recorded requests that hold ``[REDACTED]``, as patterns, by agent."""

    def __init__(self) -> None:
        self._patterns: list[tuple[str, str, dict[str, Any]]] = []

    def add(self, agent: str, request_hash: str, normalised: dict[str, Any]) -> None:
        """Keep recorded request ``normalised`` of ``agent`` (hashed ``request_hash``) if
        it holds ``[REDACTED]``."""
        if _holds_redacted(normalised):
            self._patterns.append((agent, request_hash, normalised))

    def find(self, agent: str, normalised: dict[str, Any]) -> tuple[str, list[str]] | None:
        """The hash of the first recorded request of ``agent`` that ``normalised`` matches
        with its ``[REDACTED]`` filled in, and the texts that fill them; None if none."""
        for owner, request_hash, pattern in self._patterns:
            if owner != agent:
                continue
            fills: list[str] = []
            if _fill(pattern, normalised, fills):
                return request_hash, fills
        return None


ANCHOR_CHARS = 16
"""Characters either side of a hole that place it in a request that does not match."""


def likely_fills(recorded: Any, replayed: Any) -> list[str]:
    """What probably stands where ``recorded`` (a normalised request holding
    ``[REDACTED]``) has its holes, in ``replayed``, a request that diverged from it. Each
    string of ``recorded`` with holes is compared with the string at the same place in
    ``replayed``: a hole starts after the last :data:`ANCHOR_CHARS` characters of the text
    before it and ends where the longest beginning of the text after it (up to as many
    characters) is found next (the string's end, for a hole that ends it); a hole whose
    edges are not found, and the ones after it, are left out. A divergence quotes the
    replayed request (its diff, the refusal the program gets), and a secret the
    recording scrubbed there is not known to the replay yet."""
    fills: list[str] = []
    if isinstance(recorded, str) and isinstance(replayed, str) and REDACTED in recorded:
        fills.extend(_approximate(recorded.split(REDACTED), replayed))
    elif isinstance(recorded, dict) and isinstance(replayed, dict):
        for key in sorted(recorded.keys() & replayed.keys()):
            fills.extend(likely_fills(recorded[key], replayed[key]))
    elif isinstance(recorded, list) and isinstance(replayed, list):
        for a, b in zip(recorded, replayed, strict=False):
            fills.extend(likely_fills(a, b))
    return fills


def _approximate(parts: list[str], text: str) -> list[str]:
    fills: list[str] = []
    position = 0
    for hole, (before, after) in enumerate(itertools.pairwise(parts), 1):
        anchor = before[-ANCHOR_CHARS:]
        found = text.find(anchor, position)
        if found < 0:
            break
        start = found + len(anchor)
        # A hole that ends the string runs to its end; two holes side by side cannot
        # be told apart, and end the guessing.
        last = hole == len(parts) - 1
        end = _edge(after, text, start + 1) if after else (len(text) if last else -1)
        if end < 0:
            break
        if end > start:
            fills.append(text[start:end])
        position = end
    return fills


def _edge(after: str, text: str, start: int) -> int:
    """Where in ``text``, from ``start``, the longest found beginning of ``after`` (at
    most :data:`ANCHOR_CHARS` characters of it) starts; -1 if not even its first
    character is found. The request diverged, perhaps right after the hole."""
    for length in range(min(len(after), ANCHOR_CHARS), 0, -1):
        found = text.find(after[:length], start)
        if found >= 0:
            return found
    return -1
