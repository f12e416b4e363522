"""Near-duplicate traces by content: bottom-k MinHash sketches over word shingles.

The exact content hash (``model.trace_hash``) misses a copy of a trace with one trailing
space, re-wrapped lines, an edited step or another release of the same benchmark. A
sketch does not: a trace's text (every step's output and tool results, speakers left
out) is lower-cased and split into words, each run of ``SHINGLE`` consecutive words is
hashed once (BLAKE2b, 32 bits), and the ``SKETCH`` smallest hashes are kept (a bottom-k
MinHash). The Jaccard similarity of two traces' shingle sets is estimated from the
sketches: among the ``SKETCH`` smallest hashes of their union, the share present in both.

Whitespace, case and punctuation do not change a sketch; an edit changes only the
shingles it touches. Computing a sketch costs one hash per shingle (a few milliseconds
for a long trace), comparing two a merge of two short sorted lists.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import re
import struct
from collections.abc import Iterable, Mapping

from faultfinder.traces.schema import Trace

SHINGLE = 2
"""Words per shingle."""
SKETCH = 64
"""Hashes kept per trace."""
NEAR = 0.6
"""Estimated Jaccard similarity at or above which two traces count as near-duplicates.

Chosen on Who&When (bench/contamination.py): distinct traces are at most 0.44 similar
(Hand-Crafted logs share Magentic-One's boilerplate), while a copy with 10% of its words
dropped stays above 0.67."""

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def words(trace: Trace) -> list[str]:
    """The trace's words, lower-cased, punctuation and whitespace dropped."""
    out: list[str] = []
    for step in trace.steps:
        out += _WORD.findall(step.content.casefold())
        for result in step.tool_results:
            out += _WORD.findall(result.content.casefold())
    return out


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=4).digest(), "big")


def sketch(trace: Trace) -> tuple[int, ...]:
    """The ``SKETCH`` smallest shingle hashes of ``trace``, ascending."""
    toks = words(trace)
    if len(toks) < SHINGLE:
        shingles = {" ".join(toks)} if toks else set()
    else:
        shingles = {" ".join(toks[i : i + SHINGLE]) for i in range(len(toks) - SHINGLE + 1)}
    return tuple(heapq.nsmallest(SKETCH, {_hash(s) for s in shingles}))


def similarity(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    """Estimated Jaccard similarity of the shingle sets behind sketches ``a`` and ``b``."""
    if not a or not b:
        return float(a == b)
    sa, sb = set(a), set(b)
    union = heapq.nsmallest(SKETCH, sa | sb)
    return sum(1 for h in union if h in sa and h in sb) / len(union)


def encode(sk: tuple[int, ...]) -> str:
    """A sketch as base64 text (4 bytes a hash), for a weights file."""
    return base64.b64encode(struct.pack(f">{len(sk)}I", *sk)).decode("ascii")


def decode(text: str) -> tuple[int, ...]:
    raw = base64.b64decode(text.encode("ascii"), validate=True)
    if len(raw) % 4:
        raise ValueError("a sketch is a multiple of 4 bytes")
    return struct.unpack(f">{len(raw) // 4}I", raw)


def nearest(
    sk: tuple[int, ...], known: Mapping[str, tuple[int, ...]], threshold: float = NEAR
) -> list[tuple[str, float]]:
    """Keys of ``known`` whose sketch is at least ``threshold`` similar, most similar first."""
    hits = [(key, similarity(sk, other)) for key, other in known.items()]
    return sorted(((k, s) for k, s in hits if s >= threshold), key=lambda x: -x[1])


def clusters(sketches: Iterable[tuple[int, ...]], threshold: float = NEAR) -> list[int]:
    """A cluster id per sketch: near-duplicates (transitively) share one."""
    sks = list(sketches)
    parent = list(range(len(sks)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(len(sks)):
        for j in range(i):
            if similarity(sks[i], sks[j]) >= threshold:
                parent[root(i)] = root(j)
    return [root(i) for i in range(len(sks))]
