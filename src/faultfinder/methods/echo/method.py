"""The ``echo`` method: hierarchical context → objective analyst panel → consensus voting.

Pipelines (see :class:`~faultfinder.methods.echo.config.EchoConfig`):

- ``decoupled`` (I4, default): an agent-level panel pass over the whole trace; its vote
  names the agent(s); a step-level panel pass sees the trace focused on those agents'
  steps (full detail there, compressed with distance elsewhere); its vote names the step.
- ``unified`` (I3): one panel pass whose vote names both.
- ``context-aware`` (I1/I2): see :mod:`faultfinder.methods.echo.ablations`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar

from faultfinder.judging.agent_names import roster_of
from faultfinder.judging.fitting import fit_pieces, fit_steps
from faultfinder.judging.method import MethodBase, MethodConfig, Verdict
from faultfinder.judging.render import RenderOptions, context_budget, render_metadata
from faultfinder.llm.client import LLM
from faultfinder.methods.echo import prompts
from faultfinder.methods.echo.ablations import run_context_aware
from faultfinder.methods.echo.config import ANALYSIS_REPLY_TOKENS, PRESETS, EchoConfig
from faultfinder.methods.echo.context import (
    Compressed,
    focused_pieces,
    make_extractor,
    render_step_context,
)
from faultfinder.methods.echo.panel import (
    Analyst,
    AnalystResult,
    alternatives,
    ballots,
    evaluations,
    run_pass,
    sample_panel,
)
from faultfinder.methods.echo.schema import analysis_json_schema
from faultfinder.methods.echo.voting import CompareOn, Consensus, consensus
from faultfinder.traces.schema import Trace

# Tokens kept free for message framing when a prompt is fitted to the context budget.
_SLACK = 64


def _variant(cfg: EchoConfig) -> str:
    if cfg.pipeline == "context-aware":
        return "I1" if cfg.context == "window" else "I2"
    return "I3" if cfg.pipeline == "unified" else "I4"


Messages = list[dict[str, Any]]


class _PanelRun:
    """One trace's panel analysis: shared prompt parts and the two passes."""

    def __init__(
        self, trace: Trace, llm: LLM, cfg: EchoConfig, compressed: dict[int, Compressed]
    ) -> None:
        self.trace = trace
        self.llm = llm
        self.cfg = cfg
        self.compressed = compressed
        self.agents = roster_of(trace)
        self.speakers = [s.agent for s in trace.steps]
        self.options = RenderOptions.from_config(cfg)
        self.head = prompts.header(trace, cfg.with_ground_truth)
        self.metadata = render_metadata(trace, cfg.observability)
        self.schema = analysis_json_schema(self.agents, len(trace.steps))
        self.panel: list[Analyst] = sample_panel(
            trace.id,
            size=cfg.panel_size,
            roles=cfg.roles,
            temperature_min=cfg.analyst_temperatures()[0],
            temperature_max=cfg.analyst_temperatures()[1],
            seed=cfg.seed,
            run=cfg.run,
        )
        self.shared = cfg.prompt_layout == "shared-prefix"
        self.truncated: dict[str, bool] = {}
        self.step_view: str | None = None
        self._log: str | None = None
        self.sample = self._sample()

    def _tokens(self, messages: Messages) -> int:
        return sum(self.llm.count_tokens(m["content"]) for m in messages)

    def _budget(self) -> int | None:
        return context_budget(self.cfg, self.llm, self.cfg.reply_tokens(ANALYSIS_REPLY_TOKENS))

    def _available(self, build: Callable[[Analyst, str], Messages]) -> int | None:
        """Tokens left for the conversation (or view) in the largest analyst's prompt."""
        budget = self._budget()
        if budget is None:
            return None
        return budget - max(self._tokens(build(a, "")) for a in self.panel) - _SLACK

    def _sample(self) -> str:
        limit = self.cfg.context_sample_chars
        if limit == 0:
            return ""
        text = render_step_context(self.trace, 0, self.compressed, self.cfg.context, self.options)
        return text[:limit] + "..." if len(text) > limit else text

    def _case(self, conversation: str | None) -> str:
        return prompts.shared_case_prompt(
            head=self.head,
            metadata=self.metadata,
            agents=self.agents,
            conversation=conversation,
            context_sample=self.sample if conversation is not None else "",
        )

    def _fit_conversation(
        self, kind: prompts.PassKind, build: Callable[[Analyst, str], Messages]
    ) -> str:
        conversation, cut = fit_steps(
            self.trace,
            self.trace.steps,
            self.options,
            self._available(build),
            count_tokens=self.llm.count_tokens,
        )
        self.truncated[kind] = cut
        return conversation

    def whole_trace_prompts(self, kind: prompts.PassKind) -> Callable[[Analyst], Messages]:
        """Unified / agent-level prompts: every step in full (fitted to the budget)."""
        if self.shared:

            def shared(analyst: Analyst, conversation: str) -> Messages:
                question = prompts.analyst_question(kind, analyst.role)
                return _messages(
                    prompts.SHARED_ANALYST_SYSTEM_PROMPT, self._case(conversation) + question
                )

            self._log = self._fit_conversation(kind, shared)
            log = self._log
            return lambda analyst: shared(analyst, log)
        sample = self.sample

        def paper(analyst: Analyst, conversation: str) -> Messages:
            user = prompts.analyst_user_prompt(
                kind,
                head=self.head,
                metadata=self.metadata,
                agents=self.agents,
                conversation=conversation,
                context_sample=sample,
            )
            return _messages(prompts.analyst_system_prompt(analyst.role, kind), user)

        conversation = self._fit_conversation(kind, paper)
        return lambda analyst: paper(analyst, conversation)

    def step_prompts(
        self, agent_consensus: Consensus, focus: list[int]
    ) -> Callable[[Analyst], Messages]:
        """Step-level prompts. Shared-prefix layout: the conversation of the agent-level
        pass, uncut, with the finding and the focus in the question; when that conversation
        was cut or does not fit with the question, the focused view instead (as in the
        paper layout): the trace focused on the attributed agents' steps."""
        finding = describe_finding(agent_consensus, focus)
        if self.shared:
            log = self._log

            def with_log(analyst: Analyst) -> Messages:
                question = prompts.analyst_question("step", analyst.role, focus=finding)
                return _messages(prompts.SHARED_ANALYST_SYSTEM_PROMPT, self._case(log) + question)

            budget = self._budget()
            if log is not None and (
                budget is None
                or (
                    not self.truncated.get("agent", False)
                    and max(self._tokens(with_log(a)) for a in self.panel) + _SLACK <= budget
                )
            ):
                self.step_view = "conversation"
                self.truncated["step"] = False
                return with_log

            def focused(analyst: Analyst, view: str) -> Messages:
                question = prompts.analyst_question(
                    "step", analyst.role, focus=finding, focused_view=view
                )
                return _messages(prompts.SHARED_ANALYST_SYSTEM_PROMPT, self._case(None) + question)

            build = focused
        else:

            def paper(analyst: Analyst, view: str) -> Messages:
                user = prompts.analyst_user_prompt(
                    "step",
                    head=self.head,
                    metadata=self.metadata,
                    agents=self.agents,
                    conversation=view,
                    focus=finding,
                )
                return _messages(prompts.analyst_system_prompt(analyst.role, "step"), user)

            build = paper
        pieces = focused_pieces(self.trace, focus, self.compressed, self.cfg.context, self.options)
        text, cut = fit_pieces(
            pieces,
            self._available(build),
            self.llm.count_tokens,
            what=f"Trace '{self.trace.id}': the step-level view of {len(focus)} focus steps",
        )
        self.truncated["step"] = cut
        self.step_view = "focused"
        return lambda analyst: build(analyst, text)

    async def ask(
        self, kind: prompts.PassKind, messages: Callable[[Analyst], Messages]
    ) -> list[AnalystResult]:
        return await run_pass(
            self.llm,
            self.panel,
            kind,
            messages,
            self.agents,
            json_schema=self.schema,
            max_tokens=self.cfg.reply_tokens(ANALYSIS_REPLY_TOKENS),
            seed=self.cfg.seed,
            top_p=self.cfg.top_p,
            # The first analyst of a pass goes alone so that the others find its prompt,
            # all but their role, in the server's cache (requests sent together miss it).
            warm_first=self.shared,
        )

    def vote(self, results: list[AnalystResult], compare: CompareOn) -> Consensus:
        cfg = self.cfg
        return consensus(
            ballots(results),
            self.speakers,
            threshold=cfg.confidence_threshold,
            review_spread=cfg.review_spread,
            high_confidence=cfg.high_confidence,
            compare=compare,
            evaluations=evaluations(results),
            alternatives=alternatives(results),
            max_alternatives=cfg.max_alternatives,
        )


