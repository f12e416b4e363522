"""DoVer on orchestrators whose steps are handoff tool calls (LangGraph's supervisor on
Chat Completions, the OpenAI Agents SDK's triage on the Responses API), the real
frameworks run unmodified against the loopback fake upstream.

The recommender is shown the step's tool calls and rewrites its text; the replay serves
that text with the recorded calls (same ids, names, arguments), so the handoff still
happens and the next agent runs. Before, the replacement went out as text alone: the
handoff vanished and the framework ended the run with the replacement as its answer (on
the Agents SDK a "validated" verdict from the recommender's own text). A redirect makes
the handoff go to another agent offered at that step.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import frameworks_scripts as scripts
from dover_cli import debug_once
from faultfinder.dover import prompts
from faultfinder.dover.intervene import propose, redirect_choices
from faultfinder.dover.models import Hypothesis, Intervention, Trial
from faultfinder.dover.replays import intervention_edit
from faultfinder.llm.client import LLM
from faultfinder.llm.doubles import FunctionBackend
from faultfinder.replay.edits import edited_response
from faultfinder.replay.run_format import RecordedCall
from faultfinder.replay.session import SessionOptions, record_run
from faultfinder.testing import FakeOpenAIServer
from faultfinder.traces.schema import Step, ToolCall, Trace

PROGRAMS = Path(__file__).parent / "fixtures" / "frameworks"
NO_TELEMETRY = {"OPENAI_AGENTS_DISABLE_TRACING": "1", "OTEL_SDK_DISABLED": "true"}
LANGGRAPH = [sys.executable, str(PROGRAMS / "langgraph_team.py"), scripts.TWO_CITIES]
AGENTS_SDK = [sys.executable, str(PROGRAMS / "agents_sdk_default.py"), scripts.TASK]


@pytest.fixture
def quiet_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key, value in NO_TELEMETRY.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    yield


def debug(
    command: list[str], script: Any, answer: str, tmp_path: Path, debugger: str = "debugger"
) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """Record ``command`` then `faultfinder debug` it (one trial, one repeat); the row,
    the replayed steps and the command's output."""
    module = "agents" if "agents_sdk" in command[1] else "langgraph_supervisor"
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[frameworks]')")
    with FakeOpenAIServer(reply=script) as upstream:
        recorded = asyncio.run(
            record_run(
                command,
                upstream.base_url,
                tmp_path,
                run_id="run",
                ground_truth=answer,
                options=SessionOptions(echo=False, timeout=180),
            )
        )
        assert recorded.child.exit_code == 0, recorded.child.stderr[-3000:]
        assert not recorded.trace.steps[0].content and recorded.trace.steps[0].tool_calls
        (row,), output = debug_once(
            recorded.run_dir,
            upstream.base_url,
            command,
            tmp_path / "dover.jsonl",
            model=f"function:frameworks_scripts:{debugger}",
        )
    (repeat,) = row["repeats"]
    replayed = json.loads((Path(repeat["branch"]) / "trace.json").read_text())["steps"]
    return row, replayed, output


def handoff(step: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["id"], c["name"]) for c in step["tool_calls"]]


@pytest.mark.slow
def test_a_langgraph_supervisors_handoff_is_kept(tmp_path: Path, quiet_env: None) -> None:
    row, replayed, output = debug(LANGGRAPH, scripts.langgraph, "164630", tmp_path)
    # The handoff is made with the new text, so the Researcher runs, then the Calculator,
    # and the Supervisor answers: the answer is the team's, not the replacement.
    assert [s["agent"] for s in replayed] == [
        "Supervisor", "Researcher", "Researcher", "Supervisor", "Calculator", "Calculator",
        "Supervisor",
    ]  # fmt: skip
    assert all(s["metadata"]["origin"] == "live" for s in replayed[1:])
    intervention = row["intervention"]
    (repeat,) = row["repeats"]
    assert repeat["final_answer"] == "164130" != intervention["replacement"]
    assert row["verdict"] != "validated"
    # The edited step is the new text with the recorded handoff, same call id.
    assert row["hypothesis"]["step"] == 0 and intervention["step"] == 0
    recorded = intervention["original_tool_calls"]
    assert [c["name"] for c in recorded] == ["transfer_to_researcher"]
    assert intervention["tool_calls"] == recorded
    assert "with the step's tool calls: transfer_to_researcher" in output
    edited = replayed[0]
    assert edited["metadata"]["origin"] == "edited" and edited["content"] == scripts.FIX
    assert handoff(edited) == [(recorded[0]["id"], "transfer_to_researcher")]


