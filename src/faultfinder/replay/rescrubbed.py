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
within one JSON string, and a replayed request that matches no recorded one exactly is
tried against the patterns of its agent's recorded requests. What filled the holes is
what the recording scrubbed: the replay learns it as a secret, so its branch does not
write it either. Tried only when nothing matches exactly, so exact matching is unchanged.
"""

from __future__ import annotations

import json
import re
from typing import Any

from faultfinder.redact import REDACTED

__all__ = ["RedactedRequests"]

_HOLE = r'((?:[^"\\]|\\.)+?)'
"""What one ``[REDACTED]`` stands for: text within one JSON string."""


def _blob(normalised: dict[str, Any]) -> str:
    """A normalised request as JSON text, written as :func:`hash_normalised` writes it."""
    return json.dumps(normalised, sort_keys=True, separators=(",", ":"))


class RedactedRequests:
    """The recorded requests that hold ``[REDACTED]``, as patterns, by agent."""

    def __init__(self) -> None:
        self._patterns: list[tuple[str, str, re.Pattern[str]]] = []

    def add(self, agent: str, request_hash: str, normalised: dict[str, Any]) -> None:
        """Keep recorded request ``normalised`` of ``agent`` (hashed ``request_hash``) if
        it holds ``[REDACTED]``."""
        blob = _blob(normalised)
        if REDACTED not in blob:
            return
        pattern = re.escape(blob).replace(re.escape(REDACTED), _HOLE)
        self._patterns.append((agent, request_hash, re.compile(pattern, re.S)))

    def find(self, agent: str, normalised: dict[str, Any]) -> tuple[str, list[str]] | None:
        """The hash of the first recorded request of ``agent`` that ``normalised`` matches
        with its ``[REDACTED]`` filled in, and the texts that fill them; None if none."""
        mine = [(h, p) for a, h, p in self._patterns if a == agent]
        if not mine:
            return None
        blob = _blob(normalised)
        for request_hash, pattern in mine:
            match = pattern.fullmatch(blob)
            if match is not None:
                return request_hash, [json.loads(f'"{hole}"') for hole in match.groups()]
        return None
