"""The canonical trace schema: one failed (or successful) multi-agent run.

Steps are indexed from 0; ``Step.index`` is the canonical index every method,
label and metric uses. Importers convert other indexings (1-based TraceElephant
ids, for example) on the way in and keep the original id in ``Step.source_id``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from faultfinder.usage import Usage

SCHEMA_VERSION = "1"

StepKind = Literal["llm", "tool", "human", "system"]


class ToolCall(BaseModel):
    """A tool call the model asked for, as in the OpenAI chat format."""

    id: str | None = None
    """Call id that links it to its result."""
    name: str
    """Tool (function) name."""
    arguments: str = ""
    """Arguments as the raw JSON string the model produced."""


class ToolResult(BaseModel):
    """What a tool returned."""

    call_id: str | None = None
    """Id of the ToolCall this answers, when known."""
    name: str | None = None
    """Tool name."""
    content: str = ""
    """The tool's output as text."""
    status: str | None = None
    """Free-form status (e.g. 'success', 'error') when the source records one."""


class Step(BaseModel):
    """One action by one agent: an LLM reply, a tool execution, a human or system message."""

    index: int = Field(ge=0)
    """Canonical 0-based position in ``Trace.steps``."""
    agent: str
    """Normalised agent name ('Orchestrator' for 'Orchestrator (thought)')."""
    role: str | None = None
    """The raw role or speaker name as the source wrote it."""
    kind: StepKind = "llm"
    """What produced the step."""
    content: str = ""
    """The step's output (the message text)."""
    input_messages: list[dict[str, Any]] | None = None
    """Full input in OpenAI chat format (the request's messages), when recorded."""
    request: dict[str, Any] | None = None
    """Other request parameters (temperature, tools offered...), without credentials."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    """Tool calls the step asked for."""
    tool_results: list[ToolResult] = Field(default_factory=list)
    """Tool results produced in this step."""
    model: str | None = None
    """Model that produced the step."""
    usage: Usage | None = None
    """Tokens spent by this step, when recorded."""
    started_at: datetime | None = None
    """When the step started."""
    ended_at: datetime | None = None
    """When the step ended."""
    source_id: str | None = None
    """The step's id in the source format (e.g. TraceElephant's 1-based step_id)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Anything else the source or the recorder kept (request hash, branch...)."""

    @property
    def speaker(self) -> str:
        """The speaker as logs show it: the raw role when it qualifies the agent's name
        (Magentic-One's 'Orchestrator (thought)'), else the agent. Prompts show this name;
        answers naming it resolve to ``agent`` (see ``judging.agent_names.roster_of``)."""
        return qualified_role(self.role, self.agent) or self.agent


def qualified_role(role: str | None, agent: str) -> str | None:
    """``role`` when it is ``agent`` followed by a parenthetical qualifier, as Magentic-One
    writes its speakers ('Orchestrator (thought)', 'Orchestrator (-> WebSurfer)'); else None."""
    if not role or role == agent:
        return None
    head, sep, tail = role.partition("(")
    if sep and head.strip() == agent and tail.rstrip().endswith(")"):
        return role.strip()
    return None


class Agent(BaseModel):
    """An agent of the system and its configuration."""

    name: str
    """Normalised name, as used in ``Step.agent`` and labels."""
    description: str | None = None
    """What the agent does, if known."""
    system_prompt: str | None = None
    """The agent's system prompt, if known."""
    model: str | None = None
    """The model behind the agent, if known."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Other per-agent configuration (tools, parameters...)."""


class GoldLabel(BaseModel):
    """The annotated cause of failure."""

    agent: str | None = None
    """Responsible agent."""
    step: int | None = None
    """Decisive error step (canonical 0-based)."""
    acceptable_steps: list[int] = Field(default_factory=list)
    """Steps also counted as correct, each once; always contains ``step`` when it is set."""
    reason: str | None = None
    """Annotator's explanation."""

    @model_validator(mode="after")
    def _include_step(self) -> GoldLabel:
        if self.step is not None and self.step not in self.acceptable_steps:
            self.acceptable_steps = [self.step, *self.acceptable_steps]
        if len(set(self.acceptable_steps)) < len(self.acceptable_steps):
            self.acceptable_steps = list(dict.fromkeys(self.acceptable_steps))
        return self


class SourceInfo(BaseModel):
    """Where the trace came from."""

    format: str = "faultfinder"
    """Importer or recorder that produced the trace."""
    path: str | None = None
    """File or directory it was read from."""
    subset: str | None = None
    """Benchmark subset (e.g. 'Algorithm-Generated', 'Hand-Crafted')."""


class Trace(BaseModel):
    """A multi-agent run: its task, its agents and its ordered steps."""

    schema_version: str = SCHEMA_VERSION
    """Version of this schema the file was written with."""
    id: str
    """Trace id, unique within a dataset."""
    task: str
    """The task or question given to the system."""
    ground_truth: str | None = None
    """Reference answer, when known."""
    final_answer: str | None = None
    """The system's final answer, when known."""
    system: str | None = None
    """Name of the multi-agent system (e.g. 'magentic-one')."""
    agents: list[Agent] = Field(default_factory=list)
    """Agent roster with per-agent configuration."""
    architecture: str | None = None
    """Free-text notes on how the agents are wired."""
    steps: list[Step]
    """The run's steps in order; ``steps[i].index == i``."""
    label: GoldLabel | None = None
    """Annotated cause of failure, for evaluation."""
    source: SourceInfo = Field(default_factory=SourceInfo)
    """Provenance."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Other facts about the run (benchmark level, question id, outcome, test status...)."""

    @model_validator(mode="after")
    def _check_indices(self) -> Trace:
        for position, step in enumerate(self.steps):
            if step.index != position:
                raise ValueError(
                    f"steps[{position}].index is {step.index}; steps must be numbered 0..n-1 "
                    "in order"
                )
        if self.label is not None:
            for s in self.label.acceptable_steps:
                if not 0 <= s < len(self.steps):
                    raise ValueError(
                        f"label step {s} is outside the trace (steps 0..{len(self.steps) - 1})"
                    )
        return self

    def agent_names(self) -> list[str]:
        """Distinct agent names of the steps, in order of first appearance."""
        seen: dict[str, None] = {}
        for step in self.steps:
            seen.setdefault(step.agent, None)
        return list(seen)

    def agent(self, name: str) -> Agent | None:
        """The roster entry for ``name``, if any."""
        return next((a for a in self.agents if a.name == name), None)

    def steps_of(self, agent: str) -> list[Step]:
        """Steps taken by ``agent``."""
        return [s for s in self.steps if s.agent == agent]

    @property
    def has_inputs(self) -> bool:
        """True when at least one step recorded its full input messages."""
        return any(s.input_messages for s in self.steps)
