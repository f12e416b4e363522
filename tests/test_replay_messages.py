"""The Messages API adapter (replay/apis/messages.py): the canonical mapping, edits, the
stream it synthesises (read back by the real SDK), and, through the proxy with the
Anthropic SDK: recorded streams replayed event for event, streamed and non-streamed
requests served from each other's recordings, and keys forwarded but never written."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import claude_scripts
import frameworks_scripts as scripts
from faultfinder.replay.apis import SSEEvent, adapter_for
from faultfinder.replay.apis.base import Chains
from faultfinder.replay.apis.messages import MessagesAdapter
from faultfinder.replay.apis.messages_stream import MessageBuilder, message_events
from faultfinder.replay.replayer import ReplayOptions
from faultfinder.replay.session import SessionOptions, record_run, replay_run
from faultfinder.testing import FakeOpenAIServer

anthropic = pytest.importorskip("anthropic")

ADAPTER = MessagesAdapter()
PROGRAMS = Path(__file__).parent / "fixtures" / "frameworks"

BODY: dict[str, Any] = {
    "model": "claude-x",
    "max_tokens": 300,
    "temperature": 0,
    "system": [
        {"type": "text", "text": "You are the Researcher.", "cache_control": {"type": "ephemeral"}}
    ],
    "tools": [{"name": "lookup", "description": "Look up.", "input_schema": {"type": "object"}}],
    "messages": [
        {"role": "user", "content": "Find it."},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "I should look.", "signature": "sig"},
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "a"}},
                {"type": "tool_use", "id": "toolu_2", "name": "lookup", "input": {"q": "b"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "A=1"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [{"type": "text", "text": "B failed"}],
                    "is_error": True,
                },
                {"type": "text", "text": "Go on.", "cache_control": {"type": "ephemeral"}},
            ],
        },
    ],
}


def test_only_the_messages_path_is_this_api() -> None:
    assert adapter_for("POST", "/v1/messages") is not None
    assert adapter_for("POST", "/v1/messages").name == "messages"  # type: ignore[union-attr]
    assert not ADAPTER.handles("POST", "/v1/threads/thread_1/messages")  # OpenAI Assistants
    assert not ADAPTER.handles("GET", "/v1/messages")


def test_canonical_request() -> None:
    canonical = ADAPTER.canonical_request(BODY, Chains())
    assert canonical["messages"] == [
        {"role": "system", "content": "You are the Researcher."},
        {"role": "user", "content": "Find it."},
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [
                {"id": "toolu_1", "type": "function",
                 "function": {"name": "lookup", "arguments": '{"q": "a"}'}},
                {"id": "toolu_2", "type": "function",
                 "function": {"name": "lookup", "arguments": '{"q": "b"}'}},
            ],
            "thinking": ["I should look."],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "A=1"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "B failed", "is_error": True},
        {"role": "user", "content": "Go on."},
    ]  # fmt: skip
    assert canonical["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "parameters": {"type": "object"},
                "description": "Look up.",
            },
        }
    ]
    assert canonical["max_tokens"] == 300 and canonical["temperature"] == 0
    assert "cache_control" not in json.dumps(canonical)  # the bill, not the answer


def test_tool_result_and_input_edits_change_the_wire_body() -> None:
    changed = ADAPTER.rewrite_tool_result(BODY, "toolu_2", "B=2")
    assert changed is not None
    assert changed["messages"][2]["content"][1]["content"] == "B=2"
    assert BODY["messages"][2]["content"][1]["content"] != "B=2"  # the original is untouched
    assert ADAPTER.rewrite_tool_result(BODY, "toolu_9", "x") is None
    edited = ADAPTER.edit_input(BODY, "Stop here.", "replace-last-user")
    last = edited["messages"][2]["content"]
    assert [b["type"] for b in last] == ["tool_result", "tool_result", "text"]
    assert last[-1]["text"] == "Stop here."
    appended = ADAPTER.edit_input(BODY, "One more thing.", "append-user")
    assert appended["messages"][-1] == {"role": "user", "content": "One more thing."}


REPLY: dict[str, Any] = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-x",
    "content": [
        {"type": "thinking", "thinking": "Hmm.", "signature": "s1"},
        {"type": "text", "text": "I will look it up now."},
        {"type": "tool_use", "id": "toolu_9", "name": "lookup", "input": {"q": "a b", "n": [1, 2]}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 10,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 5,
        "output_tokens": 7,
    },
}


def test_canonical_reply_and_edited_reply() -> None:
    reply = ADAPTER.canonical_reply(REPLY)
    assert reply.message["content"] == "I will look it up now."
    assert reply.message["tool_calls"][0]["id"] == "toolu_9"
    assert reply.finish_reason == "tool_calls"
    assert (reply.prompt_tokens, reply.completion_tokens, reply.cached_tokens) == (115, 7, 100)
    assert reply.extra == {"thinking": ["Hmm."]}
    edited = ADAPTER.with_reply(REPLY, {"role": "assistant", "content": "The answer is 4."})
    assert edited["id"] == "msg_1-edited" and edited["stop_reason"] == "end_turn"
    assert [b["type"] for b in edited["content"]] == ["thinking", "text"]
    assert ADAPTER.reply_ok(edited) and not ADAPTER.reply_ok({"choices": []})


def test_synthesised_stream_adds_back_up_and_the_sdk_reads_it() -> None:
    events = ADAPTER.synthesise(REPLY, {"stream": True})
    names = [SSEEvent.parse(e).name for e in events]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == [
        "message_delta",
        "message_stop",
    ]
    parsed = [SSEEvent.parse(e) for e in events]
    deltas = [e.data["delta"]["type"] for e in parsed if e.name == "content_block_delta"]
    assert {"text_delta", "input_json_delta", "thinking_delta", "signature_delta"} <= set(deltas)
    builder = ADAPTER.accumulator()
    for event in events:
        builder.add(SSEEvent.parse(event))
    assert builder.finished and builder.result() == REPLY
    # The real SDK's stream accumulator reads the same events into the same message.
    with FakeOpenAIServer(lambda body: REPLY) as server:
        client = anthropic.Anthropic(
            base_url=server.base_url.removesuffix("/v1"), api_key="k", max_retries=0
        )
        with client.messages.stream(
            model="claude-x", max_tokens=50, messages=[{"role": "user", "content": "q"}]
        ) as stream:
            message = stream.get_final_message()
    assert message.model_dump(exclude_none=True)["content"] == REPLY["content"]
    assert message.usage.cache_read_input_tokens == 100


def test_a_cut_stream_or_an_error_event_is_no_reply() -> None:
    events = message_events(REPLY)
    cut = MessageBuilder()
    for _name, data in events[:-1]:
        cut.add_data(data)
    assert not cut.finished and cut.result() is None
    failed = MessageBuilder()
    failed.add_data(events[0][1])
    failed.add_data({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})
    assert failed.finished and failed.result() is None and failed.error == "busy"


# --- through the proxy, with the Anthropic SDK ------------------------------------------------

EVENTS_PROGRAM = """
import sys, anthropic
client = anthropic.Anthropic()
seen = []
with client.messages.create(model="claude-x", max_tokens=100, stream=True,
                            system="You are the Researcher.",
                            messages=[{"role": "user", "content": sys.argv[1]}]) as events:
    for event in events:
        seen.append(event.type)
