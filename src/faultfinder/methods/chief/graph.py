"""The hierarchical causal graph (HCG) CHIEF builds (its renderings, which import this
module: ``graph_render.py``).

Nodes are subtasks and agent-within-subtask instances; edges are subtask edges, agent
edges (both carrying counterfactual patterns) and step edges (data flow). Loop groups,
virtual oracles and backtracking candidates are attached so one JSON file tells the
whole story. Step indices are the trace's canonical 0-based ones throughout.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

SubtaskEdgeType = Literal["data_dependency", "logical_prereq"]
AgentEdgeType = Literal[
    "obs_dependency",
    "reasoning_continuation",
    "decision_dependency",
    "environment_feedback",
    "memory_ref",
    "loop_control",
]
SUBTASK_EDGE_TYPES: tuple[str, ...] = ("data_dependency", "logical_prereq")
AGENT_EDGE_TYPES: tuple[str, ...] = (
    "obs_dependency",
    "reasoning_continuation",
    "decision_dependency",
    "environment_feedback",
    "memory_ref",
    "loop_control",
)
Scenario = Literal["local", "planning-control", "data-flow", "deviation-aware", "unspecified"]
SCENARIOS: tuple[str, ...] = ("local", "planning-control", "data-flow", "deviation-aware")
DataType = Literal["text", "numeric", "list", "boolean", "url", "file"]
EdgeOrigin = Literal["llm", "deterministic", "both", "default"]
StageStatus = Literal["ok", "unparsed", "skipped", "cached", "fallback", "loaded"]
LoopRole = Literal["entry", "internal", "exit"]


class StageRecord(BaseModel):
    """How one pipeline stage went."""

    status: StageStatus = "ok"
    """'ok' parsed; 'unparsed' the model's reply could not be read after retries;
    'fallback' a recorded structural default was used instead; 'skipped' not run by this
    preset; 'cached'/'loaded' reused from the stage cache or a graph file."""
    note: str = ""
    """What happened, in a sentence (parse error, repairs made...)."""
    attempts: int = 0
    """Model calls this stage made (parse retries included; 0 when reused)."""


class Subtask(BaseModel):
    """A subtask node: one contiguous phase of the run."""

    id: str
    """'S1', 'S2', ... in execution order."""
    name: str
    """Short name of the phase."""
    description: str = ""
    """What the phase is for."""
    start: int
    """First step (inclusive, 0-based)."""
    end: int
    """Last step (inclusive, 0-based)."""
    agents: list[str] = Field(default_factory=list)
    """Agents that act within the step range (from the trace, not the model)."""

    def steps(self) -> range:
        return range(self.start, self.end + 1)


class OTAR(BaseModel):
    """Observation, Thought, Action, Result of one agent within one subtask."""

    observation: str = ""
    """What the agent saw."""
    thought: str = ""
    """Its reasoning."""
    action: str = ""
    """What it did."""
    result: str = ""
    """What it produced."""


class AgentNode(BaseModel):
    """An agent node: one agent within one subtask."""

    id: str
    """'<subtask id>:<agent>'."""
    subtask: str
    """Subtask id."""
    agent: str
    """Agent name as in the trace."""
    steps: list[int] = Field(default_factory=list)
    """The agent's steps inside the subtask."""
    otar: OTAR | None = None
    """Parsed OTAR tuple; None when the OTAR stage did not cover this node."""


class CounterfactualPattern(BaseModel):
    """Bias(u) --Φ--> Anomaly(v): an upstream deviation and the downstream error it causes."""

    scenario: Scenario = "unspecified"
    """Which attribution scenario the pattern serves."""
    bias: str
    """The latent upstream deviation."""
    anomaly: str
    """The observable downstream error."""
    reversible: bool | None = None
    """For deviation-aware patterns: whether later steps can self-correct the deviation."""


class SubtaskEdge(BaseModel):
    """Logical progression between consecutive subtasks."""

    source: str
    """Upstream subtask id."""
    target: str
    """Downstream subtask id."""
    type: SubtaskEdgeType = "logical_prereq"
    """Data dependency or logical prerequisite."""
    patterns: list[CounterfactualPattern] = Field(default_factory=list)
    """Counterfactual patterns bound to the edge."""
    origin: EdgeOrigin = "llm"
    """'llm' from the edge prompt; 'default' added because the model gave none."""


