"""The Anthropic Messages backend (``anthropic:MODEL``) against the loopback fake upstream:
request and reply mapping, prompt-cache marks and cached tokens, errors and retries, the
key, and every registered method run through it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder import errors
from faultfinder.cli import main as cli
from faultfinder.judging.method import run_method
from faultfinder.llm import LLM, ChatRequest, base, make_backend
from faultfinder.llm.anthropic_messages import (
    PLACEHOLDER_KEY,
    AnthropicBackend,
    messages_body,
    place_cache_marks,
)
from faultfinder.llm.cache import ResponseCache
from faultfinder.llm.prompt_prefixes import PrefixMemory, shared_line_prefix
from faultfinder.registry import create_method, methods
from faultfinder.testing import FakeOpenAIServer, ReplyError
from faultfinder.testing.fake_messages import FakeMessages, PromptCache
from faultfinder.usage import Budget
from test_observability import PROJECT_METHODS, generic_answer, marked_trace

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


async def _no_sleep(seconds: float) -> None:
    return None


def request(text: str = "hi", **fields: Any) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], **fields)


def complete(backend: AnthropicBackend, req: ChatRequest) -> Any:
    return asyncio.run(backend.complete(req))


def sent(server: FakeOpenAIServer) -> list[dict[str, Any]]:
    return [r.body for r in server.requests if r.path == "/v1/messages" and r.body is not None]


# --- request and reply -----------------------------------------------------------------


def test_text_reply_usage_headers_and_path() -> None:
    with FakeOpenAIServer("The answer.") as server:
        backend = AnthropicBackend("claude-test", base_url=server.base_url, api_key="sk-ant-k1")
        out = complete(backend, request("What?", max_tokens=50))
    assert out.text == "The answer."
    assert out.finish_reason == "stop"
    assert out.usage.prompt_tokens > 0 and out.usage.completion_tokens > 0
    assert out.raw is not None and out.raw["type"] == "message"
    (received,) = [r for r in server.requests if r.body is not None]
    assert received.path == "/v1/messages"  # the /v1 of --base-url is not doubled
    # The SDK sends the key (x-api-key, or a bearer token in its newer releases).
    assert "sk-ant-k1" in (
        received.headers.get("x-api-key"),
        received.headers.get("authorization", "").removeprefix("Bearer "),
    )
    assert received.headers["anthropic-version"]
    assert received.body is not None
    assert received.body["max_tokens"] == 50
    assert received.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What?"}]}
    ]


def test_system_tools_and_tool_results_map_to_blocks() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Find x."},
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q": "x"}'},
                },
                {
                    "id": "call 2",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q": "y"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "x=1"},
        {"role": "tool", "tool_call_id": "call 2", "content": "y=2"},
        {"role": "user", "content": "And now?"},
    ]
    body = messages_body(
        ChatRequest(
            messages=messages,
            tools=TOOLS,
            tool_choice="required",
            max_tokens=None,
            stop=["END"],
            top_p=0.5,
        ),
        "claude-test",
        prompt_cache=False,
    )
    assert body["system"] == [{"type": "text", "text": "Be brief."}]
    assert body["max_tokens"] > 0  # required by the API
    assert body["stop_sequences"] == ["END"] and body["top_p"] == 0.5
    assert body["tools"] == [
        {
            "name": "lookup",
            "description": "Look something up.",
            "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
        }
    ]
    assert body["tool_choice"] == {"type": "any"}
    _, assistant, results = body["messages"]
    assert assistant["content"] == [
        {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "call_1", "name": "lookup", "input": {"q": "x"}},
        {"type": "tool_use", "id": "call_2", "name": "lookup", "input": {"q": "y"}},
    ]
    # Both results, then the user's text, in one user turn (the API wants turns to alternate).
    assert results == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "x=1"},
            {"type": "tool_result", "tool_use_id": "call_2", "content": "y=2"},
            {"type": "text", "text": "And now?"},
        ],
    }
    assert "cache_control" not in json.dumps(body)


def test_tool_use_reply_becomes_tool_calls() -> None:
    reply = {"text": "", "tool_calls": [{"name": "lookup", "arguments": {"q": "z"}}]}
    with FakeOpenAIServer(lambda body: reply) as server:
        backend = AnthropicBackend("claude-test", base_url=server.base_url)
        out = complete(backend, request(tools=TOOLS, tool_choice="auto"))
    assert out.finish_reason == "tool_calls"
    (call,) = out.tool_calls
    assert call.name == "lookup" and json.loads(call.arguments) == {"q": "z"}
    assert call.id and call.id.startswith("toolu_")
    assert sent(server)[0]["tool_choice"] == {"type": "auto"}


# --- prompt caching ----------------------------------------------------------------------


def _marked(body: dict[str, Any]) -> list[str]:
    out = [
        b.get("text", b.get("name", "")) for b in body.get("system") or [] if "cache_control" in b
    ]
    for turn in body["messages"]:
        out += [b.get("text") or b.get("type") for b in turn["content"] if "cache_control" in b]
    return out


def test_cache_marks_sit_at_the_prefix_boundaries() -> None:
    # One question: the system prompt is the shared prefix.
    one = messages_body(
        ChatRequest(
            messages=[
                {"role": "system", "content": "RULES"},
                {"role": "user", "content": "case + question"},
            ]
        ),
        "m",
    )
    assert _marked(one) == ["RULES"]
    # A message sent as text parts: each boundary between parts is one.
    parts = messages_body(
        ChatRequest(
            messages=[
                {"role": "system", "content": "RULES"},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "CASE"},
                        {"type": "text", "text": "QUESTION"},
                    ],
                },
            ]
        ),
        "m",
    )
    assert _marked(parts) == ["RULES", "CASE"]
    # A dialogue: the end of the conversation, so the next turn reads it all.
    dialogue = messages_body(
        ChatRequest(
            messages=[
                {"role": "system", "content": "RULES"},
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": "step 1"},
                {"role": "user", "content": "observation"},
            ]
        ),
        "m",
    )
    assert _marked(dialogue) == ["RULES", "observation"]
    # Tools and no system: the last tool definition.
    tools = messages_body(
        ChatRequest(messages=[{"role": "user", "content": "q"}], tools=TOOLS), "m"
    )
    assert "cache_control" in tools["tools"][-1]


def test_at_most_four_marks_the_first_and_the_last_three() -> None:
    body = {
        "system": [{"type": "text", "text": "S"}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": str(i)} for i in range(6)]}
        ],
    }
    assert place_cache_marks(body) == 4
    assert _marked(body) == ["S", "2", "3", "4"]


def test_cached_tokens_are_counted_reads_and_writes(loopback_requests: None) -> None:
    rules = "Rule. " * 1200  # ~1.8k tokens: above the 1,024-token minimum
    with FakeOpenAIServer("ok") as server:
        server.mount(FakeMessages(prompt_cache=PromptCache()))
        llm = LLM(AnthropicBackend("claude-test", base_url=server.base_url), sleep=_no_sleep)

        async def ask(question: str) -> Any:
            return await llm.chat(
                [{"role": "system", "content": rules}, {"role": "user", "content": question}]
            )

        first = asyncio.run(ask("question one"))
        second = asyncio.run(ask("question two"))
    assert first.usage.cache_write_prompt_tokens > 1000
    assert first.usage.cached_prompt_tokens == 0
    assert second.usage.cached_prompt_tokens == first.usage.cache_write_prompt_tokens
    assert second.usage.cache_write_prompt_tokens == 0
    # The prompt counts every token, cached or not.
    assert second.usage.prompt_tokens > second.usage.cached_prompt_tokens
    assert llm.usage.cached_prompt_tokens == second.usage.cached_prompt_tokens
    assert llm.usage.cache_write_prompt_tokens == first.usage.cache_write_prompt_tokens


def test_prompt_cache_can_be_switched_off() -> None:
    backend = AnthropicBackend("m", base_url="http://127.0.0.1:1", prompt_cache=False)
    body = backend.body(
        ChatRequest(messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "q"}])
    )
    assert "cache_control" not in json.dumps(body)


# --- key, registry -----------------------------------------------------------------------


def test_the_key_is_sent_but_never_cached(loopback_requests: None, tmp_path: Path) -> None:
    key = "sk-ant-secret-value-123456"
    cache_file = tmp_path / "cache.sqlite"
    with FakeOpenAIServer("cached reply") as server:
        llm = LLM(
            AnthropicBackend("m", base_url=server.base_url, api_key=key),
            cache=ResponseCache(cache_file),
        )
        asyncio.run(llm.chat("hello"))
        again = asyncio.run(llm.chat("hello"))
    assert again.cached
    assert key in json.dumps(server.requests[0].headers)
    assert key.encode() not in cache_file.read_bytes()
    assert key not in repr(llm.backend)


def test_no_key_and_no_base_url_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    with pytest.raises(errors.ModelNotAvailableError, match="ANTHROPIC_API_KEY"):
        make_backend("anthropic:claude-x", api_key_env="ANTHROPIC_API_KEY")


def test_registry_builds_it_with_the_key_from_anthropic_api_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
    backend = make_backend("anthropic:claude-x", base_url="http://127.0.0.1:9/v1")
    assert isinstance(backend, AnthropicBackend)
    assert backend.name == "anthropic:claude-x"
    assert backend.base_url == "http://127.0.0.1:9"
    assert backend._api_key == "sk-ant-from-env"
    with pytest.raises(errors.ConfigError, match="anthropic:MODEL"):
        make_backend("anthropic:")


def test_a_gateway_without_a_key_gets_a_placeholder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    backend = make_backend("anthropic:m", base_url="http://127.0.0.1:9")
    assert isinstance(backend, AnthropicBackend) and backend._api_key == PLACEHOLDER_KEY


# --- errors and retries ------------------------------------------------------------------


def test_overload_and_rate_limit_are_retried_through_the_llm_layer(
    loopback_requests: None,
) -> None:
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    with FakeOpenAIServer("fine", fail_first=2, fail_status=529, retry_after=3) as server:
        llm = LLM(AnthropicBackend("m", base_url=server.base_url), sleep=sleep)
        reply = asyncio.run(llm.chat("hi"))
    assert reply.text == "fine"
    assert delays == [3.0, 3.0]  # retry-after honoured
    assert len(sent(server)) == 3


def test_bad_request_is_not_retried_and_says_why(loopback_requests: None) -> None:
    def refuse(body: dict[str, Any]) -> str:
        raise ReplyError(400, "messages.0.content: text content blocks must be non-empty")

    with FakeOpenAIServer(refuse) as server:
        llm = LLM(AnthropicBackend("m", base_url=server.base_url), sleep=_no_sleep)
        with pytest.raises(errors.LLMCallError, match=r"invalid_request_error: messages\.0"):
            asyncio.run(llm.chat("hi"))
    assert len(sent(server)) == 1


def test_authentication_error_names_the_variable() -> None:
    def refuse(body: dict[str, Any]) -> str:
        raise ReplyError(401, "invalid x-api-key")

    with FakeOpenAIServer(refuse) as server:
        backend = AnthropicBackend("m", base_url=server.base_url, api_key="sk-ant-bad-key-000")
        with pytest.raises(errors.LLMCallError, match="ANTHROPIC_API_KEY") as info:
            complete(backend, request())
    assert "sk-ant-bad-key-000" not in str(info.value)


@pytest.mark.parametrize(
    ("status", "hint"),
    [
        (403, "permissions"),
        (404, "faultfinder adds /v1/messages"),
        (413, "context budget"),
        (422, "temperature with top_p"),
    ],
)
def test_client_errors_say_what_to_check(status: int, hint: str) -> None:
    with FakeOpenAIServer(fail_first=1, fail_status=status) as server:
        backend = AnthropicBackend("m", base_url=server.base_url)
        with pytest.raises(errors.LLMCallError, match=hint):
            complete(backend, request())


def test_timeout_is_transient() -> None:
    with FakeOpenAIServer("late", latency=1.0) as server:
        backend = AnthropicBackend("m", base_url=server.base_url, timeout=0.1)
        with pytest.raises(base.TransientLLMError):
            complete(backend, request())


def test_a_malformed_reply_is_transient() -> None:
    with FakeOpenAIServer(lambda body: {"type": "message", "content": "not a list"}) as server:
        backend = AnthropicBackend("m", base_url=server.base_url)
        with pytest.raises(base.TransientLLMError, match="no content list"):
            complete(backend, request())


def test_budgets_hold(loopback_requests: None) -> None:
    with FakeOpenAIServer("ok") as server:
        llm = LLM(AnthropicBackend("m", base_url=server.base_url), budget=Budget(max_calls=1))
        asyncio.run(llm.chat("one"))
        with pytest.raises(errors.BudgetExceededError):
            asyncio.run(llm.chat("two"))
    assert len(sent(server)) == 1


def test_connection_refused_fails_at_once() -> None:
    backend = AnthropicBackend("m", base_url="http://127.0.0.1:9")
    with pytest.raises(errors.LLMCallError, match="connection refused"):
        complete(backend, request())


# --- every method, and the command line ---------------------------------------------------


def judge(body: dict[str, Any]) -> Any:
    """The generic answerer of test_observability, reading the Messages request in the
    canonical chat form the fake upstream hands its reply callable."""
    return generic_answer(
        ChatRequest(
            messages=body["messages"], tools=body.get("tools"), tool_choice=body.get("tool_choice")
        )
    )


@pytest.mark.parametrize("name", PROJECT_METHODS)
def test_every_method_runs_on_the_messages_api(name: str, loopback_requests: None) -> None:
    with FakeOpenAIServer(judge) as server:
        server.mount(FakeMessages(prompt_cache=PromptCache()))
        backend = make_backend("anthropic:claude-test", base_url=server.base_url)
        llm = LLM(backend, budget=Budget(max_calls=150), sleep=_no_sleep)
        result = asyncio.run(run_method(create_method(name), marked_trace(), llm))
    assert result.status != "error", result.error
    calls = sent(server)
    if methods()[name].needs_model:
        assert calls, f"{name} made no Messages call"
        assert result.usage.calls == len(calls)
        assert result.usage.prompt_tokens > 0
        assert all(isinstance(c["messages"][0]["content"], list) for c in calls)
    else:
        assert not calls
    assert result.model == "anthropic:claude-test" or not methods()[name].needs_model


def test_cli_attribute_with_an_anthropic_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loopback_requests: None
) -> None:
    trace_file = tmp_path / "trace.json"
    trace_file.write_text(marked_trace().model_dump_json())
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-cli-key-4242")
    with FakeOpenAIServer(judge) as server:
        out = CliRunner().invoke(
            cli,
            [
                "attribute", str(trace_file), "--method", "all-at-once",
                "--model", "anthropic:claude-test", "--base-url", server.base_url,
                "--cache", "none",
            ],
        )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "agent:      Bob" in out.output and "step:       1" in out.output
    (request,) = [r for r in server.requests if r.api == "messages"]
    assert "sk-ant-cli-key-4242" in json.dumps(request.headers)
    assert "sk-ant-cli-key-4242" not in out.output


def long_trace() -> Any:
    """The observability probe with long step outputs: a log of ~5k tokens."""
    trace = marked_trace()
    for step in trace.steps:
        step.content += " " + "detail of the computation, checked twice. " * 40
    return trace


@pytest.mark.parametrize("name", ["echo", "chief"])
def test_echo_and_chief_read_their_shared_prefix_from_the_prompt_cache(
    name: str, loopback_requests: None
) -> None:
    """Both layouts send each user message as one text that starts with the case and the
    log; the backend learns where that shared part ends, marks it, and later calls read
    it from the cache (CHIEF's instructions-first system prompt is marked as well)."""
    with FakeOpenAIServer(judge) as server:
        server.mount(FakeMessages(prompt_cache=PromptCache()))
        llm = LLM(make_backend("anthropic:claude-test", base_url=server.base_url))
        result = asyncio.run(run_method(create_method(name), long_trace(), llm))
    calls = sent(server)
    cut = [c for c in calls if len(c["messages"][-1]["content"]) > 1]
    assert len(cut) >= len(calls) - 1  # all but the first call of the case
    for body in cut:
        first, *_, last = body["messages"][-1]["content"]
        assert "cache_control" in first and "cache_control" not in last
    if name == "chief":
        assert all("cache_control" in c["system"][-1] for c in calls)
    usage = result.usage
    assert usage.cache_write_prompt_tokens > 0
    assert usage.cached_prompt_tokens > usage.prompt_tokens / 2


def test_learned_prefixes_cut_at_a_line_end_after_the_same_context() -> None:
    memory = PrefixMemory(min_chars=20)
    case = "Case: Avalon.\nLog: step 0 said 140,210.\n"
    assert memory.cuts("ctx", case + "Question one?") == []  # nothing to share yet
    assert memory.cuts("ctx", case + "Question two?") == [len(case)]
    assert memory.cuts("ctx", case + "Question three?") == [len(case)]
    assert memory.cuts("other", case + "Question four?") == []  # another system prompt
    assert memory.cuts("ctx", "Case: Brigadoon.\nQuestion?") == []
    assert shared_line_prefix("ab\ncd", "ab\nce") == 3 and shared_line_prefix("abc", "abd") == 0
    small = PrefixMemory(min_chars=20, contexts=2)
    for context in ("a", "b", "c"):
        small.cuts(context, case + "Question one?")
    assert small.cuts("a", case + "Question two?") == []  # 'a' was forgotten
    assert small.cuts("c", case + "Question two?") == [len(case)]
