"""DoVer on the two CrewAI paths tests/test_dover_crewai.py leaves out, each crew run
unmodified in CrewAI's own environment against the loopback fake upstream.

- **ReAct text** (tests/fixtures/frameworks/crewai_react_team.py): a model whose
  ``supports_function_calling()`` is False gets no ``tools``; its agents write
  "Thought: / Action: / Action Input:" and CrewAI sends the reply back with the tool's
  result appended ("Observation: ..."). The recording's steps carry the action as text
  (no tool calls are recovered from it), and an edited Action is read by the agent: the
  edit is applied and judged, never ``not_applied``.
- **Hierarchical** (tests/fixtures/frameworks/crewai_hierarchical_team.py): CrewAI's
  manager delegates through its coworker tools; each step is the manager's or the
  worker's that made it. A delegation is a tool call whose text CrewAI drops, so DoVer's
  text intervention there is ``not_applied``; a ``tool_call`` edit of the delegation's
  arguments (``verify-edit``) reaches the worker and flips the answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import frameworks_scripts as scripts
from dover_cli import Recorded, debug_once, recorded_crew
from faultfinder.cli import main


@pytest.fixture(scope="module")
def react(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    out = tmp_path_factory.mktemp("r")
    with recorded_crew("crewai_react_team.py", scripts.crewai_react, out) as recorded:
        yield recorded


@pytest.fixture(scope="module")
def hierarchical(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    program, out = "crewai_hierarchical_team.py", tmp_path_factory.mktemp("h")
    with recorded_crew(program, scripts.crewai_hierarchical, out) as recorded:
        yield recorded


def branch_steps(repeat: dict[str, Any]) -> list[dict[str, Any]]:
    lines = (Path(repeat["branch"]) / "steps.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def debug(recorded: Recorded, out: Path) -> dict[str, Any]:
    """``faultfinder debug`` on the recording, one repeat; its one row."""
    run_dir, _, command, upstream = recorded
    (row,), _ = debug_once(run_dir, upstream, command, out)
    return dict(row)


def said(messages: list[dict[str, Any]], role: str) -> list[str]:
    return [str(m.get("content")) for m in messages if m.get("role") == role]


@pytest.mark.slow
@pytest.mark.frameworks_env
def test_a_react_crews_steps_carry_their_actions_as_text(react: Recorded) -> None:
    _, trace, _, _ = react
    assert [s.agent for s in trace.steps] == ["Researcher", "Researcher", "Writer"]
    assert all(not (s.request or {}).get("tools") for s in trace.steps)
    # The action is the step's text; no tool call is recovered from it...
    action = trace.steps[0]
    assert 'Action: lookup\nAction Input: {"query": "population of Avalon in 2019"}' in (
        action.content
    )
    assert action.tool_calls == [] and action.tool_results == []
    # ...and its result reaches the next request inside the echoed reply, as CrewAI sends it.
    (echoed,) = said(trace.steps[1].input_messages or [], "assistant")
    assert echoed.startswith(action.content)
    assert echoed.endswith("Observation: Avalon had 140,210 inhabitants in 2019.")
    assert trace.final_answer == scripts.WRONG


@pytest.mark.slow
@pytest.mark.frameworks_env
def test_dover_edits_a_react_action_and_the_agent_reads_it(react: Recorded, tmp_path: Path) -> None:
    row = debug(react, tmp_path / "dover.jsonl")
    intervention = row["intervention"]
    assert intervention["step"] == 0 and intervention["agent"] == "Researcher"
    assert intervention["tool_calls"] == [] == intervention["original_tool_calls"]
    assert '"population of Avalon in 2020"' in intervention["replacement"]
    (repeat,) = row["repeats"]
    branch = branch_steps(repeat)
    assert branch[0]["origin"] == "edited"
    # CrewAI parsed the edited Action, ran the lookup, and sent the edited text back.
    (echoed,) = said(branch[1]["request"]["messages"], "assistant")
    assert echoed.startswith(intervention["replacement"])
    assert echoed.endswith("Observation: Avalon had 144,630 inhabitants in 2020.")
    assert repeat["edit_applied"] and repeat["error"] is None
    assert repeat["final_answer"] == scripts.ANSWER and repeat["success"] is True
    assert repeat["fulfilled"] is True
    assert row["verdict"] == "validated", row["verdict_reason"]


@pytest.mark.slow
@pytest.mark.frameworks_env
def test_a_hierarchical_crews_steps_are_the_managers_and_the_workers(
    hierarchical: Recorded,
) -> None:
    _, trace, _, _ = hierarchical
    assert [s.agent for s in trace.steps] == [
        "Crew Manager", "Researcher", "Researcher", "Crew Manager", "Writer", "Crew Manager",
    ]  # fmt: skip
    coworker_tools = ["delegate_work_to_coworker", "ask_question_to_coworker"]
    for step in trace.steps:
        offered = [t["function"]["name"] for t in (step.request or {}).get("tools") or []]
        expected = {"Crew Manager": coworker_tools, "Researcher": ["lookup"], "Writer": []}
        assert offered == expected[step.agent], step.index
    delegation, lookup, _, question, _, answer = trace.steps
    (call,) = delegation.tool_calls
    assert call.name == "delegate_work_to_coworker"
    assert json.loads(call.arguments)["coworker"] == "Researcher"
    # The delegation's result is what the Researcher answered; the question's, the Writer.
    assert [r.content for r in delegation.tool_results] == [trace.steps[2].content]
    assert [c.name for c in lookup.tool_calls] == ["lookup"]
    assert [c.name for c in question.tool_calls] == ["ask_question_to_coworker"]
    assert [r.content for r in question.tool_results] == [trace.steps[4].content]
    assert answer.content == trace.final_answer == scripts.WRONG


@pytest.mark.slow
@pytest.mark.frameworks_env
def test_dovers_text_intervention_on_a_delegation_is_not_applied(
    hierarchical: Recorded, tmp_path: Path
) -> None:
    row = debug(hierarchical, tmp_path / "dover.jsonl")
    intervention = row["intervention"]
    assert intervention["step"] == 0 and intervention["agent"] == "Crew Manager"
    assert intervention["tool_calls"] == intervention["original_tool_calls"]
    (repeat,) = row["repeats"]
    branch = branch_steps(repeat)
    served = branch[0]["response"]["choices"][0]["message"]
    assert branch[0]["origin"] == "edited" and served["content"] == scripts.FIX
    # The delegation runs as recorded, so the Researcher is asked for 2019 again...
    assert (
        "Current Task: Look up the population of Avalon in 2019"
        in said(branch[1]["request"]["messages"], "user")[0]
    )
    # ...and the manager's history holds the call without the new text.
    manager = next(s for s in branch[1:] if s["agent"] == "Crew Manager")
    (echoed,) = [m for m in manager["request"]["messages"] if m["role"] == "assistant"]
    assert (
        echoed["content"] is None and echoed["tool_calls"][0]["id"] == served["tool_calls"][0]["id"]
    )
    assert not repeat["edit_applied"] and "no later request carried it" in repeat["error"]
    assert repeat["final_answer"] == scripts.WRONG
    assert row["verdict"] == "not_applied", row["verdict_reason"]


@pytest.mark.slow
@pytest.mark.frameworks_env
def test_a_tool_call_edit_of_a_delegation_reaches_the_worker(
    hierarchical: Recorded, tmp_path: Path
) -> None:
    run_dir, _, command, upstream = hierarchical
    task = "Look up the population of Avalon in 2020"
    edit = tmp_path / "delegation.json"
    edit.write_text(json.dumps({"kind": "tool_call", "set_arguments": {"task": task}}))
    result = CliRunner().invoke(
        main,
        [
            "verify-edit", str(run_dir), "--at", "0", "--edit-file", str(edit),
            "--repeats", "1", "--session", "delegation", "--upstream", upstream,
            "--", *command,
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (row,) = [
        json.loads(line)
        for line in (run_dir / "dover" / "delegation.jsonl").read_text().splitlines()
    ]
    (repeat,) = row["repeats"]
    branch = branch_steps(repeat)
    (call,) = branch[0]["response"]["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"])["task"] == task
    assert f"Current Task: {task}" in said(branch[1]["request"]["messages"], "user")[0]
    assert repeat["edit_applied"] and repeat["final_answer"] == scripts.ANSWER
    assert repeat["success"] is True
    assert row["verdict"] == "validated", row["verdict_reason"]
