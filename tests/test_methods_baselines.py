"""The Who&When baselines (all-at-once, step-by-step, binary-search, hybrid), scripted."""

from __future__ import annotations

import asyncio
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.judging.method import Attribution, run_method
from faultfinder.llm import LLM, ChatRequest, FunctionBackend, ScriptedBackend
from faultfinder.methods.whowhen import common as ww
from faultfinder.registry import create_method
from faultfinder.traces.loader import load_trace
from faultfinder.traces.schema import Trace

FIXTURES = Path(__file__).parent / "fixtures" / "baselines"
FIVE = FIXTURES / "five_steps.json"
EIGHT = FIXTURES / "eight_steps.json"
BASELINES = ["all-at-once", "step-by-step", "binary-search", "hybrid"]


def five() -> Trace:
    return load_trace(FIVE)


def eight() -> Trace:
    return load_trace(EIGHT)


def run(spec: str, trace: Trace, backend: Any, **cfg: Any) -> Attribution:
    return asyncio.run(run_method(create_method(spec, **cfg), trace, LLM(backend)))


def prompts(backend: ScriptedBackend | FunctionBackend) -> list[str]:
    return [str(r.messages[-1]["content"]) for r in backend.requests]


AAO_WEBSEARCHER = "Agent Name: Searcher\nStep Number: 1\nReason for Mistake: 200 F is wrong."
WELL_FORMED = {
    "all-at-once": [AAO_WEBSEARCHER],
    "step-by-step": ["1. No. 2. ok", "1. Yes. 2. 200 F is wrong"],
    "binary-search": ["upper half", "upper half", "lower half"],
    "hybrid": [AAO_WEBSEARCHER, "1. Yes. 2. 200 F is wrong"],
}


def scripted(spec: str) -> ScriptedBackend:
    """Well-formed replies that lead each baseline to step 1 (Searcher)."""
    return ScriptedBackend(WELL_FORMED[spec])


# --- prompts ------------------------------------------------------------------------


@pytest.mark.parametrize("spec", BASELINES)
def test_default_prompt_has_step_indices_and_reminder_but_no_ground_truth(spec: str) -> None:
    backend = scripted(spec)
    run(spec, five(), backend)
    first = prompts(backend)[0]
    assert five().task in first
    assert "Step 0 - Planner: Plan:" in first
    assert ww.GUIDANCE_REMINDER in first
    assert "The Answer for the problem is" not in first
    # Default observability is the paper's 'outputs': no roster, no system prompts.
    assert "SYSTEM-PROMPT" not in first


@pytest.mark.parametrize("spec", BASELINES)
def test_paper_preset_has_neither_refinement(spec: str) -> None:
    backend = scripted(spec)
    result = run(f"{spec}:paper", five(), backend)
    first = prompts(backend)[0]
    assert "Step 0 -" not in first and "Step 1 -" not in first
    assert "\nPlanner: Plan:" in first
    assert any("\nSearcher: The boiling point" in p for p in prompts(backend))
    assert "Reminder of the annotation guidance" not in first
    assert result.prompt_version == "whowhen-v1"


@pytest.mark.parametrize("spec", BASELINES)
def test_ground_truth_only_when_asked(spec: str) -> None:
    backend = scripted(spec)
    result = run(spec, five(), backend, with_ground_truth=True)
    assert all("The Answer for the problem is: 100." in p for p in prompts(backend))
    assert result.with_ground_truth


@pytest.mark.parametrize(
    ("settings", "version"),
    [
        ({}, "whowhen-v1+dover"),
        ({"guidance_reminder": False}, "whowhen-v1+idx"),
        ({"step_indices": False}, "whowhen-v1+guide"),
        ({"step_indices": False, "guidance_reminder": False}, "whowhen-v1"),
    ],
)
def test_prompt_version_follows_the_refinements(settings: dict[str, bool], version: str) -> None:
    result = run("all-at-once", five(), ScriptedBackend([AAO_WEBSEARCHER]), **settings)
    assert result.prompt_version == version
    assert result.config["step_indices"] == settings.get("step_indices", True)


