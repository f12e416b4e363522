"""Confidence-weighted consensus voting over analyst conclusions (paper §3.3, Appendix A.7).

Plain functions over plain data, so each rule can be checked by hand:

1. ballots below the confidence threshold δ are set aside (:func:`filter_ballots`);
2. the conclusion type wins by summed confidence (:func:`vote_type`);
3. among the winning type's ballots, agents win by summed confidence — one agent for a
   single-agent conclusion, every agent whose sum reaches δ for a multi-agent one
   (:func:`vote_agents`);
4. steps win by summed confidence among the same ballots, after dropping steps that break
   the agent/step rule: outside the trace, or taken by an agent the ballot does not name
   (:func:`vote_step`, ``judging/pairing.py``);
5. the disagreement analysis reports conclusion diversity, confidence spread, conflicting
   high-confidence attributions and step/agent consistency (:func:`analyze_disagreement`).

Ties go to the candidate met first in analyst order, as in the paper's code.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, Field

from faultfinder.judging.pairing import check_step

ConclusionType = Literal["single_agent", "multi_agent"]
CompareOn = Literal["agents", "steps", "both"]


class Ballot(BaseModel):
    """One analyst's primary conclusion (or one alternative hypothesis) as it enters the vote."""

    analyst: str
    """Who cast it, e.g. 'skeptical@0.60'."""
    type: ConclusionType
    """Single- or multi-agent conclusion."""
    attribution: list[str] = Field(default_factory=list)
    """Responsible agents (roster names); empty when the analyst named none."""
    mistake_step: int | None = None
    """Claimed decisive step (canonical 0-based), unchecked against the trace."""
    confidence: float = Field(ge=0.0, le=1.0)
    """The analyst's confidence σ in [0, 1]."""
    reasoning: str = ""
    """The analyst's explanation."""


class AgentEvaluation(BaseModel):
    """One analyst's error-likelihood estimate for one agent."""

    analyst: str
    """Who estimated it."""
    agent: str
    """Roster name."""
    error_likelihood: float = Field(ge=0.0, le=1.0)
    """Estimated probability that this agent caused the failure."""


class EvaluationSummary(BaseModel):
    """All analysts' estimates for one agent."""

    mean_error_likelihood: float
    """Average of the analysts' error likelihoods."""
    count: int
    """How many analysts evaluated the agent."""


class Disagreement(BaseModel):
    """How far the analysts disagree (the paper's disagreement analysis ϕ)."""

    num_conclusion_types: int
    """Distinct conclusion types among the ballots that passed the threshold."""
    confidence_spread: float
    """max(σ) − min(σ) over the ballots that passed the threshold."""
    high_confidence_conflict: bool
    """Two or more ballots at or above the high-confidence level disagree."""
    step_agent_consistent: bool | None
    """Whether the consensus step was taken by a consensus agent (None when either is
    missing)."""
    requires_review: bool
    """True when the spread exceeds the review level, high-confidence ballots conflict, or
    no ballot passed the threshold."""
    reasons: list[str] = Field(default_factory=list)
    """Why review is required, in words."""


class Consensus(BaseModel):
    """The outcome of one vote, with everything needed to see why."""

    type: ConclusionType | None
    """Winning conclusion type (None when no ballot passed the threshold)."""
    agents: list[str]
    """Winning agents, strongest first."""
    step: int | None
    """Winning step within the trace, or None."""
    confidence: float
    """Mean confidence of the winning type's ballots (0 when none)."""
    reasoning: str
    """Reasoning of the strongest ballot that supports the consensus."""
    type_scores: dict[str, float]
    """Summed confidence per conclusion type."""
    agent_scores: dict[str, float]
    """Summed confidence per agent, over the winning type's ballots."""
    step_scores: dict[int, float]
    """Summed confidence per in-trace step, over the winning type's ballots."""
    rejected_steps: list[int]
    """Claimed steps left out of the step vote: outside the trace, or taken by an agent
    the ballot does not name (``judging/pairing.py``)."""
    accepted: list[Ballot]
    """Ballots at or above the threshold."""
    below_threshold: list[Ballot]
    """Ballots set aside for low confidence."""
    disagreement: Disagreement
    """The disagreement analysis."""
    alternatives: list[Ballot]
    """Strongest alternative hypotheses, highest confidence first."""
    agent_evaluations: dict[str, EvaluationSummary]
    """Mean error likelihood per agent over all analysts."""


