"""The span tree's ancestor walk: the same spans as a plain walk up the parent links, in
work that grows with a chain's depth, not its square (counted, not timed)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from faultfinder.traces.importers._agent_spans import agent_step_spans
from faultfinder.traces.importers._span_fields import SpanTree, span_kind
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


class CountingChildren(dict[str | None, list[Span]]):
    """The tree's child lists, counting the look-ups."""

    lookups = 0

    def get(self, key: str | None, default: Any = None) -> Any:
        CountingChildren.lookups += 1
        return super().get(key, default)


def agent(span_id: str, parent: str | None, name: str, *, io: bool = True) -> Span:
    attrs: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}
    if io:
        attrs.update({"input.value": f"to {name}", "output.value": f"from {name}"})
    return Span(trace_id="t", span_id=span_id, parent_id=parent, name=name, attributes=attrs)


def call(span_id: str, parent: str | None) -> Span:
    attrs = {"gen_ai.operation.name": "chat"}
    return Span(trace_id="t", span_id=span_id, parent_id=parent, name="chat", attributes=attrs)


def plain_agent_steps(
    order: list[Span], tree: SpanTree, kinds: dict[str, str | None]
) -> dict[str, str]:
    """Agent steps as the rule defines them: an agent span with input or output and no
    model call anywhere under it; one nested in an agent step of the same name joins the
    nearest one's step."""

    def under(span: Span) -> list[Span]:
        found, stack = [], list(dict.get(tree.children, span.span_id, []))
        while stack:
            found.append(stack.pop())
            stack.extend(dict.get(tree.children, found[-1].span_id, []))
        return found

    owner: dict[str, str] = {}
    for each in order:
        if kinds[each.span_id] != "agent" or "input.value" not in each.attributes:
            continue
        if any(kinds[s.span_id] == "llm" for s in under(each)):
            continue
        outer = next(
            (
                owner[a.span_id]
                for a in plain_walk(tree, each)
                if a.span_id in owner and a.name == each.name
            ),
            None,
        )
        owner[each.span_id] = outer or each.span_id
    return owner


def test_agent_steps_are_those_the_rule_defines_in_random_trees() -> None:
    """Random trees of agent spans (two names, with and without input and output), model
    calls and plain spans, some parents missing: the agent steps found in one pass down
    the tree are those of a search of every span's subtree and ancestors."""
    rng = random.Random(3)
    for _ in range(200):
        spans: list[Span] = []
        for n in range(rng.randint(1, 40)):
            parent = rng.choice([None, "gone", *(s.span_id for s in spans)]) if spans else None
            kind = rng.random()
            if kind < 0.6:
                spans.append(agent(f"s{n}", parent, rng.choice("AB"), io=rng.random() < 0.8))
            elif kind < 0.75:
                spans.append(call(f"s{n}", parent))
            else:
                spans.append(node(f"s{n}", parent))
        tree = SpanTree(spans)
        order = tree.walk()
        kinds = {s.span_id: span_kind(s) for s in order}
        assert agent_step_spans(order, tree, kinds) == plain_agent_steps(order, tree, kinds)


def test_nested_agent_steps_are_found_in_work_linear_in_their_depth() -> None:
    """Agent spans each inside the one before, with input and output and no model call:
    each searched its whole subtree for a model call, and its ancestors for an agent step
    of its name (a 2,000-deep chain took 5 s); the tree is now read once."""
    depth = 300
    spans = [agent("s0", None, "Agent0")]
    spans += [agent(f"s{i}", f"s{i - 1}", f"Agent{i}") for i in range(1, depth)]
    tree = SpanTree(spans)
    order = tree.walk()
    kinds = {s.span_id: span_kind(s) for s in order}
    tree.by_id = CountingDict(tree.by_id)
    tree.children = CountingChildren(tree.children)
    CountingDict.lookups = CountingChildren.lookups = 0
    owner = agent_step_spans(order, tree, kinds)
    assert owner == {f"s{i}": f"s{i}" for i in range(depth)}
    assert CountingDict.lookups + CountingChildren.lookups <= 3 * depth
    same = [agent(f"t{i}", f"t{i - 1}" if i else None, "Agent") for i in range(depth)]
    tree = SpanTree([*same, call("c", "t0")])  # a model call under the outermost only
    order = tree.walk()
    kinds = {s.span_id: span_kind(s) for s in order}
    assert agent_step_spans(order, tree, kinds) == {f"t{i}": "t1" for i in range(1, depth)}
