"""Agent nodes: one per agent acting in a subtask, with its OTAR tuple parsed from the model.

Which agents act in which subtask comes from the trace; the model only supplies the
Observation / Thought / Action / Result summaries. Entries naming an unknown subtask, or
an agent that does not act in that subtask, are dropped and recorded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from faultfinder.judging.agent_names import Roster, match_agent
from faultfinder.llm.client import ParseError
from faultfinder.methods.chief import prompts
from faultfinder.methods.chief.context import StageContext, as_list, as_text, get_field
from faultfinder.methods.chief.graph import OTAR, AgentNode, StageRecord, Subtask
from faultfinder.methods.chief.graph_render import section_texts, subtask_entries


def agent_nodes(ctx: StageContext, subtasks: list[Subtask]) -> list[AgentNode]:
    """Agent nodes from the trace alone (no OTAR yet)."""
    nodes: list[AgentNode] = []
    for sub in subtasks:
        for agent in sub.agents:
            steps = [i for i in sub.steps() if ctx.trace.steps[i].agent == agent]
            nodes.append(
                AgentNode(id=f"{sub.id}:{agent}", subtask=sub.id, agent=agent, steps=steps)
            )
    return nodes


def match_subtask(value: Any, subtasks: list[Subtask]) -> Subtask | None:
    """The subtask a model answer names, by id ('S2', '2') or exact name."""
    text = as_text(value)
    if not text:
        return None
    for sub in subtasks:
        if text.lower() == sub.id.lower() or text.strip().lower() == sub.name.strip().lower():
            return sub
    m = re.fullmatch(r"(?:s|subtask\s*)?(\d+)", text.strip().lower())
    if m:
        return next((s for s in subtasks if s.id == f"S{int(m.group(1))}"), None)
    return None


class OtarParse(BaseModel):
    """What the OTAR reply yielded."""

    otar: dict[str, OTAR] = Field(default_factory=dict)
    """OTAR by agent node id."""
    dropped: list[str] = Field(default_factory=list)
    """Entries that could not be placed, with why."""


def parse_otar(
    data: Any, subtasks: list[Subtask], aliases: Mapping[str, str] | None = None
) -> OtarParse:
    out = OtarParse()
    for item in as_list(data, "subtasks"):
        if not isinstance(item, dict):
            continue
        sub = match_subtask(get_field(item, "subtask", "id", "subtask_name", "name"), subtasks)
        if sub is None:
            out.dropped.append(f"unknown subtask {json.dumps(item)[:60]}")
            continue
        agents = get_field(item, "agents")
        for entry in agents if isinstance(agents, list) else []:
            if not isinstance(entry, dict):
                continue
            raw_name = as_text(get_field(entry, "agent", "name", "agent_name"))
            try:
                agent = match_agent(raw_name, Roster(sub.agents, aliases))
            except ParseError:
                out.dropped.append(f"{sub.id}: agent '{raw_name[:40]}' does not act there")
                continue
            out.otar[f"{sub.id}:{agent}"] = OTAR(
                observation=as_text(get_field(entry, "observation")),
                thought=as_text(get_field(entry, "thought")),
                action=as_text(get_field(entry, "action")),
                result=as_text(get_field(entry, "result")),
            )
    if not out.otar:
        raise ParseError("no OTAR entry names a known subtask and an agent acting in it")
    return out


def subtasks_text(subtasks: list[Subtask]) -> str:
    return json.dumps(subtask_entries(subtasks), ensure_ascii=False, indent=1)


async def parse_otar_stage(
    ctx: StageContext, subtasks: list[Subtask], nodes: list[AgentNode]
) -> StageRecord:
    """Fill ``nodes[*].otar`` from one OTAR call (paper Fig. 7)."""
    prompt = ctx.render(
        "otar",
        prompts.OTAR,
        {"subtasks": subtasks_text(subtasks)},
        sections=section_texts(subtasks),
    )
    reply = await ctx.ask_json(
        prompt,
        lambda data: parse_otar(data, subtasks, ctx.roster.aliases),
        purpose="chief otar",
        items=len(nodes),
    )
    if reply.parsed is None:
        return StageRecord(status="unparsed", note=str(reply.parse_error), attempts=reply.attempts)
    for node in nodes:
        node.otar = reply.parsed.otar.get(node.id)
    missing = [n.id for n in nodes if n.otar is None]
    notes = []
    if missing:
        notes.append(f"no OTAR for {', '.join(missing)}")
    if reply.parsed.dropped:
        notes.append("dropped: " + "; ".join(reply.parsed.dropped))
    return StageRecord(status="ok", note=" | ".join(notes), attempts=reply.attempts)
