"""DoVer's data: its options, trials, hypotheses, interventions, judgements and the
result row."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from faultfinder.traces.schema import ToolCall
from faultfinder.usage import Usage

ROW_VERSION = "1"

VerdictName = Literal[
    "validated", "partially_validated", "refuted", "inconclusive", "not_applied", "unverifiable"
]
InterventionCategory = Literal["modified_instruction", "plan_update"]
MilestoneState = Literal["achieved", "partial", "missed"]
FulfilmentOutcome = Literal[
    "success_after_intervention", "instruction_not_executed", "applied_but_insufficient"
]


class PlanningStep(BaseModel):
    """A step where a plan is made or updated (a trial boundary)."""

    step: int
    """Canonical step index."""
    type: Literal["initial", "update"] = "update"
    """The first plan, or a later plan update."""
    criterion: str = ""
    """Why the segmenter took it for a planning step."""


class Trial(BaseModel):
    """A contiguous span of steps: a planning step and the steps executing its plan."""

    index: int
    """0-based trial number."""
    start: int
    """First step (inclusive)."""
    end: int
    """Last step (inclusive)."""
    planning_step: int | None = None
    """The planning step that opens it (None when the log has no recognised plan)."""
    kind: Literal["initial", "update", "whole-log"] = "whole-log"
    """How it was opened."""
    criterion: str = ""
    """The segmenter's criterion for its planning step."""


class Segmentation(BaseModel):
    """How a log was cut into trials."""

    method: str
    """'llm', 'pattern:<regex>' or 'none'."""
    status: Literal["ok", "unparsed", "no-planning-steps"] = "ok"
    """'unparsed': the model's answer could not be read, so the log is one trial."""
    planning_steps: list[PlanningStep] = Field(default_factory=list)
    """Planning steps found, in order."""
    trials: list[Trial] = Field(default_factory=list)
    """The resulting trials."""
    detail: str | None = None
    """Parse error or other remark."""


class Hypothesis(BaseModel):
    """A failure hypothesis for one trial: (agent, step, rationale)."""

    trial: int
    """Trial it belongs to."""
    agent: str | None = None
    """Suspected agent."""
    step: int | None = None
    """Suspected failure step (canonical index in the whole log)."""
    reason: str | None = None
    """Rationale."""
    method: str
    """Attribution method that proposed it."""
    status: str = "ok"
    """The method's verdict status (ok, unparsed, no-error-found, error...)."""
    details: dict[str, Any] = Field(default_factory=dict)
    """The method's evidence."""


class Redirect(BaseModel):
    """One tool call of the intervened step made to another tool (a handoff to another
    agent), its id and arguments kept."""

    model_config = ConfigDict(extra="forbid")

    call: int = Field(ge=0)
    """Which tool call of the step (0-based)."""
    to: str = Field(min_length=1)
    """The tool it calls instead: one offered at that step, taking the same parameters."""


class InterventionProposal(BaseModel):
    """What the intervention recommender returns: a concrete, applicable edit."""

    category: InterventionCategory
    """DoVer's intervention category."""
    replacement: str = Field(min_length=1)
    """The full new text of the intervened message (for a step that makes tool calls: its
    text, the calls kept)."""
    rationale: str = ""
    """Why this change should fix the hypothesised failure."""
    redirect: Redirect | None = None
    """For a step that makes tool calls: one of them made to another tool offered there
    (a handoff to another agent), when the hypothesis is that the wrong one was chosen."""


