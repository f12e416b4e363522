"""Counterfactual attribution (paper §4.3, Appendix F) and the M1-only direct answer.

The model assesses each candidate step along the four stages (local origin and upstream
causes; loop responsibility; data-flow role; reversibility) and names its final pick.
:func:`screen` then applies the progressive screening to those assessments
deterministically:

1. Local: a step with upstream causes is a symptom; its causes become suspects.
2. Planning-control: planner responsibility moves to the loop group's entry (the planner's
   first issue of the repeated message); executor responsibility to the loop's first
   executor step.
3. Data-flow: a step that only propagates data is traced back along step edges to the
   earliest producer the model found fabricating, misinterpreting or misusing data.
4. Deviation-aware: reversible deviations lose to irreversible ones.

With ``screening='enforce'`` the model's pick stands only if it survives; otherwise the
best survivor (irrecoverable first, most stages, earliest) is chosen and the override is
recorded. With ``screening='model'`` the pick stands and the screening is only recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from faultfinder.judging.agent_names import match_agent
from faultfinder.judging.answers import (
    AgentStepAnswer,
    parse_agent_step_reason,
    parse_step_number,
)
from faultfinder.judging.grammars import agent_step_grammar
from faultfinder.llm.client import ParseError
from faultfinder.methods.chief import prompts
from faultfinder.methods.chief.context import (
    StageContext,
    as_int,
    as_text,
    get_field,
    reply_bound,
)
from faultfinder.methods.chief.graph import CausalGraph, StageRecord
from faultfinder.methods.chief.graph_render import graph_sections, json_lines, prompt_view

STAGES = ("Local", "Planning-Control", "Data-Flow", "Final Screening")
DataFlowRole = Literal["fabricates", "misinterprets", "misuses", "propagates", "none"]
LoopResponsibility = Literal["planner", "executor", "none"]
CORRUPTING = ("fabricates", "misinterprets", "misuses")


class Assessment(BaseModel):
    """The model's per-candidate judgement along the four stages."""

    step: int
    """Candidate step."""
    agent: str = ""
    """Agent the model names for it."""
    local_origin: bool | None = None
    """Valid inputs, wrong output (Stage A)."""
    upstream_causes: list[int] = Field(default_factory=list)
    """Earlier steps that causally explain this step's anomaly (Stage A)."""
    loop_group: str | None = None
    """Loop group the step belongs to, as the model read it."""
    loop_responsibility: LoopResponsibility = "none"
    """Planner or executor responsibility within the loop (Stage B)."""
    data_flow: DataFlowRole = "none"
    """Data-flow role (Stage C)."""
    reversible: bool | None = None
    """Self-corrected later (Stage D)."""
    irrecoverable: bool | None = None
    """First point that blocks recovery (Stage D)."""


class AttributionAnswer(BaseModel):
    """The attribution reply."""

    assessments: list[Assessment] = Field(default_factory=list)
    """Per-candidate assessments."""
    agent: str
    """Final agent (roster name)."""
    step: int
    """Final step."""
    reason: str = ""
    """Explanation."""
    stages: list[str] = Field(default_factory=list)
    """Stages the model says support its pick."""


def _bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    text = as_text(value).lower()
    return True if text in ("true", "yes", "1") else False if text in ("false", "no", "0") else None


def _choice(value: Any, options: tuple[str, ...], default: str) -> str:
    text = as_text(value).lower()
    return next((o for o in options if text.startswith(o)), default)


def _stage_names(value: Any) -> list[str]:
    items = value if isinstance(value, list) else as_text(value).split(",")
    out: list[str] = []
    for item in items:
        text = as_text(item).lower().replace("_", "-")
        for stage in STAGES:
            if stage.lower() in text or stage.lower().split("-")[0] == text.split(" ")[0]:
                if stage not in out:
                    out.append(stage)
                break
    return out


