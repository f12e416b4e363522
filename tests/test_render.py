"""Rendering: observability, compact inputs, context budgets and per-step truncation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from faultfinder.judging.fitting import fit_steps
from faultfinder.judging.method import MethodConfig
from faultfinder.judging.reference import reference_answer
from faultfinder.judging.render import (
    ContextBudgetError,
    RenderOptions,
    backend_context_window,
    compact_input,
    context_budget,
    new_input_messages,
    render_metadata,
    render_step,
    render_steps,
    visible_agents,
)
from faultfinder.llm.base import approx_token_count
from faultfinder.llm.client import LLM
from faultfinder.llm.doubles import ScriptedBackend
from faultfinder.traces.io import read_json, trace_from_dict
from faultfinder.traces.schema import Agent, Step, Trace

FIXTURE = Path(__file__).parent / "fixtures" / "agentic" / "zentar_trace.json"
HEADER = re.compile(r"^Step (\d+) - ", flags=re.MULTILINE)
MARKER = re.compile(r"\[\.\.\. (\d+) characters truncated by faultfinder \.\.\.\]")


def zentar() -> Trace:
    return trace_from_dict(read_json(FIXTURE), FIXTURE)


def long_trace(n: int = 12) -> Trace:
    """Steps of very different lengths; step 5 is huge."""
    steps = []
    for i in range(n):
        size = 4000 if i == 5 else (30 if i % 2 else 600)
        body = f"<s{i}>" + ("abcdefghij" * (size // 10)) + f"</s{i}>"
        steps.append(Step(index=i, agent=f"A{i % 3}", content=body))
    return Trace(id="long", task="t", steps=steps)


# --- observability ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("observability", "inputs", "metadata"),
    [
        ("full", True, True),
        ("no-metadata", True, False),
        ("no-inputs", False, True),
        ("outputs", False, False),
    ],
)
def test_observability_decides_inputs_and_metadata(
    observability: str, inputs: bool, metadata: bool
) -> None:
    trace = zentar()
    text = render_steps(trace, trace.steps, RenderOptions(observability=observability))
    meta = render_metadata(trace, observability)  # type: ignore[arg-type]
    assert ("You are WebSurfer" in text) is inputs
    assert ("[input]" in text) is inputs
    assert ("You are WebSurfer" in meta) is metadata
    assert ("Browses the web" in meta) is metadata
    # Outputs are always there.
    assert "FINAL ANSWER: 12" in text
    assert "web_search" in text


def test_metadata_shows_agent_config_and_caps_long_fields() -> None:
    trace = zentar()
    meta = render_metadata(trace, "full")
    assert "configuration:" in meta and "web_search" in meta
    capped = render_metadata(trace, "full", max_chars=70)
    assert "characters truncated by faultfinder" in capped


def test_visible_agents_adds_roster_only_with_metadata() -> None:
    trace = zentar().model_copy(update={"agents": [*zentar().agents, Agent(name="Silent")]})
    assert "Silent" in visible_agents(trace, "full")
    assert "Silent" not in visible_agents(trace, "outputs")
    assert visible_agents(trace, "outputs") == ["Orchestrator", "WebSurfer", "Assistant"]


def test_reference_answer_falls_back_to_test_status() -> None:
    trace = zentar()
    assert reference_answer(trace) == "14"
    swe = trace.model_copy(
        update={"ground_truth": None, "metadata": {"tests_status": {"FAIL_TO_PASS": "failed"}}}
    )
    assert reference_answer(swe) == 'test results: {"FAIL_TO_PASS": "failed"}'
    assert reference_answer(swe.model_copy(update={"metadata": {}})) is None


# --- compact inputs --------------------------------------------------------------


def test_new_input_messages_drops_the_agents_previous_prefix() -> None:
    trace = zentar()
    new, omitted = new_input_messages(trace, trace.steps[3])
    assert omitted == 4  # system, task, plan, ledger question: as at Step 1
    assert [m["role"] for m in new] == ["assistant", "user", "user"]
    first, none = new_input_messages(trace, trace.steps[0])
    assert none == 0 and len(first) == 2


def test_compact_input_points_to_repeated_outputs_and_inputs() -> None:
    trace = zentar()
    step3 = compact_input(trace, trace.steps[3])
    assert step3 is not None and step3.omitted == 4 and step3.omitted_from == 1
    text = step3.render()
    # 'WebSurfer: <output of Step 2>' in the history is a pointer, not a copy.
    assert "[the output of Step 2]" in text
    assert "2019 Zentar Moon Survey" not in text
    # A pointer to a step that is not shown alongside is expanded back.
    assert "2019 Zentar Moon Survey" in step3.render(visible={3})
    assert "not shown here" in step3.render(visible={3})
    step0 = compact_input(trace, trace.steps[0])
    assert step0 is not None and step0.omitted == 0 and len(step0.messages) == 2
    no_input = trace.steps[0].model_copy(update={"input_messages": None})
    assert compact_input(trace, no_input) is None


def test_render_step_alone_is_self_contained() -> None:
    trace = zentar()
    alone = render_step(trace, trace.steps[4], RenderOptions(observability="full"))
    assert "2019 Zentar Moon Survey" in alone  # the history message is expanded
    together = render_steps(trace, trace.steps, RenderOptions(observability="full"))
    step4 = together.split("Step 4 - Assistant:")[1].split("Step 5 -")[0]
    assert "[the output of Step 2]" in step4


def test_full_inputs_option_shows_every_message() -> None:
    trace = zentar()
    options = RenderOptions(observability="full", compact_inputs=False)
    text = render_step(trace, trace.steps[5], options)
    assert "omitted" not in text
    assert text.count("You are the Orchestrator") == 1
    assert "[request parameters]" in text


# --- context budget --------------------------------------------------------------


def test_context_budget_prefers_config_then_backend_window() -> None:
    backend = ScriptedBackend(["x"])
    llm = LLM(backend)
    assert backend_context_window(llm) is None
    assert context_budget(MethodConfig(), llm) is None
    backend.n_ctx = 8192  # type: ignore[attr-defined]
    assert backend_context_window(llm) == 8192
    assert context_budget(MethodConfig(), llm) == 8192 - 1024
    assert context_budget(MethodConfig(), llm, reply_tokens=512) == 8192 - 512
    assert context_budget(MethodConfig(context_budget=3000), llm) == 3000


def test_fit_steps_untouched_when_it_fits() -> None:
    trace = long_trace()
    text, cut = fit_steps(trace, trace.steps, RenderOptions(), 100_000)
    assert not cut
    assert text == render_steps(trace, trace.steps, RenderOptions())
    assert fit_steps(trace, trace.steps, RenderOptions(), None) == (text, False)


@pytest.mark.parametrize("budget", [600, 900, 1500])
def test_fit_steps_respects_budget_and_keeps_every_index(budget: int) -> None:
    trace = long_trace()
    full = render_steps(trace, trace.steps, RenderOptions())
    reserved = 100
    text, cut = fit_steps(trace, trace.steps, RenderOptions(), budget, reserved_tokens=reserved)
    assert cut
    assert len(full) // 4 > budget  # the test really needs truncation
    assert (len(text) + 3) // 4 <= budget - reserved
    assert [int(i) for i in HEADER.findall(text)] == list(range(12))
    assert MARKER.search(text)
    # Short steps are not cut; the huge one is cut hardest.
    assert "<s1>" + "abcdefghij" * 3 + "</s1>" in text
    chunks = re.split(r"^Step \d+ - ", text, flags=re.MULTILINE)[1:]
    cuts = [sum(int(n) for n in MARKER.findall(c)) for c in chunks]
    assert cuts[5] == max(cuts) and cuts[1] == 0


def test_fit_steps_keeps_indices_of_a_slice() -> None:
    trace = long_trace()
    text, _ = fit_steps(trace, trace.steps[4:9], RenderOptions(), 400)
    assert [int(i) for i in HEADER.findall(text)] == [4, 5, 6, 7, 8]


def test_fit_steps_prefers_output_over_input() -> None:
    trace = zentar()
    big_input = {"role": "user", "content": "INPUT " * 2000}
    step = trace.steps[2].model_copy(
        update={"input_messages": [big_input], "content": "OUTPUT-HEAD " + "o" * 300}
    )
    steps = [*trace.steps[:2], step, *trace.steps[3:]]
    trace = trace.model_copy(update={"steps": steps})
    text, cut = fit_steps(trace, trace.steps, RenderOptions(observability="full"), 1200)
    assert cut
    step2 = text.split("Step 2 - WebSurfer:")[1].split("Step 3 -")[0]
    assert "OUTPUT-HEAD" in step2
    assert step2.count("INPUT") < 500


def test_fit_steps_raises_when_the_judged_steps_do_not_fit() -> None:
    trace = long_trace(60)
    # Far steps may be left out, so 60 steps fit 300 tokens...
    text, cut = fit_steps(trace, trace.steps, RenderOptions(), 300)
    assert cut and "left out by faultfinder" in text and approx_token_count(text) <= 300
    # ...but a judged step is never cut: when it alone is too long, that is an error.
    with pytest.raises(ContextBudgetError, match="context_budget"):
        fit_steps(trace, trace.steps, RenderOptions(), 120, judged=[5])
    with pytest.raises(ContextBudgetError):
        fit_steps(trace, trace.steps[:2], RenderOptions(), 500, reserved_tokens=600)


def test_fit_steps_uses_the_given_token_counter() -> None:
    trace = long_trace()
    full = render_steps(trace, trace.steps, RenderOptions())
    text, cut = fit_steps(
        trace, trace.steps, RenderOptions(), 300, count_tokens=lambda t: len(t) // 10
    )
    assert len(full) // 10 > 300
    # 300 tokens at 10 characters each: far more text than the default 4-per-token counter allows.
    assert cut and 1200 < len(text) <= 3000


def test_step_indices_off_uses_agent_names() -> None:
    trace = zentar()
    text = render_steps(trace, trace.steps[:2], RenderOptions(step_indices=False))
    assert text.startswith("Orchestrator: Plan:")
    assert "Step 0" not in text
