"""Budget and rate arithmetic shared by the in-process LLM layer and the Ray actor."""

from __future__ import annotations

import asyncio

import pytest

from faultfinder.errors import BudgetExceededError
from faultfinder.llm import LLM, FunctionBackend
from faultfinder.llm.limits import BudgetBook, LocalLedger, RateSchedule
from faultfinder.usage import Budget


def test_reservations_count_against_the_budget_until_settled() -> None:
    book = BudgetBook(Budget(max_tokens=100, max_calls=3))
    book.reserve(60)
    with pytest.raises(BudgetExceededError, match="Token budget of 100"):
        book.reserve(50)  # 60 held + 50 > 100, although nothing is spent yet
    book.settle(60, 20, called=True)
    book.reserve(50)  # 20 spent + 50 held
    book.settle(50, 0, called=False)  # a failed call spends nothing
    assert (book.calls, book.spent_tokens, book.reserved_tokens) == (1, 20, 0)
    book.reserve(1)
    book.reserve(1)
    with pytest.raises(BudgetExceededError, match="Call budget of 3"):
        book.reserve(1)


def test_negative_usage_cannot_refill_the_budget() -> None:
    book = BudgetBook(Budget(max_tokens=10))
    book.reserve(5)
    book.settle(5, -1000, called=True)
    assert book.spent_tokens == 0


def test_rate_schedule_spaces_claims_after_a_burst() -> None:
    now = [100.0]
    schedule = RateSchedule(rate=2.0, burst=2, clock=lambda: now[0])
    waits = [schedule.claim() for _ in range(5)]
    assert waits == [0.0, 0.0, 0.5, 1.0, 1.5]
    now[0] += 10  # idle: the burst is available again
    assert [schedule.claim(), schedule.claim(), schedule.claim()] == [0.0, 0.0, 0.5]


def test_llm_uses_the_ledger_it_is_given() -> None:
    ledger = LocalLedger(Budget(max_calls=1))
    llm = LLM(FunctionBackend(lambda r: "ok"), ledger=ledger)
    asyncio.run(llm.chat("one"))
    with pytest.raises(BudgetExceededError):
        asyncio.run(llm.chat("two"))
    assert ledger.book.calls == 1 and ledger.book.reserved_calls == 0
