"""``compose``: shortlist, then a judge over the shortlisted steps only."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from faultfinder.errors import ConfigError
from faultfinder.judging.method import run_method
from faultfinder.judging.render import RenderOptions
from faultfinder.llm import LLM, ChatRequest, FunctionBackend, ScriptedBackend
from faultfinder.methods.compose import (
    ComposeConfig,
    abbreviated,
    compressed_log,
    compressed_view,
    judge_prompt,
)
from faultfinder.methods.whowhen import common as ww
from faultfinder.methods.whowhen.all_at_once import whole_log_prompt
from faultfinder.registry import create_method
from faultfinder.shortlist.features import feature_names
from faultfinder.shortlist.model import ShortlistModel
from faultfinder.testing.oracle import label_consistent, perfect_judge
from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import GoldLabel, Step, ToolCall, Trace

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
            # min_saving=None: the abbreviated log even where it saves little.
            result = run(trace, perfect_judge(trace), model_path=weights, top_k=k, min_saving=None)
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
    free = run(trace, perfect_judge(trace), model_path=weights, top_k=4, min_saving=None)
    assert free.details["candidates"] == [0, 1, 2, 3]
    k4_need = free.details["judge_worst_case_tokens"]
    # What the call reserves: the prompt plus the reply bound (the LLM layer's figure).
    assert k4_need == free.details["judge_prompt_tokens"] + 304
    tight = run(
        trace,
        perfect_judge(trace),
        model_path=weights,
        top_k=4,
        budget_tokens=k4_need - 1,
        min_saving=None,
    )
    assert len(tight.details["candidates"]) < 4 and tight.step == 1
    assert tight.details["judge_worst_case_tokens"] <= k4_need - 1
    assert tight.usage.total_tokens <= k4_need - 1
    none = run(trace, ScriptedBackend([]), model_path=weights, budget_tokens=300)
    assert none.status == "budget-exceeded" and none.usage.calls == 0
    assert none.budget_stop == "case" and "no call was made" in (none.error or "")
    assert "budget_tokens 300" in none.details["budget"]
    assert none.details["scores"]  # the shortlist is still there


def test_unreadable_judge_is_unparsed_never_a_guess(weights: str) -> None:
    trace = trace_of(6, 0)
    result = run(trace, ScriptedBackend(["no idea"] * 3), model_path=weights)
    assert result.status == "unparsed" and result.step is None and result.agent is None
    assert result.details["candidates"] == [0, 1, 2]


def test_confidence_is_renormalised_over_the_candidates(weights: str) -> None:
    trace = trace_of(5, 0)
    result = run(trace, perfect_judge(trace), model_path=weights, top_k=2)
    probs = {s["step"]: s["prob"] for s in result.details["scores"]}
    assert result.confidence == pytest.approx(probs[0] / (probs[0] + probs[1]), abs=1e-3)


# --- short logs: the whole log when abbreviating saves too little ------------------------


def whole_log_prompt_of(trace: Trace, weights: str) -> str:
    prompt, truncated = whole_log_prompt(trace, LLM(ScriptedBackend([])), ComposeConfig())
    assert not truncated
    return prompt


def test_short_log_is_judged_whole_and_any_step_counts(weights: str) -> None:
    trace = trace_of(4, 3)  # the gold step is last: outside a top-3 shortlist
    backend = perfect_judge(trace)
    result = run(trace, backend, model_path=weights, top_k=3, min_saving=0.5)
    assert result.status == "ok" and result.step == 3
    assert result.usage.calls == 1
    # Exactly the whole-log all-at-once judge's prompt, no candidates line.
    assert backend.requests[0].messages[-1]["content"] == whole_log_prompt_of(trace, weights)
    assert result.details["shortlisted"] == [0, 1, 2]
    assert result.details["candidates"] == [0, 1, 2, 3]
    assert "less than min_saving 50%" in result.details["whole_log"]
    probs = {s["step"]: s["prob"] for s in result.details["scores"]}
    assert result.confidence == pytest.approx(probs[3], abs=1e-3)
    # The same case with widening off stays within the shortlist.
    kept = run(trace, perfect_judge(trace), model_path=weights, top_k=3, min_saving=None)
    assert kept.status == "unparsed" and "whole_log" not in kept.details


def test_default_widens_only_where_abbreviating_saves_little(weights: str) -> None:
    # Two steps, k = 3: nothing to abbreviate, and the candidates line costs extra.
    short = trace_of(2, 1)
    result = run(short, perfect_judge(short), model_path=weights)
    assert "whole_log" in result.details and result.step == 1
    # Six long steps, k = 3: half the log is abbreviated, well over 10% saved.
    long = trace_of(6, 1)
    result = run(long, perfect_judge(long), model_path=weights)
    assert "whole_log" not in result.details and result.details["candidates"] == [0, 1, 2]


def test_whole_log_only_within_the_case_budget(weights: str) -> None:
    trace = trace_of(4, 3)
    free = run(trace, perfect_judge(trace), model_path=weights, top_k=3, min_saving=None)
    k3_need = free.details["judge_worst_case_tokens"]
    # Room for the abbreviated log but not the whole one: stay abbreviated.
    tight = run(
        trace, perfect_judge(trace), model_path=weights, min_saving=0.5, budget_tokens=k3_need
    )
    assert "whole_log" not in tight.details and tight.details["candidates"] == [0, 1, 2]
    assert tight.usage.total_tokens <= k3_need


def test_pluggable_judges_are_never_widened(weights: str) -> None:
    trace = trace_of(2, 1)
    result = run(
        trace, perfect_judge(trace), model_path=weights, judge="step-by-step", min_saving=1.0
    )
    assert "whole_log" not in result.details


# --- pluggable judges ------------------------------------------------------------------


def unique_trace(n: int, gold: int) -> Trace:
    """Every step's text is unique and long, so a leak of a full step is visible."""
    steps = [
        Step(index=i, agent=f"A{i % 2}", content=f"FULLTEXT-{i}-" + f"{i}abc " * 60)
        for i in range(n)
    ]
    return Trace(
        id="u", task="Do it.", steps=steps, label=GoldLabel(agent=f"A{gold % 2}", step=gold)
    )


