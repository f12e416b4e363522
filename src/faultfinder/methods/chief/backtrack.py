"""Hierarchical oracle-guided backtracking (paper Eqs. 3–5, Appendix E).

One call evaluates subtasks in reverse topological order (computed here from the subtask
edges), then the agents of discrepant subtasks, then those agents' steps. The model
returns every binary decision; the candidate sets are derived here, and the hierarchy is
enforced: a candidate agent must act in a candidate subtask, a candidate step must be a
step of a candidate agent inside that subtask. Decisions that break it are recorded as
dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from faultfinder.judging.agent_names import Roster, match_agent
from faultfinder.llm.client import ParseError
from faultfinder.methods.chief import prompts
from faultfinder.methods.chief.context import StageContext, as_int, as_text, get_field
from faultfinder.methods.chief.graph import Candidates, CausalGraph, StageRecord
from faultfinder.methods.chief.graph_render import graph_sections, prompt_view
from faultfinder.methods.chief.otar import match_subtask


def reverse_topological_order(graph: CausalGraph) -> list[str]:
    """Subtask ids, downstream first (Kahn's algorithm; ties broken by plan order)."""
    ids = [s.id for s in graph.subtasks]
    indegree = dict.fromkeys(ids, 0)
    successors: dict[str, list[str]] = {i: [] for i in ids}
    for edge in graph.subtask_edges:
        if edge.source in successors and edge.target in indegree:
            successors[edge.source].append(edge.target)
            indegree[edge.target] += 1
    ready = [i for i in ids if indegree[i] == 0]
    order: list[str] = []
    while ready:
        current = ready.pop(0)
        order.append(current)
        for nxt in successors[current]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready.append(nxt)
        ready.sort(key=ids.index)
    # A cycle cannot come from consecutive-pair edges; keep any leftover in plan order.
    order.extend(i for i in ids if i not in order)
    return list(reversed(order))


def _flag(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    number = as_int(value)
    if number in (0, 1):
        return number == 1
    text = as_text(value).lower()
    if text in ("yes", "true"):
        return True
    if text in ("no", "false"):
        return False
    return None


class Decisions(BaseModel):
    """The model's binary decisions, as read."""

    subtasks: dict[str, tuple[bool, str]] = Field(default_factory=dict)
    """Subtask id -> (discrepancy, reason)."""
    agents: dict[str, tuple[bool, str]] = Field(default_factory=dict)
    """Agent node id -> (discrepancy, reason)."""
    steps: dict[int, tuple[bool, str]] = Field(default_factory=dict)
    """Step -> (discrepancy, reason)."""
    dropped: list[str] = Field(default_factory=list)
    """Entries that name nothing in the graph."""


def parse_decisions(
    data: Any, graph: CausalGraph, aliases: Mapping[str, str] | None = None
) -> Decisions:
    if not isinstance(data, dict):
        raise ParseError("expected a JSON object with 'subtasks', 'agents' and 'steps'")
    out = Decisions()
    raw_sub = get_field(data, "subtasks")
    if not isinstance(raw_sub, list):
        raise ParseError("no 'subtasks' decision list in the answer")
    for item in raw_sub:
        if not isinstance(item, dict):
            continue
        sub = match_subtask(get_field(item, "id", "subtask"), graph.subtasks)
        flag = _flag(get_field(item, "discrepancy", "decision"))
        if sub is None or flag is None:
            out.dropped.append(f"subtask decision {str(item)[:60]}: unreadable")
            continue
        out.subtasks[sub.id] = (flag, as_text(get_field(item, "reason")))
    for item in get_field(data, "agents") or []:
        if not isinstance(item, dict):
            continue
        sub = match_subtask(get_field(item, "subtask", "subtask_id"), graph.subtasks)
        flag = _flag(get_field(item, "discrepancy", "decision"))
        raw_agent = as_text(get_field(item, "agent", "name"))
        if sub is None or flag is None:
            out.dropped.append(f"agent decision {str(item)[:60]}: unreadable")
            continue
        try:
            agent = match_agent(raw_agent, Roster(sub.agents, aliases))
        except ParseError:
            out.dropped.append(f"agent '{raw_agent[:40]}' does not act in {sub.id}")
            continue
        out.agents[f"{sub.id}:{agent}"] = (flag, as_text(get_field(item, "reason")))
    for item in get_field(data, "steps") or []:
        if not isinstance(item, dict):
            continue
        step = as_int(get_field(item, "step", "step_id", "id"))
        flag = _flag(get_field(item, "discrepancy", "decision"))
        if step is None or flag is None or not 0 <= step < graph.n_steps:
            out.dropped.append(f"step decision {str(item)[:60]}: unreadable or out of range")
            continue
        out.steps[step] = (flag, as_text(get_field(item, "reason")))
    if not out.subtasks:
        raise ParseError("no readable subtask decision")
    return out


def derive_candidates(decisions: Decisions, graph: CausalGraph, order: list[str]) -> Candidates:
    """Candidate sets C_sub, C_agt, C_step with the hierarchy enforced."""
    cand = Candidates(order=order, dropped=list(decisions.dropped))
    for sid in order:
        flag, reason = decisions.subtasks.get(sid, (False, ""))
        if flag:
            cand.subtasks.append(sid)
            cand.reasons[sid] = reason
    for node_id, (flag, reason) in decisions.agents.items():
        if not flag:
            continue
        if node_id.split(":", 1)[0] not in cand.subtasks:
            cand.dropped.append(f"agent {node_id}: its subtask is not a candidate")
            continue
        cand.agents.append(node_id)
        cand.reasons[node_id] = reason
    for step, (flag, reason) in sorted(decisions.steps.items()):
        if not flag:
            continue
        sub = graph.subtask_of_step(step)
        node_id = f"{sub.id}:{graph.step_agents[step]}" if sub else ""
        if node_id not in cand.agents:
            cand.dropped.append(f"step {step}: not a step of a candidate agent ({node_id})")
            continue
        cand.steps.append(step)
        cand.reasons[f"step {step}"] = reason
    return cand


async def backtrack(ctx: StageContext, graph: CausalGraph) -> tuple[Candidates | None, StageRecord]:
    """Candidates from one backtracking call; None when the reply is unparsed."""
    order = reverse_topological_order(graph)
    prompt = ctx.render(
        "backtrack",
        prompts.BACKTRACK,
        {
            "graph": prompt_view(graph, max_step_edges=ctx.config.prompt_step_edges),
            "order": " -> ".join(order),
        },
        sections=graph_sections(graph, max_step_edges=ctx.config.prompt_step_edges),
    )
    reply = await ctx.ask_json(
        prompt,
        lambda data: parse_decisions(data, graph, ctx.roster.aliases),
        purpose="chief backtrack",
        items=len(order),
    )
    if reply.parsed is None:
        return None, StageRecord(
            status="unparsed", note=str(reply.parse_error), attempts=reply.attempts
        )
    cand = derive_candidates(reply.parsed, graph, order)
    note = f"{len(cand.subtasks)} subtasks, {len(cand.agents)} agents, {len(cand.steps)} steps"
    if cand.dropped:
        note += " | dropped: " + "; ".join(cand.dropped)
    return cand, StageRecord(status="ok", note=note, attempts=reply.attempts)
