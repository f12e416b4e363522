"""The recording proxy: forwarding, streaming, tool calls, usage, agent identity, secrets,
failures and crash-safe recording. Everything runs on loopback against a fake upstream."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from faultfinder.replay.httpserver import ServerThread
from faultfinder.replay.proxy import ProxyConfig, RecordingProxy
from faultfinder.replay.recorder import (
    RunMeta,
    RunStore,
    build_trace,
    load_calls,
    read_meta,
)
from faultfinder.replay.session import SessionOptions, record_run
from faultfinder.testing import FakeOpenAIServer

SECRET = "sk-test-0123456789abcdefghijklmnop"


def tool_reply(body: dict[str, Any]) -> Any:
    """Calls the 'add' tool first, then answers with the tool's result."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return {
            "text": f"The sum is {last['content']}.",
            "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
        }
    return {"tool_calls": [{"id": "call_add", "name": "add", "arguments": {"a": 2, "b": 3}}]}


ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        },
    },
}


class Rig:
    """A fake upstream and a recording proxy in front of it."""

    def __init__(self, upstream: FakeOpenAIServer, proxy: ServerThread, run_dir: Path) -> None:
        self.upstream = upstream
        self.proxy = proxy
        self.run_dir = run_dir

    @property
    def base_url(self) -> str:
        return self.proxy.url + "/v1"

    def client(self, **kwargs: Any) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=self.base_url, api_key=kwargs.pop("api_key", "none"), max_retries=0, **kwargs
        )

    def calls(self, include_failed: bool = False) -> list[Any]:
        return load_calls(self.run_dir, include_failed=include_failed)


@pytest.fixture
def make_rig(tmp_path: Path) -> Iterator[Callable[..., Rig]]:
    started: list[tuple[FakeOpenAIServer, ServerThread]] = []

    def make(reply: Any = "hello", api_key_env: str | None = None, **fake: Any) -> Rig:
        upstream = FakeOpenAIServer(reply=reply, **fake).start()
        run_dir = tmp_path / "run"
        store = RunStore(run_dir)
        config = ProxyConfig(upstream=upstream.base_url, api_key_env=api_key_env)

        async def factory() -> RecordingProxy:
            return await RecordingProxy(config, store).start()

        thread = ServerThread(factory).start()
        started.append((upstream, thread))
        return Rig(upstream, thread, run_dir)

    yield make
    for upstream, thread in started:
        thread.stop()
        upstream.stop()


def test_records_a_call_with_model_usage_and_agent_header(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(reply="Paris")
    reply = rig.client().chat.completions.create(
        model="m1",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Capital of France?"},
        ],
        temperature=0.2,
        extra_headers={"X-Faultfinder-Agent": "Geographer"},
    )
    assert reply.choices[0].message.content == "Paris"
    [call] = rig.calls()
    assert call.agent == "Geographer" and call.agent_source == "header"
    assert call.request["temperature"] == 0.2
    trace = build_trace(rig.run_dir, RunMeta(run_id="run"))
    [step] = trace.steps
    assert step.content == "Paris" and step.model == "m1" and step.agent == "Geographer"
    assert (
        step.input_messages is not None
        and step.input_messages[-1]["content"] == "Capital of France?"
    )
    assert step.request == {"model": "m1", "temperature": 0.2}
    assert step.usage is not None and step.usage.completion_tokens > 0
    assert (
        step.started_at is not None
        and step.ended_at is not None
        and step.ended_at >= step.started_at
    )
    assert trace.task == "Capital of France?"
    assert trace.agents[0].system_prompt == "Be brief."
    # The agent header is for the proxy only: the upstream never sees it.
    assert "x-faultfinder-agent" not in rig.upstream.chat_requests[0].headers


