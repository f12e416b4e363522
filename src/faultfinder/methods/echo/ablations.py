"""The context-aware ablations (paper §4.2, I1 and I2; Appendix A.2, A.4, A.6).

One context-aware agent per step argues that *its* step caused the failure, seeing the
step with a fixed ±1 window (I1) or with its hierarchical context (I2); a final judge
weighs all arguments and names the agent and step. Costs n + 1 calls for n steps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from faultfinder.llm.base import OutputConstraint
from faultfinder.llm.client import LLM
from faultfinder.methods.base import Verdict
from faultfinder.methods.echo import prompts
from faultfinder.methods.echo.config import EchoConfig
from faultfinder.methods.echo.context import Compressed, render_step_context
from faultfinder.methods.echo.schema import judge_json_schema, parse_judge, parse_sections
from faultfinder.methods.reference import ground_truth_for
from faultfinder.methods.render import (
    RenderOptions,
    context_budget,
    render_metadata,
    render_step,
    truncate,
)
from faultfinder.traces.schema import Trace

# Tokens kept free for the reply's framing when a prompt is fitted to the budget.
_SLACK = 64


def window_context(trace: Trace, index: int, options: RenderOptions) -> str:
    """Previous, current and next step in full (the paper's fixed window, A.2)."""
    steps = trace.steps
    previous = render_step(trace, steps[index - 1], options) if index > 0 else None
    following = render_step(trace, steps[index + 1], options) if index + 1 < len(steps) else None
    return "\n\n".join(
        [
            "Previous agent:\n" + (previous or "(none: this is the first step)"),
            "Current agent (the one you argue caused the error):\n"
            + render_step(trace, steps[index], options),
            "Next agent:\n" + (following or "(none: this is the last step)"),
        ]
    )


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
    budget = context_budget(cfg, llm, cfg.max_tokens)

    def context_of(index: int, cap: int | None) -> str:
        capped = options.model_copy(update={"max_step_chars": cap})
        if cfg.context == "window":
            return window_context(trace, index, capped)
        return render_step_context(trace, index, compressed, "hierarchical", capped)

    async def argue(index: int) -> dict[str, Any]:
        step = trace.steps[index]
        skeleton = prompts.step_agent_user_prompt(head, metadata, step, "", cfg.context)
        available = None if budget is None else budget - count(system) - count(skeleton) - _SLACK
        context, cut = prompts.fit(lambda cap: context_of(index, cap), available, count)
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
            temperature=cfg.argue_temperature,
            max_tokens=cfg.max_tokens,
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
    user, cut = prompts.fit(judge_prompt, available, count)
    n_steps = len(trace.steps)
    reply = await llm.chat(
        [
            {"role": "system", "content": prompts.JUDGE_SYSTEM_PROMPT},
            {"role": "user", "content": user},
        ],
        parse=lambda text: parse_judge(text, agents, n_steps),
        purpose="echo judge",
        temperature=cfg.judge_temperature,
        max_tokens=cfg.max_tokens,
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
