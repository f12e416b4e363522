"""The OpenAI-compatible backend against the loopback fake server (no real endpoint)."""

from __future__ import annotations

import asyncio
import email.utils
import socket
from pathlib import Path
from typing import Any

import pytest

from faultfinder import errors
from faultfinder.llm import (
    LLM,
    ChatRequest,
    OutputConstraint,
    TransientLLMError,
    make_backend,
)
from faultfinder.llm.cache import ResponseCache
from faultfinder.llm.openai_compat import PLACEHOLDER_KEY, OpenAICompatBackend
from faultfinder.llm.sdk import parse_retry_after
from faultfinder.testing import FakeOpenAIServer, ReplyError

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look something up.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
]


class RecordingSleep:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def request(text: str = "hi", **fields: Any) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], **fields)


def complete(backend: OpenAICompatBackend, req: ChatRequest) -> Any:
    return asyncio.run(backend.complete(req))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- replies --------------------------------------------------------------------------


def test_text_reply_usage_and_raw() -> None:
    with FakeOpenAIServer(reply="Agent Name: Planner") as server:
        backend = OpenAICompatBackend("gpt-test", base_url=server.base_url, api_key="sk-a")
        completion = complete(backend, request("Who failed?"))
    assert completion.text == "Agent Name: Planner"
    assert completion.finish_reason == "stop"
    assert completion.model == "gpt-test"
    assert completion.usage.prompt_tokens == 3  # the fake counts ~4 characters per token
    assert completion.usage.completion_tokens == 5
    assert not completion.usage.estimated
    assert completion.raw is not None
    assert completion.raw["choices"][0]["message"]["content"] == "Agent Name: Planner"
    assert completion.tool_calls == []


def test_tool_calls_are_returned() -> None:
    reply = {"tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"q": "paris"}}]}
    with FakeOpenAIServer(reply=lambda body: reply) as server:
        backend = OpenAICompatBackend("m", base_url=server.base_url)
        completion = complete(backend, request(tools=TOOLS, tool_choice="auto"))
        sent = server.chat_requests[0].body
    assert completion.text == ""
    assert completion.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in completion.tool_calls] == [
        ("c1", "lookup", '{"q": "paris"}')
    ]
    assert sent is not None
    assert sent["tools"] == TOOLS
    assert sent["tool_choice"] == "auto"


def test_request_parameters_are_sent() -> None:
    with FakeOpenAIServer(reply="ok") as server:
        backend = OpenAICompatBackend("m", base_url=server.base_url, extra_body={"top_k": 5})
        complete(
            backend,
            request(temperature=0.7, max_tokens=33, seed=10, sample=2, stop=["\n\n"]),
        )
        complete(backend, request(max_tokens=None))
        first, second = (r.body for r in server.chat_requests)
    assert first is not None and second is not None
    assert first["model"] == "m"
    assert first["messages"] == [{"role": "user", "content": "hi"}]
    assert first["temperature"] == 0.7
    assert first["max_tokens"] == 33
    assert first["seed"] == 12  # another sample index is another draw
    assert first["stop"] == ["\n\n"]
    assert first["top_k"] == 5
    assert "tools" not in first and "response_format" not in first
    assert "max_tokens" not in second and "seed" not in second


def test_structured_output_sends_the_json_schema() -> None:
    schema = {"type": "object", "properties": {"agent": {"type": "string"}}}
    constrained = request(constraint=OutputConstraint(json_schema=schema, gbnf='root ::= "x"'))
    with FakeOpenAIServer(reply='{"agent": "A"}') as server:
        plain = OpenAICompatBackend("m", base_url=server.base_url)
        structured = OpenAICompatBackend("m", base_url=server.base_url, structured_output=True)
        complete(plain, constrained)
        complete(structured, constrained)
        complete(structured, request())
        bodies = [r.body or {} for r in server.chat_requests]
    assert "response_format" not in bodies[0]
    assert bodies[1]["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema},
    }
    assert "response_format" not in bodies[2]


def test_missing_usage_is_estimated_by_the_llm_layer(loopback_requests: None) -> None:
    with FakeOpenAIServer(reply=lambda body: {"text": "x" * 40, "usage": None}) as server:
        llm = LLM(OpenAICompatBackend("m", base_url=server.base_url))
        reply = asyncio.run(llm.chat("y" * 400))
    assert reply.usage.estimated
    assert reply.usage.prompt_tokens == 100
    assert reply.usage.completion_tokens == 10


def test_cached_prompt_tokens_are_counted_separately(loopback_requests: None) -> None:
    usage = {
        "prompt_tokens": 1200,
        "completion_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 1024},
    }
    with FakeOpenAIServer(reply=lambda body: {"text": "ok", "usage": usage}) as server:
        llm = LLM(OpenAICompatBackend("m", base_url=server.base_url))
        first = asyncio.run(llm.chat("a question"))
        second = asyncio.run(llm.chat("another question"))
    total = first.usage + second.usage
    assert first.usage.cached_prompt_tokens == 1024
    assert first.usage.uncached_prompt_tokens == 176
    assert total.cached_prompt_tokens == 2048 and total.prompt_tokens == 2400
    assert not first.usage.estimated


# --- keys --------------------------------------------------------------------------------


def test_the_key_is_sent_but_never_cached(loopback_requests: None, tmp_path: Path) -> None:
    secret = "sk-secret-0123456789"
    db = tmp_path / "cache.sqlite"
    with FakeOpenAIServer(reply="answer") as server:
        backend = OpenAICompatBackend("m", base_url=server.base_url, api_key=secret)
        llm = LLM(backend, cache=ResponseCache(db))
        asyncio.run(llm.chat("q"))
        again = asyncio.run(llm.chat("q"))
        headers = server.chat_requests[0].headers
    assert again.cached
    assert len(server.chat_requests) == 1
    assert headers["authorization"] == f"Bearer {secret}"
    assert secret.encode() not in db.read_bytes()
    assert secret not in repr(backend) and secret not in str(backend.identity())