print(len(seen), " ".join(seen), flush=True)
"""


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key in ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    yield


def test_a_recorded_stream_is_replayed_event_for_event(tmp_path: Path, clean_env: None) -> None:
    program = tmp_path / "events.py"
    program.write_text(EVENTS_PROGRAM)
    command = [sys.executable, str(program), "Tell me about Avalon in many words."]
    options = SessionOptions(echo=False, timeout=120)
    long_text = " ".join(f"word{i}" for i in range(40))
    with FakeOpenAIServer(lambda body: long_text) as upstream:
        recorded = asyncio.run(
            record_run(command, upstream.base_url, tmp_path, run_id="r", options=options)
        )
        assert recorded.child.exit_code == 0, recorded.child.stderr
        replayed = asyncio.run(
            replay_run(
                recorded.run_dir,
                command,
                ReplayOptions(),
                upstream=upstream.base_url,
                options=options,
            )
        )
    assert replayed.report.faithful and replayed.report.live_calls == 0
    seen = recorded.child.stdout.split()
    assert int(seen[0]) > 40  # message_start, ping, 40 text deltas, ...
    assert replayed.child.stdout == recorded.child.stdout  # every event, in order


@pytest.mark.parametrize(
    ("recorded_with", "replayed_with"), [([], ["--stream"]), (["--stream"], [])]
)
def test_streamed_and_plain_calls_serve_each_other(
    tmp_path: Path, clean_env: None, recorded_with: list[str], replayed_with: list[str]
) -> None:
    team = [sys.executable, str(PROGRAMS / "anthropic_sdk_team.py"), scripts.TASK]
    options = SessionOptions(echo=False, timeout=120)
    with FakeOpenAIServer(claude_scripts.anthropic_sdk) as upstream:
        recorded = asyncio.run(
            record_run(
                [*team, *recorded_with], upstream.base_url, tmp_path, run_id="r", options=options
            )
        )
        assert recorded.child.exit_code == 0, recorded.child.stderr
        asked = len(upstream.requests_of("messages"))
        replayed = asyncio.run(
            replay_run(
                recorded.run_dir, [*team, *replayed_with], ReplayOptions(),
                upstream=upstream.base_url, options=options,
            )
        )  # fmt: skip
        assert len(upstream.requests_of("messages")) == asked
    report = replayed.report
    assert report.faithful and report.reproduced == 3 and report.live_calls == 0
    assert replayed.trace.final_answer == recorded.trace.final_answer == scripts.WRONG


def test_the_key_is_forwarded_as_x_api_key_and_never_written(
    tmp_path: Path, clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    program_key = "sk-ant-program-key-0123456789"
    upstream_key = "sk-ant-upstream-key-9876543210"
    monkeypatch.setenv("ANTHROPIC_API_KEY", program_key)
    monkeypatch.setenv("UPSTREAM_KEY", upstream_key)
    team = [sys.executable, str(PROGRAMS / "anthropic_sdk_team.py"), scripts.TASK]
    with FakeOpenAIServer(claude_scripts.anthropic_sdk) as upstream:
        forwarded = asyncio.run(
            record_run(
                team, upstream.base_url, tmp_path, run_id="own", options=SessionOptions(echo=False)
            )
        )
        named = asyncio.run(
            record_run(
                team, upstream.base_url, tmp_path, run_id="named",
                options=SessionOptions(echo=False, api_key_env="UPSTREAM_KEY"),
            )
        )  # fmt: skip
    assert forwarded.child.exit_code == 0 and named.child.exit_code == 0
    first, *_, last = upstream.requests_of("messages")
    assert program_key in json.dumps(first.headers)  # the program's own key, as it sent it
    assert last.headers.get("x-api-key") == upstream_key  # --api-key-env: as x-api-key
    assert program_key not in json.dumps(last.headers)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            text = path.read_bytes()
            assert program_key.encode() not in text and upstream_key.encode() not in text, path


CACHED_PROGRAM = """
import sys, anthropic
reply = anthropic.Anthropic().messages.create(
    model="claude-x", max_tokens=100, system="You are the Researcher.",
    messages=[{"role": "user", "content": sys.argv[1]}])
