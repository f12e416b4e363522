"""The context-aware ablations (paper §4.2, I1 and I2; Appendix A.2, A.4, A.6).

One context-aware agent per step argues that *its* step caused the failure, seeing the
step with a fixed ±1 window (I1) or with its hierarchical context (I2); a final judge
weighs all arguments and names the agent and step. Costs n + 1 calls for n steps.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from typing import Any

from faultfinder.judging.fitting import Piece, fit_pieces, fit_text, min_cap
from faultfinder.judging.method import Verdict
from faultfinder.judging.reference import ground_truth_for
from faultfinder.judging.render import (
    RenderOptions,
    context_budget,
    render_metadata,
    render_step,
    truncate,
)
from faultfinder.llm.base import OutputConstraint
from faultfinder.llm.client import LLM
from faultfinder.methods.echo import prompts
from faultfinder.methods.echo.config import ARGUMENT_REPLY_TOKENS, JUDGE_REPLY_TOKENS, EchoConfig
from faultfinder.methods.echo.context import Compressed, step_context_pieces
from faultfinder.methods.echo.schema import judge_json_schema, parse_judge, parse_sections
from faultfinder.traces.schema import Step, Trace

# Tokens kept free for the reply's framing when a prompt is fitted to the budget.
_SLACK = 64


def window_pieces(trace: Trace, index: int, options: RenderOptions) -> list[Piece]:
    """Previous, current and next step in full (the paper's fixed window, A.2); the
    current step is the judged piece, its neighbours the context."""
    steps = trace.steps
    pieces: list[Piece] = []
    for group, at, role, missing in (
        ("Previous agent:", index - 1, "context", "(none: this is the first step)"),
        ("Current agent (the one you argue caused the error):", index, "judged", ""),
        ("Next agent:", index + 1, "context", "(none: this is the last step)"),
    ):
        if 0 <= at < len(steps):
            step = steps[at]
            pieces.append(
                Piece(
                    step=at,
                    agent=step.agent,
                    role="judged" if role == "judged" else "context",
                    render=functools.partial(_capped_step, trace, step, options),
                    size=len(render_step(trace, step, options)),
                    group=group,
                )
            )
        else:
            pieces.append(
                Piece(
                    step=at,
                    agent="",
                    role="judged",
                    render=functools.partial(_fixed, missing),
                    size=len(missing),
                    group=group,
                )
            )
    return pieces


def _capped_step(trace: Trace, step: Step, options: RenderOptions, cap: int | None) -> str:
    limit = min_cap(cap, options.max_step_chars)
    return render_step(trace, step, options.model_copy(update={"max_step_chars": limit}))


def _fixed(text: str, cap: int | None) -> str:
    return text


async def run_context_aware(
    trace: Trace,
    llm: LLM,
    cfg: EchoConfig,
    compressed: dict[int, Compressed],
    agents: Sequence[str],
) -> Verdict:
    """I1 (window) or I2 (hierarchical): arguments per step, then the judge."""
    options = RenderOptions.from_config(cfg)
    head = prompts.header(trace, cfg.with_ground_truth)
    metadata = render_metadata(trace, cfg.observability)
    system = prompts.step_agent_system_prompt(
        ground_truth_for(trace, cfg.with_ground_truth) is not None
    )
    count = llm.count_tokens
    budget = context_budget(cfg, llm, cfg.reply_tokens(ARGUMENT_REPLY_TOKENS))

    def context_of(index: int) -> list[Piece]:
        if cfg.context == "window":
            return window_pieces(trace, index, options)
        return step_context_pieces(trace, index, compressed, "hierarchical", options)

    async def argue(index: int) -> dict[str, Any]:
        step = trace.steps[index]
        skeleton = prompts.step_agent_user_prompt(head, metadata, step, "", cfg.context)
        available = None if budget is None else budget - count(system) - count(skeleton) - _SLACK
        context, cut = fit_pieces(
            context_of(index),
            available,
            count,
            what=f"Trace '{trace.id}': the context of step {index}",
        )
        reply = await llm.chat(
            [
                {"role": "system", "content": system},
                {
                    "role": "user",
                    "content": prompts.step_agent_user_prompt(
                        head, metadata, step, context, cfg.context
                    ),
                },
            ],
            parse=parse_sections,
            purpose=f"echo {cfg.context} argument: step {index}",
            temperature=cfg.argue_temperature if cfg.temperature is None else cfg.temperature,
            top_p=cfg.top_p,
            max_tokens=cfg.reply_tokens(ARGUMENT_REPLY_TOKENS),
            seed=cfg.seed,
        )
        return {
            "step": index,
            "agent": step.agent,
            "status": "ok" if reply.parsed is not None else "unparsed",
            "text": reply.text,
            "parse_error": reply.parse_error,
            "context_truncated": cut,
        }

    arguments = list(await asyncio.gather(*(argue(s.index) for s in trace.steps)))
    usable = [a for a in arguments if a["status"] == "ok"]
    details: dict[str, Any] = {
        "pipeline": "context-aware",
        "variant": "I1" if cfg.context == "window" else "I2",
        "context": cfg.context,
        "extractor": cfg.extractor if cfg.context == "hierarchical" else None,
        "arguments": [
            {k: a[k] for k in ("step", "agent", "status", "parse_error") if a[k] is not None}
            for a in arguments
        ],
    }
    if not usable:
        details["judge"] = {"status": "skipped: no argument could be read"}
        return Verdict(
            status="unparsed", reason="no step agent's argument could be read", details=details
        )

    def judge_prompt(cap: int | None) -> str:
        payload = [
            {
                "step_id": a["step"],
                "agent_name": a["agent"],
                "analysis": truncate(a["text"], cap),
            }
            for a in usable
        ]
        return prompts.judge_user_prompt(head, payload)

    available = None if budget is None else budget - count(prompts.JUDGE_SYSTEM_PROMPT) - _SLACK
    user, cut = fit_text(
        judge_prompt,
        available,
        count,
        size=max((len(a["text"]) for a in usable), default=0),
        what=f"Trace '{trace.id}': {len(usable)} arguments for the judge",
    )
    n_steps = len(trace.steps)
    reply = await llm.chat(
        [
            {"role": "system", "content": prompts.JUDGE_SYSTEM_PROMPT},
            {"role": "user", "content": user},
        ],
        parse=lambda text: parse_judge(text, agents, n_steps),
        purpose="echo judge",
        temperature=cfg.judge_temperature if cfg.temperature is None else cfg.temperature,
        top_p=cfg.top_p,
        max_tokens=cfg.reply_tokens(JUDGE_REPLY_TOKENS),
        seed=cfg.seed,
        constraint=OutputConstraint(json_schema=judge_json_schema(agents, n_steps)),
    )
    if reply.parsed is None:
        details["judge"] = {"status": "unparsed", "parse_error": reply.parse_error}
        return Verdict(
            status="unparsed", reason="the judge's answer could not be read", details=details
        )
    judged = reply.parsed
    details["judge"] = {"status": "ok", "arguments_truncated": cut, **judged.model_dump()}
    return Verdict(agent=judged.agent, step=judged.step, reason=judged.reason, details=details)