def test_local_servers_get_a_placeholder_key() -> None:
    with FakeOpenAIServer(reply="ok") as server:
        complete(OpenAICompatBackend("m", base_url=server.base_url), request())
        headers = server.chat_requests[0].headers
    assert headers["authorization"] == f"Bearer {PLACEHOLDER_KEY}"


def test_no_key_and_no_base_url_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(errors.ModelNotAvailableError, match=r"OPENAI_API_KEY.*--api-key-env"):
        OpenAICompatBackend("gpt-4o")
    with pytest.raises(errors.ModelNotAvailableError, match="OPENAI_API_KEY"):
        make_backend("openai:gpt-4o")


def test_registry_reads_the_key_from_the_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("MY_GATEWAY_KEY", "sk-gw")
    backend = make_backend("openai:gpt-4o", api_key_env="MY_GATEWAY_KEY")
    assert isinstance(backend, OpenAICompatBackend)
    assert backend.name == "openai:gpt-4o"
    assert backend.identity() == {
        "backend": "openai",
        "base_url": "https://api.openai.com/v1",
        "model": "gpt-4o",
    }


# --- failures ------------------------------------------------------------------------------


def test_rate_limit_with_retry_after_then_success(loopback_requests: None) -> None:
    sleep = RecordingSleep()
    with FakeOpenAIServer(reply="fine", fail_first=2, fail_status=429, retry_after=3) as server:
        llm = LLM(OpenAICompatBackend("m", base_url=server.base_url), sleep=sleep)
        reply = asyncio.run(llm.chat("q"))
        n_requests = len(server.chat_requests)
    assert reply.text == "fine"
    assert sleep.delays == [3.0, 3.0]
    assert n_requests == 3


def test_server_error_then_success(loopback_requests: None) -> None:
    sleep = RecordingSleep()
    with FakeOpenAIServer(reply="fine", fail_first=1, fail_status=500) as server:
        llm = LLM(OpenAICompatBackend("m", base_url=server.base_url), sleep=sleep)
        reply = asyncio.run(llm.chat("q"))
        n_requests = len(server.chat_requests)
    assert reply.text == "fine"
    assert len(sleep.delays) == 1
    assert n_requests == 2


def test_transient_error_carries_retry_after() -> None:
    with FakeOpenAIServer(fail_first=1, fail_status=503, retry_after=12) as server:
        backend = OpenAICompatBackend("m", base_url=server.base_url)
        with pytest.raises(TransientLLMError) as info:
            complete(backend, request())
    assert info.value.retry_after == 12.0
    assert "503" in str(info.value)


def test_bad_request_is_not_retried(loopback_requests: None) -> None:
    sleep = RecordingSleep()

    def reject(body: dict[str, Any]) -> str:
        raise ReplyError(400, "Unsupported parameter: 'seed'")

    with FakeOpenAIServer(reply=reject) as server:
        llm = LLM(OpenAICompatBackend("m", base_url=server.base_url), sleep=sleep)
        with pytest.raises(errors.LLMCallError, match=r"400.*seed.*parameters"):
            asyncio.run(llm.chat("q"))
        n_requests = len(server.chat_requests)
    assert n_requests == 1
    assert sleep.delays == []


@pytest.mark.parametrize(
    ("status", "hint"),
    [(401, "API key"), (403, "permissions"), (404, "--base-url"), (422, "parameters")],
)
def test_client_errors_say_what_to_check(status: int, hint: str) -> None:
    with FakeOpenAIServer(fail_first=1, fail_status=status) as server:
        backend = OpenAICompatBackend("m", base_url=server.base_url)
        with pytest.raises(errors.LLMCallError, match=hint):
            complete(backend, request())


def test_connection_refused_fails_at_once_and_says_so() -> None:
    # Nothing listening will not start listening during a backoff: no retries.
    backend = OpenAICompatBackend("m", base_url=f"http://127.0.0.1:{free_port()}/v1")
    with pytest.raises(errors.LLMCallError, match="connection refused"):
        complete(backend, request())


def test_timeout_is_transient() -> None:
    with FakeOpenAIServer(reply="late", latency=1.0) as server:
        backend = OpenAICompatBackend("m", base_url=server.base_url, timeout=0.1)
        with pytest.raises(TransientLLMError):
            complete(backend, request())


def test_a_reply_without_choices_is_retried_as_malformed() -> None:
    with FakeOpenAIServer(reply=lambda body: {"choices": []}) as server:
        backend = OpenAICompatBackend("m", base_url=server.base_url)
        with pytest.raises(TransientLLMError, match="malformed reply \\(no choices\\)"):
            complete(backend, request())


def test_backend_works_across_event_loops() -> None:
    with FakeOpenAIServer(reply="again") as server:
        backend = OpenAICompatBackend("m", base_url=server.base_url)
        assert complete(backend, request()).text == "again"
        assert complete(backend, request()).text == "again"


# --- Retry-After parsing --------------------------------------------------------------------


def test_parse_retry_after_forms() -> None:
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after({"Retry-After": "7"}) == 7.0
    assert parse_retry_after({"retry-after": "1.5"}) == 1.5
    assert parse_retry_after({"Retry-After": date}, now=now) == pytest.approx(30.0)
    assert parse_retry_after({"Retry-After": email.utils.formatdate(now - 60)}, now=now) == 0.0
    assert parse_retry_after({"retry-after-ms": "250", "Retry-After": "9"}) == 0.25
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None
    assert parse_retry_after(None) is None