class Intervention(InterventionProposal):
    """A proposal bound to the step it replaces."""

    step: int
    """Step whose output is replaced (canonical index)."""
    agent: str
    """The agent that step belongs to."""
    original: str
    """The step's original text."""
    original_tool_calls: list[ToolCall] = Field(default_factory=list)
    """The step's recorded tool calls (handoffs, delegations, tools)."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    """The tool calls served with ``replacement``: the recorded ones, ids and arguments
    kept, so the tool results and handoffs that follow still match (one renamed by
    ``redirect``). Empty: the step made none, and ``replacement`` is its whole reply."""
    leaks_answer: bool = False
    """The replacement contains the reference answer (flagged, not filtered)."""

    def changes_step(self) -> bool:
        """The intervention changes the step: new text (blanks aside) or tool calls."""
        return _plain(self.replacement) != _plain(self.original) or (
            self.tool_calls != self.original_tool_calls
        )


def _plain(text: str) -> str:
    return " ".join(text.split())


class Milestone(BaseModel):
    """One checkpoint of the reference solution."""

    order: int
    title: str
    action: str = ""
    result: str = ""


class MilestoneStatus(BaseModel):
    order: int
    status: MilestoneState
    evidence: str = ""


class NewPath(BaseModel):
    explored: bool = False
    feasible: bool = False
    contribution: str = ""


class MilestoneEvaluation(BaseModel):
    """How far a trace got along the milestones."""

    milestones: list[MilestoneStatus]
    new_path: NewPath = Field(default_factory=NewPath)

    def achieved(self, total: int) -> float:
        """Milestone count: achieved = 1, partial = 0.5 (orders outside 1..total ignored)."""
        seen: dict[int, float] = {}
        for item in self.milestones:
            if 1 <= item.order <= total:
                seen[item.order] = {"achieved": 1.0, "partial": 0.5, "missed": 0.0}[item.status]
        return sum(seen.values())


class Fulfilment(BaseModel):
    """The 'intervention fulfilled' judgement of one replay."""

    is_intervention_fulfilled: bool
    outcome: FulfilmentOutcome
    evidence: str = ""


class RepeatResult(BaseModel):
    """One replay of an intervention and its judgements."""

    repeat: int
    """Repeat number (0-based)."""
    branch: str
    """Branch directory of the replay."""
    final_answer: str | None = None
    """The replayed program's answer."""
    success: bool | None = None
    """The checker's verdict on the answer (None: it cannot tell, e.g. no reference)."""
    check_detail: str = ""
    """The checker's reason or output."""
    seed: int | None = None
    """Seed sent with the replay's live calls (distinct per repeat)."""
    temperatures: list[float | None] = Field(default_factory=list)
    """Temperature of each live call of the replay as sent (None: the API default)."""
    fulfilled: bool | None = None
    """The intervention was carried out (None: judgement unreadable or not made)."""
    fulfilment: Fulfilment | None = None
    """The full judgement."""
    judge_status: Literal["ok", "unparsed", "skipped"] = "ok"
    """'unparsed' when the judge's answer could not be read."""
    milestones: MilestoneEvaluation | None = None
    """Milestones reached by the replay."""
    progress: float | None = None
    """(milestones of replay - milestones of original) / number of milestones."""
    edit_applied: bool = False
    """The replay reached the intervened step and served the edit (and, for new text kept
    with the step's tool calls, a later request carried that text: some frameworks drop
    the text of a reply that makes tool calls, and then no agent read the intervention)."""
    at_reached: bool | None = None
    """The program reached the intervened step with the recorded history (it may still
    not have got the edit: a ``tool_result`` edit that no request carried, an edited call
    the upstream never answered). None: not known (rows written before it was kept)."""
    divergences: int = 0
    """Calls before the edit that differed from the recording."""
    exit_code: int | None = None
    """The replayed program's exit status."""
    program_failed: bool = False
    """The replayed program failed on its own (non-zero exit or timeout; being stopped
    when the live window was used up is not a failure)."""
    live_calls: int = 0
    """Requests of the replay that reached the upstream (every path)."""
    steps: int = 0
    """Steps in the replay's trace."""
    ran: bool = True
    """The replay ran the program (False: it could not start, e.g. a command that does
    not exist; ``error`` says why)."""
    error: str | None = None
    """Why the replay could not be used (for a replay that failed on its own or could not
    run: what happened; such a replay is no evidence either way)."""