def test_paper_wording_of_the_all_at_once_prompt() -> None:
    backend = ScriptedBackend([AAO_WEBSEARCHER])
    run("all-at-once:paper", five(), backend, with_ground_truth=True)
    prompt = prompts(backend)[0]
    assert prompt.startswith(
        "You are an AI assistant tasked with analyzing a multi-agent conversation history "
        "when solving a real world problem.\nThe problem is: What is the boiling point"
    )
    assert "\nThe Answer for the problem is: 100.\nIdentify which agent made an error" in prompt
    assert "If the mistake is in agent c's speech, the step number is 2." in prompt
    assert prompt.endswith(
        "Agent Name: (Your prediction)\nStep Number: (Your prediction)\n"
        "Reason for Mistake: (Your reason)"
    )


def test_full_observability_adds_the_system_prompts() -> None:
    backend = ScriptedBackend([AAO_WEBSEARCHER])
    run("all-at-once", five(), backend, observability="full")
    assert "SEARCHER-SYSTEM-PROMPT" in prompts(backend)[0]


def test_context_budget_truncates_long_steps_visibly() -> None:
    trace = five()
    trace.steps[2].content = "long computation " * 2000
    backend = ScriptedBackend([AAO_WEBSEARCHER])
    result = run("all-at-once", trace, backend, context_budget=1500)
    prompt = prompts(backend)[0]
    assert "truncated by faultfinder" in prompt
    assert result.details["truncated"] is True
    assert len(prompt) // 4 <= 1500
    assert result.step == 1


def test_missing_ground_truth_runs_without_it_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    trace = five()
    trace.ground_truth = None
    backend = ScriptedBackend([AAO_WEBSEARCHER])
    with caplog.at_level("WARNING", logger="faultfinder"):
        result = run("all-at-once", trace, backend, with_ground_truth=True)
    assert result.status == "ok" and result.ground_truth == "unavailable"
    assert result.with_ground_truth is True
    assert "The Answer for the problem is" not in prompts(backend)[0]
    assert "no reference answer" in caplog.text and trace.id in caplog.text
    shown = run("all-at-once", five(), ScriptedBackend([AAO_WEBSEARCHER]), with_ground_truth=True)
    assert shown.ground_truth == "shown"
    assert run("all-at-once", five(), ScriptedBackend([AAO_WEBSEARCHER])).ground_truth == "off"


# --- all-at-once -------------------------------------------------------------------


def test_all_at_once_reads_agent_step_reason_and_constrains_the_answer() -> None:
    backend = ScriptedBackend(["Agent Name: searcher\nStep Number: Step 1\nReason for Mistake: x"])
    result = run("all-at-once", five(), backend)
    assert (result.status, result.agent, result.step, result.reason) == ("ok", "Searcher", 1, "x")
    grammar = backend.requests[0].constraint
    assert grammar is not None and grammar.gbnf is not None
    assert '"Searcher"' in grammar.gbnf and '"4"' in grammar.gbnf and '"5"' not in grammar.gbnf


def test_unparseable_answer_is_unparsed_with_raw_replies_kept() -> None:
    junk = ["I cannot tell.", "Maybe the planner?", "Agent Name: Nobody\nStep Number: 2"]
    result = run("all-at-once", five(), ScriptedBackend(junk))
    assert result.status == "unparsed"
    assert result.agent is None and result.step is None
    assert [c.reply for c in result.calls] == junk
    assert not any(c.parsed for c in result.calls)


def test_out_of_range_step_is_not_accepted_but_the_agent_is_kept() -> None:
    replies = ["Agent Name: Coder\nStep Number: 9\nReason for Mistake: r"] * 3
    result = run("all-at-once", five(), ScriptedBackend(replies))
    assert result.status == "unparsed" and result.step is None
    assert result.agent == "Coder" and result.details["out_of_range_step"] == 9
    assert result.details["step_unparsed"] == "step 9 is outside the trace (0..4)"
    hybrid = run("hybrid", five(), ScriptedBackend([replies[0], "1. No. 2. ok", "1. Yes. 2. r"]))
    assert (hybrid.agent, hybrid.step, hybrid.status) == ("Coder", 4, "ok")
    assert hybrid.details["all_at_once"]["step_unparsed"] == "step 9 is outside the trace (0..4)"


# --- step-by-step ------------------------------------------------------------------


