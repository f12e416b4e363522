"""The prefix-cache stand-in: what a caching server would report, offline and over HTTP."""

from __future__ import annotations

import asyncio

import pytest

from faultfinder.llm import base
from faultfinder.llm.base import ChatRequest
from faultfinder.llm.client import LLM
from faultfinder.llm.doubles import ScriptedBackend
from faultfinder.llm.scopes import track_usage
from faultfinder.testing.prefix_cache import (
    PrefixCache,
    PrefixCachingBackend,
    prompt_text,
    shared_prefix,
)

LOG = "x" * 8000  # 2,000 estimated tokens


def _request(*messages: tuple[str, str]) -> ChatRequest:
    return ChatRequest(messages=[{"role": r, "content": c} for r, c in messages])


def test_shared_prefix_is_exact() -> None:
    assert shared_prefix("abcdef", "abcxyz") == 3
    assert shared_prefix("", "abc") == 0
    assert shared_prefix("same", "same") == 4
    assert shared_prefix("a" * 1000 + "b", "a" * 1000 + "c") == 1000


def test_first_prompt_is_never_cached_and_a_shared_log_is() -> None:
    cache = PrefixCache()
    first = cache.usage_for(_request(("user", LOG + "\nQuestion one?")))
    second = cache.usage_for(_request(("user", LOG + "\nQuestion two, longer?")))
    assert first.cached_prompt_tokens == 0
    # The shared part is the role header plus the log: about 2,002 tokens, served in
    # whole 128-token blocks.
    assert second.cached_prompt_tokens == 1920
    assert second.cached_prompt_tokens % 128 == 0
    assert second.uncached_prompt_tokens == second.prompt_tokens - 1920


def test_question_first_layout_shares_nothing() -> None:
    cache = PrefixCache()
    cache.usage_for(_request(("user", "Question one?\n" + LOG)))
    again = cache.usage_for(_request(("user", "Other question?\n" + LOG)))
    assert again.cached_prompt_tokens == 0


def test_short_prefixes_are_not_served() -> None:
    cache = PrefixCache()
    short = "y" * 2000  # 500 tokens, under the 1,024 minimum
    cache.usage_for(_request(("user", short + "a")))
    assert cache.usage_for(_request(("user", short + "b"))).cached_prompt_tokens == 0


def test_a_different_system_message_breaks_the_prefix() -> None:
    cache = PrefixCache()
    cache.usage_for(_request(("system", "You are analyst A."), ("user", LOG)))
    other = cache.usage_for(_request(("system", "You are analyst B."), ("user", LOG)))
    assert other.cached_prompt_tokens == 0
    assert prompt_text([{"role": "user", "content": "hi"}]).startswith("<|user|>")


def test_the_llm_layer_keeps_cached_tokens_from_a_wrapped_backend() -> None:
    backend = PrefixCachingBackend(ScriptedBackend(["A", "B"]))
    llm = LLM(backend)

    async def run() -> None:
        await llm.chat(LOG + "\nfirst")
        await llm.chat(LOG + "\nsecond")

    with track_usage() as scope:
        asyncio.run(run())
    assert scope.usage.calls == 2
    assert scope.usage.cached_prompt_tokens == 1920
    assert scope.calls[1].usage.cached_prompt_tokens == 1920


def test_the_fake_upstream_reports_cached_tokens_through_the_openai_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)  # a loopback fake, not a model
    from faultfinder.llm.openai_compat import OpenAICompatBackend
    from faultfinder.testing.fake_openai import FakeOpenAIServer

    with FakeOpenAIServer("ok", prefix_cache=PrefixCache()) as server:
        llm = LLM(OpenAICompatBackend("fake-model", base_url=server.base_url))

        async def run() -> None:
            await llm.chat(LOG + "\none")
            await llm.chat(LOG + "\ntwo")

        with track_usage() as scope:
            asyncio.run(run())
    assert scope.calls[0].usage.cached_prompt_tokens == 0
    assert scope.calls[1].usage.cached_prompt_tokens == 1920


def test_requests_sent_together_miss_each_others_prefix() -> None:
    """A server caches a prompt once it has processed it: concurrent first requests all
    pay for the shared log; one sent after them finds it."""
    backend = PrefixCachingBackend(ScriptedBackend(["A", "B", "C"]))
    llm = LLM(backend)

    async def run() -> None:
        await asyncio.gather(llm.chat(LOG + "\none"), llm.chat(LOG + "\ntwo"))
        await llm.chat(LOG + "\nthree")

    with track_usage() as scope:
        asyncio.run(run())
    assert [c.usage.cached_prompt_tokens for c in scope.calls] == [0, 0, 1920]


def test_the_fake_upstream_caches_only_answered_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)  # a loopback fake, not a model
    from faultfinder.llm.openai_compat import OpenAICompatBackend
    from faultfinder.testing.fake_openai import FakeOpenAIServer

    with FakeOpenAIServer("ok", latency=0.2, prefix_cache=PrefixCache()) as server:
        llm = LLM(OpenAICompatBackend("fake-model", base_url=server.base_url))

        async def run() -> None:
            await asyncio.gather(llm.chat(LOG + "\none"), llm.chat(LOG + "\ntwo"))
            await llm.chat(LOG + "\nthree")

        with track_usage() as scope:
            asyncio.run(run())
    assert [c.usage.cached_prompt_tokens for c in scope.calls] == [0, 0, 1920]


@pytest.mark.parametrize("capacity", [1, 4])
def test_capacity_bounds_memory(capacity: int) -> None:
    cache = PrefixCache(capacity=capacity)
    for i in range(10):
        cache.usage_for(_request(("user", f"{i}" + LOG)))
    assert len(cache._seen) == capacity


def _naive(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_shared_prefix_agrees_with_the_obvious_definition() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=300, deadline=None)
    @given(st.text(alphabet="ab", max_size=1200), st.text(alphabet="ab", max_size=1200))
    def check(a: str, b: str) -> None:
        assert shared_prefix(a, b) == _naive(a, b)
        assert shared_prefix(a + b, a + "c") == len(a) + _naive(b, "c")

    check()
