"""``compose``: shortlist, then a judge over the shortlisted steps only."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from faultfinder.llm import LLM, ScriptedBackend
from faultfinder.methods import create_method, run_method
from faultfinder.methods.compose import ComposeConfig, judge_prompt
from faultfinder.shortlist.features import feature_names
from faultfinder.shortlist.model import ShortlistModel
from faultfinder.testing.oracle import label_consistent, perfect_judge
from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import GoldLabel, Step, Trace

FIXTURES = Path(__file__).parent / "fixtures" / "oracle"


@pytest.fixture()
def weights(tmp_path: Path) -> str:
    """A ranker that prefers early steps (step 0 first, then 1, ...)."""
    names = feature_names(["position"])
    coef = [-5.0 if n == "position.log_index" else 0.0 for n in names]
    model = ShortlistModel(["position"], [0.0] * len(names), [1.0] * len(names), coef, 0.0)
    model.conformal = {"0.8": 0.5, "0.9": 0.7, "0.95": 0.9}
    path = tmp_path / "w.json"
    path.write_text(json.dumps(model.to_json()))
    return str(path)


def trace_of(n: int, gold: int) -> Trace:
    steps = [Step(index=i, agent=f"A{i % 2}", content=f"output {i} " + "x" * 300) for i in range(n)]
    return Trace(
        id="c", task="Do it.", steps=steps, label=GoldLabel(agent=f"A{gold % 2}", step=gold)
    )


def run(trace: Trace, backend: object, **settings: object):  # type: ignore[no-untyped-def]
    return asyncio.run(run_method(create_method("compose", **settings), trace, LLM(backend)))  # type: ignore[arg-type]


def test_perfect_judge_accuracy_equals_shortlist_recall_at_k(weights: str) -> None:
    traces = [t for t in load_traces(FIXTURES) if t.label is not None and label_consistent(t)]
    for k in (1, 3):
        for trace in traces:
            result = run(trace, perfect_judge(trace), model_path=weights, top_k=k)
            assert trace.label is not None and trace.label.step is not None
            in_shortlist = trace.label.step < k  # the ranker's order is 0, 1, 2, ...
            assert (result.step == trace.label.step) == in_shortlist, (trace.id, k)
            assert result.usage.calls == 1
            if not in_shortlist:
                assert result.status == "unparsed"
                assert "not among the shortlisted" in result.details["step_unparsed"]


def test_only_shortlisted_steps_are_shown_in_full(weights: str) -> None:
    trace = trace_of(6, 1)
    prompt = judge_prompt(trace, {0, 1}, ComposeConfig(model_path=weights))
    assert prompt.count("x" * 300) == 2
    assert "Step 4 - A0: output 4 " in prompt and "[abbreviated: " in prompt
    assert "candidates for the decisive error: 0, 1" in prompt


def test_budget_lowers_k_then_refuses_without_a_call(weights: str) -> None:
    trace = trace_of(6, 1)
    free = run(trace, perfect_judge(trace), model_path=weights, top_k=4)
    assert free.details["candidates"] == [0, 1, 2, 3]
    k4_tokens = free.details["judge_prompt_tokens"]
    tight = run(
        trace, perfect_judge(trace), model_path=weights, top_k=4, budget_tokens=k4_tokens + 255
    )
    assert len(tight.details["candidates"]) < 4 and tight.step == 1
    assert tight.details["judge_prompt_tokens"] + 256 <= k4_tokens + 255
    none = run(trace, ScriptedBackend([]), model_path=weights, budget_tokens=300)
    assert none.status == "budget-exceeded" and none.usage.calls == 0
    assert "budget_tokens is 300" in none.details["budget"]


def test_unreadable_judge_is_unparsed_never_a_guess(weights: str) -> None:
    trace = trace_of(4, 0)
    result = run(trace, ScriptedBackend(["no idea"] * 3), model_path=weights)
    assert result.status == "unparsed" and result.step is None and result.agent is None
    assert result.details["candidates"] == [0, 1, 2]


def test_confidence_is_renormalised_over_the_candidates(weights: str) -> None:
    trace = trace_of(5, 0)
    result = run(trace, perfect_judge(trace), model_path=weights, top_k=2)
    probs = {s["step"]: s["prob"] for s in result.details["scores"]}
    assert result.confidence == pytest.approx(probs[0] / (probs[0] + probs[1]), abs=1e-3)
