"""Causal edges from the model: subtask and agent edges with counterfactual patterns
(paper Fig. 8), and step edges (Fig. 9).

Edges are checked against the graph: subtask edges only between consecutive subtasks,
agent edges only between agents acting in the same subtask, step edges only from an
earlier to a later step. Anything else is dropped and recorded. Every consecutive pair of
subtasks gets an edge; a pair the model left out gets a 'logical_prereq' edge marked
origin='default'.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from faultfinder.judging.agent_names import Roster, match_agent
from faultfinder.llm.client import ParseError
from faultfinder.methods.chief import prompts
from faultfinder.methods.chief.context import (
    StageContext,
    as_int,
    as_list,
    as_text,
    get_field,
)
from faultfinder.methods.chief.graph import (
    AGENT_EDGE_TYPES,
    SCENARIOS,
    SUBTASK_EDGE_TYPES,
    AgentEdge,
    AgentNode,
    CounterfactualPattern,
    StageRecord,
    StepEdge,
    Subtask,
    SubtaskEdge,
)
from faultfinder.methods.chief.graph_render import section_texts
from faultfinder.methods.chief.otar import match_subtask


def _norm_type(value: Any) -> str:
    return re.sub(r"[\s\-]+", "_", as_text(value).strip().lower())


def _scenario(value: Any) -> str:
    text = re.sub(r"[\s_]+", "-", as_text(value).strip().lower())
    for scenario in SCENARIOS:
        if text.startswith(scenario) or scenario.replace("-", "") == text.replace("-", ""):
            return scenario
    return "unspecified"


def parse_patterns(value: Any) -> list[CounterfactualPattern]:
    patterns: list[CounterfactualPattern] = []
    for item in value if isinstance(value, list) else []:
        if not isinstance(item, dict):
            continue
        bias = as_text(get_field(item, "bias"))
        anomaly = as_text(get_field(item, "anomaly"))
        if not bias and not anomaly:
            continue
        reversible = get_field(item, "reversible")
        patterns.append(
            CounterfactualPattern(
                scenario=_scenario(get_field(item, "scenario", "type")),  # type: ignore[arg-type]
                bias=bias,
                anomaly=anomaly,
                reversible=reversible if isinstance(reversible, bool) else None,
            )
        )
    return patterns


class EdgeParse(BaseModel):
    """What the edge reply yielded."""

    subtask_edges: list[SubtaskEdge] = Field(default_factory=list)
    """Valid subtask edges."""
    agent_edges: list[AgentEdge] = Field(default_factory=list)
    """Valid agent edges."""
    dropped: list[str] = Field(default_factory=list)
    """Edges discarded, with why."""


def parse_edges(
    data: Any, subtasks: list[Subtask], aliases: Mapping[str, str] | None = None
) -> EdgeParse:
    if not isinstance(data, dict):
        raise ParseError("expected a JSON object with 'subtask_edges' and 'agent_edges'")
    out = EdgeParse()
    position = {s.id: n for n, s in enumerate(subtasks)}
    raw_sub = get_field(data, "subtask_edges")
    raw_agent = get_field(data, "agent_edges")
    if not isinstance(raw_sub, list) and not isinstance(raw_agent, list):
        raise ParseError("no 'subtask_edges' or 'agent_edges' list in the answer")
    for item in raw_sub if isinstance(raw_sub, list) else []:
        if not isinstance(item, dict):
            continue
        src = match_subtask(get_field(item, "from", "source"), subtasks)
        dst = match_subtask(get_field(item, "to", "target"), subtasks)
        kind = _norm_type(get_field(item, "type"))
        if src is None or dst is None or position[dst.id] != position[src.id] + 1:
            out.dropped.append(f"subtask edge {json.dumps(item)[:60]}: not a consecutive pair")
            continue
        if kind not in SUBTASK_EDGE_TYPES:
            out.dropped.append(f"subtask edge {src.id}->{dst.id}: unknown type '{kind}'")
            continue
        out.subtask_edges.append(
            SubtaskEdge(
                source=src.id,
                target=dst.id,
                type=kind,  # type: ignore[arg-type]
                patterns=parse_patterns(get_field(item, "counterfactual_patterns", "patterns")),
            )
        )
    for item in raw_agent if isinstance(raw_agent, list) else []:
        if not isinstance(item, dict):
            continue
        sub = match_subtask(get_field(item, "subtask"), subtasks)
        kind = _norm_type(get_field(item, "type"))
        if sub is None:
            out.dropped.append(f"agent edge {json.dumps(item)[:60]}: unknown subtask")
            continue
        try:
            roster = Roster(sub.agents, aliases)  # qualified speakers read as their agent
            src_agent = match_agent(as_text(get_field(item, "from", "source")), roster)
            dst_agent = match_agent(as_text(get_field(item, "to", "target")), roster)
        except ParseError as exc:
            out.dropped.append(f"agent edge in {sub.id}: {exc}")
            continue
        if kind not in AGENT_EDGE_TYPES:
            out.dropped.append(f"agent edge {src_agent}->{dst_agent}: unknown type '{kind}'")
            continue
        out.agent_edges.append(
            AgentEdge(
                subtask=sub.id,
                source=src_agent,
                target=dst_agent,
                type=kind,  # type: ignore[arg-type]
                patterns=parse_patterns(get_field(item, "counterfactual_patterns", "patterns")),
            )
        )
    return out


def default_subtask_edges(subtasks: list[Subtask], given: list[SubtaskEdge]) -> list[SubtaskEdge]:
    """``given`` plus a default edge for every consecutive pair it does not cover."""
    have = {(e.source, e.target) for e in given}
    out = list(given)
    for prev, nxt in itertools.pairwise(subtasks):
        if (prev.id, nxt.id) not in have:
            out.append(SubtaskEdge(source=prev.id, target=nxt.id, origin="default"))
    order = {s.id: n for n, s in enumerate(subtasks)}
    return sorted(out, key=lambda e: order[e.source])


def subtasks_agents_text(subtasks: list[Subtask], nodes: list[AgentNode]) -> str:
    view = []
    for sub in subtasks:
        agents = []
        for node in (n for n in nodes if n.subtask == sub.id):
            entry: dict[str, Any] = {"agent": node.agent, "steps": node.steps}
            if node.otar is not None:
                entry["OTAR"] = node.otar.model_dump()
            agents.append(entry)
        view.append(
            {"id": sub.id, "name": sub.name, "step_range": [sub.start, sub.end], "agents": agents}
        )
    return json.dumps(view, ensure_ascii=False, indent=1)


async def build_edges(
    ctx: StageContext, subtasks: list[Subtask], nodes: list[AgentNode]
) -> tuple[list[SubtaskEdge], list[AgentEdge], StageRecord]:
    """Subtask and agent edges (one call). On an unparsed reply only default edges remain."""
    prompt = ctx.render(
        "edges",
        prompts.EDGES,
        {"subtasks": subtasks_agents_text(subtasks, nodes)},
        sections=section_texts(subtasks, nodes),
    )
    reply = await ctx.ask_json(
        prompt,
        lambda data: parse_edges(data, subtasks, ctx.roster.aliases),
        purpose="chief edges",
        items=len(subtasks) + len(nodes),
    )
    if reply.parsed is None:
        return (
            default_subtask_edges(subtasks, []),
            [],
            StageRecord(status="unparsed", note=str(reply.parse_error), attempts=reply.attempts),
        )
    parsed = reply.parsed
    note = ("dropped: " + "; ".join(parsed.dropped)) if parsed.dropped else ""
    return (
        default_subtask_edges(subtasks, parsed.subtask_edges),
        parsed.agent_edges,
        StageRecord(status="ok", note=note, attempts=reply.attempts),
    )


_DATA_TYPES = ("text", "numeric", "list", "boolean")


def parse_step_edges(data: Any, ctx: StageContext) -> tuple[list[StepEdge], list[str]]:
    edges: list[StepEdge] = []
    dropped: list[str] = []
    for item in as_list(data, "step_edges"):
        if not isinstance(item, dict):
            continue
        up = get_field(item, "upstream_step", "upstream", "producer", "producer_step")
        down = get_field(item, "downstream_step", "downstream", "consumer", "consumer_step")
        if isinstance(up, dict):
            up = get_field(up, "step_id", "step")
        if isinstance(down, dict):
            down = get_field(down, "step_id", "step")
        producer, consumer = as_int(up), as_int(down)
        if producer is None or consumer is None:
            dropped.append(f"step edge {json.dumps(item)[:60]}: no step numbers")
            continue
        if not (0 <= producer < consumer < ctx.n_steps):
            dropped.append(f"step edge {producer}->{consumer}: not an earlier-to-later pair")
            continue
        data_text = as_text(get_field(item, "output_data", "data", "input_data"))
        kind = _norm_type(get_field(item, "data_type", "type"))
        edges.append(
            StepEdge(
                producer=producer,
                consumer=consumer,
                producer_agent=ctx.trace.steps[producer].agent,
                consumer_agent=ctx.trace.steps[consumer].agent,
                data=data_text or "(unspecified)",
                data_type=kind if kind in _DATA_TYPES else "text",  # type: ignore[arg-type]
                origin="llm",
            )
        )
    return edges, dropped


async def build_step_edges(
    ctx: StageContext, subtasks: list[Subtask]
) -> tuple[list[StepEdge], StageRecord]:
    """Step edges from the model (Fig. 9). Unparsed → none from the model."""
    from faultfinder.methods.chief.otar import subtasks_text

    prompt = ctx.render(
        "step-edges",
        prompts.STEP_EDGES,
        {"subtasks": subtasks_text(subtasks)},
        sections=section_texts(subtasks),
    )
    reply = await ctx.ask_json(
        prompt,
        lambda data: parse_step_edges(data, ctx),
        purpose="chief step edges",
        items=ctx.n_steps,
    )
    if reply.parsed is None:
        return [], StageRecord(
            status="unparsed", note=str(reply.parse_error), attempts=reply.attempts
        )
    edges, dropped = reply.parsed
    note = ("dropped: " + "; ".join(dropped)) if dropped else ""
    return edges, StageRecord(status="ok", note=note, attempts=reply.attempts)
