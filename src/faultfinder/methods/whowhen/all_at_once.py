"""``all-at-once`` (Who&When): the whole log in one prompt; the judge names agent, step, reason."""

from __future__ import annotations

import functools
from typing import Any, ClassVar

from faultfinder.judging.agent_names import roster_of
from faultfinder.judging.answers import parse_agent_step_reason
from faultfinder.judging.grammars import agent_step_grammar
from faultfinder.judging.method import MethodBase, MethodConfig, Verdict
from faultfinder.judging.pairing import check_step
from faultfinder.llm.client import LLM
from faultfinder.methods.whowhen import common as ww
from faultfinder.traces.schema import Trace


class AllAtOnceConfig(ww.WhoWhenConfig):
    """All-at-once has no options beyond the shared Who&When ones."""


def whole_log_prompt(trace: Trace, llm: LLM, config: ww.WhoWhenConfig) -> tuple[str, bool]:
    """(prompt, truncated?): the all-at-once prompt over the whole log, within the
    context budget. ``compose`` reads it to know what the whole-log judge would cost."""
    template = functools.partial(
        ww.all_at_once_prompt,
        trace.task,
        ground_truth=ww.ground_truth_for(trace, config),
        reminder=config.guidance_reminder,
        metadata=ww.metadata_for(trace, config),
    )
    return ww.fill_log(
        trace, trace.steps, config, llm, template, reply_tokens=ww.ALL_AT_ONCE_REPLY_TOKENS
    )


async def locate_all_at_once(
    trace: Trace,
    llm: LLM,
    config: ww.WhoWhenConfig,
    built: tuple[str, bool] | None = None,
) -> Verdict:
    """One call over the full log. Reused by ``hybrid`` for its agent choice and by
    ``compose`` when abbreviating would save too little (``built``: the
    :func:`whole_log_prompt` it already made)."""
    agents = roster_of(trace)
    n_steps = len(trace.steps)
    if not n_steps:
        return Verdict(status="no-error-found", reason="empty trace")
    prompt, truncated = built or whole_log_prompt(trace, llm, config)
    reply = await llm.chat(
        prompt,
        # The step is range-checked by the agent/step rule (run_method), so a readable
        # agent survives a step outside the trace.
        parse=functools.partial(parse_agent_step_reason, agents=agents),
        purpose="all-at-once: agent, step, reason",
        constraint=agent_step_grammar(list(agents), range(n_steps)),
        **config.chat_options(ww.ALL_AT_ONCE_REPLY_TOKENS),
    )
    details: dict[str, Any] = {"truncated": truncated}
    answer = reply.parsed
    if answer is None:
        details["parse_error"] = reply.parse_error
        return Verdict(status="unparsed", details=details)
    if 0 <= answer.step < n_steps:
        details["step_agent"] = trace.steps[answer.step].agent
    speakers = [step.agent for step in trace.steps]
    problem = check_step(speakers, [answer.agent], answer.step)
    if problem is not None:
        # run_method applies the same rule to the verdict; hybrid keeps this note.
        details["step_unparsed"] = problem
    return Verdict(agent=answer.agent, step=answer.step, reason=answer.reason, details=details)


class AllAtOnceMethod(MethodBase):
    """Who&When's all-at-once judge, with DoVer's two prompt refinements by default."""

    name: ClassVar[str] = "all-at-once"
    summary: ClassVar[str] = "Who&When: whole log in one prompt -> agent, step, reason"
    Config: ClassVar[type[MethodConfig]] = AllAtOnceConfig
    presets: ClassVar[dict[str, dict[str, Any]]] = dict(ww.PRESETS)

    def __init__(self, config: AllAtOnceConfig) -> None:
        self.config = config

    async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
        assert isinstance(self.config, AllAtOnceConfig)
        return await locate_all_at_once(trace, llm, self.config)
