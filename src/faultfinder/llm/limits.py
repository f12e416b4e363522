"""Budgets and request rates, behind two small interfaces.

The LLM layer asks a :class:`Ledger` before every model call and tells it what the call
spent afterwards, and waits on a :class:`RateLimiter` before every attempt. The classes
here keep that state in this process. ``faultfinder.scale.limits`` keeps it in one Ray
actor instead, so that many worker processes share one budget and one rate.

The arithmetic lives in :class:`BudgetBook` and :class:`RateSchedule`, plain synchronous
objects, so the in-process and the shared versions cannot drift apart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from faultfinder import errors
from faultfinder.usage import Budget


@runtime_checkable
class Ledger(Protocol):
    """Holds the token and call budget of a run."""

    async def reserve(self, tokens: int) -> None:
        """Hold one call and up to ``tokens`` tokens, or raise ``BudgetExceededError``."""
        ...

    async def settle(self, reserved: int, spent: int, *, called: bool) -> None:
        """Release a reservation of ``reserved`` tokens; ``spent`` were really used."""
        ...


@runtime_checkable
class RateLimiter(Protocol):
    """Spaces requests to an endpoint."""

    async def acquire(self) -> None:
        """Wait until one more request may be sent."""
        ...


class BudgetBook:
    """Calls made, tokens spent and what calls in flight may still spend.

    A call reserves its prompt tokens plus its output cap before it is sent, so calls
    running at the same time cannot together overshoot the budget; when it returns, the
    reservation is swapped for what it really spent.
    """

    def __init__(
        self,
        budget: Budget,
        *,
        what: str = "Token budget",
        hint: str = "Raise --max-tokens or narrow the run.",
        error: type[errors.BudgetExceededError] = errors.BudgetExceededError,
    ) -> None:
        self.budget = budget
        self.what = what
        """How messages name this budget ('Token budget', 'Per-case token budget')."""
        self.hint = hint
        """What the user can do, ending every token-budget message."""
        self.error = error
        """The error raised when a reservation does not fit."""
        self.calls = 0
        self.spent_tokens = 0
        self.reserved_calls = 0
        self.reserved_tokens = 0

    def reserve(self, tokens: int) -> None:
        b = self.budget
        if b.max_calls is not None and self.calls + self.reserved_calls + 1 > b.max_calls:
            raise errors.BudgetExceededError(
                f"Call budget of {b.max_calls} reached ({self._calls_so_far()}). "
                "Raise --max-calls or narrow the run."
            )
        if (
            b.max_tokens is not None
            and self.spent_tokens + self.reserved_tokens + tokens > b.max_tokens
        ):
            held = (
                f", {self.reserved_tokens} held by calls in flight" if self.reserved_tokens else ""
            )
            raise self.error(
                f"{self.what} of {b.max_tokens} would be exceeded: "
                f"{self.spent_tokens} spent{held}, next call may need up to {tokens}. "
                f"{self.hint}"
            )
        self.reserved_calls += 1
        self.reserved_tokens += tokens

    def _calls_so_far(self) -> str:
        """'5 calls made' or '2 calls made, 3 in flight': a call in flight holds its
        place in the call budget until it returns."""
        made = f"{self.calls} call{'' if self.calls == 1 else 's'} made"
        return f"{made}, {self.reserved_calls} in flight" if self.reserved_calls else made

    @property
    def tokens_left(self) -> int | None:
        """Tokens a new reservation may still take (None: no token limit)."""
        if self.budget.max_tokens is None:
            return None
        return max(0, self.budget.max_tokens - self.spent_tokens - self.reserved_tokens)

    def settle(self, reserved: int, spent: int, *, called: bool) -> None:
        self.reserved_calls -= 1
        self.reserved_tokens -= reserved
        if called:
            self.calls += 1
            self.spent_tokens += max(spent, 0)


class RateSchedule:
    """When the next request may go: at most ``rate`` per second, bursts of ``burst``.

    The generic cell rate algorithm: each request moves a theoretical arrival time one
    interval on, and a request may go once that time is no more than ``burst - 1``
    intervals ahead of the clock.
    """

    def __init__(self, rate: float, burst: int = 1, clock: Callable[[], float] = time.monotonic):
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.interval = 1.0 / rate
        self.burst = max(1, burst)
        self._clock = clock
        self._arrival = clock()

    def claim(self) -> float:
        """Book a slot; return how many seconds the caller must wait before sending."""
        now = self._clock()
        arrival = max(self._arrival, now)
        self._arrival = arrival + self.interval
        return max(0.0, arrival - now - (self.burst - 1) * self.interval)


class LocalLedger:
    """A :class:`BudgetBook` for the tasks of one process."""

    def __init__(self, budget: Budget) -> None:
        self.book = BudgetBook(budget)

    async def reserve(self, tokens: int) -> None:
        self.book.reserve(tokens)

    async def settle(self, reserved: int, spent: int, *, called: bool) -> None:
        self.book.settle(reserved, spent, called=called)


class LocalRateLimiter:
    """A :class:`RateSchedule` for the tasks of one process."""

    def __init__(self, rate: float, burst: int = 1) -> None:
        self.schedule = RateSchedule(rate, burst)

    async def acquire(self) -> None:
        wait = self.schedule.claim()
        if wait > 0:
            await asyncio.sleep(wait)