def _messages(system: str, user: str) -> Messages:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def describe_finding(found: Consensus, focus: list[int]) -> str:
    """The agent-level consensus in words, for the step-level prompt."""
    kind = "multi-agent" if found.type == "multi_agent" else "single-agent"
    steps = ", ".join(str(i) for i in focus)
    return (
        f"Attributed agent(s): {', '.join(found.agents)} ({kind} conclusion; "
        f"{len(found.accepted)} analyst conclusion(s) at or above the confidence threshold, "
        f"mean confidence {found.confidence:.2f}).\n"
        f"Steps taken by them: {steps}.\n"
        f"Agent-level reasoning: {found.reasoning}"
    )


def _pass_record(results: list[AnalystResult], found: Consensus) -> dict[str, Any]:
    return {
        "analysts": [r.summary() for r in results],
        "consensus": found.model_dump(mode="json"),
    }


def _no_attribution(found: Consensus, results: list[AnalystResult]) -> Verdict | None:
    """The verdict when a pass produced no agent: unparsed, or no error found."""
    if all(r.status == "unparsed" for r in results):
        return Verdict(status="unparsed", reason="no analyst's reply could be read")
    if not found.agents:
        why = (
            "no analyst conclusion reached the confidence threshold"
            if not found.accepted
            else "the winning conclusion names no agent"
        )
        return Verdict(status="no-error-found", reason=why)
    return None


