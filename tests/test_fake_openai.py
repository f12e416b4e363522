"""The loopback fake OpenAI server: protocol, faults, streaming and concurrency."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest

from faultfinder.testing import FakeOpenAIServer, ReplyError

MESSAGES = [{"role": "user", "content": "hello"}]


def client(server: FakeOpenAIServer) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-test", base_url=server.base_url, max_retries=0)


def post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=body, headers=headers or {}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_non_streaming_completion_through_the_sdk() -> None:
    def go(server: FakeOpenAIServer) -> Any:
        return client(server).chat.completions.create(model="x-model", messages=MESSAGES)

    with FakeOpenAIServer(reply="Hi there") as server:
        response = go(server)
        recorded = server.requests
    assert response.choices[0].message.content == "Hi there"
    assert response.choices[0].finish_reason == "stop"
    assert response.model == "x-model"
    assert response.usage is not None and response.usage.completion_tokens == 2
    assert len(recorded) == 1
    assert recorded[0].body == {"model": "x-model", "messages": MESSAGES}
    assert recorded[0].headers["authorization"] == "Bearer sk-test"


def test_models_endpoint() -> None:
    def go(server: FakeOpenAIServer) -> list[str]:
        page = client(server).models.list()
        return [m.id for m in page.data]

    with FakeOpenAIServer(model="my-fake") as server:
        assert go(server) == ["my-fake"]


def test_reply_callable_receives_the_full_body() -> None:
    seen: list[dict[str, Any]] = []

    def reply(body: dict[str, Any]) -> str:
        seen.append(body)
        return f"{body['model']}:{body['messages'][-1]['content']}:{body['temperature']}"

    def go(server: FakeOpenAIServer) -> str | None:
        response = client(server).chat.completions.create(
            model="m", messages=MESSAGES, temperature=0.3, extra_body={"custom": [1, 2]}
        )
        return response.choices[0].message.content

    with FakeOpenAIServer(reply=reply) as server:
        assert go(server) == "m:hello:0.3"
    assert seen[0]["custom"] == [1, 2]


def test_async_reply_callable_and_full_completion_passthrough() -> None:
    async def reply(body: dict[str, Any]) -> dict[str, Any]:  # async callables are awaited
        await asyncio.sleep(0)
        return {
            "id": "fixed",
            "object": "chat.completion",
            "created": 1,
            "model": "upstream",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "raw"},
                    "finish_reason": "length",
                }
            ],
        }

    def go(server: FakeOpenAIServer) -> Any:
        return client(server).chat.completions.create(model="m", messages=MESSAGES)

    with FakeOpenAIServer(reply=reply) as server:
        response = go(server)
    assert response.id == "fixed"
    assert response.model == "upstream"
    assert response.choices[0].finish_reason == "length"
    assert response.usage is None


def test_streaming_with_usage_chunk() -> None:
    def go(server: FakeOpenAIServer, include_usage: bool) -> tuple[str, list[Any]]:
        stream = client(server).chat.completions.create(
            model="m",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": include_usage},
        )
        text, usages = "", []
        for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
            if chunk.usage is not None:
                usages.append(chunk.usage)
        return text, usages

    reply = "Agent Name: WebSurfer\nStep Number: 4"
    with FakeOpenAIServer(reply=reply) as server:
        with_usage = go(server, True)
        without_usage = go(server, False)
    assert with_usage[0] == reply
    assert len(with_usage[1]) == 1 and with_usage[1][0].completion_tokens == 9
    assert without_usage == (reply, [])


def test_streaming_tool_calls_reassemble() -> None:
    calls = {"tool_calls": [{"id": "t1", "name": "search", "arguments": '{"q": "x"}'}]}

    def go(server: FakeOpenAIServer) -> tuple[str, str, str | None]:
        stream = client(server).chat.completions.create(model="m", messages=MESSAGES, stream=True)
        name, arguments, finish = "", "", None
        for chunk in stream:
            for choice in chunk.choices:
                for call in choice.delta.tool_calls or []:
                    if call.function is not None:
                        name += call.function.name or ""
                        arguments += call.function.arguments or ""
                finish = choice.finish_reason or finish
        return name, arguments, finish

    with FakeOpenAIServer(reply=lambda body: calls) as server:
        assert go(server) == ("search", '{"q": "x"}', "tool_calls")


def test_streaming_can_be_refused() -> None:
    def go(server: FakeOpenAIServer) -> None:
        client(server).chat.completions.create(model="m", messages=MESSAGES, stream=True)

    with FakeOpenAIServer(stream_support=False) as server, pytest.raises(openai.BadRequestError):
        go(server)


def test_fail_first_with_retry_after() -> None:
    def go(server: FakeOpenAIServer) -> list[tuple[int, str | None]]:
        outcomes: list[tuple[int, str | None]] = []
        for _ in range(3):
            try:
                client(server).chat.completions.create(model="m", messages=MESSAGES)
                outcomes.append((200, None))
            except openai.APIStatusError as exc:
                outcomes.append((exc.status_code, exc.response.headers.get("retry-after")))
        return outcomes

    with FakeOpenAIServer(fail_first=2, fail_status=503, retry_after=4) as server:
        assert go(server) == [(503, "4"), (503, "4"), (200, None)]
        assert len(server.chat_requests) == 3


def test_reply_error_sets_status_and_headers() -> None:
    def reply(body: dict[str, Any]) -> str:
        raise ReplyError(429, "slow down", headers={"retry-after-ms": "120"})

    def go(server: FakeOpenAIServer) -> Any:
        client(server).chat.completions.create(model="m", messages=MESSAGES)

    with FakeOpenAIServer(reply=reply) as server, pytest.raises(openai.RateLimitError) as info:
        go(server)
    assert info.value.response.headers["retry-after-ms"] == "120"
    assert "slow down" in info.value.message


def test_bad_routes_and_bodies() -> None:
    with FakeOpenAIServer() as server:
        root = server.base_url
        assert post(f"{root}/embeddings", b"{}")[0] == 404
        status, payload = post(f"{root}/chat/completions", b"{not json")
        assert status == 400 and "invalid JSON" in payload["error"]["message"]
        with urllib.request.urlopen(f"{root}/models", timeout=5) as response:
            assert json.loads(response.read())["object"] == "list"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"n": ' + b"9" * 5000 + b"}", "integer longer than 4,300 digits"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"model": "\xff"}', "is not UTF-8"),
    ],
    ids=["long-integer", "deep", "not-utf8"],
)
@pytest.mark.parametrize("endpoint", ["chat/completions", "responses"])
def test_a_body_json_cannot_read_is_a_400_saying_why(
    endpoint: str, body: bytes, reason: str
) -> None:
    with FakeOpenAIServer() as server:
        status, payload = post(f"{server.base_url}/{endpoint}", body)
        assert status == 400, payload
        assert "invalid JSON" in payload["error"]["message"]
        assert reason in payload["error"]["message"]
        assert server.requests[-1].body is None


def test_a_chat_body_that_is_not_an_object_is_a_400() -> None:
    with FakeOpenAIServer() as server:
        status, payload = post(f"{server.base_url}/chat/completions", b"[1, 2]")
        assert status == 400 and payload["error"]["message"] == "the body must be a JSON object"


def test_chunked_request_body() -> None:
    body = json.dumps({"model": "m", "messages": MESSAGES}).encode()
    half = len(body) // 2
    with FakeOpenAIServer(reply="chunked ok") as server:
        assert server.port is not None
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                + b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n"
                % (half, body[:half], len(body) - half, body[half:])
            )
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        recorded = server.chat_requests[0].body
    assert data.startswith(b"HTTP/1.1 200")
    assert b"chunked ok" in data
    assert recorded == {"model": "m", "messages": MESSAGES}


def test_loopback_only_and_stops_cleanly() -> None:
    server = FakeOpenAIServer()
    with server:
        port = server.port
        assert server.base_url == f"http://127.0.0.1:{port}/v1"
        assert server.addresses == {"127.0.0.1"}
    assert port is not None
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.base_url


def test_many_concurrent_requests_share_the_latency() -> None:
    latency, n = 0.5, 32

    async def go(server: FakeOpenAIServer) -> float:
        async with openai.AsyncOpenAI(api_key="k", base_url=server.base_url, max_retries=0) as c:
            start = time.perf_counter()
            await asyncio.gather(
                *(
                    c.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": str(i)}]
                    )
                    for i in range(n)
                )
            )
            return time.perf_counter() - start

    with FakeOpenAIServer(reply="ok", latency=latency) as server:
        wall = asyncio.run(go(server))
        in_flight = server.max_in_flight
    assert in_flight == n
    # Serially that is 16 s; even 8 at a time would take 4 * latency. Allow for a busy CPU.
    assert wall < 3.5 * latency


def test_responses_endpoint_chains_stores_and_streams() -> None:
    def reply(body: dict[str, Any]) -> Any:
        # The callable gets the request in canonical chat form.
        assert body["api"] == "responses" and body["raw"]["model"] == "m"
        last = body["messages"][-1]
        if last["role"] == "tool":
            return f"result was {last['content']}"
        return {"tool_calls": [{"name": "lookup", "arguments": {"q": 1}}], "reasoning": "r"}

    with FakeOpenAIServer(reply=reply) as server:
        sdk = client(server)
        first = sdk.responses.create(model="m", instructions="I", input="hi")
        kinds = [item.type for item in first.output]
        assert kinds == ["reasoning", "function_call"] and first.id.startswith("resp_")
        call = first.output[1]
        results = [{"type": "function_call_output", "call_id": call.call_id, "output": "42"}]
        second = sdk.responses.create(
            model="m", instructions="I", previous_response_id=first.id, input=results
        )
        assert second.output_text == "result was 42"
        assert sdk.responses.retrieve(second.id).output_text == "result was 42"
        with sdk.responses.stream(
            model="m", instructions="I", previous_response_id=first.id, input=results
        ) as events:
            deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
            final = events.get_final_response()
        assert len(deltas) == 3 and "".join(deltas) == final.output_text == "result was 42"
        unstored = sdk.responses.create(model="m", input="hi", store=False)
        with pytest.raises(openai.BadRequestError, match="not found"):
            sdk.responses.create(model="m", previous_response_id=unstored.id, input=results)
    assert [r.api for r in server.model_requests] == ["responses"] * 5
