import asyncio
import json
from pathlib import Path

import pytest

from faultfinder.judging.answers import (
    extract_json,
    match_agent,
    parse_agent_step_reason,
    parse_step_number,
    parse_yes_no,
)
from faultfinder.judging.grammars import agent_step_grammar
from faultfinder.judging.method import run_method
from faultfinder.judging.why import why
from faultfinder.llm import LLM, ScriptedBackend
from faultfinder.llm.client import ParseError
from faultfinder.registry import create_method
from faultfinder.traces.loader import load_trace

AGENTS = ["Orchestrator", "WebSurfer", "Excel_Expert"]
FIVE = Path(__file__).parent / "fixtures" / "baselines" / "five_steps.json"


def test_match_agent_normalises_and_finds_contained_names() -> None:
    assert match_agent("excel expert", AGENTS) == "Excel_Expert"
    assert match_agent("**WebSurfer**", AGENTS) == "WebSurfer"
    assert match_agent("The Orchestrator agent", AGENTS) == "Orchestrator"
    with pytest.raises(ParseError, match="not one of"):
        match_agent("FileSurfer", AGENTS)


def test_names_around_separators() -> None:
    # Leading separators are optional, as separators are everywhere in a name.
    assert match_agent("it was -x, I think", ["_Agent", "-x"]) == "-x"
    assert match_agent("Agent", ["_Agent", "Planner"]) == "_Agent"
    # A name of separators only ('__') names nothing in prose; it used to be found (as an
    # empty match) beside any punctuation, which made this answer ambiguous.
    assert match_agent("It was B, no doubt.", ["__", "B"]) == "B"


def test_parse_agent_step_reason_reads_paper_format() -> None:
    reply = "Agent Name: WebSurfer\nStep Number: 12\nReason for Mistake: clicked the wrong link"
    answer = parse_agent_step_reason(reply, AGENTS, 20)
    assert (answer.agent, answer.step) == ("WebSurfer", 12)
    assert answer.reason == "clicked the wrong link"


def test_parse_agent_step_reason_tolerates_markdown() -> None:
    reply = "**Agent Name:** Excel_Expert\n**Step Number:** Step 3\n**Reason for Mistake:** bad sum"
    answer = parse_agent_step_reason(reply, AGENTS, 5)
    assert (answer.agent, answer.step) == ("Excel_Expert", 3)


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("Step Number: 2", "Agent Name"),
        ("Agent Name: WebSurfer", "Step Number"),
        ("Agent Name: WebSurfer\nStep Number: 40", "outside the trace"),
        ("Agent Name: WebSurfer\nStep Number: none", "no step number"),
    ],
)
def test_parse_agent_step_reason_rejects_incomplete(reply: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_agent_step_reason(reply, AGENTS, 10)


def test_step_number_is_integer_not_substring() -> None:
    assert parse_step_number("12", 20) == 12
    assert parse_step_number("Step 1", 20) == 1


def test_yes_no() -> None:
    assert parse_yes_no("1. Yes. 2. The agent misread the table.") is True
    assert parse_yes_no("1. No. 2. Fine.") is False
    with pytest.raises(ParseError):
        parse_yes_no("Maybe.")


def test_extract_json_handles_fences_prose_and_trailing_commas() -> None:
    assert extract_json('Sure!\n```json\n{"a": [1, 2,],}\n```') == {"a": [1, 2]}
    assert extract_json('The result is {"x": "a } in a string"} ok') == {"x": "a } in a string"}
    # Code quoted inside the answer's strings is not a fence to read instead of the answer.
    quoted = {
        "subtasks": [
            {"id": "S1", "description": "configs: ``` ['0-4-0' '4-4-0' '...", "range": [0, 2]},
            {"id": "S2", "description": "notation: ``` ['0-4-0', '2-8-...", "range": [3, 4]},
        ]
    }
    assert extract_json(json.dumps(quoted)) == quoted
    assert extract_json("Answer: " + json.dumps(quoted)) == quoted
    assert extract_json('Step [3] says:\n```json\n{"a": 1}\n```\nDone.') == {"a": 1}
    assert extract_json('Step [3] says: ```json {"a": 1}``` done') == {"a": 1}
    # Nesting too deep for the json module is an unreadable answer, not a crash.
    for deep in ("[" * 5000, "[" * 5000 + "]" * 5000, "Answer: " + "{" * 5000):
        with pytest.raises(ParseError):
            extract_json(deep)
    with pytest.raises(ParseError):
        extract_json("no json here")


def test_agent_step_grammar_lists_agents_and_steps() -> None:
    grammar = agent_step_grammar(['Say "hi"', "B"], range(3)).gbnf
    assert grammar is not None
    assert '"Say \\"hi\\""' in grammar
    assert 'step ::= "0" | "1" | "2"' in grammar


@pytest.mark.parametrize("text", ["9" * 5_000, "Step Number: " + "7" * 5_000 + "."])
def test_a_number_too_long_for_python_is_no_step_number(text: str) -> None:
    # Over the 4,300 digits int() converts: a ValueError escaped the parser, not a
    # ParseError, crashing callers that catch ParseError alone.
    with pytest.raises(ParseError, match="too long to be a step number"):
        parse_step_number(text)
    reply = f"Agent Name: WebSurfer\nStep Number: {text}"
    with pytest.raises(ParseError, match="too long to be a step number"):
        parse_agent_step_reason(reply, AGENTS)


def test_a_longer_name_holding_a_roster_name_is_unparsed_not_that_agent() -> None:
    # 'Coder_Expert' is another agent than 'Coder': reading it as Coder was a guess.
    with pytest.raises(ParseError, match=r"'Coder_Expert' is not one of: Planner, Coder"):
        match_agent("Coder_Expert", ["Planner", "Coder"])
    assert match_agent("Verification_Expert", ["Verification_Expert", "Coder"]) == (
        "Verification_Expert"
    )
    trace = load_trace(FIVE)  # Planner, Searcher, Coder; gold Searcher at step 1
    reply = "Agent Name: Coder_Expert\nStep Number: 2\nReason for Mistake: wrong arithmetic"
    result = asyncio.run(
        run_method(create_method("all-at-once"), trace, LLM(ScriptedBackend([reply] * 3)))
    )
    assert (result.status, result.agent, result.step) == ("unparsed", None, None)
    assert "'Coder_Expert' is not one of: Planner, Searcher, Coder" in (why(result) or "")
