"""ECHO's consensus voting, checked against cases computed by hand from the paper's rules
(§3.3 and Appendix A.7): threshold δ, confidence-weighted type → agents → step, bounds,
disagreement analysis."""

from __future__ import annotations

import pytest

from faultfinder.methods.echo.voting import (
    AgentEvaluation,
    Ballot,
    analyze_disagreement,
    consensus,
    filter_ballots,
    summarize_evaluations,
    top_alternatives,
    vote_agents,
    vote_step,
    vote_type,
)

SPEAKERS = ["Planner", "Coder", "Terminal", "Coder", "Terminal", "Verifier", "Planner"]


def ballot(
    analyst: str, agents: list[str], step: int | None, confidence: float, kind: str = "single"
) -> Ballot:
    return Ballot(
        analyst=analyst,
        type="multi_agent" if kind == "multi" else "single_agent",
        attribution=agents,
        mistake_step=step,
        confidence=confidence,
        reasoning=f"reasoning of {analyst}",
    )


def test_threshold_keeps_ballots_at_or_above_delta() -> None:
    ballots = [ballot("a", ["Coder"], 1, 0.3), ballot("b", ["Coder"], 1, 0.29)]
    accepted, rejected = filter_ballots(ballots, 0.3)
    assert [b.analyst for b in accepted] == ["a"]
    assert [b.analyst for b in rejected] == ["b"]


def test_worked_example_single_agent_wins_by_summed_confidence() -> None:
    # single: 0.8 + 0.6 = 1.4 > multi: 0.9 ; the 0.2 ballot is below δ = 0.3.
    ballots = [
        ballot("conservative", ["Coder"], 3, 0.8),
        ballot("liberal", ["Coder"], 1, 0.6),
        ballot("pattern", ["Planner", "Coder"], 0, 0.9, kind="multi"),
        ballot("skeptical", ["Planner"], 0, 0.2),
    ]
    result = consensus(ballots, SPEAKERS, threshold=0.3, compare="agents")
    assert result.type == "single_agent"
    assert result.type_scores == pytest.approx({"single_agent": 1.4, "multi_agent": 0.9})
    assert result.agents == ["Coder"]
    assert result.agent_scores == pytest.approx({"Coder": 1.4})
    # Step vote uses the winning type's ballots only: 3 (0.8) beats 1 (0.6).
    assert result.step == 3
    assert result.step_scores == pytest.approx({3: 0.8, 1: 0.6})
    assert result.confidence == pytest.approx(0.7)  # mean of 0.8 and 0.6
    assert [b.analyst for b in result.below_threshold] == ["skeptical"]
    d = result.disagreement
    assert d.num_conclusion_types == 2
    assert d.confidence_spread == pytest.approx(0.3)  # 0.9 - 0.6 among accepted
    # 0.8 {Coder} and 0.9 {Planner, Coder} are both ≥ 0.7 and name different agents.
    assert d.high_confidence_conflict and d.requires_review
    assert d.step_agent_consistent is True  # step 3 was taken by Coder
    assert "reasoning of conservative" in result.reasoning  # strongest supporting ballot


def test_multi_agent_keeps_every_agent_whose_sum_reaches_the_threshold() -> None:
    ballots = [
        ballot("a", ["Planner", "Coder"], 1, 0.5, kind="multi"),
        ballot("b", ["Planner"], 0, 0.4, kind="multi"),
    ]
    assert vote_agents(ballots, "multi_agent", 0.3) == (
        ["Planner", "Coder"],
        pytest.approx({"Planner": 0.9, "Coder": 0.5}),
    )
    agents, _ = vote_agents(ballots, "multi_agent", 0.6)
    assert agents == ["Planner"]
    # A single-agent conclusion keeps only the top agent.
    agents, _ = vote_agents(ballots, "single_agent", 0.3)
    assert agents == ["Planner"]


def test_steps_outside_the_trace_are_left_out_of_the_step_vote() -> None:
    ballots = [ballot("a", ["Coder"], 12, 0.9), ballot("b", ["Coder"], 3, 0.4)]
    step, scores, rejected = vote_step(ballots, SPEAKERS)
    assert step == 3
    assert scores == {3: 0.4}
    assert rejected == [12]
    step, scores, rejected = vote_step([ballot("a", ["Coder"], -1, 0.9)], SPEAKERS)
    assert step is None and rejected == [-1]