def full_texts_outside(trace: Trace, candidates: list[int]) -> list[str]:
    return [s.content for s in trace.steps if s.index not in candidates]


def test_view_abbreviates_exactly_like_the_log_and_leaks_no_full_step(weights: str) -> None:
    trace = unique_trace(6, 1)
    trace.steps[4].tool_calls = [ToolCall(name="search", arguments="SECRET-ARGS")]
    trace.steps[4].input_messages = [{"role": "user", "content": trace.steps[5].content}]
    trace.steps[1].input_messages = [{"role": "user", "content": trace.steps[3].content}]
    view = compressed_view(trace, {0, 1}, 80)
    assert [(s.index, s.speaker) for s in view.steps] == [(s.index, s.speaker) for s in trace.steps]
    dumped = view.model_dump_json()
    for text in full_texts_outside(trace, [0, 1]):
        assert text not in dumped
    assert "SECRET-ARGS" not in dumped
    assert view.steps[0].content == trace.steps[0].content
    options = RenderOptions()
    log = compressed_log(trace, {0, 1}, options, 80)
    for step in view.steps[2:]:
        assert f"Step {step.index} - {step.speaker}: {step.content}" in log
        assert step.content == abbreviated(trace.steps[step.index], 80)
        assert "[abbreviated: " in step.content