def filter_ballots(
    ballots: Iterable[Ballot], threshold: float
) -> tuple[list[Ballot], list[Ballot]]:
    """(ballots with confidence ≥ threshold, the rest), order kept."""
    accepted: list[Ballot] = []
    rejected: list[Ballot] = []
    for ballot in ballots:
        (accepted if ballot.confidence >= threshold else rejected).append(ballot)
    return accepted, rejected


def _winner(scores: dict[str, float]) -> str | None:
    # max() keeps the first of equal maxima, and dicts keep insertion (analyst) order.
    if not scores:
        return None
    best = max(scores, key=lambda key: scores[key])
    return best if scores[best] > 0 else None


def vote_type(ballots: Sequence[Ballot]) -> tuple[ConclusionType | None, dict[str, float]]:
    """Winning conclusion type by summed confidence, and the sums."""
    scores: dict[str, float] = {}
    for ballot in ballots:
        scores[ballot.type] = scores.get(ballot.type, 0.0) + ballot.confidence
    winner = _winner(scores)
    return (winner if winner in ("single_agent", "multi_agent") else None), scores  # type: ignore[return-value]


def vote_agents(
    ballots: Sequence[Ballot], conclusion_type: ConclusionType, threshold: float
) -> tuple[list[str], dict[str, float]]:
    """Agents chosen by summed confidence over ``ballots`` (those of the winning type).

    Single-agent: the top agent. Multi-agent: every agent whose sum reaches ``threshold``,
    strongest first.
    """
    scores: dict[str, float] = {}
    for ballot in ballots:
        for agent in dict.fromkeys(ballot.attribution):
            scores[agent] = scores.get(agent, 0.0) + ballot.confidence
    # sorted() is stable: equal sums keep analyst order.
    ranked = sorted(scores, key=lambda agent: scores[agent], reverse=True)
    if not ranked:
        return [], scores
    if conclusion_type == "single_agent":
        return [ranked[0]], scores
    return [agent for agent in ranked if scores[agent] >= threshold], scores


def vote_step(
    ballots: Sequence[Ballot], speakers: Sequence[str]
) -> tuple[int | None, dict[int, float], list[int]]:
    """Winning step by summed confidence, the sums, and the steps left out.

    A ballot's step counts only when it could be its agents' mistake (the one agent/step
    rule, :func:`faultfinder.judging.pairing.check_step`): inside the trace and taken by
    one of the agents the ballot names. Otherwise the ballot still votes for its agents
    (:func:`vote_agents`) but not for the step."""
    scores: dict[int, float] = {}
    rejected: list[int] = []
    for ballot in ballots:
        step = ballot.mistake_step
        if step is None:
            continue
        if check_step(speakers, ballot.attribution, step) is not None:
            rejected.append(step)
            continue
        scores[step] = scores.get(step, 0.0) + ballot.confidence
    if not scores:
        return None, scores, rejected
    best = max(scores, key=lambda s: scores[s])
    return (best if scores[best] > 0 else None), scores, rejected


def _conflict_key(ballot: Ballot, compare: CompareOn) -> tuple[frozenset[str], int | None]:
    agents = frozenset(ballot.attribution) if compare in ("agents", "both") else frozenset()
    step = ballot.mistake_step if compare in ("steps", "both") else None
    return agents, step