def parse_attribution(data: Any, roster: Sequence[str], n_steps: int) -> AttributionAnswer:
    if not isinstance(data, dict):
        raise ParseError("expected a JSON object with the final agent and step")
    agent_raw = as_text(get_field(data, "agent_name", "agent"))
    step_raw = get_field(data, "step_number", "step")
    if step_raw is None:
        raise ParseError("no 'step_number' in the answer")
    # Read by the rule of every method's step field ('Step #12', '12.' are 12; '12 or 13',
    # '3.5', a hedge are unreadable). A step outside the trace is read as written: the
    # agent/step rule (run_method) keeps the agent and marks the step, as for every method.
    step = parse_step_number(step_raw if isinstance(step_raw, int | float) else str(step_raw))
    agent = match_agent(agent_raw, roster)
    assessments: list[Assessment] = []
    raw = get_field(data, "assessments")
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        s = as_int(get_field(item, "step", "step_id"))
        if s is None or not 0 <= s < n_steps:
            continue
        causes = get_field(item, "upstream_causes") or []
        group = as_text(get_field(item, "loop_group")) or None
        assessments.append(
            Assessment(
                step=s,
                agent=as_text(get_field(item, "agent")),
                local_origin=_bool(get_field(item, "local_origin")),
                upstream_causes=sorted(
                    {
                        c
                        for c in (as_int(v) for v in (causes if isinstance(causes, list) else []))
                        if c is not None and 0 <= c < s
                    }
                ),
                loop_group=None if group in (None, "null", "none") else group,
                loop_responsibility=_choice(  # type: ignore[arg-type]
                    get_field(item, "loop_responsibility"), ("planner", "executor"), "none"
                ),
                data_flow=_choice(  # type: ignore[arg-type]
                    get_field(item, "data_flow"), (*CORRUPTING, "propagates"), "none"
                ),
                reversible=_bool(get_field(item, "reversible")),
                irrecoverable=_bool(get_field(item, "irrecoverable")),
            )
        )
    return AttributionAnswer(
        assessments=assessments,
        agent=agent,
        step=step,
        reason=as_text(get_field(data, "reason_for_mistake", "reason")),
        stages=_stage_names(get_field(data, "supporting_stages", "stages") or []),
    )


class Screening(BaseModel):
    """What the deterministic screening concluded."""

    step: int
    """Chosen step."""
    agent: str
    """Chosen agent."""
    stages: list[str] = Field(default_factory=list)
    """Stages that support the chosen step."""
    survivors: list[int] = Field(default_factory=list)
    """Steps left after all four stages."""
    trail: list[str] = Field(default_factory=list)
    """What each stage did, in order."""
    overridden: bool = False
    """True when the model's final pick did not survive and another step was chosen."""


def screen(answer: AttributionAnswer, graph: CausalGraph) -> Screening:
    """Apply the four screening stages to the model's assessments (see module docstring)."""
    by_step = {a.step: a for a in answer.assessments}
    if not by_step:
        return Screening(
            step=answer.step,
            agent=answer.agent,
            stages=answer.stages,
            survivors=[answer.step],
            trail=["no per-candidate assessment to screen: the model's pick stands"],
        )
    support: dict[int, set[str]] = {}
    symptoms: set[int] = set()
    agent_for: dict[int, str] = {}
    trail: list[str] = []

    def back(step: int, stage: str) -> None:
        support.setdefault(step, set()).add(stage)

    # Stage A — local vs propagated.
    for a in by_step.values():
        if a.upstream_causes:
            symptoms.add(a.step)
            trail.append(f"Local: step {a.step} is explained by upstream {a.upstream_causes}")
            for cause in a.upstream_causes:
                if cause not in by_step:
                    back(cause, "Local")
        elif a.local_origin:
            back(a.step, "Local")
    # Stage B — planning-control within loop groups.
    for a in by_step.values():
        if a.loop_responsibility == "none":
            continue
        group = next((g for g in graph.loops if g.id == a.loop_group), None)
        group = group or next(iter(graph.loops_of_step(a.step)), None)
        if group is None:
            trail.append(f"Planning-Control: step {a.step} claims a loop, but none contains it")
            continue
        if a.loop_responsibility == "planner":
            target = (
                group.start if graph.step_agents[group.start] == group.agent else group.repeats[0]
            )
            agent_for[target] = group.agent
        else:
            target = next((m.step for m in group.members if m.agent != group.agent), a.step)
        back(target, "Planning-Control")
        if target != a.step:
            symptoms.add(a.step)
        trail.append(
            f"Planning-Control: {a.loop_responsibility} responsibility in {group.id} "
            f"-> step {target}"
        )
    # Stage C — data flow.
    for a in by_step.values():
        if a.data_flow in CORRUPTING:
            back(a.step, "Data-Flow")
        elif a.data_flow == "propagates":
            source = _corruption_source(a.step, graph, by_step)
            symptoms.add(a.step)
            if source is None:
                trail.append(f"Data-Flow: step {a.step} propagates data; source not identified")
            else:
                back(source, "Data-Flow")
                trail.append(f"Data-Flow: step {a.step} propagates data corrupted at step {source}")
    origins = sorted(s for s in support if s not in symptoms)
    if not origins:
        origins = sorted(s for s in by_step if s not in symptoms) or sorted(by_step)
        trail.append(f"no stage singled out an origin; keeping {origins}")
    # Stage D — deviation-aware: reversible deviations lose to irreversible ones.
    reversible = [s for s in origins if s in by_step and by_step[s].reversible is True]
    survivors = [s for s in origins if s not in reversible]
    if reversible and survivors:
        trail.append(f"Final Screening: reversible deviations {reversible} dropped")
    if not survivors:
        survivors = origins
        trail.append("Final Screening: every origin is reversible; none dropped")
    for s in survivors:
        if reversible or (s in by_step and by_step[s].irrecoverable):
            back(s, "Final Screening")

    def rank(s: int) -> tuple[int, int, int]:
        a = by_step.get(s)
        return (0 if a and a.irrecoverable else 1, -len(support.get(s, ())), s)

    if answer.step in survivors:
        chosen, overridden = answer.step, False
    else:
        chosen, overridden = min(survivors, key=rank), True
        trail.append(f"model's pick {answer.step} did not survive screening; chose {chosen}")
    if chosen == answer.step:
        agent = answer.agent
    else:
        agent = agent_for.get(chosen, graph.step_agents[chosen])
    stages = [s for s in STAGES if s in support.get(chosen, set())]
    return Screening(
        step=chosen,
        agent=agent,
        stages=stages,
        survivors=survivors,
        trail=trail,
        overridden=overridden,
    )


