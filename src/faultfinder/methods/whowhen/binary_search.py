"""``binary-search`` (Who&When Algorithm 2): halve the log until one step remains.

Ranges are 0-based and inclusive. For [low, high] with low < high the judge sees the
steps low..high and answers 'upper half' (steps low..mid, written first) or 'lower half'
(steps mid+1..high), mid = (low + high) // 2 — the paper's L' = {l_low..l_mid} and its
prompt's wording, matching the authors' code. The remaining step and its agent are the
verdict; a log of n steps takes ceil(log2 n) calls.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

from faultfinder.judging.method import MethodBase, MethodConfig, Verdict
from faultfinder.llm.client import LLM
from faultfinder.methods.whowhen import common as ww
from faultfinder.traces.schema import Trace


class BinarySearchConfig(ww.WhoWhenConfig):
    """Options of the binary-search judge."""

    explain: bool = False
    """After the search, make one more call asking why the located step is the mistake.
    Off in the paper, whose binary search gives no reasons (Appendix B.1)."""


async def bisect(trace: Trace, llm: LLM, config: BinarySearchConfig) -> Verdict:
    """Algorithm 2 over the whole log."""
    problem = trace.task
    ground_truth = ww.ground_truth_for(trace, config)
    metadata = ww.metadata_for(trace, config)
    grammar = ww.half_grammar()
    path: list[dict[str, Any]] = []
    details: dict[str, Any] = {"path": path}
    truncated = False
    low, high = 0, len(trace.steps) - 1
    while low < high:
        upper, lower = ww.split_range(low, high)
        template = functools.partial(
            ww.binary_search_prompt,
            problem,
            low=low,
            high=high,
            ground_truth=ground_truth,
            reminder=config.guidance_reminder,
            metadata=metadata,
        )
        prompt, cut = ww.fill_log(
            trace,
            trace.steps[low : high + 1],
            config,
            llm,
            template,
            reply_tokens=ww.HALF_REPLY_TOKENS,
            judged=[upper[1], lower[0]],
        )
        truncated = truncated or cut
        details["truncated"] = truncated
        reply = await llm.chat(
            prompt,
            parse=ww.parse_half,
            purpose=f"binary search: steps {low}-{high}, upper or lower half?",
            constraint=grammar,
            **config.chat_options(ww.HALF_REPLY_TOKENS),
        )
        entry: dict[str, Any] = {"range": [low, high], "upper": list(upper), "lower": list(lower)}
        path.append(entry)
        if reply.parsed is None:
            entry["answer"] = "unparsed"
            details["parse_error"] = reply.parse_error
            return Verdict(status="unparsed", details=details)
        entry["answer"] = f"{reply.parsed} half"
        low, high = upper if reply.parsed == "upper" else lower
    details["truncated"] = truncated
    step = trace.steps[low]
    reason = f"narrowed to step {low} by {len(path)} upper/lower-half answers"
    if config.explain:
        explain = functools.partial(
            ww.explain_step_prompt,
            problem,
            step=low,
            agent=step.agent,
            ground_truth=ground_truth,
            metadata=metadata,
        )
        prompt, cut = ww.fill_log(
            trace,
            trace.steps,
            config,
            llm,
            explain,
            reply_tokens=ww.EXPLAIN_REPLY_TOKENS,
            judged=[low],
        )
        details["truncated"] = truncated or cut
        reply_reason = await llm.chat(
            prompt,
            parse=ww.parse_reason,
            purpose=f"binary search: why is step {low} the mistake?",
            constraint=ww.reason_grammar(),
            **config.chat_options(ww.EXPLAIN_REPLY_TOKENS),
        )
        if reply_reason.parsed is not None:
            reason = reply_reason.parsed
        else:
            # The located step does not depend on this answer, so the verdict stands.
            details["explain_parse_error"] = reply_reason.parse_error
    return Verdict(agent=step.agent, step=low, reason=reason, details=details)


class BinarySearchMethod(MethodBase):
    """Who&When's binary-search judge, with DoVer's two prompt refinements by default."""

    name: ClassVar[str] = "binary-search"
    summary: ClassVar[str] = "Who&When Alg. 2: halve the log by upper/lower-half answers"
    Config: ClassVar[type[MethodConfig]] = BinarySearchConfig
    presets: ClassVar[dict[str, dict[str, Any]]] = dict(ww.PRESETS)

    def __init__(self, config: BinarySearchConfig) -> None:
        self.config = config

    async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
        assert isinstance(self.config, BinarySearchConfig)
        if not trace.steps:
            return Verdict(status="no-error-found", reason="empty trace")
        return await bisect(trace, llm, self.config)