def analyze_disagreement(
    accepted: Sequence[Ballot],
    *,
    review_spread: float,
    high_confidence: float,
    compare: CompareOn,
    consensus_agents: Sequence[str] = (),
    consensus_step: int | None = None,
    speakers: Sequence[str] = (),
) -> Disagreement:
    """The paper's disagreement analysis over the ballots that passed the threshold.

    ``compare`` says what makes two high-confidence ballots conflict: their agents (the
    agent-level pass), their steps (the step-level pass) or either (unified analysis).
    ``speakers`` (the agent of each step) lets the consensus step be checked against the
    consensus agents.
    """
    types = {b.type for b in accepted}
    confidences = [b.confidence for b in accepted]
    spread = round(max(confidences) - min(confidences), 6) if confidences else 0.0
    strong = {_conflict_key(b, compare) for b in accepted if b.confidence >= high_confidence}
    conflict = len(strong) > 1
    consistent: bool | None = None
    if consensus_step is not None and consensus_agents and consensus_step < len(speakers):
        consistent = speakers[consensus_step] in consensus_agents
    reasons: list[str] = []
    if not accepted:
        reasons.append("no conclusion reached the confidence threshold")
    if spread > review_spread:
        reasons.append(f"confidence spread {spread:.2f} exceeds {review_spread:.2f}")
    if conflict:
        reasons.append(f"{len(strong)} different attributions at confidence ≥ {high_confidence}")
    return Disagreement(
        num_conclusion_types=len(types),
        confidence_spread=spread,
        high_confidence_conflict=conflict,
        step_agent_consistent=consistent,
        requires_review=bool(reasons),
        reasons=reasons,
    )


def summarize_evaluations(evaluations: Iterable[AgentEvaluation]) -> dict[str, EvaluationSummary]:
    """Mean error likelihood per agent, agents in order of first evaluation."""
    sums: dict[str, list[float]] = {}
    for evaluation in evaluations:
        sums.setdefault(evaluation.agent, []).append(evaluation.error_likelihood)
    return {
        agent: EvaluationSummary(mean_error_likelihood=sum(v) / len(v), count=len(v))
        for agent, v in sums.items()
    }


def top_alternatives(alternatives: Iterable[Ballot], limit: int) -> list[Ballot]:
    """The ``limit`` most confident alternative hypotheses (ties keep analyst order)."""
    return sorted(alternatives, key=lambda b: b.confidence, reverse=True)[:limit]


def _synthesize(backing: Sequence[Ballot], support: Sequence[Ballot], mean: float) -> str:
    if not backing:
        return "No clear consensus reached."
    strongest = max(backing, key=lambda b: b.confidence)
    text = (
        f"Backed by {len(backing)} of {len(support)} analyst(s) whose conclusion type won "
        f"(their mean confidence {mean:.2f}); strongest ({strongest.analyst}, "
        f"{strongest.confidence:.2f}): "
    )
    return text + (strongest.reasoning.strip() or "(no reasoning given)")


def consensus(
    ballots: Sequence[Ballot],
    speakers: Sequence[str],
    *,
    threshold: float = 0.3,
    review_spread: float = 0.5,
    high_confidence: float = 0.7,
    compare: CompareOn = "both",
    evaluations: Iterable[AgentEvaluation] = (),
    alternatives: Iterable[Ballot] = (),
    max_alternatives: int = 5,
) -> Consensus:
    """Run the whole vote. ``speakers[i]`` is the agent of step i (it fixes the trace
    bounds and the step/agent consistency check)."""
    accepted, below = filter_ballots(ballots, threshold)
    winning_type, type_scores = vote_type(accepted)
    support = [b for b in accepted if b.type == winning_type]
    agents: list[str] = []
    agent_scores: dict[str, float] = {}
    step: int | None = None
    step_scores: dict[int, float] = {}
    rejected_steps: list[int] = []
    if winning_type is not None:
        agents, agent_scores = vote_agents(support, winning_type, threshold)
        step, step_scores, rejected_steps = vote_step(support, speakers)
    mean_confidence = sum(b.confidence for b in support) / len(support) if support else 0.0
    backing = [b for b in support if set(agents) & set(b.attribution)] or support
    return Consensus(
        type=winning_type,
        agents=agents,
        step=step,
        confidence=round(mean_confidence, 6),
        reasoning=_synthesize(backing, support, mean_confidence),
        type_scores=type_scores,
        agent_scores=agent_scores,
        step_scores=step_scores,
        rejected_steps=rejected_steps,
        accepted=accepted,
        below_threshold=below,
        disagreement=analyze_disagreement(
            accepted,
            review_spread=review_spread,
            high_confidence=high_confidence,
            compare=compare,
            consensus_agents=agents,
            consensus_step=step,
            speakers=speakers,
        ),
        alternatives=top_alternatives(alternatives, max_alternatives),
        agent_evaluations=summarize_evaluations(evaluations),
    )
