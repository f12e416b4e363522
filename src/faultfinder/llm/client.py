"""The LLM every method uses: one backend plus retries, caching, limits and accounting.

The scopes its calls are counted in (``track_usage``, ``run_index``, a case's token
budget) and the :class:`CallRecord` each call leaves are in :mod:`faultfinder.llm.scopes`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, Field

from faultfinder import errors
from faultfinder.llm import base
from faultfinder.llm.base import (
    Backend,
    ChatRequest,
    Completion,
    OutputConstraint,
    TransientLLMError,
    incomplete_reason,
    last_user_text,
    messages_text,
    request_text,
)
from faultfinder.llm.cache import ResponseCache, cache_key
from faultfinder.llm.limits import Ledger, LocalLedger, LocalRateLimiter, RateLimiter
from faultfinder.llm.scopes import (
    CallRecord,
    active_scopes,
    current_run,
    reserve_all,
    scope_books,
    settle_all,
)
from faultfinder.traces.schema import ToolCall
from faultfinder.usage import Budget, Usage

T = TypeVar("T")


class ParseError(ValueError):
    """A reply could not be parsed. Parsers raise it; the raw reply is kept."""


class Reply(BaseModel, Generic[T]):
    """What ``LLM.chat`` returns: text, parsed value (or the parse error), usage, raw reply."""

    text: str
    parsed: T | None = None
    parse_error: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    raw: dict[str, Any] | None = None
    attempts: int = 1
    cached: bool = False
    finish_reason: str | None = None
    """Why the (last) reply ended, as the backend said: ``stop``, ``tool_calls``,
    ``length`` (cut off at the output limit), ``content_filter``..."""

    @property
    def ok(self) -> bool:
        return self.parse_error is None


DEFAULT_TIMEOUT = 600.0
"""Seconds one model call may take, retries and backoff included (``--timeout``)."""
UNCAPPED_OUTPUT = 4096
"""Output tokens reserved under a token budget for a request without ``max_tokens``."""


class LLM:
    """A backend with retries, a concurrency limit, a cache, a budget and token accounting.

    Budgets hold under concurrency: before a call starts, its worst case (the prompt's
    tokens, scaled by how far the backend's counts have exceeded local estimates so far,
    plus the output cap) is reserved, and a call that could overspend is refused. After the
    call its actual usage is charged; usage a server reports as missing, zero or negative
    is replaced by the local estimate, so a server cannot switch the budget off.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        cache: ResponseCache | None = None,
        max_retries: int = 5,
        backoff_base: float = 1.0,
        backoff_max: float = 60.0,
        concurrency: int = 8,
        budget: Budget | None = None,
        parse_retries: int = 2,
        keep_prompts: bool = False,
        timeout: float | None = DEFAULT_TIMEOUT,
        sleep: Callable[[float], Any] = asyncio.sleep,
        ledger: Ledger | None = None,
        limiter: RateLimiter | None = None,
        rate_limit: float | None = None,
    ) -> None:
        self.backend = backend
        self.cache = cache
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.concurrency = concurrency
        self.budget = budget or Budget()
        self.parse_retries = parse_retries
        self.keep_prompts = keep_prompts
        self.usage = Usage()
        self.on_call: Callable[[CallRecord], None] | None = None
        """Called after every call (cached ones too), e.g. to show progress."""
        self._sleep = sleep
        self._semaphores: dict[int, asyncio.Semaphore] = {}
        self.timeout = timeout
        # The budget is held by a ledger: this process's own, or one shared by many
        # processes (a Ray actor). Cache hits cost nothing, so they never reach it.
        self.ledger: Ledger = ledger or LocalLedger(self.budget)
        self.limiter: RateLimiter | None = limiter or (
            LocalRateLimiter(rate_limit) if rate_limit else None
        )
        # Largest ratio of reported to locally estimated prompt tokens seen so far (>= 1):
        # reservations scale estimates by it, so an optimistic tokenizer cannot overspend.
        self._prompt_ratio = 1.0
        self._calibrated = False
        self._calibration_locks: dict[int, asyncio.Lock] = {}

    @property
    def name(self) -> str:
        return self.backend.name

    @property
    def model(self) -> str:
        return self.backend.model

    @property
    def supports_tools(self) -> bool:
        return self.backend.supports_tools

    def count_tokens(self, text: str) -> int:
        return self.backend.count_tokens(text)

    def reservation(self, prompt: str, max_tokens: int | None) -> int:
        """Tokens a one-message call with this prompt and reply bound reserves against a
        budget (the same figure the call itself will reserve), for methods that plan."""
        text = messages_text([{"role": "user", "content": prompt}])
        return self._need(self.backend.count_tokens(text), max_tokens)

    def _semaphore(self) -> asyncio.Semaphore:
        # One semaphore per event loop: eval runs and tests may use several loops in turn.
        loop_id = id(asyncio.get_running_loop())
        if loop_id not in self._semaphores:
            self._semaphores[loop_id] = asyncio.Semaphore(self.concurrency)
        return self._semaphores[loop_id]

    @contextlib.asynccontextmanager
    async def _calibration(self) -> AsyncIterator[None]:
        """Under a token budget, the first call runs alone: only once it has finished is it
        known how the backend's token counts compare with the local estimate."""
        if self.budget.max_tokens is None or self._calibrated:
            yield
            return
        loop_id = id(asyncio.get_running_loop())
        lock = self._calibration_locks.setdefault(loop_id, asyncio.Lock())
        await lock.acquire()
        if self._calibrated:  # another call finished first: no need to queue
            lock.release()
            yield
            return
        try:
            yield
        finally:
            lock.release()

    async def chat(
        self,
        messages: list[dict[str, Any]] | str,
        *,
        parse: Callable[[str], T] | None = None,
        purpose: str = "",
        temperature: float | None = 0.0,
        top_p: float | None = None,
        max_tokens: int | None = 1024,
        seed: int | None = None,
        stop: list[str] | None = None,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        constraint: OutputConstraint | None = None,
        sample: int = 0,
    ) -> Reply[T]:
        """Ask the model. With ``parse``, unparseable replies are re-sampled ``parse_retries``
        times and then returned with ``parsed=None`` and ``parse_error`` set (never guessed)."""
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        total = Usage()
        attempts = 0
        last: Completion | None = None
        last_error: str | None = None
        cached = False
        for attempt in range(self.parse_retries + 1 if parse else 1):
            attempts += 1
            request = ChatRequest(
                messages=messages,
                temperature=temperature,
                top_p=top_p,
                max_tokens=max_tokens,
                seed=seed,
                stop=stop,
                tools=tools,
                tool_choice=tool_choice,
                constraint=constraint,
                # A parse retry must be a new draw, not the same cached reply.
                sample=sample + 1000 * attempt,
            )
            try:
                completion, cached, key = await self._complete(request)
            except errors.LLMCallError as exc:
                if exc.sent:  # it went out: a report must not say fewer calls went live
                    self._record(self._failed_call(purpose, request, exc))
                raise
            last = completion
            call_usage = completion.usage.model_copy(
                update={"calls": 0 if cached else 1, "cached_calls": 1 if cached else 0}
            )
            total = total + call_usage
            record = CallRecord(
                purpose=purpose,
                request_hash=key[:16],
                prompt=last_user_text(messages) if self.keep_prompts else None,
                reply=completion.text,
                tool_calls=completion.tool_calls,
                usage=call_usage,
                cached=cached,
                finish_reason=completion.finish_reason,
            )
            if parse is None:
                self._record(record)
                return Reply(
                    text=completion.text,
                    tool_calls=completion.tool_calls,
                    usage=total,
                    raw=completion.raw,
                    attempts=attempts,
                    cached=cached,
                    finish_reason=completion.finish_reason,
                )
            unfinished = incomplete_reason(completion, request.max_tokens)
            if unfinished is not None:
                # Never parsed: a cut-off reply can hold a cut-off value. Cut off or
                # withheld, a new sample under the same limit and filter ends the same way;
                # an empty reply is re-sampled as an unreadable one is.
                last_error = record.parse_error = unfinished
                record.parsed = False
                self._record(record)
                if completion.finish_reason in base.CUT_OFF | base.WITHHELD:
                    break
                continue
            try:
                value = parse(completion.text)
            except (ParseError, ValueError) as exc:
                last_error = str(exc) or type(exc).__name__
                record.parsed = False
                record.parse_error = last_error
                self._record(record)
                continue
            self._record(record)
            return Reply(
                text=completion.text,
                parsed=value,
                tool_calls=completion.tool_calls,
                usage=total,
                raw=completion.raw,
                attempts=attempts,
                cached=cached,
                finish_reason=completion.finish_reason,
            )
        assert last is not None
        return Reply(
            text=last.text,
            parsed=None,
            parse_error=last_error,
            tool_calls=last.tool_calls,
            usage=total,
            raw=last.raw,
            attempts=attempts,
            cached=cached,
            finish_reason=last.finish_reason,
        )

    def _failed_call(
        self, purpose: str, request: ChatRequest, exc: errors.LLMCallError
    ) -> CallRecord:
        """The record of a call sent that brought no reply: one call, charged what
        ``_complete`` charged it (put on the error), no reply."""
        usage = base.reported_usage(exc) or self._unanswered(
            self.backend.count_tokens(request_text(request)), Usage()
        )
        return CallRecord(
            purpose=purpose,
            prompt=last_user_text(request.messages) if self.keep_prompts else None,
            parsed=False,
            parse_error=f"no reply: {exc}",
            usage=usage,
        )

    def _unanswered(self, prompt_estimate: int, reported: Usage) -> Usage:
        """What a call that went out and brought no reply is charged: never less than was
        used. The prompt the backend reported reading (the local estimate when that is
        more); with no report, the estimate scaled as reservations scale it (the chat
        template and the tokenizer's difference are unknown). The completion tokens the
        backend reported generating before it stopped (none when it says nothing)."""
        if reported.prompt_tokens > 0:
            prompt = max(prompt_estimate, reported.prompt_tokens)
        else:
            prompt = self._scaled(prompt_estimate)
        return Usage(
            prompt_tokens=prompt,
            completion_tokens=reported.completion_tokens,
            calls=1,
            estimated=reported.estimated or prompt > reported.prompt_tokens or not prompt,
        )

    def _record(self, record: CallRecord) -> None:
        self.usage = self.usage + record.usage
        for scope in active_scopes():
            scope.add(record)
        if self.on_call is not None:
            self.on_call(record)

    async def _complete(self, request: ChatRequest) -> tuple[Completion, bool, str]:
        key = cache_key(self.backend.identity(), request, current_run())
        books = scope_books()
        prompt_estimate = self.backend.count_tokens(request_text(request)) if books else None
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None and incomplete_reason(hit, request.max_tokens) is None:
                if books and prompt_estimate is not None:
                    # A case budget charges cache hits too, through the same reservation.
                    need = self._need(prompt_estimate, request.max_tokens)
                    reserve_all(books, need)
                    settle_all(books, need, hit.usage.total_tokens)
                return hit, True, key
        if self.backend.is_real and not base.ALLOW_MODEL_REQUESTS:
            raise errors.ModelRequestsForbiddenError(self.backend.name)
        if prompt_estimate is None:
            prompt_estimate = self.backend.count_tokens(request_text(request))
        async with self._semaphore(), self._calibration():
            # Reserve only once a slot is free: queued calls must not hold budget they may
            # never need, and by then the real spend of finished calls is known.
            need = self._need(prompt_estimate, request.max_tokens)
            reserve_all(books, need)
            try:
                await self.ledger.reserve(need)
            except BaseException:
                settle_all(books, need, 0, called=False)
                raise
            attempts = _Attempts()
            try:
                completion = await self._with_deadline(request, attempts)
            except BaseException as exc:
                # A request that went out and failed counts as a call, with its prompt (and
                # what the backend says it generated), in budgets too. Any other exception
                # (a bad request refused before sending, a cancelled run) leaves the call
                # uncounted, as before.
                went = False
                spent = 0
                if isinstance(exc, errors.LLMCallError):
                    went = exc.sent if exc.sent is not None else any(attempts.sent)
                    exc.sent = went
                    if went:
                        charged = self._unanswered(prompt_estimate, attempts.used)
                        base.report_usage(exc, charged)
                        spent = charged.total_tokens
                await self.ledger.settle(need, spent, called=went)
                settle_all(books, need, spent, called=went)
                raise
            completion = self._fill_usage(completion, prompt_estimate)
            await self.ledger.settle(need, completion.usage.total_tokens, called=True)
            settle_all(books, need, completion.usage.total_tokens)
            if prompt_estimate > 0 and not completion.usage.estimated:
                ratio = completion.usage.prompt_tokens / prompt_estimate
                self._prompt_ratio = max(self._prompt_ratio, min(ratio, 16.0))
            self._calibrated = True
        if self.cache is not None and incomplete_reason(completion, request.max_tokens) is None:
            # A cut-off, withheld or empty reply is not kept: the limit that cut it may be
            # the server's, and a rerun after fixing it must reach the model again.
            self.cache.put(key, request, completion)
        return completion, False, key

    def _need(self, prompt_estimate: int, max_tokens: int | None) -> int:
        """Tokens to reserve for a call: its prompt, scaled by how far the backend's counts
        have exceeded the local estimate, plus its output cap (``UNCAPPED_OUTPUT`` when
        the request has none)."""
        prompt = self._scaled(prompt_estimate)
        return prompt + (max_tokens if max_tokens is not None else UNCAPPED_OUTPUT)

    def _scaled(self, prompt_estimate: int) -> int:
        """A local prompt estimate scaled by the largest ratio of reported to estimated
        prompt tokens seen so far (at least 1)."""
        return int(prompt_estimate * self._prompt_ratio + 0.999)

    def _fill_usage(self, c: Completion, prompt_estimate: int) -> Completion:
        """Usage to charge: reported counts where plausible, local estimates elsewhere.

        A count is implausible when missing, zero for non-empty text, or negative.
        """
        completion_text = c.text + "".join(t.name + t.arguments for t in c.tool_calls)
        prompt, completion = c.usage.prompt_tokens, c.usage.completion_tokens
        estimated = c.usage.estimated
        if prompt < 0 or (prompt == 0 and prompt_estimate > 0):
            prompt, estimated = prompt_estimate, True
        if completion < 0 or (completion == 0 and completion_text):
            completion, estimated = self.backend.count_tokens(completion_text), True
        if (prompt, completion, estimated) == (
            c.usage.prompt_tokens,
            c.usage.completion_tokens,
            c.usage.estimated,
        ):
            return c
        usage = Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            cached_prompt_tokens=min(c.usage.cached_prompt_tokens, prompt),
            cache_write_prompt_tokens=min(c.usage.cache_write_prompt_tokens, prompt),
            cache_reported=c.usage.cache_reported,
            estimated=estimated,
        )
        return c.model_copy(update={"usage": usage})

    async def _with_deadline(self, request: ChatRequest, attempts: _Attempts) -> Completion:
        """The call with its retries, cut off after ``timeout`` seconds in all
        (``attempts`` notes what each attempt sent and used)."""
        if self.timeout is None:
            return await self._with_retries(request, attempts)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        try:
            async with asyncio.timeout_at(deadline):
                return await self._with_retries(request, attempts, deadline)
        except TimeoutError:
            raise errors.LLMCallError(
                f"{self.backend.name}: no complete reply within {self.timeout:g} s "
                "(retries included). Raise --timeout, or check the endpoint."
            ) from None

    async def _with_retries(
        self, request: ChatRequest, attempts: _Attempts, deadline: float | None = None
    ) -> Completion:
        for attempt in range(self.max_retries + 1):
            if self.limiter is not None:
                await self.limiter.acquire()
            attempts.sent.append(True)
            try:
                return base.completion_of(self.backend, await self.backend.complete(request))
            except BaseException as exc:
                used = base.reported_usage(exc)
                if used is not None:  # what the model did before this attempt failed
                    attempts.used = attempts.used + used
                if isinstance(exc, asyncio.CancelledError) and base.never_sent(exc):
                    attempts.sent[-1] = False  # cut while queued inside the backend
                if not isinstance(exc, TransientLLMError):
                    raise
                where, what = base.who_and_what(self.backend.name, exc)
                if attempt == self.max_retries:
                    raise errors.LLMCallError(
                        f"{where}: still failing after {attempt + 1} attempts: {what}. "
                        "Check the endpoint, or lower --concurrency."
                    ) from exc
                delay = self._delay(attempt, exc.retry_after)
                if deadline is not None:
                    left = deadline - asyncio.get_running_loop().time()
                    if delay >= left:
                        raise errors.LLMCallError(
                            f"{where}: {what}; the next retry (in {delay:.0f} s) would pass "
                            f"the {self.timeout:g} s deadline. Raise --timeout, or check the "
                            "endpoint."
                        ) from exc
                await self._sleep(delay)
        raise AssertionError("unreachable")

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.backoff_max)
        exp = self.backoff_base * (2**attempt)
        return float(min(self.backoff_max, exp * (0.5 + random.random() / 2)))


class _Attempts:
    """What the attempts of one call did: for each, whether it went out (False when the
    backend said it never sent it), and the tokens backends reported for failed ones."""

    def __init__(self) -> None:
        self.sent: list[bool] = []
        self.used = Usage()
