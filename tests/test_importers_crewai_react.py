"""CrewAI on its ReAct text path (a model declared unable to take ``tools``), traced by
OpenInference: the tool calls its agents write as "Action:" / "Action Input:" and the
results CrewAI feeds back as "Observation:" are attached to the step that asked, as a
native tool call's are.

The committed fixtures come from tests/fixtures/otel/programs/crewai_crew.py ``--react``
run against the loopback scripted upstream, exported by the real OTLP/HTTP exporter to the
collector (`python tests/otel_programs.py --producer crewai-react[-agents-only] PYTHON`,
with the ``crewai-otel`` environment of tests/framework_env.py); the tests marked
``frameworks_env`` run the program again and check the fresh export reads the same.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faultfinder.judging.render import step_output_text
from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import Trace
from test_importers_stacks import attribute

FIXTURES = Path(__file__).parent / "fixtures" / "otel"
QUESTION = "What is 2 + 3?"
REACT = FIXTURES / "crewai-react.otlp.jsonl"
AGENTS_ONLY = FIXTURES / "crewai-react-agents-only.otlp.jsonl"


def _calls(trace: Trace) -> list[tuple[str, list[tuple[str, object]], list[tuple[str, str]]]]:
    return [
        (
            s.agent,
            [(c.name, json.loads(c.arguments)) for c in s.tool_calls],
            [(str(r.name), r.content) for r in s.tool_results],
        )
        for s in trace.steps
    ]


def check_react(trace: Trace) -> None:
    """The Researcher's action (add with a wrong operand) carries the observation CrewAI
    fed back; its reply text stays as the model wrote it."""
    assert _calls(trace) == [
        ("Researcher", [("add", {"a": 2, "b": 4})], [("add", "6")]),
        ("Researcher", [], []),
        ("Writer", [], []),
    ]
    action = trace.steps[0]
    assert action.content.endswith('Action: add\nAction Input: {"a": 2, "b": 4}')
    react = action.metadata["react"]
    assert react["observation_from"].startswith("input of step 1 ")
    # What a method reads of the step (its outputs, the default observability) now shows
    # the tool's result, which before was only inside the next call's input.
    assert "[tool result add] 6" in step_output_text(action)
    assert trace.final_answer == "The answer is 6."


def check_react_agents_only(trace: Trace) -> None:
    """No model-call span: the Researcher's agent step gets its three actions and their
    observations from the conversation CrewAI's task output carries; the third
    observation, which CrewAI followed with its reminder of the tools, is the result
    alone."""
    assert _calls(trace) == [
        (
            "Researcher",
            [("add", {"a": 2, "b": 4}), ("add", {"a": 6, "b": 1}), ("add", {"a": 7, "b": 0})],
            [("add", "6"), ("add", "7"), ("add", "7")],
        ),
        ("Writer", [], []),
    ]
    researcher = trace.steps[0]
    assert researcher.metadata["react"]["crewai_reminder_removed"] is True
    said = [str(m.get("content")) for m in researcher.input_messages or []]
    assert any("Observation: 7\n\n\nYou ONLY have access" in m for m in said)  # kept there
    assert trace.final_answer == "The answer is 7."


def test_react_fixture() -> None:
    (trace,) = load_traces(REACT)
    assert trace.source.format == "otlp" and QUESTION in trace.task
    check_react(trace)
    attribute(trace, "Researcher", 0)


def test_react_agents_only_fixture() -> None:
    (trace,) = load_traces(AGENTS_ONLY)
    check_react_agents_only(trace)
    attribute(trace, "Researcher", 0)


def test_an_action_no_later_call_echoes_gets_its_call_only(tmp_path: Path) -> None:
    """Without the Researcher's next model call (a run cut off after the action), the
    call is still the step's, with no result invented."""
    kept = []
    for line in REACT.read_text().splitlines():
        request = json.loads(line)
        for rs in request["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                ss["spans"] = [s for s in ss["spans"] if "chatcmpl-fake-2" not in json.dumps(s)]
        kept.append(json.dumps(request))
    path = tmp_path / "cut.otlp.jsonl"
    path.write_text("\n".join(kept))
    (trace,) = load_traces(path)
    action = trace.steps[0]
    assert [(c.name, c.arguments) for c in action.tool_calls] == [("add", '{"a": 2, "b": 4}')]
    assert action.tool_results == [] and "observation_from" not in action.metadata["react"]


def test_a_reply_that_only_mentions_an_action_gets_no_call() -> None:
    """The Writer's reply and the Researcher's final answer name no action: no call."""
    (trace,) = load_traces(REACT)
    assert all("react" not in s.metadata for s in trace.steps[1:])


@pytest.mark.slow
@pytest.mark.frameworks_env
@pytest.mark.parametrize("agents_only", [False, True])
def test_react_live(tmp_path: Path, agents_only: bool) -> None:
    from framework_env import CREWAI_OTEL, framework_python
    from otel_programs import crewai_agents_upstream, crewai_upstream, run_program

    python = str(framework_python("crewai-otel", CREWAI_OTEL))
    program = ["crewai_crew.py", QUESTION, "--react", *(["--agents-only"] if agents_only else [])]
    upstream = crewai_agents_upstream if agents_only else crewai_upstream
    run = run_program(program, upstream, tmp_path, python=python)
    assert run.llm_requests == (5 if agents_only else 3)
    (trace,) = load_traces(run.raw)
    (check_react_agents_only if agents_only else check_react)(trace)
