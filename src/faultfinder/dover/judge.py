"""Judging replays: task success, milestone progress, and whether the intervention was
carried out (DoVer Section 4.2; Appendix B's milestone extractor/evaluator and its
'intervention fulfilled' / mislocalisation judge)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from faultfinder.dover import prompts
from faultfinder.dover.models import Fulfilment, Intervention, Milestone, MilestoneEvaluation
from faultfinder.judging.structured import json_parser, render_log, schema_constraint
from faultfinder.llm.client import LLM, ParseError
from faultfinder.traces.schema import ToolCall, Trace

MAX_MILESTONES = 5
"""DoVer extracts at most five milestones per task."""


class _Milestones(BaseModel):
    milestones: list[Milestone] = Field(default_factory=list)


async def extract_milestones(
    trace: Trace, reference_steps: list[str], llm: LLM, *, temperature: float = 0.0
) -> list[Milestone] | None:
    """At most five ordered milestones from the reference solution (None: unreadable)."""

    def check(answer: _Milestones) -> None:
        if not answer.milestones:
            raise ParseError("no milestones")

    steps = "\n".join(f"{i}. {text}" for i, text in enumerate(reference_steps, start=1))
    reply = await llm.chat(
        prompts.MILESTONES.format(
            limit=MAX_MILESTONES,
            task=trace.task,
            answer=trace.ground_truth or "(none)",
            steps=steps,
        ),
        parse=json_parser(_Milestones, check),
        purpose="dover: milestone extraction",
        temperature=temperature,
        constraint=schema_constraint(prompts.SCHEMAS["milestones"]),
        max_tokens=prompts.MAX_TOKENS["milestones"],
    )
    if reply.parsed is None:
        return None
    ordered = sorted(reply.parsed.milestones, key=lambda m: m.order)[:MAX_MILESTONES]
    return [m.model_copy(update={"order": i}) for i, m in enumerate(ordered, start=1)]


async def evaluate_milestones(
    trace: Trace,
    milestones: list[Milestone],
    llm: LLM,
    *,
    budget: int | None = None,
    temperature: float = 0.0,
) -> MilestoneEvaluation | None:
    """Which milestones ``trace`` reached (None: unreadable answer)."""
    listed = "\n".join(f"{m.order}. {m.title}: {m.action} -> {m.result}" for m in milestones)
    overhead = llm.count_tokens(
        prompts.EVALUATE_MILESTONES.format(task=trace.task, milestones=listed, log="")
    )
    log = render_log(
        trace, trace.steps, budget=budget, count_tokens=llm.count_tokens, reserved=overhead + 600
    )
    reply = await llm.chat(
        prompts.EVALUATE_MILESTONES.format(task=trace.task, milestones=listed, log=log),
        parse=json_parser(MilestoneEvaluation),
        purpose="dover: milestone evaluation",
        temperature=temperature,
        constraint=schema_constraint(prompts.SCHEMAS["evaluate"]),
        max_tokens=prompts.MAX_TOKENS["evaluate"],
    )
    return reply.parsed


async def judge_fulfilment(
    original: Trace,
    replayed: Trace,
    intervention: Intervention,
    llm: LLM,
    *,
    window: int = 10,
    with_ground_truth: bool = True,
    budget: int | None = None,
    temperature: float = 0.0,
) -> Fulfilment | None:
    """Compare the runs before/after the intervention (None: unreadable answer)."""
    k = intervention.step
    before_steps = original.steps[k + 1 : k + 1 + window]
    after_steps = replayed.steps[k : k + 1 + window]
    fields = {
        "step": k,
        "agent": intervention.agent,
        "task": original.task,
        "reference": prompts.reference_line(original.ground_truth if with_ground_truth else None),
        "original": shown(intervention.original, intervention.original_tool_calls),
        "category": intervention.category,
        "replacement": shown(intervention.replacement, intervention.tool_calls),
        "rationale": intervention.rationale or "(none)",
        "old_answer": original.final_answer or "(none)",
        "new_answer": replayed.final_answer or "(none)",
    }
    overhead = llm.count_tokens(prompts.FULFILMENT.format(**fields, before="", after=""))
    half = None if budget is None else max((budget - overhead - 300) // 2, 256)
    before = render_log(original, before_steps, budget=half, count_tokens=llm.count_tokens)
    after = render_log(replayed, after_steps, budget=half, count_tokens=llm.count_tokens)
    reply = await llm.chat(
        prompts.FULFILMENT.format(**fields, before=before, after=after),
        parse=json_parser(Fulfilment),
        purpose=f"dover: intervention fulfilled? (step {k})",
        temperature=temperature,
        constraint=schema_constraint(prompts.SCHEMAS["fulfilment"]),
        max_tokens=prompts.MAX_TOKENS["fulfilment"],
    )
    return reply.parsed


def shown(text: str, calls: list[ToolCall]) -> str:
    """A step's text and its tool calls, as the fulfilment judge reads an intervened step
    (its text alone when it makes none, as before)."""
    lines = [text] if text else []
    lines += [f"[tool call] {c.name}({c.arguments})" for c in calls]
    return "\n".join(lines)
