"""``compose``: the offline shortlist first, an expensive judge only over its top steps.

Stage 1 ranks every step offline (``shortlist``, no API call). Stage 2 asks a judge over
a view of the log in which only the top-k shortlisted steps are shown in full and every
other step is cut to its first characters, so the judge's tokens go where the ranking
says the answer is. The default judge is all-at-once (Who&When's prompt, a line naming
the candidates, an answer grammar allowing only them); ``judge`` names any other method,
which then runs in its own prompt format on that view (:func:`compressed_view`).
Either way the judge's answer counts only when it names a shortlisted step. Under a
per-case token budget (``budget_tokens``) k is lowered until the judge's worst case fits
what the case may still spend. When abbreviating would save the built-in judge less than
``min_saving`` of the whole-log judge's tokens (short logs), the whole log is judged
instead, every step a candidate (:func:`whole_log_instead`). Stage 3, the replay check
when the confidence is low, is ``faultfinder check --check-below``
(``methods.agentic.dynamic``). See docs/methods/compose.md.
"""

from __future__ import annotations

import functools
import json
from typing import Any, ClassVar, NamedTuple

from pydantic import Field

from faultfinder.errors import ConfigError
from faultfinder.judging.agent_names import roster_of
from faultfinder.judging.answers import parse_agent_step_reason
from faultfinder.judging.grammars import agent_step_grammar
from faultfinder.judging.method import Method, MethodBase, MethodConfig, Verdict
from faultfinder.judging.render import RenderOptions, render_step, step_output_text
from faultfinder.llm.client import LLM
from faultfinder.llm.scopes import case_tokens_left, track_usage
from faultfinder.methods.shortlist import (
    load_configured_model,
    rank_with,
    ranking_details,
    surprisal_scorer,
)
from faultfinder.methods.whowhen import common as ww
from faultfinder.methods.whowhen.all_at_once import locate_all_at_once, whole_log_prompt
from faultfinder.registry import create_method
from faultfinder.shortlist.rank import Ranking
from faultfinder.traces.schema import Step, Trace

DEFAULT_JUDGE = "all-at-once"
"""The built-in judge: the all-at-once prompt over :func:`compressed_log`."""

SHARED_OPTIONS = (
    "with_ground_truth",
    "observability",
    "context_budget",
    "temperature",
    "top_p",
    "seed",
    "max_output_tokens",
)
"""Options every method has that ``compose`` hands on to its judge (``budget_tokens`` is
not: the case's budget already covers the judge's calls)."""


class ComposeConfig(ww.WhoWhenConfig):
    """Options of the shortlist → judge composition (plus the Who&When prompt options)."""

    model_path: str | None = None
    """Shortlist weights file; None: the shipped one (see ``shortlist``)."""
    top_k: int = Field(default=3, ge=1)
    """Shortlisted steps the judge sees in full and may choose from."""
    compressed_chars: int = Field(default=80, ge=0)
    """Characters kept of every other step (0: only its speaker and length)."""
    judge: str = DEFAULT_JUDGE
    """The expensive stage, a method spec ('step-by-step', 'echo:I1', ...). The default
    'all-at-once' is the built-in judge (one call over the abbreviated log, candidates
    named, answer grammar limited to them); any other method runs in its own prompt
    format on a view of the trace in which the other steps are abbreviated the same way.
    Its answer counts only when it names a shortlisted step."""
    judge_options: dict[str, Any] = Field(default_factory=dict)
    """Options of the judge method beyond those compose hands on (with_ground_truth,
    observability, context_budget and the sampling options), e.g. {"on_unparsed": "skip"}."""
    min_saving: float | None = Field(default=0.1, ge=0.0, le=1.0)
    """Built-in judge only. When showing only the k candidates in full would save less than
    this share of the whole-log judge's prompt tokens, the whole log is judged instead
    (Who&When's all-at-once, every step a candidate), provided it fits what the case may
    still spend: on a short log there is little to abbreviate, and limiting the answer to
    k steps would cost accuracy for next to no saving. None: never (always the
    abbreviated log)."""

    def prompt_version(self) -> str:
        """'compose-v2/' plus the Who&When prompt version (built-in judge; v2: a short log
        may be judged whole, ``min_saving``), or 'compose-v1/view/<judge spec>=<the
        judge's prompt version>'."""
        if self.judge == DEFAULT_JUDGE:
            return f"compose-v2/{super().prompt_version()}"
        judge_version = _judge_prompt_version(
            self.judge, json.dumps(judge_settings(self), sort_keys=True, default=str)
        )
        return f"compose-v1/view/{self.judge}={judge_version}"


def judge_settings(config: ComposeConfig) -> dict[str, Any]:
    """The options the judge method is built with: those of ``SHARED_OPTIONS`` that
    compose's config sets away from the common default (so a judge keeps its own
    defaults otherwise, e.g. ECHO's sampled analysts), then ``judge_options``."""
    shared = {
        key: getattr(config, key)
        for key in SHARED_OPTIONS
        if getattr(config, key) != MethodConfig.model_fields[key].default
    }
    return {**shared, **config.judge_options}