def test_step_by_step_stops_at_the_first_yes() -> None:
    backend = ScriptedBackend(["1. No. 2. fine", "1. No. 2. fine", "1. Yes. 2. bad sum", "1. No"])
    result = run("step-by-step", five(), backend)
    assert (result.agent, result.step, result.reason) == ("Coder", 2, "bad sum")
    assert len(backend.requests) == 3
    for i, prompt in enumerate(prompts(backend)):
        assert f"Step {i} - " in prompt
        assert f"Step {i + 1} - " not in prompt
    judged = result.details["judged"]
    assert [(j["step"], j["answer"]) for j in judged] == [(0, "no"), (1, "no"), (2, "yes")]


def test_step_by_step_without_a_yes_finds_no_error_unless_falling_back() -> None:
    result = run("step-by-step", five(), ScriptedBackend(["1. No. 2. ok"], repeat_last=True))
    assert (result.status, result.agent, result.step) == ("no-error-found", None, None)
    assert len(result.details["judged"]) == 5
    fallback = run(
        "step-by-step",
        five(),
        ScriptedBackend(["1. No. 2. ok"], repeat_last=True),
        fallback_last_step=True,
    )
    assert (fallback.status, fallback.agent, fallback.step) == ("ok", "Coder", 4)
    assert fallback.details["fallback"] == "last-step"


def test_step_by_step_unparsed_stops_or_skips() -> None:
    replies = ["1. No. 2. ok", "???", "???", "???", "1. Yes. 2. bad"]
    stopped = run("step-by-step", five(), ScriptedBackend(replies))
    assert stopped.status == "unparsed" and stopped.step is None
    assert [c.reply for c in stopped.calls][-3:] == ["???"] * 3
    skipped = run("step-by-step", five(), ScriptedBackend(replies), on_unparsed="skip")
    assert (skipped.status, skipped.step) == ("ok", 2)
    assert skipped.details["judged"][1] == {"step": 1, "agent": "Searcher", "answer": "unparsed"}


def test_step_by_step_sends_the_yes_no_grammar() -> None:
    backend = ScriptedBackend(["1. Yes. 2. r"])
    run("step-by-step", five(), backend)
    constraint = backend.requests[0].constraint
    assert constraint is not None and constraint.gbnf is not None
    assert '"Yes"' in constraint.gbnf and '"No"' in constraint.gbnf


# --- binary search -----------------------------------------------------------------


def test_binary_search_walks_scripted_answers_to_the_right_step() -> None:
    # [0,7] mid 3: lower -> [4,7]; mid 5: upper -> [4,5]; mid 4: lower -> [5,5].
    backend = ScriptedBackend(["lower half", "Upper half.", "'lower half'"])
    result = run("binary-search", eight(), backend)
    assert (result.status, result.step, result.agent) == ("ok", 5, "Beta")
    path = result.details["path"]
    assert [p["range"] for p in path] == [[0, 7], [4, 7], [4, 5]]
    assert [p["upper"] for p in path] == [[0, 3], [4, 5], [4, 4]]
    assert [p["lower"] for p in path] == [[4, 7], [6, 7], [5, 5]]
    assert [p["answer"] for p in path] == ["lower half", "upper half", "lower half"]
    second = prompts(backend)[1]
    assert "Review the following conversation range from step 4 to step 7:" in second
    assert (
        "lower half is defined as the range from step 6 to step 7 and upper half is defined "
        "as the range from step 4 to step 5." in second
    )
    assert "Step 4 - Alpha: message number 4" in second
    assert "message number 3" not in second and "message number 0" not in second


def _oracle(target: int):  # type: ignore[no-untyped-def]
    def answer(request: ChatRequest) -> str:
        prompt = str(request.messages[-1]["content"])
        m = re.search(r"upper half is defined as the range from step (\d+) to step (\d+)", prompt)
        assert m is not None
        return "upper half" if int(m.group(1)) <= target <= int(m.group(2)) else "lower half"

    return answer


@pytest.mark.parametrize("n_steps", [2, 3, 5, 8])
def test_binary_search_finds_every_step_a_consistent_judge_points_to(n_steps: int) -> None:
    base = eight()
    trace = base.model_copy(update={"steps": base.steps[:n_steps]})
    for target in range(n_steps):
        backend = FunctionBackend(_oracle(target))
        result = run("binary-search", trace, backend)
        assert result.step == target
        assert len(backend.requests) <= math.ceil(math.log2(n_steps))


