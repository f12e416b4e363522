"""One budget and one request rate for a whole cluster, held by a Ray actor.

Workers build their LLM with :class:`RayLedger` and :class:`RayRateLimiter`, which ask the
run's :class:`SharedLimits` actor instead of keeping counts of their own. The actor runs
one method at a time, so reservations from fifty workers are as exact as from one process;
the arithmetic is the same :class:`~faultfinder.llm.limits.BudgetBook` and
:class:`~faultfinder.llm.limits.RateSchedule` the local classes use.
"""

from __future__ import annotations

import asyncio
from typing import Any

from faultfinder import errors
from faultfinder.llm.limits import BudgetBook, RateSchedule
from faultfinder.scale.cluster import require_ray
from faultfinder.usage import Budget

ray = require_ray()


@ray.remote(num_cpus=0, max_restarts=0)
class SharedLimits:
    """The run's budget book and the endpoint's rate schedule."""

    def __init__(self, budget: dict[str, Any], rate: float | None, burst: int = 1) -> None:
        self.book = BudgetBook(Budget.model_validate(budget))
        self.schedule = RateSchedule(rate, burst) if rate else None

    def reserve(self, tokens: int) -> str | None:
        """None when the call may go; the budget message when it may not."""
        try:
            self.book.reserve(tokens)
        except errors.BudgetExceededError as exc:
            return str(exc)
        return None

    def settle(self, reserved: int, spent: int, called: bool) -> None:
        self.book.settle(reserved, spent, called=called)

    def claim(self) -> float:
        return self.schedule.claim() if self.schedule else 0.0

    def snapshot(self) -> dict[str, int]:
        b = self.book
        return {
            "calls": b.calls,
            "spent_tokens": b.spent_tokens,
            "reserved_calls": b.reserved_calls,
            "reserved_tokens": b.reserved_tokens,
        }


class RayLedger:
    """A :class:`~faultfinder.llm.limits.Ledger` kept by a :class:`SharedLimits` actor."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    async def reserve(self, tokens: int) -> None:
        refused = await self.actor.reserve.remote(tokens)
        if refused:
            raise errors.BudgetExceededError(refused)

    async def settle(self, reserved: int, spent: int, *, called: bool) -> None:
        await self.actor.settle.remote(reserved, spent, called)


class RayRateLimiter:
    """A :class:`~faultfinder.llm.limits.RateLimiter` scheduled by a :class:`SharedLimits`."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    async def acquire(self) -> None:
        wait = await self.actor.claim.remote()
        if wait > 0:
            await asyncio.sleep(wait)
