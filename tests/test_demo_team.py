"""The demo team, its tools, its scripted model, and serve-local as its offline endpoint."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from faultfinder.demo_team import TASKS, Team, TeamConfig, mock_model
from faultfinder.demo_team.tools import calculate, lookup
from faultfinder.llm.client import LLM
from faultfinder.llm.doubles import FunctionBackend
from faultfinder.replay.httpserver import ServerThread
from faultfinder.replay.local_server import LocalModelServer
from faultfinder.replay.proxy import ProxyConfig, RecordingProxy
from faultfinder.replay.recorder import RunMeta, RunStore, build_trace


def test_lookup_needs_the_keys_words_and_defaults_to_the_latest_year() -> None:
    assert lookup("the population of Avalon in 2020") == "population of Avalon in 2020: 48210"
    assert lookup("population of Avalon") == "population of Avalon in 2023: 51377"
    assert (
        lookup("distance from Avalon to Brigadoon")
        == "distance from Avalon to Brigadoon in km: 342"
    )
    assert lookup("population of Camelot in 2020").startswith("NOT FOUND")


def test_calculate_is_safe_arithmetic() -> None:
    assert calculate("48210 * 3") == "144630"
    assert calculate("1290 * 15 / 100") == "193.5"
    assert calculate("2 ** 10") == "1024"
    assert calculate("__import__('os')").startswith("ERROR")
    assert calculate("1 / 0").startswith("ERROR")


def test_scripted_orchestrator_follows_the_plan_in_its_history() -> None:
    system = {"role": "system", "content": "You are the Orchestrator."}
    plan_prompt = {"role": "user", "content": f"Task: {TASKS[0].text}\n\nWrite a short plan ..."}
    plan = mock_model.orchestrator([system, plan_prompt])
    assert plan.startswith("PLAN:") and "Avalon" in plan
    history = [system, plan_prompt, {"role": "assistant", "content": plan}]
    first = mock_model.orchestrator(
        [*history, {"role": "user", "content": "Progress so far:\n(nothing yet)"}]
    )
    assert first == "NEXT: Researcher | Look up the population of Avalon"
    # An edited plan is what it follows next.
    edited = (
        "PLAN:\n1. Researcher: Look up X in 2020\n2. Calculator: Compute [result of step 1] + 1"
    )
    history = [system, plan_prompt, {"role": "assistant", "content": edited}]
    history += [
        {"role": "user", "content": "p"},
        {"role": "assistant", "content": "NEXT: Researcher | Look up X in 2020"},
    ]
    ledger = "Progress so far:\n- Researcher (asked: Look up X in 2020): X in 2020: 41"
    assert (
        mock_model.orchestrator([*history, {"role": "user", "content": ledger}])
        == "NEXT: Calculator | Compute 41 + 1"
    )


@pytest.fixture(scope="module")
def endpoint() -> Iterator[ServerThread]:
    async def factory() -> LocalModelServer:
        llm = LLM(FunctionBackend(mock_model.respond, model="demo-mock"))
        return await LocalModelServer(llm, model_name="demo-mock").start()

    with ServerThread(factory) as thread:
        yield thread


def run_team(base_url: str, monkeypatch: pytest.MonkeyPatch, task: str, **config: Any) -> Any:
    monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    return Team(TeamConfig(verbose=False, **config)).run(task)


EXPECTED = {
    "avalon-2020": "154131",
    "round-trip": "684",
    "brigadoon-percent": "19350",
    "lyonesse-650": "737",
    "camelot": None,
}


@pytest.mark.parametrize("task", TASKS, ids=[t.id for t in TASKS])
def test_scripted_runs_fail_where_the_task_table_says(
    task: Any, endpoint: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcome = run_team(endpoint.url + "/v1", monkeypatch, task.text)
    assert outcome.answer == EXPECTED[task.id]
    assert (outcome.answer == task.answer) == (task.mock_flaw is None)
    if task.id == "camelot":
        assert outcome.replans == 1


def test_streaming_and_text_written_tool_calls(
    endpoint: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    streamed = run_team(endpoint.url + "/v1", monkeypatch, TASKS[1].text, stream=True)
    assert streamed.answer == "684"

    def no_function_calling(request: Any) -> Any:
        return mock_model.reply({"messages": request.messages})  # tools withheld

    async def factory() -> LocalModelServer:
        return await LocalModelServer(LLM(FunctionBackend(no_function_calling))).start()

    with ServerThread(factory) as plain:
        outcome = run_team(plain.url + "/v1", monkeypatch, TASKS[1].text)
    assert outcome.answer == "684"
    assert "distance from Avalon to Brigadoon in km: 342" in outcome.ledger[0]


def test_recorded_through_the_proxy_with_path_identity(
    endpoint: ServerThread, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    store = RunStore(tmp_path / "run")

    async def factory() -> RecordingProxy:
        return await RecordingProxy(ProxyConfig(upstream=endpoint.url + "/v1"), store).start()

    with ServerThread(factory) as proxy:
        outcome = run_team(proxy.url + "/v1", monkeypatch, TASKS[0].text, identity="path")
    assert outcome.answer == "154131"
    trace = build_trace(store.dir, RunMeta(run_id="run", ground_truth=TASKS[0].answer))
    assert [s.agent for s in trace.steps] == [
        "Orchestrator", "Orchestrator", "Researcher", "Researcher",
        "Orchestrator", "Calculator", "Calculator", "Orchestrator",
    ]  # fmt: skip
    assert {s.metadata["agent_source"] for s in trace.steps} == {"path"}
    assert trace.steps[2].tool_results[0].content == "population of Avalon in 2023: 51377"
    assert trace.metadata["outcome"] == "failure"
    assert {a.name for a in trace.agents} == {"Orchestrator", "Researcher", "Calculator"}


class NoToolsBackend(FunctionBackend):
    supports_tools = False


def test_serve_local_describes_tools_in_text_for_models_without_function_calling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[Any] = []

    def answer(request: Any) -> Any:
        seen.append(request)
        return mock_model.reply({"messages": request.messages, "tools": request.tools})

    async def factory() -> LocalModelServer:
        return await LocalModelServer(LLM(NoToolsBackend(answer))).start()

    with ServerThread(factory) as plain:
        outcome = run_team(plain.url + "/v1", monkeypatch, TASKS[1].text)
    assert outcome.answer == "684"
    worker_calls = [r for r in seen if "You are the Researcher" in str(r.messages[0]["content"])]
    assert worker_calls and all(r.tools is None for r in seen)
    system = worker_calls[0].messages[0]["content"]
    assert "You can use these tools" in system and "- lookup(query)" in system
    # The written call's result came back as a plain user message.
    assert any(m["content"].startswith("lookup result:") for m in worker_calls[-1].messages)