def _corruption_source(step: int, graph: CausalGraph, by_step: dict[int, Assessment]) -> int | None:
    """Earliest step upstream of ``step`` (along step edges) assessed as corrupting data."""
    seen: set[int] = set()
    frontier = [step]
    found: list[int] = []
    while frontier:
        current = frontier.pop()
        for edge in graph.incoming(current):
            p = edge.producer
            if p in seen:
                continue
            seen.add(p)
            frontier.append(p)
            if p in by_step and by_step[p].data_flow in CORRUPTING:
                found.append(p)
    return min(found) if found else None


def candidate_view(graph: CausalGraph, steps: list[int], pruned: bool) -> str:
    """The candidate_set of the attribution prompt, with each step's predecessors."""
    cand = graph.candidates
    view: dict[str, Any] = {}
    if pruned and cand is not None:
        view["candidate_error_subtasks"] = [
            # Each subtask's oracle is in the graph this prompt shows, not repeated here.
            {"id": sid, "reason": cand.reasons.get(sid, "")}
            for sid in cand.subtasks
        ]
        view["candidate_error_agents"] = [
            {"node": nid, "reason": cand.reasons.get(nid, "")} for nid in cand.agents
        ]
    else:
        view["note"] = (
            "No oracle-guided pruning: every step is a candidate. Assess the steps you "
            "consider plausible origins (at most 8)."
        )
    view["candidate_error_steps"] = [
        {
            "step": s,
            "agent": graph.step_agents[s],
            "reason": cand.reasons.get(f"step {s}", "") if cand else "",
            "data_from_steps": sorted({e.producer for e in graph.incoming(s)}),
            "loop_groups": [g.id for g in graph.loops_of_step(s)],
        }
        for s in steps
    ]
    return json_lines(view)


async def counterfactual(
    ctx: StageContext, graph: CausalGraph, steps: list[int], pruned: bool
) -> tuple[AttributionAnswer | None, StageRecord]:
    """The attribution call (paper Fig. 13)."""
    prompt = ctx.render(
        "attribution",
        prompts.ATTRIBUTION,
        {
            "candidates": candidate_view(graph, steps, pruned),
            "graph": prompt_view(
                graph, include_oracles=pruned, max_step_edges=ctx.config.prompt_step_edges
            ),
        },
        sections=graph_sections(
            graph, include_oracles=pruned, max_step_edges=ctx.config.prompt_step_edges
        ),
    )
    roster = ctx.roster
    reply = await ctx.ask_json(
        prompt,
        lambda data: parse_attribution(data, roster, ctx.n_steps),
        purpose="chief attribution",
        items=1,
    )
    if reply.parsed is None:
        return None, StageRecord(
            status="unparsed", note=str(reply.parse_error), attempts=reply.attempts
        )
    return reply.parsed, StageRecord(status="ok", attempts=reply.attempts)


async def direct(
    ctx: StageContext, graph: CausalGraph
) -> tuple[AgentStepAnswer | None, StageRecord]:
    """M1 only: the all-at-once question asked over the graph."""
    prompt = ctx.render(
        "direct",
        prompts.DIRECT,
        {
            "graph": prompt_view(
                graph, include_oracles=False, max_step_edges=ctx.config.prompt_step_edges
            )
        },
        sections=graph_sections(
            graph, include_oracles=False, max_step_edges=ctx.config.prompt_step_edges
        ),
    )
    roster = ctx.roster
    constraint = agent_step_grammar(roster, range(ctx.n_steps)) if ctx.config.grammar else None
    reply = await ctx.llm.chat(
        prompt,
        # The step is checked by the agent/step rule (run_method), which keeps the agent.
        parse=lambda text: parse_agent_step_reason(text, roster),
        purpose="chief direct",
        constraint=constraint,
        **ctx.config.chat_options(reply_bound(1)),
    )
    if reply.parsed is None:
        return None, StageRecord(
            status="unparsed", note=str(reply.parse_error), attempts=reply.attempts
        )
    return reply.parsed, StageRecord(status="ok", attempts=reply.attempts)