@pytest.mark.slow
def test_an_agents_sdk_triage_handoff_is_kept(tmp_path: Path, quiet_env: None) -> None:
    row, replayed, _ = debug(AGENTS_SDK, scripts.agents_sdk, scripts.ANSWER, tmp_path)
    # The Researcher gets the handoff, reads Triage's new text, looks the right year up:
    # the answer is the Researcher's, not the recommender's text.
    assert [s["agent"] for s in replayed] == ["Triage", "Researcher", "Researcher"]
    lookup = replayed[1]["tool_calls"][0]
    assert lookup["name"] == "lookup" and "2020" in lookup["arguments"]
    intervention = row["intervention"]
    (repeat,) = row["repeats"]
    assert repeat["final_answer"] == scripts.ANSWER != intervention["replacement"]
    assert row["verdict"] == "validated" and not intervention["leaks_answer"]
    assert intervention["step"] == 0
    assert intervention["tool_calls"] == intervention["original_tool_calls"]
    (call,) = intervention["tool_calls"]
    assert call["name"] == "transfer_to_researcher"
    edited = replayed[0]
    assert edited["metadata"]["api"] == "responses"
    assert edited["content"] == scripts.FIX and handoff(edited) == [(call["id"], call["name"])]


@pytest.mark.slow
def test_a_redirect_hands_off_to_another_agent(tmp_path: Path, quiet_env: None) -> None:
    row, replayed, output = debug(
        LANGGRAPH, scripts.langgraph, "164630", tmp_path, debugger="redirecting_debugger"
    )
    assert replayed[1]["agent"] == "Calculator"
    intervention = row["intervention"]
    assert intervention["redirect"] == {"call": 0, "to": "transfer_to_calculator"}
    (before,) = intervention["original_tool_calls"]
    (after,) = intervention["tool_calls"]
    assert (after["id"], after["arguments"]) == (before["id"], before["arguments"])
    assert after["name"] == "transfer_to_calculator" != before["name"]
    assert "(call 0 redirected)" in output
    assert handoff(replayed[0]) == [(before["id"], "transfer_to_calculator")]


# --- the parts, without a framework ------------------------------------------------


def tool(name: str, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "parameters": parameters or {"type": "object"}},
    }


def handoff_trace() -> Trace:
    offered = [
        tool("transfer_to_researcher"),
        tool("transfer_to_calculator"),
        tool("lookup", {"type": "object", "properties": {"query": {"type": "string"}}}),
    ]
    steps = [
        Step(
            index=0,
            agent="Supervisor",
            content="",
            tool_calls=[ToolCall(id="call_a", name="transfer_to_researcher", arguments="{}")],
            request={"tools": offered},
        ),
        Step(index=1, agent="Researcher", content="Brigadoon had 19,500 inhabitants in 2019."),
    ]
    return Trace(id="t", task=scripts.TWO_CITIES, steps=steps, ground_truth="164630")


def proposal(answer: dict[str, Any]) -> tuple[Intervention | None, str, Any]:
    backend = FunctionBackend(lambda request: json.dumps(answer))
    trace = handoff_trace()
    hypothesis = Hypothesis(trial=0, agent="Supervisor", step=0, reason="x", method="m")
    intervention, reply = asyncio.run(
        propose(
            trace,
            Trial(index=0, start=0, end=1),
            hypothesis,
            LLM(backend, parse_retries=0),
            orchestrator="Supervisor",
            target=0,
            with_ground_truth=True,
        )
    )
    return intervention, str(backend.requests[0].messages[-1]["content"]), reply


