"""``step-by-step`` (Who&When Algorithm 1): judge the steps in order, stop at the first Yes.

For candidate step i the judge sees the log up to and including step i and answers
whether the most recent agent's action contains an error. The first Yes gives the
step and its agent. When no step is flagged the verdict is 'no-error-found' (the
paper's "No error found"); ``fallback_last_step`` reproduces the variant of the
authors' code that then names the last step instead.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

from faultfinder.judging.method import MethodBase, MethodConfig, Verdict
from faultfinder.llm.client import LLM
from faultfinder.methods.whowhen import common as ww
from faultfinder.traces.schema import Trace


class StepByStepConfig(ww.WhoWhenConfig):
    """Options of the step-by-step judge."""

    fallback_last_step: bool = False
    """When no step is judged erroneous, name the last judged step and its agent instead
    of answering 'no-error-found' (as one version of the authors' code does)."""
    on_unparsed: Literal["stop", "skip"] = "stop"
    """An unreadable Yes/No answer: 'stop' ends the run as 'unparsed'; 'skip' moves on to
    the next step as the authors' code does (the skipped step is listed in details)."""


def step_prompt(
    trace: Trace,
    llm: LLM,
    config: StepByStepConfig,
    i: int,
    template: Callable[..., str] | None = None,
) -> tuple[str, bool]:
    """(prompt, whether the log was cut) of the question about step ``i``: the log up to
    and including it. Also used by ``compose`` to plan a budget before asking."""
    if template is None:
        template = functools.partial(
            ww.step_judgement_prompt,
            trace.task,
            ground_truth=ww.ground_truth_for(trace, config),
            reminder=config.guidance_reminder,
            metadata=ww.metadata_for(trace, config),
        )
    return ww.fill_log(
        trace,
        trace.steps[: i + 1],
        config,
        llm,
        template,
        reply_tokens=ww.JUDGEMENT_REPLY_TOKENS,
        judged=[i],
    )


async def judge_steps(
    trace: Trace, llm: LLM, config: StepByStepConfig, candidates: Sequence[int]
) -> Verdict:
    """Algorithm 1 over ``candidates`` (ascending step indices). Reused by ``hybrid``."""
    problem = trace.task
    template = functools.partial(
        ww.step_judgement_prompt,
        problem,
        ground_truth=ww.ground_truth_for(trace, config),
        reminder=config.guidance_reminder,
        metadata=ww.metadata_for(trace, config),
    )
    grammar = ww.judgement_grammar()
    judged: list[dict[str, Any]] = []
    truncated = False
    details: dict[str, Any] = {"judged": judged, "candidates": list(candidates)}
    for i in candidates:
        step = trace.steps[i]
        prompt, cut = step_prompt(trace, llm, config, i, template)
        truncated = truncated or cut
        reply = await llm.chat(
            prompt,
            parse=ww.parse_judgement,
            purpose=f"step-by-step: is step {i} an error?",
            constraint=grammar,
            **config.chat_options(ww.JUDGEMENT_REPLY_TOKENS),
        )
        details["truncated"] = truncated
        judgement = reply.parsed
        if judgement is None:
            judged.append({"step": i, "agent": step.agent, "answer": "unparsed"})
            if config.on_unparsed == "stop":
                details["parse_error"] = reply.parse_error
                return Verdict(status="unparsed", details=details)
            continue
        judged.append(
            {
                "step": i,
                "agent": step.agent,
                "answer": "yes" if judgement.erroneous else "no",
                "reason": judgement.reason,
            }
        )
        if judgement.erroneous:
            return Verdict(agent=step.agent, step=i, reason=judgement.reason, details=details)
    details["truncated"] = truncated
    if config.fallback_last_step and candidates:
        last = candidates[-1]
        details["fallback"] = "last-step"
        return Verdict(
            agent=trace.steps[last].agent,
            step=last,
            reason="no step was judged erroneous; fallback to the last step",
            details=details,
        )
    if any(j["answer"] == "unparsed" for j in judged):
        return Verdict(status="unparsed", details=details)
    return Verdict(status="no-error-found", reason="no step was judged erroneous", details=details)


class StepByStepMethod(MethodBase):
    """Who&When's step-by-step judge, with DoVer's two prompt refinements by default."""

    name: ClassVar[str] = "step-by-step"
    summary: ClassVar[str] = "Who&When Alg. 1: judge each step in order, first Yes wins"
    Config: ClassVar[type[MethodConfig]] = StepByStepConfig
    presets: ClassVar[dict[str, dict[str, Any]]] = dict(ww.PRESETS)

    def __init__(self, config: StepByStepConfig) -> None:
        self.config = config

    async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
        assert isinstance(self.config, StepByStepConfig)
        if not trace.steps:
            return Verdict(status="no-error-found", reason="empty trace")
        return await judge_steps(trace, llm, self.config, range(len(trace.steps)))

    async def judge_candidates(
        self, trace: Trace, llm: LLM, candidates: list[int]
    ) -> Verdict | None:
        """Algorithm 1 over the given steps only, in order (``compose``'s judge)."""
        assert isinstance(self.config, StepByStepConfig)
        return await judge_steps(trace, llm, self.config, sorted(candidates))

    def candidates_cost(self, trace: Trace, llm: LLM, candidates: list[int]) -> int | None:
        """One question per candidate: the sum of their reservations."""
        cfg = self.config
        assert isinstance(cfg, StepByStepConfig)
        return sum(
            llm.reservation(
                step_prompt(trace, llm, cfg, i)[0], cfg.reply_tokens(ww.JUDGEMENT_REPLY_TOKENS)
            )
            for i in sorted(candidates)
        )