class AgentEdge(BaseModel):
    """Collaboration between two agents inside one subtask."""

    subtask: str
    """Subtask id the edge lives in."""
    source: str
    """Upstream agent."""
    target: str
    """Downstream agent."""
    type: AgentEdgeType
    """One of the six agent edge types."""
    patterns: list[CounterfactualPattern] = Field(default_factory=list)
    """Counterfactual patterns bound to the edge."""
    origin: EdgeOrigin = "llm"
    """Where the edge came from."""


class StepEdge(BaseModel):
    """A data snapshot: a value produced at one step and consumed at a later one."""

    producer: int
    """Step that produced the data."""
    consumer: int
    """Step that used it."""
    producer_agent: str
    """Agent of the producer step (from the trace)."""
    consumer_agent: str
    """Agent of the consumer step (from the trace)."""
    data: str
    """The data item (a description from the model, or the literal value found)."""
    data_type: DataType = "text"
    """Kind of value."""
    origin: EdgeOrigin = "llm"
    """'llm' (step-edge prompt), 'deterministic' (value linking) or 'both'."""


class LoopMember(BaseModel):
    """One step of a loop group and its role."""

    step: int
    """Step index."""
    agent: str
    """Agent of the step."""
    role: LoopRole
    """'entry' first issue of the repeated message, 'exit' where control leaves the loop,
    'internal' everything between."""
    repeat: bool = False
    """True for the repeated (near-identical) messages themselves."""


class LoopGroup(BaseModel):
    """A repeated plan/instruction cycle found deterministically."""

    id: str
    """'L1', 'L2', ..."""
    agent: str
    """The agent that kept re-issuing a near-identical message (the planner side)."""
    repeats: list[int]
    """Steps of the near-identical messages, in order."""
    start: int
    """First step of the group (the entry)."""
    end: int
    """Last step of the group (the exit)."""
    members: list[LoopMember]
    """Every step of the group with its role."""
    other_agents: list[str] = Field(default_factory=list)
    """Agents acting inside the loop besides the repeating one (the executor side)."""
    similarity: float
    """Mean similarity of consecutive repeats (0..1)."""
    excerpt: str = ""
    """The start of the repeated message."""


class Oracle(BaseModel):
    """A subtask virtual oracle ⟨Goal, Preconditions, Key Evidence, Acceptance Criteria⟩."""

    subtask: str
    """Subtask id."""
    goal: str = ""
    """What the subtask should achieve."""
    preconditions: list[str] = Field(default_factory=list)
    """What must hold from upstream outputs / environment before it starts."""
    key_evidence: list[str] = Field(default_factory=list)
    """Facts, tool fields or quantities to verify during it."""
    acceptance_criteria: list[str] = Field(default_factory=list)
    """Checkable, falsifiable pass/fail conditions."""


class Candidates(BaseModel):
    """Backtracking output: candidate error subtasks, agents and steps."""

    subtasks: list[str] = Field(default_factory=list)
    """Candidate subtask ids."""
    agents: list[str] = Field(default_factory=list)
    """Candidate agent node ids ('S2:WebSurfer')."""
    steps: list[int] = Field(default_factory=list)
    """Candidate steps, ascending."""
    reasons: dict[str, str] = Field(default_factory=dict)
    """Why each candidate was flagged, keyed by subtask id, agent node id or 'step N'."""
    order: list[str] = Field(default_factory=list)
    """Reverse topological order of subtasks the evaluation followed."""
    dropped: list[str] = Field(default_factory=list)
    """Model answers discarded as inconsistent with the graph (with why)."""


class Exemplar(BaseModel):
    """A knowledge-base entry retrieved for decomposition."""

    id: str
    """Entry id."""
    score: float
    """Retrieval score."""
    source: str = ""
    """Where the entry came from."""


