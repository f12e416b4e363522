"""Renderings of CHIEF's causal graph: Graphviz DOT, Mermaid, and the compact JSON view
its prompts show (``render_dot``, ``render_mermaid``, ``prompt_view``, ``graph_sections``)."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from faultfinder.methods.chief.graph import AgentNode, CausalGraph, StepEdge, Subtask


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _dot_id(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _dot_label(text: str) -> str:
    return _dot_id(text).replace("\n", "\\n")


def render_dot(graph: CausalGraph) -> str:
    candidate_nodes = set(graph.candidates.agents) if graph.candidates else set()
    candidate_subtasks = set(graph.candidates.subtasks) if graph.candidates else set()
    lines = [
        f"digraph {_dot_id('chief:' + graph.trace_id)} {{",
        "  rankdir=TB;",
        "  compound=true;",
        '  node [shape=box, style="rounded", fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=9];',
        f"  label={_dot_label('CHIEF causal graph: ' + _short(graph.task, 80))};",
        "  labelloc=t;",
    ]
    for sub in graph.subtasks:
        style = "bold" if sub.id in candidate_subtasks else "solid"
        lines.append(f"  subgraph {_dot_id('cluster_' + sub.id)} {{")
        title = f"{sub.id}: {_short(sub.name, 40)} (steps {sub.start}-{sub.end})"
        lines.append(f"    label={_dot_label(title)};")
        lines.append(f"    style={style};")
        for agent_node in (a for a in graph.agents if a.subtask == sub.id):
            label = f"{agent_node.agent}\nsteps {_ranges(agent_node.steps)}"
            fill = (
                ', style="rounded,filled", fillcolor="#f4cccc"'
                if agent_node.id in candidate_nodes
                else ""
            )
            lines.append(f"    {_dot_id(agent_node.id)} [label={_dot_label(label)}{fill}];")
        lines.append("  }")
    for se in graph.subtask_edges:
        first = _first_node(graph, se.source)
        second = _first_node(graph, se.target)
        lines.append(
            f"  {_dot_id(first)} -> {_dot_id(second)} [label={_dot_label(se.type)}, penwidth=2, "
            f"ltail={_dot_id('cluster_' + se.source)}, lhead={_dot_id('cluster_' + se.target)}];"
        )
    for ae in graph.agent_edges:
        lines.append(
            f"  {_dot_id(f'{ae.subtask}:{ae.source}')} -> {_dot_id(f'{ae.subtask}:{ae.target}')} "
            f"[label={_dot_label(ae.type)}, style=dashed];"
        )
    for (src, dst), bundle in _step_edge_bundles(graph).items():
        color = "gray40" if all(e.origin == "deterministic" for e in bundle) else "blue"
        lines.append(
            f"  {_dot_id(src)} -> {_dot_id(dst)} [label={_dot_label(_bundle_label(bundle))}, "
            f"style=dotted, color={color}];"
        )
    for loop in graph.loops:
        anchor = _node_of_step(graph, loop.start)
        if anchor is None:
            continue
        label = (
            f"{loop.id}: {loop.agent} repeats x{len(loop.repeats)}\nsteps {loop.start}-{loop.end}"
        )
        lines.append(
            f"  {_dot_id(loop.id)} [shape=ellipse, color=orange, label={_dot_label(label)}];"
        )
        lines.append(f"  {_dot_id(loop.id)} -> {_dot_id(anchor)} [color=orange, style=dashed];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _mm_id(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def _mm_text(text: str) -> str:
    # Mermaid labels are quoted; quotes and brackets inside them break the parser.
    return text.replace('"', "'").replace("[", "(").replace("]", ")").replace("\n", "<br/>")


def render_mermaid(graph: CausalGraph) -> str:
    candidate_nodes = set(graph.candidates.agents) if graph.candidates else set()
    lines = ["flowchart TB"]
    for sub in graph.subtasks:
        title = _mm_text(f"{sub.id}: {_short(sub.name, 40)} (steps {sub.start}-{sub.end})")
        lines.append(f'  subgraph {_mm_id(sub.id)}["{title}"]')
        for agent_node in (a for a in graph.agents if a.subtask == sub.id):
            label = _mm_text(f"{agent_node.agent}\nsteps {_ranges(agent_node.steps)}")
            lines.append(f'    {_mm_id(agent_node.id)}["{label}"]')
        lines.append("  end")
    for se in graph.subtask_edges:
        lines.append(f"  {_mm_id(se.source)} ==>|{_mm_text(se.type)}| {_mm_id(se.target)}")
    for ae in graph.agent_edges:
        lines.append(
            f"  {_mm_id(f'{ae.subtask}:{ae.source}')} -.->|{_mm_text(ae.type)}| "
            f"{_mm_id(f'{ae.subtask}:{ae.target}')}"
        )
    for (src, dst), bundle in _step_edge_bundles(graph).items():
        label = _mm_text(_bundle_label(bundle))
        lines.append(f'  {_mm_id(src)} -->|"{label}"| {_mm_id(dst)}')
    for loop in graph.loops:
        node = _node_of_step(graph, loop.start)
        if node is None:
            continue
        label = _mm_text(
            f"{loop.id}: {loop.agent} repeats x{len(loop.repeats)}, steps {loop.start}-{loop.end}"
        )
        lines.append(f'  {_mm_id(loop.id)}(["{label}"]) -.-> {_mm_id(node)}')
    if candidate_nodes:
        lines.append("  classDef candidate fill:#f4cccc,stroke:#990000")
        lines.append(
            "  class " + ",".join(_mm_id(n) for n in sorted(candidate_nodes)) + " candidate"
        )
    return "\n".join(lines) + "\n"


def _step_edge_bundles(graph: CausalGraph) -> dict[tuple[str, str], list[StepEdge]]:
    """Step edges grouped by the pair of agent nodes they connect (one drawn edge each)."""
    bundles: dict[tuple[str, str], list[StepEdge]] = {}
    for e in graph.step_edges:
        src = _node_of_step(graph, e.producer)
        dst = _node_of_step(graph, e.consumer)
        if src is None or dst is None or src == dst:
            continue
        bundles.setdefault((src, dst), []).append(e)
    return bundles


def _bundle_label(bundle: list[StepEdge]) -> str:
    """'7→9: 555-0199' for one edge; '3 data items, e.g. 7→9: 555-0199' for several."""
    # Model edges first: they carry a description, not just a literal.
    first = sorted(bundle, key=lambda e: (e.origin == "deterministic", e.consumer))[0]
    text = f"{first.producer}→{first.consumer}: {_short(first.data, 24)}"
    return text if len(bundle) == 1 else f"{len(bundle)} data items, e.g. {text}"


def _first_node(graph: CausalGraph, subtask_id: str) -> str:
    node = next((a for a in graph.agents if a.subtask == subtask_id), None)
    return node.id if node else subtask_id


def _node_of_step(graph: CausalGraph, step: int) -> str | None:
    sub = graph.subtask_of_step(step)
    if sub is None or not 0 <= step < len(graph.step_agents):
        return None
    return f"{sub.id}:{graph.step_agents[step]}"


def _ranges(steps: list[int]) -> str:
    """'3-5,8' for [3, 4, 5, 8]."""
    if not steps:
        return "-"
    parts: list[str] = []
    start = prev = steps[0]
    for s in steps[1:]:
        if s == prev + 1:
            prev = s
            continue
        parts.append(f"{start}-{prev}" if prev > start else str(start))
        start = prev = s
    parts.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(parts)


def prompt_view(
    graph: CausalGraph, *, include_oracles: bool = True, max_step_edges: int = 80
) -> str:
    """The graph as compact JSON for prompts: one entry (subtask, edge, loop group) a line.

    The text is one valid JSON object with the content of ``view_data``, written without
    indentation or spaces after separators; each list entry sits on its own line so that a
    reader can find an edge or a subtask by scanning lines (docs/methods/chief.md,
    "Deviations").
    """
    return json_lines(
        view_data(graph, include_oracles=include_oracles, max_step_edges=max_step_edges)
    )


def json_lines(view: dict[str, Any]) -> str:
    """``view`` as compact JSON, each entry of a non-empty list on a line of its own."""
    lines = ["{"]
    for i, (key, value) in enumerate(view.items()):
        comma = "," if i < len(view) - 1 else ""
        if isinstance(value, list) and value:
            lines.append(f"{_compact(key)}:[")
            lines.extend(
                _compact(v) + ("," if j < len(value) - 1 else "") for j, v in enumerate(value)
            )
            lines.append("]" + comma)
        else:
            lines.append(f"{_compact(key)}:{_compact(value)}{comma}")
    lines.append("}")
    return "\n".join(lines)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _list_lines(items: list[dict[str, Any]]) -> str:
    """A JSON list, one compact entry a line."""
    if not items:
        return "[]"
    body = ",\n".join(_compact(item) for item in items)
    return f"[\n{body}\n]"


def subtask_entries(subtasks: list[Subtask]) -> list[dict[str, Any]]:
    """The subtasks as the prompts list them (id, name, description, step range, agents)."""
    return [
        {
            "id": s.id,
            "name": s.name,
            "description": s.description,
            "step_range": [s.start, s.end],
            "agents": s.agents,
        }
        for s in subtasks
    ]


def section_texts(
    subtasks: list[Subtask],
    nodes: list[AgentNode] | None = None,
    graph: CausalGraph | None = None,
    *,
    include_oracles: bool = True,
    max_step_edges: int = 80,
) -> list[str]:
    """The graph as the 'instructions-first' layout shows it, in the order it is built: the
    subtasks; then (given ``nodes``) the agent nodes with their OTAR; then (given
    ``graph``) the edges, loop groups and oracles. Together the same content as
    ``view_data``; a stage that knows more of the graph shows more sections, and each
    section reads the same in every stage that shows it."""
    from faultfinder.methods.chief import prompts

    texts = [prompts.SUBTASKS_SECTION.format(body=_list_lines(subtask_entries(subtasks)))]
    if nodes is None:
        return texts
    entries = []
    for node in nodes:
        entry: dict[str, Any] = {"subtask": node.subtask, "agent": node.agent, "steps": node.steps}
        if node.otar is not None:
            entry["OTAR"] = node.otar.model_dump()
        entries.append(entry)
    texts.append(prompts.NODES_SECTION.format(body=_list_lines(entries)))
    if graph is None:
        return texts
    links = _links(graph, max_step_edges)
    if include_oracles:
        links["oracles"] = [o.model_dump() for o in graph.oracles]
    texts.append(prompts.LINKS_SECTION.format(body=json_lines(links)))
    return texts


def view_data(graph: CausalGraph, *, include_oracles: bool, max_step_edges: int) -> dict[str, Any]:
    """What the prompt view shows. Deterministic step edges are capped first."""
    subtasks: list[dict[str, Any]] = []
    for sub in graph.subtasks:
        entry: dict[str, Any] = {
            "id": sub.id,
            "name": sub.name,
            "step_range": [sub.start, sub.end],
            "agents": [],
        }
        if sub.description:
            entry["description"] = sub.description
        for node in (a for a in graph.agents if a.subtask == sub.id):
            agent: dict[str, Any] = {"agent": node.agent, "steps": node.steps}
            if node.otar is not None:
                agent["OTAR"] = node.otar.model_dump()
            entry["agents"].append(agent)
        oracle = graph.oracle(sub.id) if include_oracles else None
        if oracle is not None:
            entry["oracle"] = oracle.model_dump(exclude={"subtask"})
        subtasks.append(entry)
    return {"subtasks": subtasks, **_links(graph, max_step_edges)}


def step_edge_entries(edges: list[StepEdge]) -> list[dict[str, Any]]:
    """Step edges as the prompts list them, by first consumer. The deterministic linker
    links one value to every later step that uses it; those edges are one entry with a
    ``consumers`` list (the same facts, said once), model edges one entry each."""
    ordered = sorted(edges, key=lambda e: (e.consumer, e.producer))
    consumers: dict[tuple[int, str, str], list[int]] = {}
    for e in ordered:
        if e.origin == "deterministic":
            consumers.setdefault((e.producer, e.data, e.data_type), []).append(e.consumer)
    entries: list[dict[str, Any]] = []
    for e in ordered:
        entry: dict[str, Any] = {"producer": e.producer, "consumer": e.consumer}
        if e.origin == "deterministic":
            steps = consumers.pop((e.producer, e.data, e.data_type), None)
            if steps is None:  # listed with the value's first consumer
                continue
            if len(steps) > 1:
                entry = {"producer": e.producer, "consumers": steps}
        entries.append({**entry, "data": e.data, "type": e.data_type, "origin": e.origin})
    return entries


def _links(graph: CausalGraph, max_step_edges: int) -> dict[str, Any]:
    """Edges (step edges capped, model edges first) and loop groups of the graph."""
    llm_edges = [e for e in graph.step_edges if e.origin != "deterministic"]
    det_edges = [e for e in graph.step_edges if e.origin == "deterministic"]
    shown = (llm_edges + det_edges)[:max_step_edges]
    view: dict[str, Any] = {
        "subtask_edges": [
            {
                "from": e.source,
                "to": e.target,
                "type": e.type,
                "patterns": [p.model_dump(exclude_none=True) for p in e.patterns],
            }
            for e in graph.subtask_edges
        ],
        "agent_edges": [
            {
                "subtask": e.subtask,
                "from": e.source,
                "to": e.target,
                "type": e.type,
                "patterns": [p.model_dump(exclude_none=True) for p in e.patterns],
            }
            for e in graph.agent_edges
        ],
        "step_edges": step_edge_entries(shown),
        "loop_groups": [
            {
                "id": g.id,
                "repeating_agent": g.agent,
                "repeats": g.repeats,
                "entry": g.start,
                "exit": g.end,
                "other_agents": g.other_agents,
                "repeated_message": g.excerpt,
            }
            for g in graph.loops
        ],
    }
    if len(graph.step_edges) > len(shown):
        view["step_edges_omitted"] = len(graph.step_edges) - len(shown)
    return view


def graph_sections(
    graph: CausalGraph, *, include_oracles: bool = True, max_step_edges: int = 80
) -> list[str]:
    """The graph as the 'instructions-first' prompt layout shows it, in three sections."""
    return section_texts(
        graph.subtasks,
        graph.agents,
        graph,
        include_oracles=include_oracles,
        max_step_edges=max_step_edges,
    )