def test_binary_search_on_one_step_asks_nothing() -> None:
    base = eight()
    trace = base.model_copy(update={"steps": base.steps[:1]})
    result = run("binary-search", trace, ScriptedBackend([]))
    assert (result.status, result.step, result.agent, result.usage.calls) == ("ok", 0, "Alpha", 0)


def test_binary_search_unparsed_keeps_the_path() -> None:
    result = run("binary-search", eight(), ScriptedBackend(["upper half", "both?", "hmm", "?"]))
    assert result.status == "unparsed" and result.step is None and result.agent is None
    assert [p["answer"] for p in result.details["path"]] == ["upper half", "unparsed"]


def test_binary_search_reply_naming_both_halves_is_not_guessed() -> None:
    replies = ["It is not the upper half but the lower half."] * 3
    result = run("binary-search", eight(), ScriptedBackend(replies))
    assert result.status == "unparsed"


def test_binary_search_explain_asks_for_a_reason_once() -> None:
    backend = ScriptedBackend(["upper half"] * 3 + ["Reason for Mistake: started wrong"])
    result = run("binary-search", eight(), backend, explain=True)
    assert (result.step, result.reason) == (0, "started wrong")
    assert "located at step 0, taken by Alpha" in prompts(backend)[-1]


# --- hybrid ------------------------------------------------------------------------


def test_hybrid_judges_only_the_chosen_agents_steps() -> None:
    backend = ScriptedBackend(
        [
            "Agent Name: Coder\nStep Number: 2\nReason for Mistake: x",
            "1. No. 2. the formula is right",
            "1. Yes. 2. the check repeats the wrong value",
        ]
    )
    result = run("hybrid", five(), backend)
    assert (result.status, result.agent, result.step) == ("ok", "Coder", 4)
    sbs = result.details["step_by_step"]
    assert sbs["candidates"] == [2, 4]
    assert [j["step"] for j in sbs["judged"]] == [2, 4]
    assert result.details["all_at_once"]["agent"] == "Coder"
    judged_prompts = prompts(backend)[1:]
    # Each judgement shows the whole log up to the judged step, other agents included.
    assert "Step 1 - Searcher" in judged_prompts[0] and "Step 3 - " not in judged_prompts[0]
    assert "Step 3 - Planner" in judged_prompts[1] and "Step 4 - Coder" in judged_prompts[1]


def test_hybrid_keeps_the_agent_when_no_step_is_flagged() -> None:
    backend = ScriptedBackend([AAO_WEBSEARCHER, "1. No. 2. fine"])
    result = run("hybrid", five(), backend)
    assert (result.status, result.agent, result.step) == ("no-error-found", "Searcher", None)


def test_hybrid_stops_when_the_agent_answer_is_unreadable() -> None:
    backend = ScriptedBackend(["no idea"] * 3)
    result = run("hybrid", five(), backend)
    assert (result.status, result.agent, result.step) == ("unparsed", None, None)
    assert len(backend.requests) == 3


# --- registry and CLI --------------------------------------------------------------


@pytest.mark.parametrize("spec", BASELINES)
def test_presets_and_options(spec: str) -> None:
    method = create_method(f"{spec}:step-index")
    assert method.config.model_dump()["guidance_reminder"] is False
    assert method.config.observability == "outputs"
    assert method.config.prompt_version() == "whowhen-v1+idx"


@pytest.mark.parametrize("spec", BASELINES)
def test_attribute_command_with_scripted_model(tmp_path: Path, spec: str) -> None:
    replies_file = tmp_path / "replies.json"
    replies_file.write_text(json.dumps(WELL_FORMED[spec]), encoding="utf-8")
    args = ["attribute", str(FIVE), "--method", spec, "--model", f"scripted:{replies_file}"]
    result = CliRunner().invoke(main, [*args, "--cache", "none", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert (data["status"], data["agent"], data["step"]) == ("ok", "Searcher", 1)
    assert data["method"] == spec and data["prompt_version"] == "whowhen-v1+dover"
