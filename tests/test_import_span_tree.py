"""The span tree's ancestor walk: the same spans as a plain walk up the parent links, in
work that grows with a chain's depth, not its square (counted, not timed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from faultfinder.traces.importers._span_fields import SpanTree
from faultfinder.traces.importers._spans import Span
from faultfinder.traces.loader import load_traces
from otel_helpers import export, span


class CountingDict(dict[str, Span]):
    """The tree's span index, counting the look-ups of a parent."""

    lookups = 0

    def get(self, key: str, default: Any = None) -> Any:
        CountingDict.lookups += 1
        return super().get(key, default)


def plain_walk(tree: SpanTree, span: Span) -> list[Span]:
    """The ancestors as the walk defines them: parent links followed up, each span once."""
    out: list[Span] = []
    current = dict.get(tree.by_id, span.parent_id or "")
    while current is not None and all(current is not seen for seen in out):
        out.append(current)
        current = dict.get(tree.by_id, current.parent_id or "")
    return out


def node(span_id: str, parent: str | None) -> Span:
    return Span(trace_id="t", span_id=span_id, parent_id=parent, name=span_id)


def test_ancestors_are_those_of_a_plain_walk_with_branches_and_cycles() -> None:
    spans = [node("root", None), node("a", "root"), node("b", "a"), node("c", "a")]
    spans += [node("d", "c"), node("orphan", "missing")]
    spans += [node("x", "y"), node("y", "z"), node("z", "x"), node("into", "y")]  # a loop
    spans += [node("self", "self")]
    tree = SpanTree(spans)
    for s in spans:
        expected = plain_walk(tree, s)
        got = tree.ancestors(s)
        assert list(got) == expected, s.span_id
        assert len(got) == len(expected), s.span_id
        assert [got[i] for i in range(len(got))] == expected
        assert got[-1:] == expected[-1:]
    assert [a.span_id for a in tree.ancestors(spans[4])] == ["c", "a", "root"]
    assert [a.span_id for a in tree.ancestors(spans[9])] == ["y", "z", "x"]
    assert [a.span_id for a in tree.ancestors(spans[6])] == ["y", "z", "x"]  # x itself last
    assert list(tree.ancestors(spans[-1])) == [spans[-1]]


def test_a_deep_chain_is_walked_in_work_linear_in_its_depth() -> None:
    """Each span the child of the one before: every span's ancestors were a new list read
    from the top (a 2,000-deep chain took minutes to import); a caller that stops at the
    first ancestor now reads one parent, and every length together is one pass."""
    depth = 300
    spans = [node("s0", None)] + [node(f"s{i}", f"s{i - 1}") for i in range(1, depth)]
    tree = SpanTree(spans)
    tree.by_id = CountingDict(tree.by_id)
    CountingDict.lookups = 0
    firsts = [next(iter(tree.ancestors(s)), None) for s in spans]
    assert [f.span_id if f else None for f in firsts] == [None] + [
        f"s{i}" for i in range(depth - 1)
    ]
    assert CountingDict.lookups <= 2 * depth
    CountingDict.lookups = 0
    assert [len(tree.ancestors(s)) for s in spans] == list(range(depth))
    assert CountingDict.lookups <= 3 * depth
    assert [a.span_id for a in tree.ancestors(spans[-1])][-2:] == ["s1", "s0"]


def test_a_deep_delegation_chain_imports_every_call_with_its_agent(tmp_path: Path) -> None:
    """agent -> tool -> agent -> ..., each agent making one model call, a model call inside
    each call (the same call seen twice) at the bottom: every agent's call is a step with
    that agent, and the nested duplicate is not."""
    levels = 200
    chain: list[dict[str, Any]] = []
    parent: str | None = None
    for k in range(levels):
        agent, call, tool = (f"{3 * k + n:016x}" for n in (1, 2, 3))
        name = f"Agent{k}"
        agent_attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}
        tool_attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "delegate"}
        chain.append(span(agent, parent, name, 3 * k, agent_attrs))
        chain.append(span(call, agent, f"chat {k}", 3 * k + 1, reply(f"r{k}")))
        chain.append(span(tool, agent, "delegate", 3 * k + 2, tool_attrs))
        parent = tool
    chain.append(span("f" * 16, f"{3 * levels - 1:016x}", "chat", 3 * levels, reply("dup")))
    path = tmp_path / "deep.otlp.json"
    path.write_text(json.dumps(export(chain)), "utf-8")
    (trace,) = load_traces(path, format="otlp")
    llm = [s for s in trace.steps if s.kind == "llm"]
    assert [(s.agent, s.content) for s in llm] == [(f"Agent{k}", f"r{k}") for k in range(levels)]


def reply(text: str) -> dict[str, Any]:
    """A model call's attributes: its one reply."""
    out = [{"role": "assistant", "parts": [{"type": "text", "content": text}]}]
    return {"gen_ai.operation.name": "chat", "gen_ai.output.messages": json.dumps(out)}
