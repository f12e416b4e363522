"""Near-duplicate traces by content: bottom-k MinHash sketches over word shingles.

The exact content hash (``model.trace_hash``) misses a copy of a trace with one trailing
space, re-wrapped lines, an edited step or another release of the same benchmark. A
sketch does not: a trace's text (every step's output and tool results, speakers left
out) is lower-cased and split into words, each run of ``SHINGLE`` consecutive words is
hashed once (BLAKE2b, 32 bits), and the ``SKETCH`` smallest hashes are kept (a bottom-k
MinHash). The Jaccard similarity of two traces' shingle sets is estimated from the
sketches: among the ``SKETCH`` smallest hashes of their union, the share present in both.

A query trace is compared with stored sketches more precisely (:func:`matches`): all of
its own shingle hashes are at hand, so below the largest hash of a stored sketch both sets
are known exactly, and the similarity is the share of shared hashes among every hash of
either set in that range (a sample of at least ``SKETCH`` hashes, with a standard error).

Whitespace, case and punctuation do not change a sketch; an edit changes only the
shingles it touches. Computing a sketch costs one hash per shingle (a few milliseconds
for a long trace), comparing two a merge of two short sorted lists.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import heapq
import math
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from faultfinder.traces.schema import Trace

SHINGLE = 2
"""Words per shingle."""
SKETCH = 64
"""Hashes kept per trace."""
NEAR = 0.6
"""Estimated Jaccard similarity at or above which two traces count as near-duplicates.

Chosen on Who&When (bench/contamination.py): distinct traces are at most 0.44 similar
(Hand-Crafted logs share Magentic-One's boilerplate), while a copy with 10% of its words
dropped stays above 0.67. Used to group training traces into folds (``train.py``); which
model ranks a trace is decided from ``FLOOR`` up."""
FLOOR = 0.2
"""Similarity to its nearest training trace from which a trace is treated as a possible
near-copy of it, and is never ranked by a model that trained on that trace.

Set from the similarities between distinct Who&When traces (bench/contamination.py):
99% of pairs of distinct traces are below 0.22, and three quarters of the traces have no
distinct trace above 0.20. A false positive costs little (a held-out model, trained on
three fifths of the data, ranks the trace instead of the deploy model)."""
RIVAL_Z = 2.0
"""Standard errors by which the nearest training trace must beat another before the other
is ruled out as the trace's original (``rivals``)."""

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


def shingle_hashes(trace: Trace) -> list[int]:
    """Every distinct shingle hash of ``trace``, ascending."""
    toks = words(trace)
    if len(toks) < SHINGLE:
        shingles = {" ".join(toks)} if toks else set()
    else:
        shingles = {" ".join(toks[i : i + SHINGLE]) for i in range(len(toks) - SHINGLE + 1)}
    return sorted({_hash(s) for s in shingles})


def sketch(trace: Trace) -> tuple[int, ...]:
    """The ``SKETCH`` smallest shingle hashes of ``trace``, ascending."""
    return tuple(shingle_hashes(trace)[:SKETCH])


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


@dataclass(frozen=True)
class Match:
    """A stored trace similar to the query."""

    key: str
    similarity: float
    """Estimated Jaccard similarity of the two traces' shingle sets."""
    sample: int
    """Hashes the estimate rests on (its standard error is about
    ``sqrt(s * (1 - s) / sample)``)."""

    @property
    def variance(self) -> float:
        return self.similarity * (1 - self.similarity) / max(self.sample, 1)


def matches(
    query: Sequence[int], known: Mapping[str, tuple[int, ...]], floor: float = FLOOR
) -> list[Match]:
    """Stored sketches at least ``floor`` similar to a trace with shingle hashes ``query``
    (``shingle_hashes``, ascending), most similar first.

    Below the largest hash of a stored sketch, the stored set is exactly its sketch and the
    query's set is exactly its hashes in that range: the estimate is the share of shared
    hashes among all of them."""
    have = set(query)
    out: list[Match] = []
    for key, stored in known.items():
        if not stored or not query:
            value, sample = float(not stored and not query), 1
        else:
            shared = len(have.intersection(stored))
            sample = len(stored) + bisect.bisect_right(query, stored[-1]) - shared
            value = shared / sample
        if value >= floor:
            out.append(Match(key, value, sample))
    return sorted(out, key=lambda m: (-m.similarity, m.key))


def rivals(found: Sequence[Match], z: float = RIVAL_Z) -> list[Match]:
    """The matches that could be the query's original: the most similar one, and every
    other not below it by more than ``z`` standard errors of the difference."""
    if not found:
        return []
    top = found[0]
    return [
        m
        for m in found
        if top.similarity - m.similarity <= z * math.sqrt(top.variance + m.variance)
    ]


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