def test_ties_go_to_the_first_candidate_in_analyst_order() -> None:
    tied = [ballot("a", ["Verifier"], 5, 0.5), ballot("b", ["Coder"], 3, 0.5)]
    assert vote_agents(tied, "single_agent", 0.3)[0] == ["Verifier"]
    assert (
        vote_step([ballot("a", ["Coder"], 3, 0.5), ballot("b", ["Coder"], 1, 0.5)], SPEAKERS)[0]
        == 3
    )
    types = [ballot("a", ["Coder"], 1, 0.5, kind="multi"), ballot("b", ["Coder"], 1, 0.5)]
    assert vote_type(types)[0] == "multi_agent"


def test_no_ballot_above_threshold_means_no_consensus_and_review() -> None:
    result = consensus([ballot("a", ["Coder"], 3, 0.1)], SPEAKERS, threshold=0.3)
    assert result.type is None and result.agents == [] and result.step is None
    assert result.confidence == 0.0
    assert result.disagreement.requires_review
    assert "no conclusion reached the confidence threshold" in result.disagreement.reasons


def test_spread_above_half_requires_review() -> None:
    ballots = [ballot("a", ["Coder"], 3, 0.95), ballot("b", ["Coder"], 3, 0.35)]
    d = analyze_disagreement(ballots, review_spread=0.5, high_confidence=0.7, compare="both")
    assert d.confidence_spread == pytest.approx(0.6)
    assert d.requires_review and not d.high_confidence_conflict
    calm = [ballot("a", ["Coder"], 3, 0.8), ballot("b", ["Coder"], 3, 0.75)]
    d = analyze_disagreement(calm, review_spread=0.5, high_confidence=0.7, compare="both")
    assert not d.requires_review and d.reasons == []


def test_what_counts_as_a_conflict_depends_on_the_pass() -> None:
    # Same agent, different steps: a conflict for the step pass, not for the agent pass.
    ballots = [ballot("a", ["Coder"], 1, 0.9), ballot("b", ["Coder"], 3, 0.8)]
    by_agents = analyze_disagreement(
        ballots, review_spread=0.5, high_confidence=0.7, compare="agents"
    )
    by_steps = analyze_disagreement(
        ballots, review_spread=0.5, high_confidence=0.7, compare="steps"
    )
    assert not by_agents.high_confidence_conflict
    assert by_steps.high_confidence_conflict


def test_a_ballot_whose_step_another_agent_took_votes_for_its_agent_only() -> None:
    # The one agent/step rule (judging/pairing.py): step 5 was taken by Verifier, so a
    # ballot naming Coder at step 5 is not a vote for step 5.
    ballots = [ballot("a", ["Coder"], 5, 0.9)]
    result = consensus(ballots, SPEAKERS)
    assert result.agents == ["Coder"] and result.step is None
    assert result.rejected_steps == [5]
    agreeing = consensus(
        [ballot("a", ["Coder"], 5, 0.9), ballot("b", ["Verifier"], 5, 0.5)], SPEAKERS
    )
    assert agreeing.agents == ["Coder"] and agreeing.step == 5
    assert agreeing.step_scores == {5: 0.5}
    assert agreeing.disagreement.step_agent_consistent is False


def test_evaluations_are_averaged_and_alternatives_ranked() -> None:
    evals = [
        AgentEvaluation(analyst="a", agent="Coder", error_likelihood=0.9),
        AgentEvaluation(analyst="b", agent="Coder", error_likelihood=0.5),
        AgentEvaluation(analyst="a", agent="Planner", error_likelihood=0.2),
    ]
    summary = summarize_evaluations(evals)
    assert summary["Coder"].mean_error_likelihood == pytest.approx(0.7)
    assert summary["Coder"].count == 2 and summary["Planner"].count == 1
    alts = [ballot(f"x{i}", ["Planner"], i, c) for i, c in enumerate([0.2, 0.6, 0.4])]
    assert [b.confidence for b in top_alternatives(alts, 2)] == [0.6, 0.4]
    assert top_alternatives(alts, 0) == []
