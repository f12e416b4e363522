"""The wire adapters (faultfinder.replay.apis): Responses requests, replies and streams to
and from the canonical call; the registry; the agent path form for every API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from faultfinder.replay.apis import (
    ADAPTERS,
    Chains,
    ChatAdapter,
    SSEEvent,
    WireAdapter,
    adapter_for,
)
from faultfinder.replay.apis.responses import ResponsesAdapter, response_events
from faultfinder.replay.httpserver import ServerThread
from faultfinder.replay.matching import Matcher
from faultfinder.replay.proxy import ProxyConfig, RecordingProxy
from faultfinder.replay.recorder import RunStore, load_calls
from faultfinder.testing import FakeOpenAIServer

RESPONSES = ResponsesAdapter()


def turn(fc: str, call: str, msg: str, rs: str) -> dict[str, Any]:
    """A second-turn request whose earlier output items carry the given ids."""
    return {
        "model": "m",
        "instructions": "You are the Researcher.",
        "input": [
            {"role": "user", "content": "question"},
            {"type": "reasoning", "id": rs, "summary": [{"type": "summary_text", "text": "t"}]},
            {"type": "message", "id": msg, "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
            {"type": "function_call", "id": fc, "call_id": call, "name": "lookup",
             "arguments": '{"q": 1}', "status": "completed"},
            {"type": "function_call_output", "call_id": call, "output": "42"},
        ],
        "tools": [{"type": "function", "name": "lookup", "parameters": {}}],
        "store": True,
    }  # fmt: skip


def test_every_adapter_follows_the_protocol_and_the_registry_routes_by_path() -> None:
    assert all(isinstance(a, WireAdapter) for a in ADAPTERS)
    assert len({a.name for a in ADAPTERS}) == len(ADAPTERS)
    route = adapter_for("POST", "/v1/chat/completions")
    assert route is not None and route.name == "chat"
    route = adapter_for("POST", "/v1/responses")
    assert route is not None and route.name == "responses"
    assert adapter_for("GET", "/v1/models") is None
    assert adapter_for("POST", "/v1/embeddings") is None


def test_responses_request_as_a_canonical_call() -> None:
    canonical = RESPONSES.canonical_request(turn("fc_1", "call_1", "msg_1", "rs_1"), Chains())
    assert canonical["api"] == "responses" and "input" not in canonical
    system, user, assistant, tool = canonical["messages"][:1] + canonical["messages"][1:]
    assert system == {"role": "system", "content": "You are the Researcher."}
    assert user == {"role": "user", "content": "question"}
    assert assistant["reasoning"] == "t" and assistant["content"] == "Let me look."
    assert assistant["tool_calls"][0]["id"] == "call_1"
    assert assistant["tool_calls"][0]["function"] == {"name": "lookup", "arguments": '{"q": 1}'}
    assert tool == {"role": "tool", "tool_call_id": "call_1", "content": "42"}
    assert canonical["tools"] == [
        {"type": "function", "function": {"name": "lookup", "parameters": {}}}
    ]


def test_item_ids_minted_per_run_do_not_break_matching() -> None:
    matcher = Matcher()
    one = RESPONSES.canonical_request(turn("fc_1", "call_1", "msg_1", "rs_1"), Chains())
    two = RESPONSES.canonical_request(turn("fc_9", "call_9", "msg_9", "rs_9"), Chains())
    assert matcher.hash(one) == matcher.hash(two)
    other = turn("fc_1", "call_1", "msg_1", "rs_1")
    other["input"][-1]["output"] = "43"
    assert matcher.hash(RESPONSES.canonical_request(other, Chains())) != matcher.hash(one)
    # The same conversation over chat completions is another call.
    chat = {"model": "m", "messages": one["messages"], "tools": one["tools"]}
    assert matcher.hash(chat) != matcher.hash(one)


def test_previous_response_id_resolves_and_expands() -> None:
    chains = Chains()
    first = {"model": "m", "instructions": "I", "input": "question"}
    reply = {
        "id": "resp_1", "object": "response", "status": "completed",
        "output": [{"type": "function_call", "id": "fc_1", "call_id": "call_1",
                    "name": "lookup", "arguments": "{}", "status": "completed"}],
    }  # fmt: skip
    RESPONSES.remember(chains, first, reply)
    second = {
        "model": "m",
        "instructions": "I",
        "previous_response_id": "resp_1",
        "input": [{"type": "function_call_output", "call_id": "call_1", "output": "42"}],
    }
    roles = [m["role"] for m in RESPONSES.canonical_request(second, chains)["messages"]]
    assert roles == ["system", "user", "assistant", "tool"]
    # A chain the run never saw stays as written (it only matches itself).
    unknown = RESPONSES.canonical_request({**second, "previous_response_id": "resp_x"}, chains)
    assert unknown["previous_response_id"] == "resp_x"
    sent = RESPONSES.for_upstream(second, chains, overrides={"temperature": 0.5, "seed": 3},
                                  stream_usage=True, expand=True)  # fmt: skip
    assert "previous_response_id" not in sent and sent["temperature"] == 0.5
    assert "seed" not in sent  # the Responses API has no seed
    assert [i.get("type") or i.get("role") for i in sent["input"]] == [
        "user", "function_call", "function_call_output",
    ]  # fmt: skip
    assert "id" not in sent["input"][1]


def test_edited_replies_keep_ids_and_stream_conformantly() -> None:
    recorded = {
        "id": "resp_1", "object": "response", "status": "completed", "model": "m",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "lookup",
             "arguments": '{"q": 1}', "status": "completed"},
        ],
    }  # fmt: skip
    message = RESPONSES.canonical_reply(recorded).message
    message["tool_calls"][0]["function"]["arguments"] = '{"q": 2}'
    edited = RESPONSES.with_reply(recorded, message)
    assert edited["id"] == "resp_1-edited"
    assert [i["type"] for i in edited["output"]] == ["reasoning", "function_call"]
    assert edited["output"][1]["id"] == "fc_1" and edited["output"][1]["arguments"] == '{"q": 2}'
    text = RESPONSES.with_reply(recorded, {"role": "assistant", "content": "Done."})
    assert [i["type"] for i in text["output"]] == ["message"]
    events = [SSEEvent.parse(e) for e in response_events(text)]
    kinds = [e.data["type"] for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds
    assert [e.data["sequence_number"] for e in events] == list(range(len(events)))
    assert all(e.name == e.data["type"] for e in events)
    accumulator = RESPONSES.accumulator()
    for event in events:
        accumulator.add(event)
    assert accumulator.finished and accumulator.result() == text


def test_agent_path_form_and_sdk_parse_of_a_served_stream(tmp_path: Any) -> None:
    """/agent/<name>/v1/responses names the agent; the SDK reads a recorded stream served
    back from the recording."""
    with FakeOpenAIServer(reply="Hello there, reader.") as upstream:
        store = RunStore(tmp_path / "run")

        async def factory() -> RecordingProxy:
            return await RecordingProxy(ProxyConfig(upstream=upstream.base_url), store).start()

        with ServerThread(factory) as proxy:
            client = openai.OpenAI(
                api_key="sk-test", base_url=proxy.url + "/agent/Writer/v1", max_retries=0
            )
            with client.responses.stream(model="m", input="hi") as events:
                deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
                final = events.get_final_response()
    assert "".join(deltas) == final.output_text == "Hello there, reader."
    (call,) = load_calls(tmp_path / "run")
    assert (call.agent, call.agent_source, call.api) == ("Writer", "path", "responses")
    assert call.events is not None and len(call.events) > 5
    assert json.loads(call.events[0].split("data: ", 1)[1])["type"] == "response.created"


def test_input_edits_and_tool_result_rewrites_on_responses_requests() -> None:
    body = turn("fc_1", "call_1", "msg_1", "rs_1")
    edited = RESPONSES.edit_input(body, "another question", "replace-last-user")
    assert edited["input"][0] == {"role": "user", "content": "another question"}
    appended = RESPONSES.edit_input({"model": "m", "input": "q"}, "more", "append-user")
    assert appended["input"] == [
        {"role": "user", "content": "q"},
        {"role": "user", "content": "more"},
    ]
    rewritten = RESPONSES.rewrite_tool_result(body, "call_1", "43")
    assert rewritten is not None and rewritten["input"][-1]["output"] == "43"
    assert body["input"][-1]["output"] == "42"  # the program's own request is untouched
    assert RESPONSES.rewrite_tool_result(body, "call_x", "43") is None


def test_serve_local_speaks_the_responses_api(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Agents SDK at its default settings runs offline against serve-local (any
    faultfinder model, here a function double), and is recorded and replayed."""
    import asyncio
    import sys

    import frameworks_scripts as scripts
    from faultfinder.llm.client import LLM
    from faultfinder.llm.doubles import FunctionBackend
    from faultfinder.replay.local_server import LocalModelServer
    from faultfinder.replay.replayer import ReplayOptions
    from faultfinder.replay.session import SessionOptions, record_run, replay_run

    def model(request: Any) -> Any:
        return scripts.agents_sdk({"messages": request.messages, "tools": request.tools})

    async def factory() -> LocalModelServer:
        return await LocalModelServer(LLM(FunctionBackend(model)), model_name="local").start()

    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    program = Path(__file__).parent / "fixtures" / "frameworks" / "agents_sdk_default.py"
    command = [sys.executable, str(program), "--stream", scripts.TASK]
    quiet = SessionOptions(echo=False, timeout=180)
    with ServerThread(factory) as local:
        recorded = asyncio.run(record_run(command, local.url + "/v1", tmp_path, options=quiet))
        assert recorded.child.exit_code == 0, recorded.child.stderr[-2000:]
        assert [s.agent for s in recorded.trace.steps] == ["Triage", "Researcher", "Researcher"]
        assert recorded.trace.final_answer == scripts.WRONG
        served = local.server.requests
        same = asyncio.run(replay_run(recorded.run_dir, command, ReplayOptions(), options=quiet))
        assert same.report.faithful and same.report.live_calls == 0
        assert local.server.requests == served


class _EchoAdapter(ChatAdapter):
    """A fourth API for the plugin test: Chat Completions served under another path."""

    name = "echo-api"

    def handles(self, method: str, path: str) -> bool:
        return method == "POST" and path.rstrip("/").endswith("/echo/complete")


def test_an_api_adapter_plugin_is_found_through_its_entry_point(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from importlib import metadata

    from faultfinder import registry
    from faultfinder.replay.apis import load_adapters

    plugin = metadata.EntryPoint(
        name="echo-api", value=f"{__name__}:_EchoAdapter", group="faultfinder.apis"
    )
    monkeypatch.setattr(
        registry, "_entry_points", lambda group: [plugin] if group == "faultfinder.apis" else []
    )
    registry.APIS.reset()
    try:
        assert registry.APIS.origin("echo-api") == "plugin"
        adapters = load_adapters()
        # The built-ins first, in the registry's order; the plugin after them.
        assert [a.name for a in adapters] == ["chat", "responses", "messages", "echo-api"]
        assert next(a for a in adapters if a.handles("POST", "/v1/echo/complete")).name == (
            "echo-api"
        )
    finally:
        registry.APIS.reset()