class DecompositionInfo(BaseModel):
    """How the subtask partition was obtained."""

    zero_shot: bool = True
    """True when no exemplar was retrieved (no knowledge base, or nothing matched)."""
    knowledge_base: str | None = None
    """The knowledge base used ('builtin' or a path)."""
    retrieval: str = "bm25"
    """Retrieval kind."""
    exemplars: list[Exemplar] = Field(default_factory=list)
    """Exemplars inserted into the prompt."""
    excluded: list[str] = Field(default_factory=list)
    """Knowledge-base entries excluded because they come from this very task."""
    reflection_rounds: int = 0
    """Refinement requests sent because the plan broke a structural rule."""
    violations: list[list[str]] = Field(default_factory=list)
    """Rule violations found in each checked plan, in order."""
    repaired: list[str] = Field(default_factory=list)
    """Deterministic repairs applied to the last plan (empty when none were needed)."""


class CausalGraph(BaseModel):
    """The hierarchical causal graph of one trace."""

    format: str = "faultfinder-chief-graph"
    """File format marker."""
    version: str = "1"
    """File format version."""
    trace_id: str
    """Trace id."""
    trace_hash: str
    """Content hash of the trace the graph was built from."""
    task: str
    """The task."""
    n_steps: int
    """Number of steps in the trace."""
    step_agents: list[str] = Field(default_factory=list)
    """Agent of each step, by index."""
    model: str = ""
    """Model that built the graph."""
    prompt_version: str = ""
    """CHIEF prompt version."""
    subtasks: list[Subtask] = Field(default_factory=list)
    """Subtask nodes in order."""
    agents: list[AgentNode] = Field(default_factory=list)
    """Agent nodes."""
    subtask_edges: list[SubtaskEdge] = Field(default_factory=list)
    """Edges between consecutive subtasks."""
    agent_edges: list[AgentEdge] = Field(default_factory=list)
    """Edges between agents within a subtask."""
    step_edges: list[StepEdge] = Field(default_factory=list)
    """Data-flow edges between steps."""
    loops: list[LoopGroup] = Field(default_factory=list)
    """Repeated instruction cycles."""
    oracles: list[Oracle] = Field(default_factory=list)
    """Virtual oracles per subtask (empty until M2 runs)."""
    candidates: Candidates | None = None
    """Backtracking candidates (None until M2 runs)."""
    decomposition: DecompositionInfo = Field(default_factory=DecompositionInfo)
    """How the subtasks were obtained."""
    stages: dict[str, StageRecord] = Field(default_factory=dict)
    """Status of each stage, by name."""

    # --- look-ups -----------------------------------------------------------

    def subtask(self, subtask_id: str) -> Subtask | None:
        return next((s for s in self.subtasks if s.id == subtask_id), None)

    def subtask_of_step(self, step: int) -> Subtask | None:
        return next((s for s in self.subtasks if s.start <= step <= s.end), None)

    def agent_node(self, node_id: str) -> AgentNode | None:
        return next((a for a in self.agents if a.id == node_id), None)

    def oracle(self, subtask_id: str) -> Oracle | None:
        return next((o for o in self.oracles if o.subtask == subtask_id), None)

    def loops_of_step(self, step: int) -> list[LoopGroup]:
        return [g for g in self.loops if g.start <= step <= g.end]

    def incoming(self, step: int) -> list[StepEdge]:
        return [e for e in self.step_edges if e.consumer == step]

    def summary(self) -> dict[str, Any]:
        """Counts and statuses, small enough to sit in a verdict's details."""
        origins: dict[str, int] = {}
        for e in self.step_edges:
            origins[e.origin] = origins.get(e.origin, 0) + 1
        return {
            "subtasks": len(self.subtasks),
            "agent_nodes": len(self.agents),
            "subtask_edges": len(self.subtask_edges),
            "agent_edges": len(self.agent_edges),
            "step_edges": len(self.step_edges),
            "step_edge_origins": origins,
            "loop_groups": len(self.loops),
            "oracles": len(self.oracles),
            "zero_shot": self.decomposition.zero_shot,
            "exemplars": [e.id for e in self.decomposition.exemplars],
            "reflection_rounds": self.decomposition.reflection_rounds,
            "repaired": bool(self.decomposition.repaired),
            "stages": {name: rec.status for name, rec in self.stages.items()},
        }
