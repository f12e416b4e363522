"""``compose``: the offline shortlist first, an expensive judge only over its top steps.

Stage 1 ranks every step offline (``shortlist``, no API call). Stage 2 asks the
all-at-once judge (Who&When's prompt, in its own answer format) over a log in which only
the top-k shortlisted steps are shown in full and every other step is cut to its first
characters, so the judge's tokens go where the ranking says the answer is. The judge
must pick one of the shortlisted steps; ``budget_tokens`` caps the judge's prompt per
case by shrinking k. See docs/methods/compose.md.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

from pydantic import Field

from faultfinder.llm.client import LLM
from faultfinder.methods import _whowhen as ww
from faultfinder.methods.answers import agent_step_grammar, parse_agent_step_reason, roster_of
from faultfinder.methods.base import MethodConfig, Verdict
from faultfinder.methods.registry import register
from faultfinder.methods.render import RenderOptions, render_step, step_output_text
from faultfinder.methods.shortlist import (
    load_configured_model,
    rank_with,
    ranking_details,
    surprisal_scorer,
)
from faultfinder.shortlist.rank import Ranking
from faultfinder.traces.schema import Trace

COMPLETION_RESERVE = 256
"""Tokens kept free for the judge's answer when checking ``budget_tokens``."""


class ComposeConfig(ww.WhoWhenConfig):
    """Options of the shortlist → judge composition (plus the Who&When prompt options)."""

    model_path: str | None = None
    """Shortlist weights file; None: the shipped one (see ``shortlist``)."""
    top_k: int = Field(default=3, ge=1)
    """Shortlisted steps the judge sees in full and may choose from."""
    compressed_chars: int = Field(default=80, ge=0)
    """Characters kept of every other step (0: only its speaker and length)."""
    budget_tokens: int | None = Field(default=None, ge=1)
    """Per-case cap on the judge's prompt tokens plus a completion reserve of 256: k is
    lowered until the prompt fits; when even k=1 does not fit, no call is made and the
    case is 'budget-exceeded'. None: no cap beyond ``context_budget``."""

    def prompt_version(self) -> str:
        """'compose-v1/' plus the Who&When prompt version of the judge's options."""
        return f"compose-v1/{super().prompt_version()}"


def compressed_log(trace: Trace, shown: set[int], options: RenderOptions, keep_chars: int) -> str:
    """The log with ``shown`` steps in full and every other step cut to ``keep_chars``."""
    lines = [
        "(Steps shown in full are the candidates for the decisive error: "
        f"{', '.join(str(i) for i in sorted(shown))}. Other steps are abbreviated.)"
    ]
    for step in trace.steps:
        if step.index in shown:
            lines.append(render_step(trace, step, options))
            continue
        text = " ".join(step_output_text(step).split())
        cut = text[:keep_chars]
        more = len(text) - len(cut)
        tail = f"… [abbreviated: {more} more characters]" if more else ""
        head = f"Step {step.index} - " if options.step_indices else ""
        lines.append(f"{head}{step.speaker}: {cut}{tail}")
    return "\n".join(lines)


def judge_prompt(trace: Trace, shown: set[int], config: ComposeConfig) -> str:
    options = RenderOptions.from_config(config, step_indices=config.step_indices)
    return ww.all_at_once_prompt(
        trace.task,
        compressed_log(trace, shown, options, config.compressed_chars),
        ground_truth=ww.ground_truth_for(trace, config),
        reminder=config.guidance_reminder,
        metadata=ww.metadata_for(trace, config),
    )


def fit_candidates(
    trace: Trace, ranking: Ranking, config: ComposeConfig, llm: LLM
) -> tuple[list[int], str | None, int]:
    """(candidates, prompt, prompt tokens): the largest k <= top_k whose prompt fits the
    budget; ([], None, tokens at k=1) when none does."""
    k = min(config.top_k, len(trace.steps))
    tokens = 0
    while k >= 1:
        candidates = ranking.top(k)
        prompt = judge_prompt(trace, set(candidates), config)
        tokens = llm.count_tokens(prompt)
        if config.budget_tokens is None or tokens + COMPLETION_RESERVE <= config.budget_tokens:
            return candidates, prompt, tokens
        k -= 1
    return [], None, tokens


@register
class ComposeMethod:
    """Shortlist, then the all-at-once judge over the shortlisted steps only."""

    name: ClassVar[str] = "compose"
    summary: ClassVar[str] = (
        "Offline shortlist, then an all-at-once judge over its top-k steps (rest abbreviated)"
    )
    Config: ClassVar[type[MethodConfig]] = ComposeConfig
    presets: ClassVar[dict[str, dict[str, Any]]] = {"k1": {"top_k": 1}, "k5": {"top_k": 5}}

    def __init__(self, config: ComposeConfig) -> None:
        self.config = config
        self.weights = load_configured_model(config.model_path)
        self.scorer = surprisal_scorer(self.weights)

    async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
        cfg = self.config
        assert isinstance(cfg, ComposeConfig)
        if not trace.steps:
            return Verdict(status="no-error-found", reason="empty trace")
        chosen, ranking = rank_with(trace, self.weights, self.scorer)
        details = ranking_details(trace, chosen, ranking, cfg.top_k)
        candidates, prompt, tokens = fit_candidates(trace, ranking, cfg, llm)
        details["candidates"] = candidates
        details["judge_prompt_tokens"] = tokens
        if prompt is None:
            details["budget"] = (
                f"the judge's prompt needs {tokens} tokens with one candidate; budget_tokens "
                f"is {cfg.budget_tokens} (with {COMPLETION_RESERVE} kept for the answer)"
            )
            return Verdict(status="budget-exceeded", details=details)
        agents = roster_of(trace)
        reply = await llm.chat(
            prompt,
            parse=functools.partial(parse_agent_step_reason, agents=agents),
            purpose=f"compose: judge over {len(candidates)} shortlisted steps",
            constraint=agent_step_grammar(list(agents), sorted(candidates)),
            **cfg.chat_options(ww.ALL_AT_ONCE_REPLY_TOKENS),
        )
        answer = reply.parsed
        if answer is None:
            details["parse_error"] = reply.parse_error
            return Verdict(status="unparsed", details=details)
        mass = sum(ranking.probs[i] for i in candidates)
        if answer.step not in candidates:
            details["step_unparsed"] = (
                f"step {answer.step} is not among the shortlisted candidates {candidates}"
            )
            details["rejected_step"] = answer.step
            return Verdict(
                agent=answer.agent, status="unparsed", reason=answer.reason, details=details
            )
        return Verdict(
            agent=answer.agent,
            step=answer.step,
            reason=answer.reason,
            # The shortlist's probability of the chosen step, renormalised over the
            # candidates the judge chose from.
            confidence=round(ranking.probs[answer.step] / mass, 4) if mass else None,
            details=details,
        )
