"""ECHO's hierarchical context: extraction patterns per level and context type, their
fallbacks (including empty content), distance levels, and rendering."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from faultfinder.judging.fitting import fit_pieces
from faultfinder.judging.render import RenderOptions
from faultfinder.llm import LLM, ChatRequest, FunctionBackend, ScriptedBackend
from faultfinder.llm.base import approx_token_count
from faultfinder.methods.echo.context import (
    NO_CONTENT,
    NO_MILESTONES,
    Compressed,
    LLMExtractor,
    PatternExtractor,
    classify,
    clip_words,
    compress,
    compress_with_patterns,
    focused_pieces,
    level_for_distance,
    plan_context,
    render_step_context,
)
from faultfinder.traces.loader import load_trace
from faultfinder.traces.schema import Step, Trace

FIXTURES = Path(__file__).parent / "fixtures" / "echo"


def test_key_decision_prefers_conclusions_for_decision_quality() -> None:
    text = (
        "Let me look at the numbers. The table has 40 rows. "
        "Therefore, we should use the median price. Some trailing remark."
    )
    assert compress(text, "key_decision") == "Therefore, we should use the median price."
    # The first pattern that matches anywhere wins, not the first sentence.
    text = "So far so good. I conclude the optimal parameters are x=0.5, y=1.0."
    assert compress(text, "key_decision") == "I conclude the optimal parameters are x=0.5, y=1.0."


def test_each_context_type_has_its_own_patterns() -> None:
    text = (
        "Received the dataset with normalized features from the loader. "
        "However, the model training failed: insufficient data. "
        "I decided to switch to regression."
    )
    assert compress(text, "key_decision", "handoff").startswith("Received the dataset")
    assert compress(text, "key_decision", "error_propagation") == (
        "However, the model training failed: insufficient data."
    )
    assert compress(text, "key_decision", "decision_quality") == (
        "I decided to switch to regression."
    )
    assert compress(text, "summary", "error_propagation") == (
        "However, the model training failed: insufficient data."
    )
    assert compress("Step 3: data cleaned and saved.", "milestone", "general") == (
        "Step 3: data cleaned and saved."
    )
    issue = "We found an issue in the join keys. Moving on."
    assert compress(issue, "milestone", "error_propagation").startswith("We found an issue")


def test_word_limits_per_level() -> None:
    long_sentence = "Therefore " + " ".join(f"w{i}" for i in range(80)) + "."
    assert len(compress(long_sentence, "key_decision").split()) == 50
    assert compress(long_sentence, "key_decision").endswith("...")
    assert len(compress(long_sentence, "summary").split()) == 20
    assert len(compress(long_sentence, "milestone").split()) == 15
    assert clip_words("a b c", 5) == "a b c"


def test_fallbacks_first_substantive_sentence_then_words() -> None:
    # No pattern of any type matches: the first sentence with three words or more that is
    # not a heading is kept.
    text = 'Updated Ledger:\n{\n  "reason": "The album title is not yet confirmed here"\n}'
    assert compress(text, "summary") == '"reason": "The album title is not yet confirmed here"'
    # Only a heading: it is still shown rather than nothing.
    assert compress("Plan:", "summary") == "Plan:"
    assert compress("TERMINATE", "key_decision") == "TERMINATE"


@pytest.mark.parametrize("empty", ["", "   ", "\n\n"])
def test_empty_content_says_so(empty: str) -> None:
    assert compress(empty, "key_decision") == NO_CONTENT
    assert compress(empty, "summary") == NO_CONTENT
    assert compress(empty, "milestone") == NO_MILESTONES


def test_classify_picks_the_context_type_from_content() -> None:
    assert classify("Traceback: KeyError 'capacity'") == "error_propagation"
    assert classify("exitcode: 1 (execution failed)", "tool") == "error_propagation"
    assert classify("exitcode: 0 (execution succeeded)", "tool") == "handoff"
    assert classify("Passing the table to the Verifier.") == "handoff"
    assert classify("Thus the answer is 4.") == "decision_quality"
    assert classify("Hello there.") == "general"


def test_auto_mode_uses_the_classified_type() -> None:
    step = Step(
        index=0,
        agent="Coder",
        content="I wrote the loader. The join failed because the key column is missing.",
    )
    paper = compress_with_patterns(step, "paper")
    auto = compress_with_patterns(step, "auto")
    assert paper.key_decision == "I wrote the loader."  # no decision pattern: first sentence
    assert auto.key_decision.startswith("The join failed")


def test_tool_calls_and_results_count_as_output() -> None:
    step = Step(
        index=0,
        agent="Researcher",
        content="",
        tool_calls=[{"name": "search", "arguments": "{}"}],  # type: ignore[list-item]
    )
    assert "search" in compress_with_patterns(step).key_decision


@pytest.mark.parametrize(
    ("distance", "level"),
    [
        (0, "full"),
        (1, "full"),
        (2, "key_decision"),
        (3, "key_decision"),
        (4, "summary"),
        (6, "summary"),
        (7, "milestone"),
        (40, "milestone"),
    ],
)
def test_levels_by_distance(distance: int, level: str) -> None:
    assert level_for_distance(distance) == level


def test_window_keeps_only_distance_one() -> None:
    assert level_for_distance(2, "window") is None
    entries = plan_context(10, [5], "window")
    assert [e.index for e in entries] == [4, 5, 6]


def test_focus_set_uses_the_nearest_focus_step() -> None:
    entries = {e.index: e for e in plan_context(12, [1, 9], "hierarchical")}
    assert entries[5].distance == 4 and entries[5].level == "summary"
    assert entries[8].level == "full" and entries[11].level == "key_decision"


def test_step_context_is_grouped_by_level_in_trace_order() -> None:
    trace = load_trace(FIXTURES / "rooms_outputs_only.json")
    compressed = asyncio.run(PatternExtractor().compress_trace(trace, LLM(ScriptedBackend([]))))
    text = render_step_context(trace, 0, compressed, "hierarchical", RenderOptions())
    titles = [
        "CURRENT STEP",
        "IMMEDIATE CONTEXT",
        "NEARBY CONTEXT",
        "DISTANT CONTEXT",
        "MILESTONES",
    ]
    positions = [text.index(t) for t in titles]
    assert positions == sorted(positions)
    nearby = text[text.index("NEARBY CONTEXT") : text.index("DISTANT CONTEXT")]
    assert "Step 2 - Computer_terminal" in nearby and "Step 3 - Coder" in nearby
    # L2 shows the key decision only, not the code below it.
    assert "I decided to keep rooms with capacity > 12." in nearby
    assert "print(len(" not in nearby
    milestones = text[text.index("MILESTONES") :]
    assert "Step 7" in milestones and "Step 9" in milestones and "Step 6" not in milestones


def focused_view(trace: Trace, focus: list[int], compressed: dict[int, Compressed]) -> str:
    """The focused view as the step-level pass sends it when nothing needs cutting."""
    pieces = focused_pieces(trace, focus, compressed, "hierarchical", RenderOptions())
    return fit_pieces(pieces, None, approx_token_count, what="")[0]


def test_focused_view_tags_every_step_and_shows_focus_in_full() -> None:
    trace = load_trace(FIXTURES / "rooms_outputs_only.json")
    compressed = asyncio.run(PatternExtractor().compress_trace(trace, LLM(ScriptedBackend([]))))
    view = focused_view(trace, [3], compressed)
    lines = [ln for ln in view.splitlines() if ln.startswith("[")]
    assert len(lines) == len(trace.steps)
    assert lines[3].startswith("[full] Step 3 - Coder")
    assert "print(len(df[df.capacity > 12]))" in view
    assert lines[0].startswith("[key decision] Step 0")  # distance 3
    assert lines[7].startswith("[summary] Step 7") and lines[9].startswith("[summary] Step 9")
    far = focused_view(trace, [0], compressed)
    assert far.splitlines()[-1].startswith("[milestone] Step 9 - Planner: TERMINATE")


def test_llm_extractor_uses_the_model_and_falls_back_per_step() -> None:
    trace = load_trace(FIXTURES / "rooms_outputs_only.json")

    def model(request: ChatRequest) -> str:
        user = request.messages[-1]["content"]
        assert request.constraint is not None and request.constraint.json_schema
        if user.startswith("Step 4 "):
            return "no json here"
        return '{"key_decision": "KD", "summary": "SUM", "milestone": "MS"}'

    backend = FunctionBackend(model)
    compressed = asyncio.run(LLMExtractor().compress_trace(trace, LLM(backend)))
    assert compressed[3].key_decision == "KD" and compressed[3].source == "llm"
    assert compressed[4].source == "patterns-fallback"
    assert compressed[4].key_decision == "exitcode: 0 (execution succeeded)"
    # 10 steps, step 4 asked three times (two parse retries).
    assert len(backend.requests) == 12


def test_llm_extractor_skips_empty_steps() -> None:
    step = Step(index=0, agent="A", content="")
    trace_dict = {"id": "e", "task": "t", "steps": [step.model_dump()]}
    from faultfinder.traces.schema import Trace

    backend = FunctionBackend(lambda r: "unused")
    compressed = asyncio.run(
        LLMExtractor().compress_trace(Trace.model_validate(trace_dict), LLM(backend))
    )
    assert compressed[0].key_decision == NO_CONTENT and backend.requests == []
    assert compress("", "milestone") == NO_MILESTONES
