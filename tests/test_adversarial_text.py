"""Regular expressions on untrusted text (step outputs, model replies, imported files) stay
linear: each reader gets ~200,000 characters built to make a backtracking pattern rescan
(long runs of blanks, hyphens, repeated cues without their terminator) and must still give
the right answer.

Each call runs in a worker process that must finish within a generous limit: linear code
takes well under a second here, a quadratic pattern minutes, a cubic one hours.
"""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, cast

import pytest

from faultfinder.eval.metrics import normalise_agent as metrics_agent
from faultfinder.judging.answers import (
    agents_mentioned,
    extract_json,
    field_values,
    parse_agent_step_reason,
    parse_step_number,
    parse_yes_no,
    stated_reason,
)
from faultfinder.llm.client import ParseError
from faultfinder.methods.agentic.actions import parse_action
from faultfinder.methods.chief.dataflow import extract_values, link_values
from faultfinder.methods.echo.context import compress
from faultfinder.methods.echo.schema import parse_sections
from faultfinder.methods.whowhen.common import parse_half
from faultfinder.replay.matching import Matcher, agent_from_system_prompt
from faultfinder.replay.outcome import final_answer_from_output
from faultfinder.traces.importers._semconv import build_trace
from faultfinder.traces.importers._spans import Span
from faultfinder.traces.importers.whoandwhen import normalise_agent
from faultfinder.traces.loader import load_trace
from faultfinder.traces.schema import Step, Trace

N = 200_000
"""Characters of each adversarial run."""
LIMIT = 30.0
"""Seconds a call may take before it counts as super-linear (no speed target: generous)."""
HAND_CRAFTED = Path(__file__).parent / "fixtures" / "importers" / "whoandwhen" / "Hand-Crafted"

T = TypeVar("T")
_FORK = multiprocessing.get_context("fork")


def finishes(call: Callable[[], T]) -> T:
    """``call()``'s result (or exception), computed in a forked worker process; the worker
    is killed and the test fails if it has not finished within ``LIMIT`` seconds.

    A process, not a thread: a regular expression holds the GIL for its whole match, so a
    test thread waiting on a worker thread stuck in one wakes only when the match ends
    (minutes for a quadratic pattern on these inputs, hours for a cubic one), and nothing
    can stop that thread."""
    receive, send = _FORK.Pipe(duplex=False)

    def work() -> None:
        try:
            outcome: tuple[bool, object] = (True, call())
        except BaseException as exc:  # re-raised in the test's process
            outcome = (False, exc)
        try:
            send.send(outcome)
        except Exception as exc:  # an outcome that does not pickle
            send.send((False, RuntimeError(f"the outcome could not be sent back: {exc!r}")))

    worker = _FORK.Process(target=work, name="adversarial-call", daemon=True)
    worker.start()
    send.close()
    try:
        if not receive.poll(LIMIT):
            pytest.fail(
                f"still running after {LIMIT:.0f} s on a {N:,}-character adversarial input: "
                "a regular expression backtracks super-linearly again",
                pytrace=False,
            )
        ok, value = receive.recv()
    finally:
        worker.kill()
        worker.join()
        receive.close()
    if not ok:
        assert isinstance(value, BaseException)
        raise value
    return cast(T, value)