def build_judge(config: ComposeConfig) -> Method:
    """The judge method ``config.judge`` names, with compose's shared options."""
    name = config.judge.partition(":")[0]
    if name == ComposeMethod.name:
        raise ConfigError("Method 'compose': option 'judge' cannot be compose itself")
    return create_method(config.judge, **judge_settings(config))


@functools.lru_cache(maxsize=64)
def _judge_prompt_version(spec: str, settings: str) -> str:
    """The prompt version of the judge ``spec`` built with ``settings`` (JSON)."""
    return create_method(spec, **json.loads(settings)).config.prompt_version()


def abbreviated(step: Step, keep_chars: int) -> str:
    """A step's output cut to its first ``keep_chars`` characters (whitespace folded), with
    a marker saying how many more there were: how every non-candidate step is shown."""
    text = " ".join(step_output_text(step).split())
    cut = text[:keep_chars]
    more = len(text) - len(cut)
    return cut + (f"… [abbreviated: {more} more characters]" if more else "")


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
        head = f"Step {step.index} - " if options.step_indices else ""
        lines.append(f"{head}{step.speaker}: {abbreviated(step, keep_chars)}")
    return "\n".join(lines)


def compressed_view(trace: Trace, shown: set[int], keep_chars: int) -> Trace:
    """The trace a pluggable judge reads: the same steps, indices and speakers; ``shown``
    steps keep their outputs, every other step's output is :func:`abbreviated` (tool
    calls, tool results and metadata dropped). Recorded inputs are dropped from every
    step: they repeat the history, so they would carry the abbreviated steps in full."""
    steps = []
    for step in trace.steps:
        update: dict[str, Any] = {"input_messages": None, "request": None}
        if step.index not in shown:
            update |= {
                "content": abbreviated(step, keep_chars),
                "tool_calls": [],
                "tool_results": [],
                "metadata": {},
            }
        steps.append(step.model_copy(update=update))
    return trace.model_copy(update={"steps": steps})


def judge_prompt(trace: Trace, shown: set[int], config: ComposeConfig) -> str:
    """The built-in judge's prompt: all-at-once over :func:`compressed_log`."""
    options = RenderOptions.from_config(config, step_indices=config.step_indices)
    return ww.all_at_once_prompt(
        trace.task,
        compressed_log(trace, shown, options, config.compressed_chars),
        ground_truth=ww.ground_truth_for(trace, config),
        reminder=config.guidance_reminder,
        metadata=ww.metadata_for(trace, config),
    )


def worst_case_tokens(
    trace: Trace, candidates: list[int], config: ComposeConfig, judge: Method | None, llm: LLM
) -> int | None:
    """Tokens the judge may reserve in all over these candidates, when it can be known
    before asking: one all-at-once call, or a step-by-step question per candidate. None
    for other judges (their calls depend on their answers)."""
    if judge is None:
        prompt = judge_prompt(trace, set(candidates), config)
        return llm.reservation(prompt, config.reply_tokens(ww.ALL_AT_ONCE_REPLY_TOKENS))
    view = compressed_view(trace, set(candidates), config.compressed_chars)
    return judge.candidates_cost(view, llm, sorted(candidates))


def fit_candidates(
    trace: Trace, ranking: Ranking, config: ComposeConfig, judge: Method | None, llm: LLM
) -> tuple[list[int], int | None, int | None]:
    """(candidates, worst-case tokens, tokens left in the case's budget): the largest
    k <= top_k whose worst case fits what the case may still spend; ([], tokens at k=1,
    left) when none does. Without a case budget, or with a judge whose cost cannot be
    known beforehand, k = top_k (the LLM layer still refuses a call over the budget)."""
    left = case_tokens_left()
    k = min(config.top_k, len(trace.steps))
    tokens: int | None = None
    while k >= 1:
        candidates = ranking.top(k)
        tokens = worst_case_tokens(trace, candidates, config, judge, llm)
        if left is None or tokens is None or tokens <= left:
            return candidates, tokens, left
        k -= 1
    return [], tokens, left


class WholeLog(NamedTuple):
    """The whole-log judge compose asks instead of the abbreviated one."""

    tokens: int
    """Its worst case: prompt plus reply bound."""
    why: str
    built: tuple[str, bool]
    """Its prompt and whether the context budget cut it (:func:`whole_log_prompt`)."""


def whole_log_instead(
    trace: Trace,
    candidates: list[int],
    tokens: int | None,
    left: int | None,
    config: ComposeConfig,
    llm: LLM,
) -> WholeLog | None:
    """The whole-log judge when the built-in judge should read the whole log rather than
    the abbreviated one: ``min_saving`` is set, candidates were found, the whole log fits
    what the case may still spend, and abbreviating would save less than ``min_saving``
    of its tokens. None otherwise."""
    if config.judge != DEFAULT_JUDGE or config.min_saving is None:
        return None
    if not candidates or tokens is None:
        return None
    built = whole_log_prompt(trace, llm, config)
    prompt = built[0]
    whole = llm.reservation(prompt, config.reply_tokens(ww.ALL_AT_ONCE_REPLY_TOKENS))
    if left is not None and whole > left:
        return None
    # Prompts only: the reply bound is the same either way.
    full = llm.count_tokens(prompt)
    cut = llm.count_tokens(judge_prompt(trace, set(candidates), config))
    saving = 1 - cut / full if full else 0.0
    if saving >= config.min_saving:
        return None
    saved = f"{saving:.0%} of the whole-log prompt" if saving > 0 else "nothing"
    why = (
        f"showing {len(candidates)} of {len(trace.steps)} steps in full would save {saved} "
        f"({cut} against {full} prompt tokens), less than min_saving {config.min_saving:.0%}: "
        "the whole log was judged, every step a candidate"
    )
    return WholeLog(whole, why, built)


