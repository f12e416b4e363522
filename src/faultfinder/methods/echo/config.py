"""ECHO's configuration and its named ablations (paper §4.2–4.3)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from faultfinder.methods.base import MethodConfig
from faultfinder.methods.echo.context import ContextKind, ContextTypeMode
from faultfinder.methods.echo.prompts import AnalystRole

Pipeline = Literal["context-aware", "unified", "decoupled"]


class EchoConfig(MethodConfig):
    """Defaults are the paper's final ECHO (I4): hierarchical context, 3 of 6 analysts at
    temperatures 0.3–0.9, decoupled agent- then step-level passes, δ = 0.3."""

    pipeline: Pipeline = "decoupled"
    """'decoupled' (I4: agent-level pass, then a step-level pass focused on its agents),
    'unified' (I3: one panel pass for both), or 'context-aware' (I1/I2: one arguing agent
    per step, then a judge)."""
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
    max_tokens: int = Field(default=4096, ge=64)
    """Reply length limit of analysts, step agents and the judge."""

    @model_validator(mode="after")
    def _check(self) -> EchoConfig:
        if self.temperature_min > self.temperature_max:
            raise ValueError("temperature_min must not exceed temperature_max")
        if self.roles is not None and not self.roles:
            raise ValueError("roles must name at least one analyst (or be left unset)")
        return self


PRESETS: dict[str, dict[str, Any]] = {
    "I1": {"pipeline": "context-aware", "context": "window"},
    "I2": {"pipeline": "context-aware", "context": "hierarchical"},
    "I3": {"pipeline": "unified"},
    "I4": {},
    "panel6": {"panel_size": 6},
    "llm-context": {"extractor": "llm"},
}
"""Named configurations: the paper's ablations I1–I4 (I4 is the default) and the extra
ablations of its Table 3 (six analysts; LLM-based context extraction)."""