class EchoMethod(MethodBase):
    """ECHO (Banerjee et al.): hierarchical context, objective analyst panel, consensus vote."""

    name: ClassVar[str] = "echo"
    summary: ClassVar[str] = (
        "ECHO: hierarchical context, panel of objective analysts, confidence-weighted "
        "consensus (agent-level then step-level)"
    )
    Config: ClassVar[type[MethodConfig]] = EchoConfig
    presets: ClassVar[dict[str, dict[str, Any]]] = PRESETS

    def __init__(self, config: EchoConfig) -> None:
        self.config = config

    async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
        cfg = self.config
        assert isinstance(cfg, EchoConfig)
        if not trace.steps:
            return Verdict(status="no-error-found", reason="the trace has no steps")
        compressed: dict[int, Compressed] = {}
        if cfg.context == "hierarchical":
            extractor = make_extractor(cfg.extractor, cfg.context_types, context_budget(cfg, llm))
            compressed = await extractor.compress_trace(trace, llm)
        common: dict[str, Any] = {
            "variant": _variant(cfg),
            "context": cfg.context,
            "extractor": cfg.extractor if cfg.context == "hierarchical" else None,
        }
        if cfg.extractor == "llm" and compressed:
            common["context_sources"] = dict(Counter(c.source for c in compressed.values()))
        if cfg.pipeline == "context-aware":
            verdict = await run_context_aware(trace, llm, cfg, compressed, roster_of(trace))
            return verdict.model_copy(update={"details": {**common, **verdict.details}})
        run = _PanelRun(trace, llm, cfg, compressed)
        common["pipeline"] = cfg.pipeline
        common["prompt_layout"] = cfg.prompt_layout
        common["panel"] = [{"role": a.role, "temperature": a.temperature} for a in run.panel]
        if cfg.pipeline == "unified":
            return await self._unified(run, common)
        return await self._decoupled(run, common)

    async def _unified(self, run: _PanelRun, details: dict[str, Any]) -> Verdict:
        results = await run.ask("unified", run.whole_trace_prompts("unified"))
        found = run.vote(results, "both")
        details["unified_pass"] = _pass_record(results, found)
        details["conversation_truncated"] = run.truncated.get("unified", False)
        details["requires_review"] = found.disagreement.requires_review
        details["review_reasons"] = found.disagreement.reasons
        empty = _no_attribution(found, results)
        if empty is not None:
            return empty.model_copy(update={"details": details})
        details["agents"] = found.agents
        return Verdict(
            agent=found.agents[0],
            step=found.step,
            reason=found.reasoning,
            confidence=found.confidence,
            details=details,
        )

    async def _decoupled(self, run: _PanelRun, details: dict[str, Any]) -> Verdict:
        agent_results = await run.ask("agent", run.whole_trace_prompts("agent"))
        by_agent = run.vote(agent_results, "agents")
        details["agent_pass"] = _pass_record(agent_results, by_agent)
        details["conversation_truncated"] = run.truncated.get("agent", False)
        empty = _no_attribution(by_agent, agent_results)
        if empty is not None:
            details["step_pass"] = {"status": "skipped: the agent-level pass named no agent"}
            details["requires_review"] = True
            details["review_reasons"] = by_agent.disagreement.reasons or [empty.reason or ""]
            return empty.model_copy(update={"details": details})
        focus = [s.index for s in run.trace.steps if s.agent in by_agent.agents]
        step_results = await run.ask("step", run.step_prompts(by_agent, focus))
        by_step = run.vote(step_results, "steps")
        details["step_pass"] = _pass_record(step_results, by_step)
        details["focus"] = {"agents": by_agent.agents, "steps": focus}
        details["step_view"] = run.step_view
        details["focused_view_truncated"] = run.truncated.get("step", False)
        details["agents"] = by_agent.agents
        passes_agree = (set(by_step.agents) == set(by_agent.agents)) if by_step.agents else None
        speaker_ok = (
            run.speakers[by_step.step] in by_agent.agents if by_step.step is not None else None
        )
        details["consistency"] = {
            "step_pass_agrees_on_agents": passes_agree,
            "step_taken_by_attributed_agent": speaker_ok,
        }
        reasons = [f"agent-level: {r}" for r in by_agent.disagreement.reasons]
        reasons += [f"step-level: {r}" for r in by_step.disagreement.reasons]
        if passes_agree is False:
            reasons.append("the step-level pass voted for other agents than the agent-level pass")
        if speaker_ok is False:
            reasons.append("the consensus step was not taken by an attributed agent")
        details["requires_review"] = bool(reasons)
        details["review_reasons"] = reasons
        confidences = [by_agent.confidence] + ([by_step.confidence] if by_step.type else [])
        step_reason = (
            by_step.reasoning
            if by_step.step is not None
            else "no step reached a consensus (see details.step_pass)"
        )
        return Verdict(
            agent=by_agent.agents[0],
            step=by_step.step,
            reason=f"Agent: {by_agent.reasoning}\nStep: {step_reason}",
            confidence=round(sum(confidences) / len(confidences), 6),
            details=details,
        )
