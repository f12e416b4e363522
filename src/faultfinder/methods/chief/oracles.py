"""Subtask virtual oracles O_k = ⟨Goal, Preconditions, Key Evidence, Acceptance Criteria⟩.

O_k = F_gen(I, O_<k, τ_>k, τ_s) (paper Eq. 2). 'single' mode asks for all oracles in one
call that synthesises them in order with earlier ones as constraints (Appendix D);
'sequential' mode makes that order explicit: one call per subtask, given the oracles
already synthesised and the trajectory from that subtask on.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from faultfinder.llm.client import ParseError
from faultfinder.methods.chief import prompts
from faultfinder.methods.chief.context import (
    StageContext,
    as_list,
    as_str_list,
    as_text,
    get_field,
)
from faultfinder.methods.chief.graph import Oracle, StageRecord, Subtask
from faultfinder.methods.chief.graph_render import section_texts
from faultfinder.methods.chief.otar import match_subtask, subtasks_text


def _oracle(item: dict[str, Any], subtask_id: str) -> Oracle:
    return Oracle(
        subtask=subtask_id,
        goal=as_text(get_field(item, "goal")),
        preconditions=as_str_list(get_field(item, "preconditions", "precondition")),
        key_evidence=as_str_list(get_field(item, "key_evidence", "evidence")),
        acceptance_criteria=as_str_list(
            get_field(item, "acceptance_criteria", "acceptance_criterion", "acceptance")
        ),
    )


def parse_oracles(data: Any, subtasks: list[Subtask]) -> list[Oracle]:
    """Oracles in subtask order; entries for unknown subtasks are ignored."""
    found: dict[str, Oracle] = {}
    for position, item in enumerate(as_list(data, "oracles")):
        if not isinstance(item, dict):
            continue
        inner = get_field(item, "oracle")
        fields = inner if isinstance(inner, dict) else item
        sub = match_subtask(get_field(item, "subtask", "subtask_name", "id", "name"), subtasks)
        if sub is None and position < len(subtasks) and not get_field(item, "subtask"):
            sub = subtasks[position]
        if sub is None or sub.id in found:
            continue
        oracle = _oracle(fields, sub.id)
        if oracle.goal or oracle.acceptance_criteria:
            found[sub.id] = oracle
    if not found:
        raise ParseError("no oracle names a subtask of the plan")
    return [found[s.id] for s in subtasks if s.id in found]


def parse_one_oracle(data: Any, subtask: Subtask) -> Oracle:
    if not isinstance(data, dict):
        raise ParseError("expected one JSON object for the oracle")
    inner = get_field(data, "oracle")
    oracle = _oracle(inner if isinstance(inner, dict) else data, subtask.id)
    if not oracle.goal and not oracle.acceptance_criteria:
        raise ParseError("the oracle has neither a goal nor acceptance criteria")
    return oracle


def _parse_one(data: Any, subtask: Subtask) -> Oracle:
    return parse_one_oracle(data, subtask)


async def synthesize_oracles(
    ctx: StageContext, subtasks: list[Subtask], rag: str
) -> tuple[list[Oracle], StageRecord]:
    """Oracles for the subtasks. A subtask left without one is recorded in the note."""
    if ctx.config.oracle_mode == "single":
        prompt = ctx.render(
            "oracles",
            prompts.ORACLES,
            {"rag": rag, "subtasks": subtasks_text(subtasks)},
            sections=section_texts(subtasks),
        )
        reply = await ctx.ask_json(
            prompt,
            lambda data: parse_oracles(data, subtasks),
            purpose="chief oracles",
            items=len(subtasks),
        )
        if reply.parsed is None:
            return [], StageRecord(
                status="unparsed", note=str(reply.parse_error), attempts=reply.attempts
            )
        oracles = reply.parsed
        attempts = reply.attempts
        failures: list[str] = []
    else:
        oracles = []
        attempts = 0
        failures = []
        for sub in subtasks:
            previous = json.dumps([o.model_dump() for o in oracles], ensure_ascii=False)
            prompt = ctx.render(
                "oracles",
                prompts.ORACLE_ONE,
                {
                    "rag": rag,
                    "subtasks": subtasks_text(subtasks),
                    "previous": previous if oracles else "(none: this is the first subtask)",
                    "subtask_id": sub.id,
                },
                sections=section_texts(subtasks),
                steps=ctx.trace.steps[sub.start :],
                partial_from=sub.start,
            )
            one = await ctx.ask_json(
                prompt,
                functools.partial(_parse_one, subtask=sub),
                purpose=f"chief oracle {sub.id}",
                items=1,
            )
            attempts += one.attempts
            if one.parsed is None:
                failures.append(f"{sub.id}: {one.parse_error}")
                continue
            oracles.append(one.parsed)
        if not oracles:
            return [], StageRecord(status="unparsed", note="; ".join(failures), attempts=attempts)
    missing = [s.id for s in subtasks if s.id not in {o.subtask for o in oracles}]
    notes = [f"no oracle for {', '.join(missing)}"] if missing else []
    notes.extend(failures)
    return oracles, StageRecord(status="ok", note=" | ".join(notes), attempts=attempts)
