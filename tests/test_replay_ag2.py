"""An unmodified AG2 program, recorded and replayed through the proxy (the [dev]
extra installs AG2; without it this file is skipped).

The AG2 team (tests/fixtures/replay/ag2_team.py) knows nothing of faultfinder: only
OPENAI_BASE_URL points it at the proxy, as it would any program using the openai SDK.
It runs in-process (importing AG2 takes seconds; a subprocess per run would repeat it).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ag2")
pytest.importorskip("ag2.config")

from faultfinder.replay.httpserver import ServerThread
from faultfinder.replay.proxy import ProxyConfig, RecordingProxy
from faultfinder.replay.recorder import RunMeta, RunStore, build_trace, load_calls
from faultfinder.replay.replayer import Edit, ReplayOptions, ReplayPlan
from faultfinder.testing import FakeOpenAIServer

TEAM = Path(__file__).parent / "fixtures" / "replay" / "ag2_team.py"
PROBLEM = "Tom has 3 apples and buys 4 more. How many apples does he have?"


def scripted(body: dict[str, Any]) -> Any:
    """The Solver adds the problem's numbers with its tool; the Reviewer repeats the
    solution's last number."""
    messages = body["messages"]
    system = next((str(m["content"]) for m in messages if m["role"] == "system"), "")
    last = messages[-1]
    if "Solver" in system:
        if last["role"] == "tool":
            return f"The total is {last['content']}."
        numbers = re.findall(r"\d+", str(last["content"]))
        return {
            "tool_calls": [
                {
                    "id": "call_1",
                    "name": "calculate",
                    "arguments": json.dumps({"expression": " + ".join(numbers)}),
                }
            ]
        }
    found = re.findall(r"\d+", str(last["content"]).split("Proposed solution:")[-1])
    return found[-1] if found else "unknown"


@pytest.fixture(scope="module")
def team() -> Any:
    spec = importlib.util.spec_from_file_location("ag2_team_fixture", TEAM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def upstream() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(reply=scripted) as server:
        yield server


def run_through_proxy(
    team: Any,
    upstream: str,
    run_dir: Path,
    plan: ReplayPlan | None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> str:
    store = RunStore(run_dir)

    async def factory() -> RecordingProxy:
        return await RecordingProxy(ProxyConfig(upstream=upstream), store, plan).start()

    with ServerThread(factory) as proxy:
        monkeypatch.setenv("OPENAI_BASE_URL", proxy.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "unused-key")
        asyncio.run(team.main(PROBLEM, True))
    out = capsys.readouterr().out
    return re.findall(r"FINAL ANSWER: (.*)", out)[-1]


def test_ag2_team_is_recorded_and_replayed_unmodified(
    team: Any,
    upstream: FakeOpenAIServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_dir = tmp_path / "run"
    answer = run_through_proxy(team, upstream.base_url, run_dir, None, monkeypatch, capsys)
    assert answer == "7"
    trace = build_trace(run_dir, RunMeta(run_id="run", ground_truth="7"))
    assert [(s.agent, s.metadata["agent_source"]) for s in trace.steps] == [
        ("Solver", "system-prompt"),
        ("Solver", "system-prompt"),
        ("Reviewer", "system-prompt"),
    ]
    assert all(s.metadata["stream"] for s in trace.steps)
    assert trace.steps[0].tool_calls[0].name == "calculate"
    assert [r.content for r in trace.steps[0].tool_results] == ["7"]
    assert trace.steps[1].input_messages is not None
    assert trace.steps[1].input_messages[-1]["role"] == "tool"
    assert trace.steps[2].content == "7" and trace.metadata["outcome"] == "success"

    # No edit: every call answered from the recording, the upstream untouched.
    calls = load_calls(run_dir)
    before = len(upstream.chat_requests)
    plan = ReplayPlan(calls, ReplayOptions())
    assert (
        run_through_proxy(team, upstream.base_url, tmp_path / "same", plan, monkeypatch, capsys)
        == "7"
    )
    report = plan.finish()
    assert report.faithful and report.reproduced == 3
    assert len(upstream.chat_requests) == before

    # Edit the Solver's conclusion: the Reviewer (live) now sees the edited message.
    plan = ReplayPlan(calls, ReplayOptions(at=1, edit=Edit(output="The total is 8.")))
    assert (
        run_through_proxy(team, upstream.base_url, tmp_path / "edited", plan, monkeypatch, capsys)
        == "8"
    )
    report = plan.finish()
    assert report.edit_applied and report.reproduced == 1 and report.live_calls == 1
    branch = build_trace(tmp_path / "edited", RunMeta(run_id="edited", ground_truth="7"))
    assert [s.metadata["origin"] for s in branch.steps] == ["cached", "edited", "live"]
    assert branch.metadata["outcome"] == "failure"