def test_step_by_step_judge_asks_only_about_candidates_in_its_own_format(weights: str) -> None:
    trace = unique_trace(6, 1)
    backend = perfect_judge(trace)
    result = run(trace, backend, model_path=weights, top_k=3, judge="step-by-step")
    assert (result.status, result.agent, result.step) == ("ok", "A1", 1)
    oracle = backend.fn
    assert [q.step for q in oracle.questions] == [0, 1]  # in order, stops at the first Yes
    assert all(q.kind == "step" for q in oracle.questions)
    for request in backend.requests:
        text = str(request.messages)
        assert "whether the most recent agent's action contains an error" in text
        for full in full_texts_outside(trace, [0, 1, 2]):
            assert full not in text
    judged = result.details["judge_result"]
    assert judged["usage"]["calls"] == 2 and result.details["judge_scope"] == "candidates"
    assert judged["prompt_version"] == create_method("step-by-step").config.prompt_version()
    assert result.prompt_version == (f"compose-v1/view/step-by-step={judged['prompt_version']}")
    assert result.confidence is not None
    # Gold outside the shortlist: step-by-step says No to every candidate.
    missed = run(
        unique_trace(6, 4),
        perfect_judge(unique_trace(6, 4)),
        model_path=weights,
        judge="step-by-step",
    )
    assert missed.status == "no-error-found" and missed.step is None


def test_step_by_step_judge_plans_k_within_the_case_budget(weights: str) -> None:
    trace = unique_trace(6, 5)  # gold never asked: every candidate is judged
    free = run(trace, perfect_judge(trace), model_path=weights, top_k=4, judge="step-by-step")
    need = free.details["judge_worst_case_tokens"]
    assert free.usage.total_tokens <= need and free.details["judge_result"]["usage"]["calls"] == 4
    tight = run(
        trace,
        perfect_judge(trace),
        model_path=weights,
        top_k=4,
        judge="step-by-step",
        budget_tokens=need - 1,
    )
    assert len(tight.details["candidates"]) < 4 and tight.usage.total_tokens <= need - 1


def echo_answer(agent: str, step: int):  # type: ignore[no-untyped-def]
    """An ECHO analyst that always names ``agent`` at ``step``; records what it was shown."""
    seen: list[str] = []

    def reply(request: ChatRequest) -> str:
        seen.append(str(request.messages))
        body = {
            "analysis_summary": "s",
            "agent_evaluations": [
                {
                    "agent_name": agent,
                    "step_index": step,
                    "error_likelihood": 0.9,
                    "reasoning": "r",
                    "evidence": "e",
                }
            ],
            "primary_conclusion": {
                "type": "single_agent",
                "attribution": [agent],
                "mistake_step": step,
                "confidence": 0.9,
                "reasoning": "r",
            },
            "alternative_hypotheses": [],
        }
        return json.dumps(body)

    return reply, seen


def test_echo_judge_reads_the_view_and_counts_only_candidates(weights: str) -> None:
    trace = unique_trace(6, 1)
    reply, seen = echo_answer("A1", 1)
    result = run(trace, FunctionBackend(reply), model_path=weights, judge="echo")
    assert (result.status, result.agent, result.step) == ("ok", "A1", 1)
    assert result.details["judge"] == "echo" and result.details["judge_scope"] == "view"
    assert result.details["judge_result"]["usage"]["calls"] == len(seen) > 0
    assert result.prompt_version.startswith("compose-v1/view/echo=echo-")
    for text in seen:
        for full in full_texts_outside(trace, [0, 1, 2]):
            assert full not in text
    # A judge naming a step outside the shortlist: agent kept, step unparsed.
    reply, _ = echo_answer("A1", 5)
    outside = run(trace, FunctionBackend(reply), model_path=weights, judge="echo")
    assert outside.status == "unparsed" and outside.step is None and outside.agent == "A1"
    assert outside.details["rejected_step"] == 5


def test_default_judge_is_unchanged_and_compose_cannot_judge_itself(weights: str) -> None:
    trace = trace_of(6, 1)
    backend = perfect_judge(trace)
    result = run(trace, backend, model_path=weights)
    config = ComposeConfig(model_path=weights)
    assert backend.requests[0].messages[-1]["content"] == judge_prompt(trace, {0, 1, 2}, config)
    assert result.prompt_version == "compose-v2/" + ww.WhoWhenConfig().prompt_version()
    with pytest.raises(ConfigError):
        create_method("compose", judge="compose:k1")
    with pytest.raises(ConfigError):
        create_method("compose", judge="step-by-step", judge_options={"no_such_option": 1})