class ComposeMethod(MethodBase):
    """Shortlist, then a judge (all-at-once by default) over the shortlisted steps only."""

    name: ClassVar[str] = "compose"
    summary: ClassVar[str] = (
        "Offline shortlist, then a judge (all-at-once, or --set judge=METHOD) over its "
        "top-k steps (rest abbreviated)"
    )
    Config: ClassVar[type[MethodConfig]] = ComposeConfig
    presets: ClassVar[dict[str, dict[str, Any]]] = {
        "k1": {"top_k": 1},
        "k5": {"top_k": 5},
        "k8": {"top_k": 8},
    }
    proposes_candidates: ClassVar[bool] = True
    config: ComposeConfig
    """``details['candidates']`` are the steps worth verifying (``check`` replays them)."""

    def __init__(self, config: ComposeConfig) -> None:
        self.config = config
        self.judge: Method | None = None if config.judge == DEFAULT_JUDGE else build_judge(config)
        self.weights = load_configured_model(config.model_path)
        self.scorer = surprisal_scorer(self.weights)

    async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
        cfg = self.config
        assert isinstance(cfg, ComposeConfig)
        if not trace.steps:
            return Verdict(status="no-error-found", reason="empty trace")
        chosen, ranking = rank_with(trace, self.weights, self.scorer)
        details = ranking_details(trace, chosen, ranking, cfg.top_k)
        candidates, tokens, left = fit_candidates(trace, ranking, cfg, self.judge, llm)
        whole = whole_log_instead(trace, candidates, tokens, left, cfg, llm)
        if whole is not None:
            tokens, details["whole_log"] = whole.tokens, whole.why
            details["shortlisted"] = candidates
            candidates = list(ranking.order)
        details["candidates"] = candidates
        details["judge"] = cfg.judge
        details["judge_worst_case_tokens"] = tokens
        if not candidates:
            message = (
                f"the judge needs up to {tokens} tokens with one candidate; the case may "
                f"spend {left} more (budget_tokens {cfg.budget_tokens}); no call was made"
            )
            details["budget"] = message
            return Verdict(status="budget-exceeded", reason=message, details=details)
        mass = sum(ranking.probs[i] for i in candidates)
        if whole is not None:
            answer = await locate_all_at_once(trace, llm, cfg, whole.built)
            details.update(answer.details)
        elif self.judge is None:
            answer = await self._all_at_once(trace, candidates, llm, details)
        else:
            answer = await self._pluggable(trace, candidates, llm, details)
        if answer.status != "ok" or answer.step is None:
            return answer.model_copy(update={"details": details})
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

    async def _all_at_once(
        self, trace: Trace, candidates: list[int], llm: LLM, details: dict[str, Any]
    ) -> Verdict:
        """The built-in judge: one all-at-once call over the abbreviated log."""
        cfg = self.config
        assert isinstance(cfg, ComposeConfig)
        prompt = judge_prompt(trace, set(candidates), cfg)
        details["judge_prompt_tokens"] = llm.count_tokens(prompt)
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
            return Verdict(status="unparsed")
        return Verdict(agent=answer.agent, step=answer.step, reason=answer.reason)

    async def _pluggable(
        self, trace: Trace, candidates: list[int], llm: LLM, details: dict[str, Any]
    ) -> Verdict:
        """Another method as judge, in its own prompt format, on the abbreviated view.
        A judge that can judge given steps only (``judge_candidates``: step-by-step) is
        asked about the candidates (in order); any other method reads the whole view and
        may name any step (kept only if it is a candidate)."""
        judge = self.judge
        assert judge is not None
        view = compressed_view(trace, set(candidates), self.config.compressed_chars)
        with track_usage() as scope:
            judged = await judge.judge_candidates(view, llm, sorted(candidates))
            if judged is not None:
                verdict = judged
                details["judge_scope"] = "candidates"
            else:
                verdict = await judge.attribute(view, llm)
                details["judge_scope"] = "view"
        details["judge_result"] = {
            "status": verdict.status,
            "agent": verdict.agent,
            "step": verdict.step,
            "reason": verdict.reason,
            "confidence": verdict.confidence,
            "prompt_version": judge.config.prompt_version(),
            "usage": scope.usage.model_dump(),
            "details": verdict.details,
        }
        return Verdict(
            agent=verdict.agent, step=verdict.step, reason=verdict.reason, status=verdict.status
        )
