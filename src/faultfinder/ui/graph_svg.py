"""Layout of CHIEF's causal graph for inline SVG: subtasks as columns, agent nodes inside,
subtask edges between columns, agent and data-flow edges as curves, loops as badges.

Only coordinates and plain strings come out of here; the template draws and escapes them,
and fits each name to its box (the ``name`` filter, the name clipped in the box's title).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from faultfinder.methods.chief.graph import CausalGraph

COLUMN = 230.0
GAP = 70.0
TOP = 50.0
NODE_W = 190.0
NODE_H = 46.0
NODE_GAP = 14.0
MAX_STEP_LINKS = 8
NODE_CHARS = 26
"""Characters of an agent's name that fit its node."""
TITLE_CHARS = 34
"""Characters of a subtask's id and name that fit its column's title."""
LOOP_CHARS = 14
"""Characters of a loop's id, and of its agent's name, in the loop's badge."""


@dataclass
class NodeBox:
    id: str
    agent: str
    x: float
    y: float
    steps: list[int]
    more_steps: int
    candidate: bool


@dataclass
class Loop:
    """A loop's badge in the column of the subtask it starts in."""

    id: str
    agent: str
    repeats: int
    start: int
    end: int


@dataclass
class SubtaskBox:
    id: str
    title: str
    x: float
    y: float
    width: float
    height: float
    candidate: bool
    nodes: list[NodeBox] = field(default_factory=list)
    loops: list[Loop] = field(default_factory=list)


@dataclass
class Curve:
    d: str
    css: str
    label: str
    lx: float
    ly: float


@dataclass
class GraphLayout:
    width: float
    height: float
    subtasks: list[SubtaskBox]
    curves: list[Curve]


def layout(graph: CausalGraph) -> GraphLayout:
    cand = graph.candidates
    cand_nodes = set(cand.agents) if cand else set()
    cand_subs = set(cand.subtasks) if cand else set()
    boxes: list[SubtaskBox] = []
    where: dict[str, NodeBox] = {}
    for col, sub in enumerate(graph.subtasks):
        nodes = [a for a in graph.agents if a.subtask == sub.id]
        x = 10 + col * (COLUMN + GAP)
        loops = [
            Loop(g.id, g.agent, len(g.repeats), g.start, g.end)
            for g in graph.loops
            if sub.start <= g.start <= sub.end
        ]
        height = 44 + len(nodes) * (NODE_H + NODE_GAP) + 18 * len(loops)
        box = SubtaskBox(
            id=sub.id,
            title=f"{sub.id}: {sub.name}",
            x=x,
            y=TOP,
            width=COLUMN,
            height=height,
            candidate=sub.id in cand_subs,
            loops=loops,
        )
        for row, node in enumerate(nodes):
            nb = NodeBox(
                id=node.id,
                agent=node.agent,
                x=x + (COLUMN - NODE_W) / 2,
                y=TOP + 36 + row * (NODE_H + NODE_GAP),
                steps=node.steps[:MAX_STEP_LINKS],
                more_steps=max(0, len(node.steps) - MAX_STEP_LINKS),
                candidate=node.id in cand_nodes,
            )
            box.nodes.append(nb)
            where[node.id] = nb
        boxes.append(box)
    curves: list[Curve] = []
    by_id = {b.id: b for b in boxes}
    for se in graph.subtask_edges:
        a, b = by_id.get(se.source), by_id.get(se.target)
        if a is None or b is None:
            continue
        y = TOP + 18
        x1, x2 = a.x + a.width, b.x
        curves.append(
            Curve(
                d=f"M{x1:.1f},{y:.1f} L{x2 - 2:.1f},{y:.1f}",
                css="edge-subtask",
                label=se.type,
                lx=(x1 + x2) / 2,
                ly=y - 6,
            )
        )
    for ae in graph.agent_edges:
        src, dst = where.get(f"{ae.subtask}:{ae.source}"), where.get(f"{ae.subtask}:{ae.target}")
        if src is None or dst is None or src is dst:
            continue
        x = src.x + NODE_W
        y1, y2 = src.y + NODE_H / 2, dst.y + NODE_H / 2
        bend = x + 24
        curves.append(
            Curve(
                d=f"M{x:.1f},{y1:.1f} C{bend:.1f},{y1:.1f} {bend:.1f},{y2:.1f} {x:.1f},{y2:.1f}",
                css="edge-agent",
                label=ae.type,
                lx=bend,
                ly=(y1 + y2) / 2,
            )
        )
    pairs: dict[tuple[str, str], int] = {}
    for e in graph.step_edges:
        s_sub, d_sub = graph.subtask_of_step(e.producer), graph.subtask_of_step(e.consumer)
        if s_sub is None or d_sub is None or s_sub.id == d_sub.id:
            continue
        s_id = f"{s_sub.id}:{e.producer_agent}"
        d_id = f"{d_sub.id}:{e.consumer_agent}"
        if s_id in where and d_id in where:
            pairs[(s_id, d_id)] = pairs.get((s_id, d_id), 0) + 1
    for (s_id, d_id), count in pairs.items():
        src, dst = where[s_id], where[d_id]
        x1, y1 = src.x + NODE_W, src.y + NODE_H * 0.75
        x2, y2 = dst.x, dst.y + NODE_H * 0.75
        mid = (x1 + x2) / 2
        curves.append(
            Curve(
                d=(
                    f"M{x1:.1f},{y1:.1f} C{mid:.1f},{y1:.1f} "
                    f"{mid:.1f},{y2:.1f} {x2 - 2:.1f},{y2:.1f}"
                ),
                css="edge-data",
                label=f"{count} data item{'s' if count > 1 else ''}",
                lx=mid,
                ly=(y1 + y2) / 2 - 4,
            )
        )
    width = 20 + len(boxes) * (COLUMN + GAP)
    height = TOP + max((b.height for b in boxes), default=0) + 30
    return GraphLayout(width=width, height=height, subtasks=boxes, curves=curves)
