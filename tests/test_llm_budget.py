"""Budgets that hold: reserved before each call, charged on actual usage, never disabled
by what a server reports."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from faultfinder import errors
from faultfinder.llm import LLM, ChatRequest, FunctionBackend
from faultfinder.llm.base import Completion, approx_token_count, messages_text
from faultfinder.llm.client import UNCAPPED_OUTPUT
from faultfinder.usage import Budget, Usage

PROMPT = "x" * 400  # 100 tokens by the local estimate


async def _many(llm: LLM, n: int, **options: Any) -> tuple[int, int]:
    """Fire ``n`` concurrent calls; (calls answered, calls refused by the budget)."""

    async def one(i: int) -> bool:
        try:
            await llm.chat(f"{i} {PROMPT}", **options)
            return True
        except errors.BudgetExceededError:
            return False

    done = await asyncio.gather(*(one(i) for i in range(n)))
    return sum(done), n - sum(done)


def reply_with_usage(prompt: Any, completion: Any, text: str = "y" * 40) -> FunctionBackend:
    async def reply(request: ChatRequest) -> Completion:
        await asyncio.sleep(0.01)
        p = prompt(request) if callable(prompt) else prompt
        return Completion(text=text, usage=Usage(prompt_tokens=p, completion_tokens=completion))

    return FunctionBackend(reply)


def test_concurrent_calls_cannot_overspend_when_the_server_counts_more() -> None:
    # The server's tokenizer counts 4x the local estimate: reservations made on the
    # estimate alone let the first wave of concurrent calls spend far past the budget.
    def four_times(request: ChatRequest) -> int:
        return 4 * approx_token_count(messages_text(request.messages))

    llm = LLM(reply_with_usage(four_times, 100), concurrency=8, budget=Budget(max_tokens=3000))
    answered, refused = asyncio.run(_many(llm, 20, max_tokens=100))
    assert refused > 0
    assert llm.usage.total_tokens <= 3000
    assert answered >= 4  # the budget is used, not refused outright


@pytest.mark.parametrize(
    ("prompt", "completion"),
    [(-100_000, -100_000), (0, 1), (-1, 0), (0, 0)],
)
def test_missing_or_negative_usage_cannot_disable_the_budget(prompt: int, completion: int) -> None:
    llm = LLM(reply_with_usage(prompt, completion), concurrency=4, budget=Budget(max_tokens=1500))
    answered, refused = asyncio.run(_many(llm, 40, max_tokens=20))
    assert refused > 0 and answered < 40
    assert 0 < llm.usage.total_tokens <= 1500
    assert llm.usage.estimated


def test_call_budget_holds_under_concurrency() -> None:
    backend = reply_with_usage(10, 10)
    llm = LLM(backend, concurrency=8, budget=Budget(max_calls=5))
    answered, refused = asyncio.run(_many(llm, 30, max_tokens=20))
    assert answered == 5 and len(backend.requests) == 5 and refused == 25


def test_a_call_without_an_output_cap_reserves_a_default_output() -> None:
    # No max_tokens: UNCAPPED_OUTPUT tokens are reserved for the reply, not zero.
    backend = reply_with_usage(100, 50)
    llm = LLM(backend, concurrency=8, budget=Budget(max_tokens=UNCAPPED_OUTPUT + 150))
    answered, refused = asyncio.run(_many(llm, 8, max_tokens=None))
    assert llm.usage.total_tokens <= UNCAPPED_OUTPUT + 150
    assert answered == 1 and refused == 7


def test_tool_definitions_count_as_prompt() -> None:
    tools = [{"type": "function", "function": {"name": "f", "description": "d" * 4000}}]
    llm = LLM(reply_with_usage(0, 0), budget=Budget(max_tokens=600))
    with pytest.raises(errors.BudgetExceededError):
        asyncio.run(llm.chat("hi", tools=tools, max_tokens=10))