def test_stream_is_relayed_and_rebuilt_with_tool_calls_and_usage(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig(reply=tool_reply)
    client = rig.client()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "add 2 and 3"}]
    chunks = list(
        client.chat.completions.create(model="m", messages=messages, tools=[ADD_TOOL], stream=True)
    )
    # The client did not ask for usage, so the usage-only chunk the proxy requested is hidden.
    assert all(chunk.choices for chunk in chunks)
    call = chunks[1].choices[0].delta.tool_calls[0]  # type: ignore[index]
    assert call.id == "call_add" and call.function is not None and call.function.name == "add"
    messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_add",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
                }
            ],
        }
    )
    messages.append({"role": "tool", "tool_call_id": "call_add", "content": "5"})
    text = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(
            model="m", messages=messages, tools=[ADD_TOOL], stream=True
        )
        if c.choices
    )
    assert text == "The sum is 5."
    upstream_body = rig.upstream.chat_requests[0].body
    assert upstream_body is not None and upstream_body["stream_options"] == {"include_usage": True}
    first, second = rig.calls()
    assert first.stream and "stream_options" not in first.request
    assert first.response is not None
    message = first.response["choices"][0]["message"]
    assert message["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"a": 2, "b": 3}'}
    assert first.response["choices"][0]["finish_reason"] == "tool_calls"
    assert second.response is not None and second.response["usage"]["completion_tokens"] == 5
    trace = build_trace(rig.run_dir, RunMeta(run_id="run"))
    assert trace.steps[0].tool_calls[0].name == "add"
    # The tool's result reached the model in the next request, and is kept there...
    assert trace.steps[1].input_messages is not None
    assert trace.steps[1].input_messages[-1] == {
        "role": "tool",
        "tool_call_id": "call_add",
        "content": "5",
    }
    # ...and attached to the step that asked for it.
    assert [r.content for r in trace.steps[0].tool_results] == ["5"]
    assert trace.steps[1].content == "The sum is 5."
    assert trace.steps[1].usage is not None and trace.steps[1].usage.prompt_tokens == 11


def test_streamed_step_is_written_before_the_client_sees_the_end(
    make_rig: Callable[..., Rig],
) -> None:
    # The upstream keeps the body open for a while after '[DONE]'; a program that exits
    # as soon as it has read its last reply must still leave that step in the recording.
    rig = make_rig(reply="last words", stream_linger=1.5)
    chunks = list(
        rig.client().chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "last words"
    [call] = rig.calls()
    assert call.response is not None and call.status == 200


def test_stream_keeps_usage_chunk_when_client_asks(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(reply="ok")
    chunks = list(
        rig.client().chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].usage is not None and not chunks[-1].choices
    [call] = rig.calls()
    assert call.request["stream_options"] == {"include_usage": True}


def test_agent_from_path_prefix_and_from_system_prompt(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(reply="ok")
    by_path = openai.OpenAI(
        base_url=rig.proxy.url + "/agent/Web%20Surfer/v1", api_key="x", max_retries=0
    )
    by_path.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    client = rig.client()
    client.chat.completions.create(
        model="m",
        messages=[
            {"role": "system", "content": "You are the Planner of the team."},
            {"role": "user", "content": "b"},
        ],
    )
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "c"}])
    calls = rig.calls()
    assert [(c.agent, c.agent_source) for c in calls] == [
        ("Web Surfer", "path"),
        ("Planner", "system-prompt"),
        ("assistant", "default"),
    ]
    # The path prefix is stripped before forwarding.
    assert [r.path for r in rig.upstream.chat_requests] == ["/v1/chat/completions"] * 3


def test_secrets_are_forwarded_but_never_recorded(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(reply=f"echoing your key {SECRET}")
    rig.client(api_key=SECRET).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": f"my key is {SECRET}"}],
        extra_body={"api_key": "another-secret-value"},
    )
    assert rig.upstream.chat_requests[0].headers["authorization"] == f"Bearer {SECRET}"
    written = (rig.run_dir / "steps.jsonl").read_text()
    assert SECRET not in written and "another-secret-value" not in written
    assert "[REDACTED]" in written
    [call] = rig.calls()
    assert "api_key" not in call.request


def test_api_key_env_replaces_the_clients_key(
    make_rig: Callable[..., Rig], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FF_TEST_UPSTREAM_KEY", "upstream-key-987654321")
    rig = make_rig(reply="ok", api_key_env="FF_TEST_UPSTREAM_KEY")
    rig.client(api_key="client-key-123456").chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}]
    )
    assert rig.upstream.chat_requests[0].headers["authorization"] == "Bearer upstream-key-987654321"
    written = (rig.run_dir / "steps.jsonl").read_text()
    assert "upstream-key-987654321" not in written and "client-key-123456" not in written


def test_missing_key_variable_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from faultfinder.errors import ConfigError

    monkeypatch.delenv("FF_TEST_NO_SUCH_KEY", raising=False)

    async def build() -> None:
        RecordingProxy(
            ProxyConfig(upstream="http://127.0.0.1:9/v1", api_key_env="FF_TEST_NO_SUCH_KEY"),
            RunStore(tmp_path),
        )

    with pytest.raises(ConfigError, match="FF_TEST_NO_SUCH_KEY"):
        asyncio.run(build())