print(reply.usage.cache_creation_input_tokens, flush=True)
"""


@pytest.mark.parametrize("stream", [False, True])
def test_a_recorded_step_keeps_the_prompt_cache_reads_and_writes(
    tmp_path: Path, clean_env: None, stream: bool
) -> None:
    """The trace of a Claude call records what the upstream reported: prompt tokens as
    input + cache reads + cache writes, cache reads as cached, cache writes as written."""
    program = tmp_path / "cached.py"
    source = CACHED_PROGRAM
    if stream:
        source = source.replace("messages.create(", "messages.stream(").replace(
            "print(reply.usage", "print(reply.__enter__().get_final_message().usage"
        )
    program.write_text(source)
    with FakeOpenAIServer(lambda body: REPLY) as upstream:
        recorded = asyncio.run(
            record_run(
                [sys.executable, str(program), "q"],
                upstream.base_url,
                tmp_path,
                run_id="r",
                options=SessionOptions(echo=False),
            )
        )
    assert recorded.child.exit_code == 0, recorded.child.stderr
    assert recorded.child.stdout.strip() == "5"
    (step,) = recorded.trace.steps
    assert step.usage is not None
    assert (
        step.usage.prompt_tokens,
        step.usage.cached_prompt_tokens,
        step.usage.cache_write_prompt_tokens,
        step.usage.completion_tokens,
    ) == (115, 100, 5, 7)
