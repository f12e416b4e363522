"""``agentic``: an LLM agent that navigates the trace with tools (TraceElephant's Static
Agentic method) and submits the responsible agent and decisive step."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from faultfinder.judging.method import MethodBase, MethodConfig, Verdict
from faultfinder.methods.agentic.config import AgenticConfig

if TYPE_CHECKING:
    from faultfinder.llm.client import LLM
    from faultfinder.traces.schema import Trace


class AgenticMethod(MethodBase):
    """Tool-using trace navigator; the verdict comes from its submit call."""

    name: ClassVar[str] = "agentic"
    summary: ClassVar[str] = (
        "LLM agent that navigates the trace with tools and submits a verdict (Static Agentic)"
    )
    Config: ClassVar[type[MethodConfig]] = AgenticConfig
    presets: ClassVar[dict[str, dict[str, Any]]] = {
        "tools": {"action_format": "tools"},
        "text": {"action_format": "text"},
        "quick": {"max_turns": 10, "token_budget": 60_000},
        # TraceElephant's Static setting: the complete trace, metadata and inputs included
        # (docs/methods/agentic.md, "Presets").
        "paper": {"observability": "full"},
    }

    def __init__(self, config: AgenticConfig) -> None:
        self.config = config

    async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
        cfg = self.config
        assert isinstance(cfg, AgenticConfig)
        if not trace.steps:
            return Verdict(status="no-error-found", reason="empty trace")
        from faultfinder.methods.agentic.loop import Navigator  # imported when it runs

        result = await Navigator(trace, llm, cfg).run()
        details = {
            "mode": result.mode,
            "turns": result.turns,
            "tokens": result.tokens,
            "forced": result.forced_by is not None,
            "forced_by": result.forced_by,
            "context_budget": result.context_budget,
            "elided_results": result.elided,
            "dropped_turns": result.dropped_turns,
            "transcript": result.transcript,
        }
        submission = result.submission
        if submission is None:
            return Verdict(status="unparsed", details=details)
        return Verdict(
            agent=submission.agent,
            step=submission.step,
            reason=submission.reason,
            confidence=submission.confidence,
            details=details,
        )
