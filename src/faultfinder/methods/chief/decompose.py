"""Subtask nodes: RAG-guided decomposition, then trajectory-aligned reflection.

The structural rules of the reflection (ranges continuous, covering every step, not
overlapping) are checked here in code. A plan that breaks them is sent back with the
list of violations (at most ``reflection_rounds`` times); a plan still wrong after that is
repaired deterministically, and every repair is recorded.
"""

from __future__ import annotations

import itertools
from typing import Any

from pydantic import BaseModel

from faultfinder.llm.client import ParseError
from faultfinder.methods.chief import prompts
from faultfinder.methods.chief.context import StageContext, as_int, as_list, as_text, get_field
from faultfinder.methods.chief.graph import DecompositionInfo, Exemplar, StageRecord, Subtask
from faultfinder.methods.chief.knowledge import Retrieved


class PlanItem(BaseModel):
    """One subtask as the model proposed it."""

    id: str
    """Id the model gave."""
    name: str
    """Short name."""
    description: str = ""
    """What the phase does."""
    start: int
    """First step (inclusive)."""
    end: int
    """Last step (inclusive)."""


def _range_of(item: dict[str, Any]) -> tuple[int, int]:
    raw = get_field(item, "step_range", "steps", "range")
    if isinstance(raw, list) and len(raw) >= 1:
        ints = [as_int(v) for v in raw]
        if all(v is not None for v in ints):
            values = [v for v in ints if v is not None]
            return values[0], values[-1]
    if isinstance(raw, str):
        parts = [as_int(p) for p in raw.replace("to", "-").replace("–", "-").split("-") if p]
        if len(parts) in (1, 2) and all(p is not None for p in parts):
            values = [p for p in parts if p is not None]
            return values[0], values[-1]
    start = as_int(get_field(item, "start", "start_step", "first_step"))
    end = as_int(get_field(item, "end", "end_step", "last_step"))
    if start is not None and end is not None:
        return start, end
    raise ParseError(f"subtask without a readable step_range: {str(item)[:120]}")


def parse_plan(data: Any) -> list[PlanItem]:
    """Subtasks from the decomposition JSON (``{"subtasks": [...]}`` or a bare list)."""
    items = as_list(data, "subtasks")
    plan: list[PlanItem] = []
    for position, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            raise ParseError("each subtask must be a JSON object")
        start, end = _range_of(item)
        name = as_text(get_field(item, "name", "subtask", "title")) or f"Subtask {position}"
        plan.append(
            PlanItem(
                id=as_text(get_field(item, "id")) or f"S{position}",
                name=name,
                description=as_text(get_field(item, "description", "goal")),
                start=start,
                end=end,
            )
        )
    if not plan:
        raise ParseError("the decomposition lists no subtask")
    return plan


def check_plan(plan: list[PlanItem], n_steps: int) -> list[str]:
    """Violations of the structural rules; empty when the plan is a clean partition of
    steps 0..n_steps-1 in order."""
    last = n_steps - 1
    problems: list[str] = []
    if not plan:
        return ["the plan has no subtask"]
    for item in plan:
        if item.start > item.end:
            problems.append(f"{item.id}: step range [{item.start}, {item.end}] is reversed")
        if item.start < 0 or item.end > last:
            problems.append(
                f"{item.id}: step range [{item.start}, {item.end}] is outside steps 0..{last}"
            )
    if problems:
        return problems
    if plan[0].start != 0:
        problems.append(f"steps 0-{plan[0].start - 1} are not covered by any subtask")
    for prev, nxt in itertools.pairwise(plan):
        if nxt.start <= prev.end:
            if nxt.start < prev.start:
                problems.append(f"{nxt.id} starts before {prev.id}: subtasks are out of order")
            else:
                overlap_end = min(prev.end, nxt.end)
                problems.append(
                    f"{prev.id} and {nxt.id} overlap on steps {nxt.start}-{overlap_end}"
                )
        elif nxt.start > prev.end + 1:
            problems.append(
                f"steps {prev.end + 1}-{nxt.start - 1} (between {prev.id} and {nxt.id}) "
                "are not covered"
            )
    if plan[-1].end < last:
        problems.append(f"steps {plan[-1].end + 1}-{last} are not covered by any subtask")
    return problems