class DoverRow(BaseModel):
    """One trial's hypothesis, intervention, replays and verdict: a self-describing row."""

    row_version: str = ROW_VERSION
    kind: Literal["dover"] = "dover"
    run_dir: str
    """The recording debugged."""
    trace_id: str
    task: str
    ground_truth: str | None = None
    original_answer: str | None = None
    original_success: bool | None = None
    n_steps: int = 0
    """Steps in the recording."""
    trial: Trial
    n_trials: int = 1
    segmentation: str = "llm"
    """Segmentation method."""
    segmentation_status: str = "ok"
    hypothesis: Hypothesis
    intervention: Intervention | None = None
    repeats: list[RepeatResult] = Field(default_factory=list)
    successes: int = 0
    """Replays judged that succeeded (the answer passed the checker); a failed replay is
    never one."""
    fulfilled: int = 0
    """Repeats judged to have carried out the intervention."""
    failed_replays: int = 0
    """Repeats that are no evidence either way: the replayed program failed on its own (a
    live call answered with an error, a crash, the timeout) or could not run; they count
    neither as successes nor as failures."""
    trial_success_rate: float | None = None
    """DoVer's trial success rate: ``successes`` / replays judged, i.e. replays that are
    evidence (not ``failed_replays``), got the edit and whose success the checker could
    tell (None when there is none: no reference, every replay failed...). One definition
    everywhere: :func:`faultfinder.dover.verdict.trial_success`."""
    flip_rate: float | None = None
    """The same figure under its other name: the failure flipped to success (only failed
    runs are debugged)."""
    flip_rate_ci: tuple[float, float] | None = None
    """95% Wilson score interval of the trial success rate (and flip rate)."""
    independent_repeats: bool | None = None
    """Every live call of every replay sampled (temperature > 0 or the API default) with a
    distinct seed per repeat; False: repeats may be one run counted several times."""
    checker: str = "exact"
    """Success checker ('exact', or 'command:...')."""
    milestones_total: int = 0
    """Number of milestones (0: no reference steps)."""
    original_milestones: float | None = None
    """Milestone count of the original run."""
    progress_made: float | None = None
    """Mean progress over repeats (None without milestones)."""
    verdict: VerdictName | None = None
    """DoVer's verdict (None when no intervention was made)."""
    verdict_reason: str = ""
    status: Literal[
        "ok", "no-hypothesis", "no-intervention", "already-succeeded", "error", "budget-exceeded"
    ] = "ok"
    """'already-succeeded': the recorded run passed the checker, so nothing was debugged."""
    error: str | None = None
    model: str = ""
    """Model behind DoVer's own calls."""
    prompt_version: str = ""
    config: dict[str, Any] = Field(default_factory=dict)
    usage: Usage = Field(default_factory=Usage)
    """Tokens of this trial's calls (hypothesis, intervention, judgements)."""
    shared_usage: Usage = Field(default_factory=Usage)
    """Tokens of the run-level calls (segmentation, milestones), repeated on every row of
    the run: count them once per run."""
    wall_time_s: float = 0.0
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat())


class DoverConfig(BaseModel):
    """DoVer's options; defaults follow the paper."""

    model_config = ConfigDict(extra="forbid")

    method: str = "all-at-once:refined"
    """Attribution method (name or name:preset) proposing one hypothesis per trial."""
    segment: str = "llm"
    """Trial segmentation: 'llm' (the paper), 'magentic-one', 'pattern:REGEX' (planning
    steps are those whose output matches) or 'none' (the whole log is one trial)."""
    repeats: int = Field(default=3, ge=1)
    """Replays per intervention (the paper runs three)."""
    orchestrator: str | None = None
    """The planning agent whose messages are rewritten (default: the agent of each
    trial's planning step)."""
    scope: Literal["orchestrator", "hypothesis"] = "orchestrator"
    """Rewrite the orchestrator's message at or before the failure step (the paper), or
    the hypothesised step itself whoever made it."""
    with_ground_truth: bool = True
    """Show the reference answer to the hypothesis method, the intervention recommender
    and the fulfilment judge (the paper's recommender uses it)."""
    max_trials: int | None = Field(default=None, ge=1)
    """Intervene on at most this many trials (the first ones)."""
    judge_window: int = Field(default=10, ge=1)
    """Steps after the intervention shown to the fulfilment judge."""
    milestones: bool = True
    """Measure milestone progress when the run has reference steps."""
    context_budget: int | None = Field(default=None, ge=256)
    """Max prompt tokens for DoVer's own prompts (logs truncated per step to fit)."""
    temperature: float = 0.0
    """Sampling temperature of DoVer's own calls."""
    live_temperature: float | None = 0.7
    """Temperature forced on the replayed program's live calls, so that repeats are
    independent samples (None: the program's own; at 0 the repeats are one run counted
    several times, which the row records as ``independent_repeats = False``)."""
    seed: int | None = 0
    """Repeat r sends ``seed + r`` with its live calls (distinct seeds; None: no seed)."""
    on_divergence: Literal["fail", "live"] = "fail"
    """What a replay does when the program diverges before the edit."""
    budget_tokens: int | None = Field(default=None, ge=1)
    """Token budget of each trial (``--budget-tokens``): its hypothesis, intervention and
    judge calls. A trial that would exceed it gets status 'budget-exceeded' and the next
    trial goes on. The shared segmentation and milestone calls are outside it."""
