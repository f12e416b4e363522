"""ECHO's configuration and its named ablations (paper §4.2–4.3)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from faultfinder.judging.method import MethodConfig
from faultfinder.methods.echo.context import ContextKind, ContextTypeMode
from faultfinder.methods.echo.prompts import PROMPT_VERSION, AnalystRole, PromptLayout

Pipeline = Literal["context-aware", "unified", "decoupled"]


class EchoConfig(MethodConfig):
    """Defaults are the paper's final ECHO (I4): hierarchical context, 3 of 6 analysts at
    temperatures 0.3–0.9, decoupled agent- then step-level passes, δ = 0.3."""

    PROMPT_VERSION: ClassVar[str] = PROMPT_VERSION
    WITHOUT_PREFIX_CACHE: ClassVar[dict[str, Any]] = {"prompt_layout": "paper"}

    pipeline: Pipeline = "decoupled"
    """'decoupled' (I4: agent-level pass, then a step-level pass focused on its agents),
    'unified' (I3: one panel pass for both), or 'context-aware' (I1/I2: one arguing agent
    per step, then a judge)."""
    prompt_layout: PromptLayout = "shared-prefix"
    """How the panel's prompts are laid out. 'shared-prefix': one system prompt for every
    analyst, then the case and the whole conversation, then the call's own part (task,
    agent-level finding, role), so every call of a case shares one long prefix that a
    server's prompt cache serves; the step-level pass sees the conversation of the
    agent-level pass (the focused view only when that conversation had to be cut). 'paper':
    the paper's order (a system prompt per role and pass, the role first) and the
    step-level pass on the focused view."""
    context: ContextKind = "hierarchical"
    """'hierarchical' (L1–L4 by distance) or 'window' (±1 step only, the I1 baseline)."""
    extractor: Literal["patterns", "llm"] = "patterns"
    """How L2–L4 are compressed: regex patterns (no calls) or one LLM call per step."""
    context_types: ContextTypeMode = "paper"
    """Pattern context type per level: 'paper' (decision quality for L2, general for L3/L4,
    as the paper's code) or 'auto' (chosen per step from its content: error propagation,
    handoff, decision quality or general)."""
    panel_size: int = Field(default=3, ge=1, le=6)
    """Analysts drawn (without replacement) from the six roles for each trace."""
    roles: list[AnalystRole] | None = None
    """Use exactly these analysts (in this order) instead of drawing ``panel_size``."""
    temperature_min: float = Field(default=0.3, ge=0.0, le=2.0)
    """Lowest analyst temperature; temperatures are spread evenly from min to max."""
    temperature_max: float = Field(default=0.9, ge=0.0, le=2.0)
    """Highest analyst temperature."""
    seed: int = 0
    """Seed of the analyst draw; combined with the trace id (and ``run``)."""
    run: int = Field(default=0, ge=0)
    """Repeat index, set by the harness so repeated runs draw other panels."""
    confidence_threshold: float = Field(default=0.3, ge=0.0, le=1.0)
    """δ: conclusions below this confidence do not vote."""
    review_spread: float = Field(default=0.5, ge=0.0, le=1.0)
    """A confidence spread above this flags the verdict for review."""
    high_confidence: float = Field(default=0.7, ge=0.0, le=1.0)
    """Conclusions at or above this confidence that disagree flag the verdict for review."""
    max_alternatives: int = Field(default=5, ge=0)
    """Alternative hypotheses kept in the result, most confident first."""
    context_sample_chars: int = Field(default=1000, ge=0)
    """Characters of Step 0's hierarchical context shown to the unified / agent-level
    analysts as an example of the levels (the paper's code); 0 leaves it out."""
    argue_temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    """Temperature of the context-aware step agents (I1/I2)."""
    judge_temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    """Temperature of the final judge (I1/I2)."""
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    """None: the paper's temperatures per call (analysts spread over
    ``temperature_min..temperature_max``, step agents ``argue_temperature``, the judge
    ``judge_temperature``). A number: every call at that temperature."""
    top_p: float | None = Field(default=0.9, gt=0.0, le=1.0)
    """Nucleus-sampling mass of every call: 0.9 in the paper's code (A.5, A.6)."""

    def analyst_temperatures(self) -> tuple[float, float]:
        """The range analysts' temperatures are spread over."""
        if self.temperature is not None:
            return self.temperature, self.temperature
        return self.temperature_min, self.temperature_max

    @model_validator(mode="after")
    def _check(self) -> EchoConfig:
        if self.temperature_min > self.temperature_max:
            raise ValueError("temperature_min must not exceed temperature_max")
        if self.roles is not None and not self.roles:
            raise ValueError("roles must name at least one analyst (or be left unset)")
        return self


ANALYSIS_REPLY_TOKENS = 1024
"""Reply bound of an analyst: the JSON analysis (a conclusion with agent, step, confidence
and reasoning, alternatives, a summary). The paper's code allows 4096."""
ARGUMENT_REPLY_TOKENS = 1024
"""Reply bound of a context-aware step agent's argument (I1/I2)."""
JUDGE_REPLY_TOKENS = 512
"""Reply bound of the I1/I2 judge's JSON verdict."""
PAPER_REPLY_TOKENS = 4096
"""``max_tokens`` of every call in the paper's code (A.5–A.7)."""

PRESETS: dict[str, dict[str, Any]] = {
    "paper": {"max_output_tokens": PAPER_REPLY_TOKENS, "prompt_layout": "paper"},
    "I1": {"pipeline": "context-aware", "context": "window"},
    "I2": {"pipeline": "context-aware", "context": "hierarchical"},
    "I3": {"pipeline": "unified"},
    "I4": {},
    "panel6": {"panel_size": 6},
    "llm-context": {"extractor": "llm"},
}
"""Named configurations: ``paper`` (I4 with the paper code's 4096-token replies and the
paper's prompt layout), the
paper's ablations I1–I4 (I4 is the default) and the extra ablations of its Table 3 (six
analysts; LLM-based context extraction)."""
