"""one-question: ask the model once, over the whole log, which agent and step made the run
fail, and read its answer in Who&When's three-field format."""

from __future__ import annotations

import functools
from typing import Any, ClassVar

from faultfinder.judging.answers import parse_agent_step_reason, roster_of
from faultfinder.judging.method import MethodBase, MethodConfig, Verdict
from faultfinder.judging.render import RenderOptions, render_steps
from faultfinder.llm.client import LLM
from faultfinder.traces.schema import Trace

REPLY_TOKENS = 200
"""Enough for the three answer fields; every reply is bounded by what its question needs."""


class OneQuestionConfig(MethodConfig):
    """Options of one-question (`faultfinder methods one-question` lists them)."""

    PROMPT_VERSION: ClassVar[str] = "one-question-1"
    """Recorded in every result; bump it whenever the prompt changes."""

    focus: str = "the first mistake that made the task fail"
    """What the model is asked to find."""


class OneQuestion(MethodBase):
    """One question over the whole log: agent, step, reason."""

    name: ClassVar[str] = "one-question"
    summary: ClassVar[str] = "One question over the whole log (an example plugin)"
    Config: ClassVar[type[MethodConfig]] = OneQuestionConfig
    presets: ClassVar[dict[str, dict[str, Any]]] = {
        "root-cause": {"focus": "the root cause, even where a later agent could have caught it"},
    }

    async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
        config = self.config
        assert isinstance(config, OneQuestionConfig)
        if not trace.steps:
            return Verdict(status="no-error-found", reason="empty trace")
        # The log as every method writes it: 'Step N - agent: ...', showing what the
        # --observability setting allows and nothing more.
        log = render_steps(trace, trace.steps, RenderOptions.from_config(config))
        prompt = (
            f"A team of agents worked on a task and failed.\n\nTask: {trace.task}\n\n"
            f"Conversation:\n{log}\n\nFind {config.focus}. Answer in three lines:\n"
            "Agent Name: <the agent>\nStep Number: <the step>\nReason for Mistake: <why>"
        )
        reply = await llm.chat(
            prompt,
            parse=functools.partial(parse_agent_step_reason, agents=roster_of(trace)),
            purpose="one-question: agent, step, reason",
            **config.chat_options(REPLY_TOKENS),
        )
        answer = reply.parsed
        if answer is None:  # asked again by the LLM layer first; never guessed
            return Verdict(status="unparsed", details={"parse_error": reply.parse_error})
        return Verdict(agent=answer.agent, step=answer.step, reason=answer.reason)