def repair_plan(plan: list[PlanItem], n_steps: int) -> tuple[list[Subtask], list[str]]:
    """A clean partition closest to ``plan``, and what was changed.

    Ranges are clamped and un-reversed, sorted by start; an overlapping start is moved past
    the previous end (a subtask swallowed whole is dropped); a gap is given to the subtask
    before it; the first starts at 0 and the last ends at the final step. Ids become S1..SK
    (not counted as a repair).
    """
    last = n_steps - 1
    changes: list[str] = []
    items: list[PlanItem] = []
    for item in plan:
        start, end = item.start, item.end
        if start > end:
            start, end = end, start
            changes.append(f"{item.id}: reversed range swapped")
        c_start, c_end = min(max(start, 0), last), min(max(end, 0), last)
        if (c_start, c_end) != (start, end):
            changes.append(f"{item.id}: range clamped to [{c_start}, {c_end}]")
        items.append(item.model_copy(update={"start": c_start, "end": c_end}))
    ordered = sorted(items, key=lambda i: (i.start, i.end))
    if [i.id for i in ordered] != [i.id for i in items]:
        changes.append("subtasks sorted by start step")
    kept: list[PlanItem] = []
    for item in ordered:
        if kept and item.start <= kept[-1].end:
            if item.end <= kept[-1].end:
                changes.append(f"{item.id}: dropped (inside {kept[-1].id})")
                continue
            changes.append(f"{item.id}: start moved from {item.start} to {kept[-1].end + 1}")
            item = item.model_copy(update={"start": kept[-1].end + 1})
        elif kept and item.start > kept[-1].end + 1:
            changes.append(f"{kept[-1].id}: extended to step {item.start - 1} to close a gap")
            kept[-1] = kept[-1].model_copy(update={"end": item.start - 1})
        kept.append(item)
    if not kept:
        changes.append("no usable subtask: one subtask covers the whole run")
        kept = [PlanItem(id="S1", name="Whole run", start=0, end=last)]
    if kept[0].start != 0:
        changes.append(f"{kept[0].id}: start moved from {kept[0].start} to 0")
        kept[0] = kept[0].model_copy(update={"start": 0})
    if kept[-1].end != last:
        changes.append(f"{kept[-1].id}: extended to the last step {last}")
        kept[-1] = kept[-1].model_copy(update={"end": last})
    subtasks = [
        Subtask(id=f"S{n}", name=i.name, description=i.description, start=i.start, end=i.end)
        for n, i in enumerate(kept, start=1)
    ]
    return subtasks, changes


def fill_agents(ctx: StageContext, subtasks: list[Subtask]) -> None:
    """Each subtask's agents: those with a step in its range (from the trace)."""
    for sub in subtasks:
        sub.agents = list(dict.fromkeys(ctx.trace.steps[i].agent for i in sub.steps()))


def exemplar_text(retrieved: Retrieved) -> str:
    if not retrieved.entries:
        return prompts.RAG_NONE
    blocks = [
        f"[Injected exemplar {n}]\n{entry.prompt_text()}"
        for n, entry in enumerate(retrieved.entries, start=1)
    ]
    return prompts.RAG_EXEMPLARS.format(exemplars="\n".join(blocks))


async def decompose(
    ctx: StageContext, retrieved: Retrieved, kb_name: str | None
) -> tuple[list[Subtask], DecompositionInfo, StageRecord]:
    """Subtask nodes for the trace, with how they were obtained."""
    cfg = ctx.config
    info = DecompositionInfo(
        zero_shot=not retrieved.entries,
        knowledge_base=kb_name,
        retrieval=cfg.retrieval,
        exemplars=[
            Exemplar(id=e.id, score=s, source=e.source)
            for e, s in zip(retrieved.entries, retrieved.scores, strict=True)
        ],
        excluded=retrieved.excluded,
    )
    last = ctx.n_steps - 1
    prompt = ctx.render(
        "decompose",
        prompts.DECOMPOSE,
        {
            "rag": exemplar_text(retrieved),
            "rag_ref": "the retrieved examples" if retrieved.entries else "the problem",
            "last": last,
        },
    )
    messages: list[dict[str, Any]] = prompt
    attempts = 0
    plan: list[PlanItem] | None = None
    note = ""
    for round_ in range(cfg.reflection_rounds + 1):
        reply = await ctx.ask_json(
            messages, parse_plan, purpose=f"chief decompose {round_}", items=ctx.n_steps
        )
        attempts += reply.attempts
        if reply.parsed is None:
            note = f"reply unparsed: {reply.parse_error}"
            break
        plan = reply.parsed
        violations = check_plan(plan, ctx.n_steps)
        info.violations.append(violations)
        if not violations or round_ == cfg.reflection_rounds:
            break
        info.reflection_rounds += 1
        messages = [
            *messages,
            {"role": "assistant", "content": reply.text},
            {
                "role": "user",
                "content": prompts.DECOMPOSE_REFINE.format(
                    violations="\n".join(f"- {v}" for v in violations), last=last
                ),
            },
        ]
    if plan is None:
        subtasks = [Subtask(id="S1", name="Whole run", start=0, end=last)]
        info.repaired = ["decomposition unparsed: one subtask covers the whole run"]
        fill_agents(ctx, subtasks)
        return subtasks, info, StageRecord(status="fallback", note=note, attempts=attempts)
    subtasks, changes = repair_plan(plan, ctx.n_steps)
    info.repaired = changes
    fill_agents(ctx, subtasks)
    if note:
        note = f"refinement {note}; last parsed plan used"
    elif changes:
        note = "plan repaired deterministically: " + "; ".join(changes)
    return subtasks, info, StageRecord(status="ok", note=note, attempts=attempts)
