"""Four real frameworks, unmodified, recorded and replayed through the proxy against a
loopback scripted upstream: 100% no-edit fidelity (every step answered from the
recording, the upstream untouched) and one edit that changes the outcome.

- OpenAI Agents SDK: a Triage agent hands off to a Researcher with a tool;
- LangGraph supervisor (langgraph-supervisor): a Researcher making parallel tool calls
  and a Calculator;
- AG2 GroupChat: four agents, the next speaker chosen by the model;
- CrewAI: a sequential crew of a Researcher with a tool and a Writer.

The programs are in tests/fixtures/frameworks/; only OPENAI_BASE_URL (set by the
recorder) points them at the proxy, plus the frameworks' documented switches that turn
their telemetry off. The Agents SDK and LangGraph come with the `frameworks` extra (in
`dev`) and run in the project's interpreter. CrewAI and AG2 GroupChat have pins that
conflict with the project's (CrewAI: openai<3, pydantic<2.13, mcp<2; GroupChat is AG2
0.x, while the project uses AG2 1.x), so their programs run in environments of their own,
built once and cached (tests/framework_env.py).
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import frameworks_scripts as scripts
from faultfinder.replay.edits import Edit, ToolCallChange
from faultfinder.replay.framework_prompts import SPEAKER_SELECTOR as SELECTOR
from faultfinder.replay.replayer import ReplayOptions
from faultfinder.replay.session import SessionOptions, record_run, replay_run
from faultfinder.testing import FakeOpenAIServer
from framework_env import AG2_GROUPCHAT, CREWAI, NO_TELEMETRY, framework_python

PROGRAMS = Path(__file__).parent / "fixtures" / "frameworks"


@dataclass
class Case:
    program: str
    script: Callable[[dict[str, Any]], Any]
    task: str
    agents: list[str]
    """Agent of each recorded step."""
    wrong: str
    at: int
    edit: Edit
    right: str
    python: Callable[[], str]


def here() -> str:
    return sys.executable


def needs(module: str) -> Callable[[], str]:
    def python() -> str:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install -e '.[frameworks]')")
        return sys.executable

    return python


def own_env(name: str, requirements: list[str]) -> Callable[[], str]:
    def python() -> str:
        return str(framework_python(name, requirements))

    return python


def set_query(query: str, index: int = 0) -> Edit:
    return Edit(tool_call_changes=[ToolCallChange(index=index, set_arguments={"query": query})])


CASES = {
    "openai-agents": Case(
        program="agents_sdk_team.py",
        script=scripts.agents_sdk,
        task=scripts.TASK,
        agents=["Triage", "Researcher", "Researcher"],
        wrong=scripts.WRONG,
        at=1,
        edit=set_query("population of Avalon in 2020"),
        right=scripts.ANSWER,
        python=needs("agents"),
    ),
    "langgraph-supervisor": Case(
        program="langgraph_team.py",
        script=scripts.langgraph,
        task=scripts.TWO_CITIES,
        agents=[
            "Supervisor",
            "Researcher",
            "Researcher",
            "Supervisor",
            "Calculator",
            "Calculator",
            "Supervisor",
        ],
        wrong="164130",
        at=1,
        edit=set_query("population of Brigadoon in 2020", index=1),
        right="164630",
        python=needs("langgraph_supervisor"),
    ),
    "ag2-groupchat": Case(
        program="ag2_groupchat.py",
        script=scripts.ag2_groupchat,
        task=scripts.TASK,
        # Speaker selections are AG2's own calls, known by its prompt: not the Planner's,
        # though the role list they carry opens with "Planner: You are the Planner".
        agents=[SELECTOR, "Planner", SELECTOR, "Researcher", SELECTOR, "Writer"],
        wrong=scripts.WRONG,
        at=1,
        edit=Edit(output="Look up: population of Avalon in 2020"),
        right=scripts.ANSWER,
        python=own_env("ag2-groupchat", AG2_GROUPCHAT),
    ),
    "crewai": Case(
        program="crewai_team.py",
        script=scripts.crewai,
        task=scripts.TASK,
        agents=["Researcher", "Researcher", "Writer"],
        wrong=scripts.WRONG,
        at=0,
        edit=set_query("population of Avalon in 2020"),
        right=scripts.ANSWER,
        python=own_env("crewai", CREWAI),
    ),
}


@pytest.fixture
def quiet_frameworks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key, value in NO_TELEMETRY.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    yield


def marks(case: Case) -> list[pytest.MarkDecorator]:
    """``frameworks_env`` on a case whose framework runs in an environment of its own
    (built with pip the first time: minutes), so ``-m "not frameworks_env"`` leaves it out."""
    return [pytest.mark.frameworks_env] if case.python.__qualname__.startswith("own_env.") else []


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, marks=marks(c)) for n, c in CASES.items()])
def test_framework_is_recorded_and_replayed_unmodified(
    name: str, tmp_path: Path, quiet_frameworks: None
) -> None:
    case = CASES[name]
    python = case.python()
    command = [python, str(PROGRAMS / case.program), case.task]
    options = SessionOptions(echo=False, timeout=240)
    with FakeOpenAIServer(reply=case.script) as upstream:
        recorded = asyncio.run(
            record_run(command, upstream.base_url, tmp_path, run_id="run", options=options)
        )
        assert recorded.child.exit_code == 0, (tmp_path / "run" / "stderr.txt").read_text()
        trace = recorded.trace
        assert [s.agent for s in trace.steps] == case.agents
        assert trace.final_answer == case.wrong

        # No edit: every step from the recording, no upstream call, same answer.
        asked = len(upstream.chat_requests)
        same = asyncio.run(
            replay_run(
                recorded.run_dir,
                command,
                ReplayOptions(),
                upstream=upstream.base_url,
                options=options,
            )
        )
        report = same.report
        assert report.faithful and report.fidelity == 1.0, [
            d.difference for d in report.divergences
        ]
        assert report.reproduced == len(case.agents) and report.live_calls == 0
        assert len(upstream.chat_requests) == asked
        assert same.trace.final_answer == case.wrong and same.child.exit_code == 0

        # One edit changes the outcome.
        edited = asyncio.run(
            replay_run(
                recorded.run_dir,
                command,
                ReplayOptions(at=case.at, edit=case.edit),
                upstream=upstream.base_url,
                options=options,
            )
        )
        diverged = [d.difference for d in edited.report.divergences]
        assert edited.report.edit_applied and not diverged, (diverged, edited.child.stderr)
        assert edited.report.reproduced == case.at
        assert edited.trace.final_answer == case.right