def test_the_recommender_sees_the_tool_calls_and_may_redirect_a_handoff() -> None:
    assert redirect_choices(handoff_trace().steps[0]) == {0: ["transfer_to_calculator"]}
    intervention, prompt, _ = proposal(
        {"category": "modified_instruction", "replacement": "Look both up for 2020.",
         "rationale": "r", "redirect": None}
    )  # fmt: skip
    assert "- call 0: transfer_to_researcher({})" in prompt
    assert "TEXT of the message only: its tool calls above are kept" in prompt
    assert "- call 0 could call instead: transfer_to_calculator" in prompt
    assert '"redirect": null or' in prompt and prompts.REPLACES_MESSAGE not in prompt
    assert intervention is not None and intervention.changes_step()
    assert intervention.tool_calls == intervention.original_tool_calls
    # A redirect to a tool that takes other arguments (or is not offered) is unreadable.
    bad, _, reply = proposal(
        {"category": "plan_update", "replacement": "x", "rationale": "r",
         "redirect": {"call": 0, "to": "lookup"}}
    )  # fmt: skip
    assert bad is None and "cannot call 'lookup' instead" in str(reply.parse_error)
    # The same (empty) text with a redirect still changes the step.
    moved, _, _ = proposal(
        {"category": "plan_update", "replacement": " ", "rationale": "r",
         "redirect": {"call": 0, "to": "transfer_to_calculator"}}
    )  # fmt: skip
    assert moved is not None and moved.changes_step()
    assert [(c.id, c.name) for c in moved.tool_calls] == [("call_a", "transfer_to_calculator")]


def test_a_message_without_tool_calls_gets_the_papers_prompt() -> None:
    trace = handoff_trace()
    backend = FunctionBackend(
        lambda request: json.dumps(
            {"category": "modified_instruction", "replacement": "y", "rationale": "r"}
        )
    )
    intervention, _ = asyncio.run(
        propose(
            trace,
            Trial(index=0, start=0, end=1),
            Hypothesis(trial=0, agent="Researcher", step=1, reason="x", method="m"),
            LLM(backend),
            orchestrator="Researcher",
            target=1,
            with_ground_truth=True,
        )
    )
    prompt = str(backend.requests[0].messages[-1]["content"])
    assert prompts.REPLACES_MESSAGE in prompt and "tool calls" not in prompt
    assert "redirect" not in prompt
    assert intervention is not None and intervention.tool_calls == []
    assert intervention_edit(intervention).tool_calls is None


CHAT_REPLY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "transfer_to_researcher", "arguments": "{}"},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
}
NOW = datetime(2026, 1, 1, tzinfo=UTC)
RESPONSES_REPLY = {
    "id": "resp_1",
    "object": "response",
    "status": "completed",
    "output": [
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_a",
            "name": "transfer_to_researcher",
            "arguments": "{}",
            "status": "completed",
        }
    ],
}


@pytest.mark.parametrize(
    "path,response",
    [("/v1/chat/completions", CHAT_REPLY), ("/v1/responses", RESPONSES_REPLY)],
)
def test_the_edited_reply_keeps_the_calls_with_the_new_text(
    path: str, response: dict[str, Any]
) -> None:
    api = "responses" if path == "/v1/responses" else "chat"
    recorded = RecordedCall(
        call=0, agent="Supervisor", agent_call=0, request={}, request_hash="h", path=path,
        api=api, response=response, started_at=NOW, ended_at=NOW,
    )  # fmt: skip
    calls = [ToolCall(id="call_a", name="transfer_to_researcher", arguments="{}")]
    intervention = Intervention(
        category="modified_instruction", replacement="Look it up for 2020.", step=0,
        agent="Supervisor", original="", original_tool_calls=calls, tool_calls=calls,
    )  # fmt: skip
    served = edited_response(recorded, intervention_edit(intervention))
    if path == "/v1/responses":
        message, call = served["output"]
        assert message["content"][0]["text"] == "Look it up for 2020."
        assert (call["id"], call["call_id"], call["name"]) == (
            "fc_1", "call_a", "transfer_to_researcher"
        )  # fmt: skip
    else:
        reply = served["choices"][0]
        assert reply["message"]["content"] == "Look it up for 2020."
        assert reply["finish_reason"] == "tool_calls"
        assert [(c["id"], c["function"]["name"]) for c in reply["message"]["tool_calls"]] == [
            ("call_a", "transfer_to_researcher")
        ]
