"""The LLM layer's bookkeeping: retries, parse retries, cache, budget, concurrency, usage."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from faultfinder import errors
from faultfinder.llm import (
    LLM,
    ChatRequest,
    Completion,
    FunctionBackend,
    ParseError,
    ScriptedBackend,
    TransientLLMError,
    run_index,
    track_usage,
)
from faultfinder.llm.base import approx_token_count
from faultfinder.llm.cache import ResponseCache, cache_key
from faultfinder.llm.openai_compat import OpenAICompatBackend
from faultfinder.testing import FakeOpenAIServer
from faultfinder.usage import Budget, Usage


class FlakyBackend(FunctionBackend):
    """Fails with TransientLLMError ``failures`` times, then answers 'ok'."""

    def __init__(self, failures: int, retry_after: float | None = None) -> None:
        self.failures = failures
        self.retry_after = retry_after
        self.attempts = 0
        super().__init__(self._answer, model="flaky")

    def _answer(self, request: ChatRequest) -> str:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise TransientLLMError("rate limited", retry_after=self.retry_after)
        return "ok"


class RecordingSleep:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def with_usage(text: str, prompt: int, completion: int) -> Completion:
    return Completion(text=text, usage=Usage(prompt_tokens=prompt, completion_tokens=completion))


# --- transport retries -----------------------------------------------------------


def test_transient_errors_are_retried_with_exponential_backoff() -> None:
    sleep = RecordingSleep()
    backend = FlakyBackend(failures=3)
    llm = LLM(backend, sleep=sleep, backoff_base=1.0, backoff_max=60.0)
    reply = run(llm.chat("hi"))
    assert reply.text == "ok"
    assert backend.attempts == 4
    assert len(sleep.delays) == 3
    # Jittered exponential: base * 2**attempt * [0.5, 1.0].
    for attempt, delay in enumerate(sleep.delays):
        assert 0.5 * 2**attempt <= delay <= 2**attempt
    assert llm.usage.calls == 1


def test_backoff_is_capped() -> None:
    sleep = RecordingSleep()
    llm = LLM(FlakyBackend(failures=4), sleep=sleep, backoff_base=10.0, backoff_max=15.0)
    run(llm.chat("hi"))
    assert max(sleep.delays) <= 15.0
    assert sleep.delays[-1] == 15.0


def test_retry_after_is_honoured() -> None:
    sleep = RecordingSleep()
    llm = LLM(FlakyBackend(failures=2, retry_after=7.5), sleep=sleep, backoff_base=0.01)
    assert run(llm.chat("hi")).text == "ok"
    assert sleep.delays == [7.5, 7.5]


def test_retry_after_beyond_the_cap_waits_the_cap() -> None:
    sleep = RecordingSleep()
    llm = LLM(FlakyBackend(failures=1, retry_after=500.0), sleep=sleep, backoff_max=30.0)
    run(llm.chat("hi"))
    assert sleep.delays == [30.0]


def test_giving_up_raises_llm_call_error() -> None:
    sleep = RecordingSleep()
    backend = FlakyBackend(failures=100)
    llm = LLM(backend, sleep=sleep, max_retries=2)
    with pytest.raises(errors.LLMCallError, match="after 3 attempts"):
        run(llm.chat("hi"))
    assert backend.attempts == 3
    assert len(sleep.delays) == 2
    # The request went out (three times): one call, its retries included, with no reply.
    assert (llm.usage.calls, llm.usage.completion_tokens) == (1, 0)


def test_a_call_with_no_reply_is_charged_its_prompt_as_reservations_scale_it() -> None:
    """The endpoint counted 3 tokens for each one the local estimate saw; a later call it
    never answered is charged its prompt scaled the same way (as its reservation was),
    not the bare estimate: a report must not say fewer tokens were used than were."""
    prompt = "word " * 40
    estimate = approx_token_count(prompt)
    answered: list[int] = []

    def answer(request: ChatRequest) -> Completion:
        if answered:
            raise TransientLLMError("HTTP 503")
        answered.append(1)
        return with_usage("ok", 3 * estimate, 1)

    llm = LLM(FunctionBackend(answer), max_retries=0, sleep=RecordingSleep())
    run(llm.chat(prompt))
    with (
        track_usage() as scope,
        pytest.raises(errors.LLMCallError, match="still failing") as raised,
    ):
        run(llm.chat(prompt))
    (record,) = scope.calls
    assert raised.value.sent is True
    assert (record.usage.calls, record.usage.completion_tokens) == (1, 0)
    assert record.usage.prompt_tokens == 3 * estimate and record.usage.estimated
    assert llm.usage.prompt_tokens == 6 * estimate


def test_non_transient_errors_are_not_retried() -> None:
    calls = []

    def broken(request: ChatRequest) -> str:
        calls.append(request)
        raise errors.LLMCallError("HTTP 400: bad request")

    with pytest.raises(errors.LLMCallError, match="400"):
        run(LLM(FunctionBackend(broken), sleep=RecordingSleep()).chat("hi"))
    assert len(calls) == 1


# --- parse retries ----------------------------------------------------------------


def parse_int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ParseError(f"not a number: {text!r}") from None


def test_parse_retry_succeeds_on_a_later_sample() -> None:
    backend = ScriptedBackend(["seven", "7"])
    reply = run(LLM(backend).chat("n?", parse=parse_int))
    assert reply.parsed == 7
    assert reply.ok
    assert reply.attempts == 2
    assert reply.usage.calls == 2
    # A parse retry is a new draw, not the same request again.
    assert backend.requests[0].sample != backend.requests[1].sample


def test_unparseable_reply_is_kept_raw_never_guessed() -> None:
    backend = ScriptedBackend(["no idea", "still none", "maybe 3ish"])
    llm = LLM(backend, parse_retries=2)
    with track_usage() as scope:
        reply = run(llm.chat("n?", parse=parse_int, purpose="count"))
    assert reply.parsed is None
    assert not reply.ok
    assert reply.text == "maybe 3ish"
    assert reply.parse_error is not None and "maybe 3ish" in reply.parse_error
    assert reply.attempts == 3
    assert len(backend.requests) == 3
    assert [c.parsed for c in scope.calls] == [False, False, False]
    assert [c.reply for c in scope.calls] == ["no idea", "still none", "maybe 3ish"]
    assert all(c.purpose == "count" for c in scope.calls)


def test_without_parse_there_is_one_attempt() -> None:
    backend = ScriptedBackend(["anything"])
    reply = run(LLM(backend).chat("hi"))
    assert reply.text == "anything"
    assert reply.parsed is None and reply.parse_error is None


# --- cache ------------------------------------------------------------------------


def counting_backend(text: str = "answer") -> FunctionBackend:
    return FunctionBackend(lambda request: with_usage(text, 10, 2), model="counted")


def test_cache_hit_and_miss(tmp_path: Path) -> None:
    backend = counting_backend()
    llm = LLM(backend, cache=ResponseCache(tmp_path / "cache.sqlite"))
    first = run(llm.chat("question"))
    second = run(llm.chat("question"))
    third = run(llm.chat("another question"))
    assert (first.cached, second.cached, third.cached) == (False, True, False)
    assert second.text == first.text
    assert len(backend.requests) == 2
    assert llm.usage.calls == 2
    assert llm.usage.cached_calls == 1
    # Cached calls still account their tokens.
    assert llm.usage.prompt_tokens == 30


def test_cache_survives_a_new_process(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    backend = counting_backend()
    run(LLM(backend, cache=ResponseCache(path)).chat("question"))
    again = run(LLM(backend, cache=ResponseCache(path)).chat("question"))
    assert again.cached
    assert len(backend.requests) == 1


def test_sample_index_and_run_index_are_distinct_entries(tmp_path: Path) -> None:
    backend = counting_backend()
    llm = LLM(backend, cache=ResponseCache(tmp_path / "cache.sqlite"))

    async def calls() -> None:
        await llm.chat("q", sample=0)
        await llm.chat("q", sample=1)
        await llm.chat("q", sample=1)
        with run_index(2):
            await llm.chat("q", sample=0)
            await llm.chat("q", sample=0)

    run(calls())
    assert [r.sample for r in backend.requests] == [0, 1, 0]
    assert len(llm.cache or []) == 3


def test_scripted_replies_are_never_served_from_cache(tmp_path: Path) -> None:
    backend = ScriptedBackend(["first", "second"])
    llm = LLM(backend, cache=ResponseCache(tmp_path / "cache.sqlite"))
    assert run(llm.chat("q")).text == "first"
    assert run(llm.chat("q")).text == "second"


def test_cache_key_excludes_credentials() -> None:
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}])
    one = OpenAICompatBackend("gpt-x", base_url="http://127.0.0.1:9/v1", api_key="sk-one")
    two = OpenAICompatBackend("gpt-x", base_url="http://127.0.0.1:9/v1", api_key="sk-two")
    other_url = OpenAICompatBackend("gpt-x", base_url="http://127.0.0.1:10/v1", api_key="sk-one")
    other_model = OpenAICompatBackend("gpt-y", base_url="http://127.0.0.1:9/v1", api_key="sk-one")
    key = cache_key(one.identity(), request)
    assert cache_key(two.identity(), request) == key
    assert cache_key(other_url.identity(), request) != key
    assert cache_key(other_model.identity(), request) != key
    assert "sk-one" not in repr(one.identity()) and "sk-one" not in repr(one)


def test_cache_key_depends_on_request_parameters() -> None:
    identity = {"backend": "x"}
    base = ChatRequest(messages=[{"role": "user", "content": "hi"}])
    keys = {
        cache_key(identity, base),
        cache_key(identity, base.model_copy(update={"temperature": 0.7})),
        cache_key(identity, base.model_copy(update={"max_tokens": 5})),
        cache_key(identity, base.model_copy(update={"sample": 1})),
        cache_key(identity, base, run=1),
    }
    assert len(keys) == 5


# --- budget -------------------------------------------------------------------------


def test_call_budget_stops_before_overspending() -> None:
    backend = counting_backend()
    llm = LLM(backend, budget=Budget(max_calls=2))

    async def calls() -> None:
        await llm.chat("a")
        await llm.chat("b")
        with pytest.raises(errors.BudgetExceededError, match="max-calls"):
            await llm.chat("c")

    run(calls())
    assert len(backend.requests) == 2
    assert llm.usage.calls == 2


def test_token_budget_refuses_a_call_that_could_overspend() -> None:
    backend = counting_backend()
    llm = LLM(backend, budget=Budget(max_tokens=100))
    # Prompt (~3 tokens) plus up to 200 completion tokens could exceed 100.
    with pytest.raises(errors.BudgetExceededError, match="max-tokens"):
        run(llm.chat("hello", max_tokens=200))
    assert backend.requests == []


def test_token_budget_counts_spent_tokens() -> None:
    backend = FunctionBackend(lambda request: with_usage("x", 40, 10))
    llm = LLM(backend, budget=Budget(max_tokens=110))

    async def calls() -> None:
        await llm.chat("a", max_tokens=9)  # may need 1 + 9; spends 50
        await llm.chat("b", max_tokens=9)  # 50 + 10 <= 110; spends 50 -> 100
        with pytest.raises(errors.BudgetExceededError):
            await llm.chat("c", max_tokens=10)  # 100 + 1 + 10 > 110

    run(calls())
    assert len(backend.requests) == 2
    assert llm.usage.total_tokens == 100


def test_cache_hits_do_not_consume_the_budget(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    backend = FunctionBackend(lambda request: with_usage("x", 40, 10))
    run(LLM(backend, cache=ResponseCache(path)).chat("a", max_tokens=10))
    llm = LLM(backend, cache=ResponseCache(path), budget=Budget(max_calls=1, max_tokens=70))

    async def calls() -> None:
        for _ in range(3):
            assert (await llm.chat("a", max_tokens=10)).cached
        await llm.chat("b", max_tokens=10)

    run(calls())
    assert llm.usage.calls == 1 and llm.usage.cached_calls == 3


def test_queued_calls_do_not_reserve_budget_before_they_run() -> None:
    # Each call may need ~1 + 100 tokens but spends 2; 10 calls fit a 300-token budget
    # when only the call in flight holds a reservation.
    async def cheap(request: ChatRequest) -> Completion:
        await asyncio.sleep(0.001)
        return with_usage("x", 1, 1)

    backend = FunctionBackend(cheap)
    llm = LLM(backend, concurrency=1, budget=Budget(max_tokens=300))

    async def calls() -> list[Any]:
        return await asyncio.gather(*(llm.chat(f"q{i}", max_tokens=100) for i in range(10)))

    assert len(run(calls())) == 10
    assert llm.usage.total_tokens == 20


def test_concurrent_calls_never_exceed_the_call_budget() -> None:
    async def slow(request: ChatRequest) -> str:
        await asyncio.sleep(0.01)
        return "x"

    backend = FunctionBackend(slow)
    llm = LLM(backend, concurrency=8, budget=Budget(max_calls=5))

    async def calls() -> list[Any]:
        return await asyncio.gather(*(llm.chat(f"q{i}") for i in range(12)), return_exceptions=True)

    results = run(calls())
    refused = [r for r in results if isinstance(r, errors.BudgetExceededError)]
    assert len(backend.requests) == 5
    assert len(refused) == 7


# --- concurrency -----------------------------------------------------------------------


def test_concurrency_limit_is_respected() -> None:
    state = {"now": 0, "max": 0}

    async def slow(request: ChatRequest) -> str:
        state["now"] += 1
        state["max"] = max(state["max"], state["now"])
        await asyncio.sleep(0.01)
        state["now"] -= 1
        return "x"

    llm = LLM(FunctionBackend(slow), concurrency=3)

    async def calls() -> None:
        await asyncio.gather(*(llm.chat(f"q{i}") for i in range(12)))

    run(calls())
    assert state["max"] == 3


def test_llm_works_across_event_loops() -> None:
    llm = LLM(ScriptedBackend(["a", "b"]), concurrency=1)
    assert run(llm.chat("1")).text == "a"
    assert run(llm.chat("2")).text == "b"


# --- usage ------------------------------------------------------------------------------


def test_usage_scopes_nest_and_isolate_concurrent_tasks() -> None:
    backend = FunctionBackend(lambda request: with_usage("x", 10, 1))
    llm = LLM(backend)

    async def one_trace(n_calls: int) -> Usage:
        with track_usage() as scope:
            for i in range(n_calls):
                await llm.chat(f"{n_calls}-{i}")
                await asyncio.sleep(0)
        return scope.usage

    async def main() -> tuple[Usage, Usage, list[Usage]]:
        with track_usage() as outer:
            with track_usage() as inner:
                await llm.chat("first")
            per_task = await asyncio.gather(one_trace(1), one_trace(2), one_trace(3))
        return outer.usage, inner.usage, list(per_task)

    outer, inner, per_task = run(main())
    assert inner.calls == 1
    assert [u.calls for u in per_task] == [1, 2, 3]
    assert [u.prompt_tokens for u in per_task] == [10, 20, 30]
    assert outer.calls == 7
    assert llm.usage.calls == 7


def test_token_usage_is_estimated_only_when_missing() -> None:
    reported = run(LLM(FunctionBackend(lambda r: with_usage("four", 100, 4))).chat("hi"))
    assert reported.usage.prompt_tokens == 100
    assert not reported.usage.estimated

    prompt = "a" * 400
    estimated = run(LLM(FunctionBackend(lambda r: "x" * 40)).chat(prompt))
    assert estimated.usage.estimated
    assert estimated.usage.prompt_tokens == approx_token_count(prompt)
    assert estimated.usage.completion_tokens == approx_token_count("x" * 40)


def test_keep_prompts_records_the_last_user_message() -> None:
    llm = LLM(ScriptedBackend(["r"]), keep_prompts=True)
    with track_usage() as scope:
        run(llm.chat([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]))
    assert scope.calls[0].prompt == "u"
    assert scope.calls[0].request_hash


# --- the global switch ----------------------------------------------------------------


def test_real_backends_are_refused_in_tests() -> None:
    with FakeOpenAIServer(reply="should not be asked") as server:
        llm = LLM(OpenAICompatBackend("m", base_url=server.base_url))
        with pytest.raises(errors.ModelRequestsForbiddenError, match="ALLOW_MODEL_REQUESTS"):
            run(llm.chat("hi"))
        assert server.requests == []


def test_a_reply_whose_counts_are_estimated_keeps_its_reported_cache_count() -> None:
    # The server said 0 prompt tokens were cached (measured) but gave no completion count:
    # the completion is estimated, and the cache figure stays a measured 0, not unknown.
    reply = Completion(
        text="Agent Name: A",
        usage=Usage(prompt_tokens=50, completion_tokens=0, cache_reported=True),
    )
    llm = LLM(FunctionBackend(lambda request: reply))
    out = run(llm.chat([{"role": "user", "content": "q"}]))
    assert out.usage.estimated and out.usage.completion_tokens > 0
    assert out.usage.cache_reported and out.usage.cached_prompt_tokens == 0
