"""pydantic-ai (pydantic-ai-slim 2.68), unmodified, through the CLI: a Coordinator agent
delegates research to a Researcher agent through a tool (pydantic-ai's documented "agent
delegation" pattern), on OpenAIChatModel (Chat Completions) and OpenAIResponsesModel
(the Responses API). tests/fixtures/frameworks/pydantic_ai_delegation.py reads
OPENAI_BASE_URL and OPENAI_API_KEY as pydantic-ai's OpenAIProvider does; the recorder
sets the first, the test the second. It runs in an environment of its own
(tests/framework_env.py, about 40 s to build), one recording per API.

The agents are told apart by their instructions (pydantic-ai sends them as the system
message, or as the Responses API's ``instructions``); the delegate's calls happen inside
the Coordinator's tool call, between its two steps.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import frameworks_scripts as scripts
from faultfinder.testing import FakeOpenAIServer
from framework_cli import edit_file, invoke, record, replay, trace
from framework_env import NO_TELEMETRY, PYDANTIC_AI, framework_python

PROGRAM = Path(__file__).parent / "fixtures" / "frameworks" / "pydantic_ai_delegation.py"
AGENTS = ["Coordinator", "Researcher", "Researcher", "Coordinator"]

pytestmark = [pytest.mark.slow, pytest.mark.frameworks_env]

Recorded = tuple[Path, list[str], str, str]


@pytest.fixture(scope="module", params=["chat", "responses"])
def recorded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Recorded]:
    """The program recorded once per API: run directory, command, upstream URL, API."""
    api = str(request.param)
    with pytest.MonkeyPatch.context() as env:
        for key, value in NO_TELEMETRY.items():
            env.setenv(key, value)
        env.delenv("OPENAI_BASE_URL", raising=False)
        python = str(framework_python("pydantic-ai", PYDANTIC_AI))
        command = [python, str(PROGRAM), scripts.TASK, api]
        with FakeOpenAIServer(reply=scripts.pydantic_ai_delegation) as upstream:
            out = tmp_path_factory.mktemp(f"pydantic-ai-{api}")
            run = record(command, upstream.base_url, out, scripts.ANSWER)
            yield run, command, upstream.base_url, api


def test_the_delegating_agents_are_recorded_apart(recorded: Recorded) -> None:
    run, _, _, api = recorded
    recording = trace(run)
    steps = recording["steps"]
    assert [s["agent"] for s in steps] == AGENTS
    assert recording["final_answer"] == scripts.WRONG
    # The delegation is the Coordinator's tool call, answered by the Researcher's run
    # (made inside it): the delegate's answer is the delegation's result.
    (delegation,) = steps[0]["tool_calls"]
    (answered,) = steps[0]["tool_results"]
    assert delegation["name"] == "research" and answered["name"] == "research"
    assert answered["content"] == steps[2]["content"] == "Avalon had 140,210 inhabitants in 2019."
    assert {s["metadata"]["api"] for s in steps} == {api}
    result = invoke("attribute", str(run / "trace.json"), "--method", "shortlist")
    assert result.exit_code == 0, result.output
    assert "agent:" in result.output and "step:" in result.output


def test_a_replay_answers_every_call_from_the_recording(recorded: Recorded) -> None:
    run, command, upstream, api = recorded
    report, branch = replay(run, upstream, command, "same")
    assert report["reproduced"] == len(AGENTS) and not report["divergences"]
    assert report["live_calls"] == 0 and report["apis"] == {api: len(AGENTS)}
    assert branch["final_answer"] == scripts.WRONG


def test_an_edit_of_the_delegation_reaches_the_delegate_and_flips_the_answer(
    recorded: Recorded, tmp_path: Path
) -> None:
    run, command, upstream, api = recorded
    fix = {"kind": "tool_call", "set_arguments": {"question": "population of Avalon in 2020"}}
    edit = ("--at", "0", "--edit-file", edit_file(tmp_path / "fix.json", fix))
    report, branch = replay(run, upstream, command, "fixed", *edit)
    assert report["edit_applied"] and not report["divergences"]
    # Everything after the edit is live, and the report says so, call by call.
    assert report["live_calls"] == 3 and [c["agent"] for c in report["live"]] == AGENTS[1:]
    assert report["apis"] == {api: len(AGENTS)}
    lookup = branch["steps"][1]["tool_calls"][0]["arguments"]
    assert "2020" in str(lookup) and branch["final_answer"] == scripts.ANSWER