def run_of(unit: str) -> str:
    """``unit`` repeated to ``N`` characters."""
    return (unit * (N // len(unit) + 1))[:N]


BLANKS = run_of(" ")
NEWLINES = run_of("\n")


# --- CHIEF data-flow values ---------------------------------------------------------------

RUNS = ["a-", "a.", "1-", "1.", "1,", "a/", '"', "'", "{", "[", " ", "\n", "Step 1", "a1-", "-"]


def test_a_long_hyphenated_token_holds_no_value() -> None:
    assert finishes(lambda: extract_values(run_of("a-"))) == []


@pytest.mark.parametrize("unit", RUNS)
def test_values_after_a_long_run_are_found(unit: str) -> None:
    text = run_of(unit) + " saved report.csv with 4817 rows"
    values = {(v.kind, v.text) for v in finishes(lambda: extract_values(text))}
    assert {("file", "report.csv"), ("numeric", "4817")} <= values


@pytest.mark.parametrize("unit", RUNS)
def test_steps_with_long_runs_are_linked(unit: str) -> None:
    trace = Trace(
        id="adversarial",
        task="Count the rows.",
        steps=[
            Step(index=0, agent="Reader", content=run_of(unit) + " saved report.csv: 4817 rows"),
            Step(index=1, agent="Writer", content=run_of(unit) + " so report.csv has 4817 rows"),
        ],
    )
    edges = {(e.producer, e.consumer, e.data) for e in finishes(lambda: link_values(trace))}
    assert {(0, 1, "report.csv"), (0, 1, "4817")} <= edges


# --- ECHO --------------------------------------------------------------------------------


def test_sections_after_long_blank_runs() -> None:
    text = NEWLINES + "## Errors: the agent misread step 3.\n" + BLANKS + "\n**Evidence**: 12."
    sections = finishes(lambda: parse_sections(text))
    assert sections == {"Errors": "the agent misread step 3.", "Evidence": "12."}
    with pytest.raises(ParseError):
        finishes(lambda: parse_sections(NEWLINES + BLANKS + run_of("#")))


def test_compression_of_a_long_line_repeating_a_cue() -> None:
    text = run_of("got ") + "nothing. Received the data from the API."
    assert finishes(lambda: compress(text, "milestone", "handoff")) == (
        "Received the data from the API."
    )
    text = run_of("got ") + "the results."
    assert finishes(lambda: compress(text, "milestone", "handoff")).startswith("got got got")
    text = run_of("will ") + "wait. I will continue with the next file."
    assert finishes(lambda: compress(text, "key_decision", "handoff")) == (
        "I will continue with the next file."
    )


# --- answers: fields, step numbers, yes/no, JSON, agents ---------------------------------


def test_agent_step_reason_after_long_blank_runs() -> None:
    text = (
        f"{BLANKS}\n>{BLANKS}\n- {BLANKS}\nAgent Name: WebSurfer\nStep Number:{BLANKS}3\n"
        "Reason for Mistake: it clicked the wrong link."
    )
    answer = finishes(lambda: parse_agent_step_reason(text, ["WebSurfer", "Orchestrator"]))
    assert (answer.agent, answer.step) == ("WebSurfer", 3)
    assert answer.reason == "it clicked the wrong link."


def test_a_heading_label_takes_its_next_line_unless_that_is_a_field() -> None:
    assert finishes(lambda: field_values(f"Agent Name:\n{BLANKS}WebSurfer", "Agent Name")) == [
        "WebSurfer"
    ]
    assert finishes(lambda: field_values(f"Agent Name:\n-{BLANKS}Step: 3", "Agent Name")) == []
    assert finishes(lambda: field_values(f"Agent Name:\n-{BLANKS}x", "Agent Name")) == [
        f"-{BLANKS}x"
    ]


def test_many_empty_fields_are_read_in_linear_time() -> None:
    # Each empty field split the whole rest of the reply into lines to find its next line:
    # 200,000 characters of 'Agent Name:' lines took 5 s, five times as many 2 minutes.
    text = "Agent Name:\n" * (5 * N // 12) + "Agent Name: WebSurfer"
    assert finishes(lambda: field_values(text, "Agent Name")) == ["WebSurfer"]


def test_a_value_in_many_layers_of_markup_is_cleaned_in_linear_time() -> None:
    # Each layer of '<*' ... '*>' around a value was stripped by copying what was left of
    # it: 200,000 layers took 5 s, a million 5 minutes.
    layers = "<*" * (5 * N // 2), "*>" * (5 * N // 2)
    text = f"Agent Name: {layers[0]}WebSurfer{layers[1]}\nStep Number: 3"
    answer = finishes(lambda: parse_agent_step_reason(text, ["WebSurfer", "Orchestrator"]))
    assert (answer.agent, answer.step) == ("WebSurfer", 3)


def test_step_numbers_after_long_blank_runs() -> None:
    assert finishes(lambda: parse_step_number(f"Step{BLANKS}7")) == 7
    assert finishes(lambda: parse_step_number(f"step #{BLANKS}12 (the search)")) == 12
    with pytest.raises(ParseError, match="no step number"):
        finishes(lambda: parse_step_number(f"step{BLANKS}x"))
    with pytest.raises(ParseError, match="several candidate steps"):
        finishes(lambda: parse_step_number(f"step{BLANKS}7 or 8"))


def test_yes_no_after_long_blank_runs() -> None:
    assert finishes(lambda: parse_yes_no(f"\n1.{BLANKS}Yes. 2. The sum is wrong.")) is True
    assert finishes(lambda: parse_yes_no(f"{BLANKS}\nAnswer:{BLANKS}**No**")) is False
    with pytest.raises(ParseError):
        finishes(lambda: parse_yes_no(f"{BLANKS}\n{BLANKS}"))


def test_json_after_an_unclosed_fence_and_long_blank_runs() -> None:
    with pytest.raises(ParseError):
        finishes(lambda: extract_json("```\n" + run_of("\n ")))
    assert finishes(lambda: extract_json(f'```json{BLANKS}{{"step": 3}}```')) == {"step": 3}


@pytest.mark.parametrize("unit", ["\n{'", "\n{", "\n['", "{'", "\n{'a': '"])
def test_python_literal_reading_of_many_unclosed_objects(unit: str) -> None:
    with pytest.raises(ParseError):
        finishes(lambda: extract_json(run_of(unit)))


def test_a_reason_after_many_echoed_placeholders() -> None:
    unit = "Reason: (your reason)\nAgent: x\n"
    text = unit * (N // len(unit)) + "Reason: off by one"
    assert finishes(lambda: stated_reason(text)) == "off by one"


def test_agent_names_across_long_blank_runs() -> None:
    roster = ["Data_-Analyst", "Planner"]
    assert finishes(lambda: agents_mentioned(f"Data{BLANKS}Analyst", roster)) == ["Data_-Analyst"]
    assert finishes(lambda: agents_mentioned(f"Data{BLANKS}x", roster)) == []


def test_agent_names_that_begin_with_a_separator() -> None:
    roster = ["_Agent", "-x", "Planner"]
    assert finishes(lambda: agents_mentioned(BLANKS + "y", roster)) == []
    text = f"{BLANKS}_agent then{BLANKS}-X"
    assert finishes(lambda: agents_mentioned(text, roster)) == ["_Agent", "-x"]


# --- Who&When binary search, agentic actions ---------------------------------------------


def test_a_half_named_many_times() -> None:
    # Not at the start of the reply, so every mention is checked for a negation before it.
    labels = "It is the " + run_of("upper half ")
    assert finishes(lambda: parse_half(labels)) == "upper"
    with pytest.raises(ParseError, match="negates"):
        finishes(lambda: parse_half(labels + " and not the upper half"))


def test_an_action_after_long_blank_line_runs() -> None:
    tools = ["read_step", "finish"]
    text = NEWLINES + 'ACTION: read_step {"step": 3}'
    action = finishes(lambda: parse_action(text, tools))
    assert (action.name, action.arguments) == ("read_step", {"step": 3})
    with pytest.raises(ParseError):
        finishes(lambda: parse_action(NEWLINES + BLANKS, tools))


# --- replay: agent names, normalisers, final answers -------------------------------------


def test_replay_agent_name_after_long_blank_line_runs() -> None:
    assert finishes(lambda: agent_from_system_prompt(NEWLINES + "name: Planner")) == "Planner"
    prompt = NEWLINES + "You are the Planner."
    assert finishes(lambda: agent_from_system_prompt(prompt)) == "Planner"


def test_replay_normalisers_on_long_runs() -> None:
    matcher = Matcher()
    assert finishes(lambda: matcher.text(f"pid{BLANKS}4242")) == f"pid{BLANKS}<pid>"
    drives = run_of("C:\\")
    assert finishes(lambda: matcher.text(drives)) == drives
    temp = drives + " C:\\Users\\me\\AppData\\Local\\Temp\\x.txt"
    assert finishes(lambda: matcher.text(temp)) == drives + " <tmp-path>"


def test_final_answer_after_long_runs() -> None:
    output = NEWLINES + "FINAL ANSWER:  42  \n"
    assert finishes(lambda: final_answer_from_output(output)) == "42"
    spaced = f"a{BLANKS}b"
    assert finishes(lambda: final_answer_from_output(f"FINAL ANSWER: {spaced}   \n")) == spaced


# --- importers and metrics ---------------------------------------------------------------


def test_agent_names_with_long_blank_runs() -> None:
    assert finishes(lambda: normalise_agent(f"Orchestrator{BLANKS}(thought)")) == "Orchestrator"
    assert finishes(lambda: normalise_agent(f"Web{BLANKS}Surfer")) == f"Web{BLANKS}Surfer"
    assert finishes(lambda: metrics_agent(f"Web{BLANKS}Surfer{BLANKS}(thought)")) == "websurfer"
    assert finishes(lambda: metrics_agent(f"Web{BLANKS}Surfer")) == "websurfer"


def test_who_and_when_file_with_long_blank_runs(tmp_path: Path) -> None:
    data = json.loads((HAND_CRAFTED / "1.json").read_text(encoding="utf-8"))
    for message in data["history"]:
        if message["role"] == "Orchestrator (thought)":
            message["role"] = f"Orchestrator{BLANKS}(thought)"
        if "FINAL ANSWER:" in message["content"]:
            message["content"] = message["content"].replace(
                "FINAL ANSWER: Example Tower", f"FINAL ANSWER: Example{BLANKS}Tower{BLANKS}"
            )
    path = tmp_path / "Hand-Crafted" / "1.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data), encoding="utf-8")
    trace = finishes(lambda: load_trace(path))
    assert trace.final_answer == f"Example{BLANKS}Tower"
    assert "Orchestrator" in {s.agent for s in trace.steps}


def test_a_handoff_span_named_with_many_tos() -> None:
    name = "handoff " + run_of("to x ") + "\nhandoff to Math tutor"
    span = Span(trace_id="t", span_id="s1", parent_id=None, name=name)
    trace = finishes(lambda: build_trace([span], path="spans.json", fmt="otlp", trace_id="t"))
    (handoff,) = trace.metadata["handoffs"]
    assert handoff["to"] == "Math tutor"
