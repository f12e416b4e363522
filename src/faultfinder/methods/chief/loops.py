"""Deterministic loop-group detection: an agent re-issuing a near-identical message.

Messages are compared within the same agent *and* raw role (so Magentic-One's ledger
thoughts are compared with ledgers, instructions with instructions). JSON blocks are
reduced to their string values first, so a ledger's fixed keys do not make every ledger
look alike. Near-identical repeats (token Jaccard ≥ threshold, at most ``max_gap`` steps
apart) are chained into a group; the group runs from the first issue (entry) to the first
step of another agent after the last repeat, i.e. the response to it (exit).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, Field

from faultfinder.llm import json_text
from faultfinder.methods.chief.graph import LoopGroup, LoopMember, LoopRole
from faultfinder.methods.chief.knowledge import tokenize
from faultfinder.traces.schema import Trace


class LoopConfig(BaseModel):
    """Loop-detection thresholds."""

    threshold: float = Field(default=0.75, ge=0.0, le=1.0)
    """Token Jaccard similarity from which two messages count as near-identical."""
    min_tokens: int = Field(default=4, ge=1)
    """Messages with fewer content tokens (e.g. 'Next speaker WebSurfer') are ignored."""
    max_gap: int = Field(default=12, ge=1)
    """Repeats further apart than this many steps are not chained."""


def _json_strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _json_strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _json_strings(v)


def message_tokens(text: str) -> frozenset[str]:
    """Content tokens of a message, JSON keys left out."""
    start = text.find("{")
    end = text.rfind("}")
    if 0 <= start < end:
        try:
            data = json_text.loads(text[start : end + 1])
        except json_text.JSONTextError:
            data = None
        if data is not None:
            text = text[:start] + " " + " ".join(_json_strings(data)) + " " + text[end + 1 :]
    text = re.sub(r"https?://\S+", " url ", text)
    return frozenset(tokenize(text))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def _finder(parent: dict[int, int]) -> Callable[[int], int]:
    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    return find


def detect_loops(trace: Trace, config: LoopConfig | None = None) -> list[LoopGroup]:
    """Loop groups of ``trace``, ordered by entry step and numbered L1, L2, ..."""
    cfg = config or LoopConfig()
    tokens = [message_tokens(s.content) for s in trace.steps]
    by_key: dict[tuple[str, str], list[int]] = {}
    for step in trace.steps:
        by_key.setdefault((step.agent, step.role or ""), []).append(step.index)
    raw_groups: list[tuple[str, list[int], float]] = []
    for (agent, _role), indices in by_key.items():
        usable = [i for i in indices if len(tokens[i]) >= cfg.min_tokens]
        parent = {i: i for i in usable}
        find = _finder(parent)

        sims: dict[tuple[int, int], float] = {}
        for pos, i in enumerate(usable):
            for j in usable[pos + 1 :]:
                if j - i > cfg.max_gap:
                    break
                sim = jaccard(tokens[i], tokens[j])
                if sim >= cfg.threshold:
                    sims[(i, j)] = sim
                    parent[find(j)] = find(i)
        components: dict[int, list[int]] = {}
        for i in usable:
            components.setdefault(find(i), []).append(i)
        for members in components.values():
            if len(members) < 2:
                continue
            members.sort()
            pair_sims = [
                sims.get((a, b), jaccard(tokens[a], tokens[b]))
                for a, b in itertools.pairwise(members)
            ]
            raw_groups.append((agent, members, sum(pair_sims) / len(pair_sims)))
    merged = _merge_same_agent(raw_groups, trace)
    merged.sort(key=lambda g: (g[1][0], g[0]))
    return [
        _build(trace, f"L{n}", agent, repeats, sim, end)
        for n, (agent, repeats, sim, end) in enumerate(merged, start=1)
    ]


def _span_end(trace: Trace, repeats: list[int]) -> int:
    """The first step by another agent after the last repeat (the response to it), looked
    for at most one cycle ahead; the last repeat itself when nobody answers in time."""
    last = repeats[-1]
    agent = trace.steps[last].agent
    gaps = [b - a for a, b in itertools.pairwise(repeats)]
    limit = min(last + max(gaps), len(trace.steps) - 1)
    return next(
        (s.index for s in trace.steps[last + 1 : limit + 1] if s.agent != agent),
        last,
    )


def _merge_same_agent(
    groups: list[tuple[str, list[int], float]], trace: Trace
) -> list[tuple[str, list[int], float, int]]:
    """Overlapping groups of one agent (e.g. ledger and instruction repeats) become one."""
    spans = [(agent, reps, sim, _span_end(trace, reps)) for agent, reps, sim in groups]
    spans.sort(key=lambda g: (g[0], g[1][0]))
    out: list[tuple[str, list[int], float, int]] = []
    for agent, reps, sim, end in spans:
        if out and out[-1][0] == agent and reps[0] <= out[-1][3]:
            _, prev_reps, prev_sim, prev_end = out[-1]
            out[-1] = (
                agent,
                sorted(set(prev_reps) | set(reps)),
                (prev_sim + sim) / 2,
                max(prev_end, end),
            )
            continue
        out.append((agent, reps, sim, end))
    return out


def _build(
    trace: Trace, group_id: str, agent: str, repeats: list[int], sim: float, end: int
) -> LoopGroup:
    start = repeats[0]
    end = max(end, repeats[-1])
    repeat_set = set(repeats)
    members: list[LoopMember] = []
    for index in range(start, end + 1):
        role: LoopRole = "entry" if index == start else "exit" if index == end else "internal"
        members.append(
            LoopMember(
                step=index,
                agent=trace.steps[index].agent,
                role=role,
                repeat=index in repeat_set,
            )
        )
    others = list(dict.fromkeys(m.agent for m in members if m.agent != agent))
    excerpt = " ".join(trace.steps[start].content.split())[:200]
    return LoopGroup(
        id=group_id,
        agent=agent,
        repeats=repeats,
        start=start,
        end=end,
        members=members,
        other_agents=others,
        similarity=round(sim, 3),
        excerpt=excerpt,
    )
