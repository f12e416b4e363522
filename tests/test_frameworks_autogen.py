"""AutoGen AgentChat (autogen-agentchat 0.7.5, autogen-ext[openai]), unmodified, through the
CLI: a SelectorGroupChat of a Planner, a Researcher with a tool and a Writer, the next
speaker chosen by the model through OpenAIChatCompletionClient, which reads
OPENAI_BASE_URL and OPENAI_API_KEY as the openai client does
(tests/fixtures/frameworks/autogen_selector_team.py). It runs in an environment of its own
(tests/framework_env.py, about 40 s to build); recorded once.

Each agent is told apart by its system message. The selector's calls quote the whole
conversation in their prompt, which grows every turn: they are one agent,
``speaker-selector`` (faultfinder.replay.framework_prompts), not one per turn.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import frameworks_scripts as scripts
from faultfinder.replay.framework_prompts import SPEAKER_SELECTOR as SELECTOR
from faultfinder.testing import FakeOpenAIServer
from framework_cli import edit_file, invoke, record, replay, trace
from framework_env import AUTOGEN_AGENTCHAT, NO_TELEMETRY, framework_python

PROGRAM = Path(__file__).parent / "fixtures" / "frameworks" / "autogen_selector_team.py"
AGENTS = [SELECTOR, "Planner", SELECTOR, "Researcher", SELECTOR, "Writer"]
FIX = "Look up: population of Avalon in 2020"

pytestmark = [pytest.mark.slow, pytest.mark.frameworks_env]

Recorded = tuple[Path, list[str], str]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    """The team recorded once: run directory, command, upstream URL."""
    with pytest.MonkeyPatch.context() as env:
        for key, value in NO_TELEMETRY.items():
            env.setenv(key, value)
        env.delenv("OPENAI_BASE_URL", raising=False)
        # AutoGen warns that the fake's model name is not the one asked for.
        env.setenv("PYTHONWARNINGS", "ignore::UserWarning")
        python = str(framework_python("autogen-agentchat", AUTOGEN_AGENTCHAT))
        command = [python, str(PROGRAM), scripts.TASK]
        with FakeOpenAIServer(reply=scripts.autogen_selector) as upstream:
            run = record(command, upstream.base_url, tmp_path_factory.mktemp("ag"), scripts.ANSWER)
            yield run, command, upstream.base_url


def test_the_team_and_its_speaker_selector_are_recorded_apart(recorded: Recorded) -> None:
    run, _, _ = recorded
    recording = trace(run)
    steps = recording["steps"]
    assert [s["agent"] for s in steps] == AGENTS
    assert [s["content"] for s in steps[0::2]] == ["Planner", "Researcher", "Writer"]
    assert recording["final_answer"] == scripts.WRONG
    assert {a["name"] for a in recording["agents"]} == set(AGENTS)
    result = invoke("attribute", str(run / "trace.json"), "--method", "shortlist")
    assert result.exit_code == 0, result.output


def test_a_replay_answers_every_call_from_the_recording(recorded: Recorded) -> None:
    run, command, upstream = recorded
    report, branch = replay(run, upstream, command, "same")
    assert report["reproduced"] == len(AGENTS) and not report["divergences"]
    assert report["live_calls"] == 0
    assert [s["agent"] for s in branch["steps"]] == AGENTS
    assert branch["final_answer"] == scripts.WRONG


def test_a_tool_call_edit_replays_the_rest_live(recorded: Recorded, tmp_path: Path) -> None:
    run, command, upstream = recorded
    fix = {"kind": "tool_call", "set_arguments": {"query": "population of Avalon in 2020"}}
    edit = ("--at", "3", "--edit-file", edit_file(tmp_path / "fix.json", fix))
    report, branch = replay(run, upstream, command, "tool", *edit)
    assert report["edit_applied"] and report["reproduced"] == 3 and not report["divergences"]
    assert [c["agent"] for c in report["live"]] == [SELECTOR, "Writer"]
    assert branch["final_answer"] == scripts.ANSWER


def test_verify_edit_validates_the_plan_that_fixes_the_run(
    recorded: Recorded, tmp_path: Path
) -> None:
    run, command, upstream = recorded
    fix = edit_file(tmp_path / "plan.json", {"kind": "message", "text": FIX})
    result = invoke(
        "verify-edit", str(run), "--at", "1", "--edit-file", fix, "--repeats", "1",
        "--session", "plan", "--upstream", upstream, "--", *command,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (row,) = [json.loads(line) for line in (run / "dover" / "plan.jsonl").read_text().splitlines()]
    (repeat,) = row["repeats"]
    assert repeat["edit_applied"] and repeat["final_answer"] == scripts.ANSWER
    assert row["verdict"] == "validated", row["verdict_reason"]