def test_upstream_errors_are_passed_on_and_are_not_steps(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(reply="fine", fail_first=1, fail_status=500)
    client = rig.client()
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    everything = rig.calls(include_failed=True)
    assert [c.status for c in everything] == [500, 200]
    assert everything[0].agent_call == -1 and everything[1].agent_call == 0
    trace = build_trace(rig.run_dir, RunMeta(run_id="run"))
    assert len(trace.steps) == 1 and trace.metadata["failed_calls"] == 1


def test_unreachable_upstream_is_a_502(tmp_path: Path) -> None:
    async def scenario() -> int:
        config = ProxyConfig(upstream="http://127.0.0.1:9/v1")
        async with (
            RecordingProxy(config, RunStore(tmp_path)) as proxy,
            httpx.AsyncClient() as client,
        ):
            response = await client.post(
                proxy.base_url + "/chat/completions", json={"model": "m", "messages": []}
            )
            return response.status_code

    assert asyncio.run(scenario()) == 502


def test_other_endpoints_pass_through_unrecorded(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(reply="ok")
    models = rig.client().models.list()
    assert models.data[0].id == "fake-model"
    assert not (rig.run_dir / "steps.jsonl").exists()


def test_cut_short_last_line_is_skipped(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(reply="ok")
    rig.client().chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    with (rig.run_dir / "steps.jsonl").open("a") as handle:
        handle.write('{"call": 1, "agent": "trunc')
    assert len(rig.calls()) == 1


CRASHING_PROGRAM = """
import os, openai
client = openai.OpenAI(max_retries=0)
for text in ("one", "two"):
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
print("FINAL ANSWER: 42", flush=True)
os._exit(3)
"""


def test_recording_survives_the_program_crashing(tmp_path: Path) -> None:
    program = tmp_path / "crash.py"
    program.write_text(CRASHING_PROGRAM)
    with FakeOpenAIServer(reply="ok") as upstream:
        url = upstream.base_url
        outcome = asyncio.run(
            record_run(
                [sys.executable, str(program)],
                url,
                tmp_path / "runs",
                run_id="crashy",
                ground_truth="42",
                options=SessionOptions(echo=False),
            )
        )
    run_dir = tmp_path / "runs" / "crashy"
    assert outcome.child.exit_code == 3
    saved = json.loads((run_dir / "trace.json").read_text())
    assert [s["input_messages"][-1]["content"] for s in saved["steps"]] == ["one", "two"]
    meta = read_meta(run_dir)
    assert (
        meta.exit_code == 3 and meta.final_answer == "42" and meta.command[-1].endswith("crash.py")
    )
    assert meta.upstream == url and meta.started_at and meta.ended_at
    # The right answer printed before a crash does not make the run a success.
    assert saved["metadata"]["outcome"] == "failure"
    assert saved["metadata"]["outcome_reason"] == "program exited 3"
    assert (run_dir / "stdout.txt").read_text().strip() == "FINAL ANSWER: 42"


def test_a_stream_cut_short_is_not_recorded_as_a_step(tmp_path: Path) -> None:
    from faultfinder.replay.httpserver import HttpServer, Request, Response

    async def truncated(request: Request) -> Response:
        async def body() -> Any:
            delta = {"role": "assistant", "content": "hal"}
            choice = {"index": 0, "delta": delta, "finish_reason": None}
            chunk = {
                "id": "c",
                "object": "chat.completion.chunk",
                "model": "m",
                "choices": [choice],
            }
            yield f"data: {json.dumps(chunk)}\n\n".encode()

        return Response(200, [("content-type", "text/event-stream")], body())

    async def scenario() -> None:
        async with HttpServer(truncated) as upstream:
            config = ProxyConfig(upstream=upstream.url + "/v1")
            async with RecordingProxy(config, RunStore(tmp_path)) as proxy:
                client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="x", max_retries=0)
                stream = await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}], stream=True
                )
                assert [c.choices[0].delta.content async for c in stream] == ["hal"]

    asyncio.run(scenario())
    [call] = load_calls(tmp_path, include_failed=True)
    assert not call.ok and call.error == "stream ended before the reply was complete"


def test_a_web_page_cannot_use_the_proxy_and_its_key(
    make_rig: Callable[..., Rig], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --api-key-env the proxy adds the user's key: a page in the browser must not be
    able to spend it, by DNS rebinding (a foreign Host) or a cross-origin POST (Origin)."""
    monkeypatch.setenv("FF_TEST_PAGE_KEY", "sk-page-test-0123456789abcdef")
    rig = make_rig(reply="hi", api_key_env="FF_TEST_PAGE_KEY")
    port = rig.proxy.url.rsplit(":", 1)[1]
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]})
    url = rig.base_url + "/chat/completions"
    for headers, status in (
        ({"host": f"attacker.example:{port}"}, 400),
        ({"origin": "http://attacker.example"}, 403),
        ({"origin": "null", "content-type": "text/plain"}, 403),
    ):
        response = httpx.post(url, content=body, headers=headers)
        assert response.status_code == status, response.text
        assert response.headers["x-should-retry"] == "false"
    assert rig.upstream.chat_requests == []  # nothing went upstream with the key
    # Programs send no Origin, and a local page's is loopback: both are served.
    ok = httpx.post(url, content=body, headers={"content-type": "application/json"})
    local_page = {"origin": "http://localhost:3000", "content-type": "application/json"}
    local = httpx.post(url, content=body, headers=local_page)
    assert ok.status_code == local.status_code == 200
    assert (
        rig.client()
        .chat.completions.create(model="m", messages=[{"role": "user", "content": "y"}])
        .choices[0]
        .message.content
        == "hi"
    )
    assert len(rig.calls()) == 3
