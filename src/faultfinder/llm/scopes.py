"""Where the LLM layer's calls are counted: call records, usage scopes and repeat runs.

A method or a runner opens :func:`track_usage` around the calls it wants counted (one
case, one check); every :class:`~faultfinder.llm.client.LLM` call made inside it, in the
same task or in tasks started from it, adds its :class:`CallRecord` to every enclosing
scope. A scope may hold a token budget of its own (a case's ``--budget-tokens``), which
the LLM reserves against before each call as it does the run-wide budget.
:func:`run_index` marks calls as belonging to one repeat of a run, so each repeat has its
own cache entries.

The state lives in context variables, so concurrent cases never see each other's scopes.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from pydantic import BaseModel, Field

from faultfinder import errors
from faultfinder.llm.limits import BudgetBook
from faultfinder.traces.schema import ToolCall
from faultfinder.usage import Budget, Usage


class CallRecord(BaseModel):
    """One model exchange as kept in results, so a person can audit a verdict."""

    purpose: str = ""
    """What the method asked this call for (e.g. 'step 4 judgement')."""
    request_hash: str = ""
    """Short hash of the request (backend, messages, parameters, run): its cache key's head."""
    prompt: str | None = None
    """The last user message, when the LLM is set to keep prompts."""
    reply: str = ""
    """The raw reply text."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    """Tool calls in the reply."""
    parsed: bool = True
    """False when the reply could not be parsed."""
    parse_error: str | None = None
    """Why parsing failed."""
    usage: Usage = Field(default_factory=Usage)
    """Tokens of this exchange."""
    cached: bool = False
    """Answered from the response cache."""
    finish_reason: str | None = None
    """Why the reply ended, as the backend said (``length``: cut off at the output limit)."""


CASE_BUDGET_HINT = "Raise --budget-tokens, or choose a cheaper method for this case."


class UsageScope:
    """Collects usage and call records of every LLM call made inside ``track_usage()``,
    and holds the scope's own token budget when it has one (a case's ``--budget-tokens``)."""

    def __init__(self, max_tokens: int | None = None) -> None:
        self.usage = Usage()
        self.calls: list[CallRecord] = []
        self.book: BudgetBook | None = None
        """The scope's token budget: reserved before each call made inside it, as the
        run-wide budget is, so concurrent calls of one case cannot overshoot it."""
        if max_tokens is not None:
            self.book = BudgetBook(
                Budget(max_tokens=max_tokens),
                what="Per-case token budget",
                hint=CASE_BUDGET_HINT,
                error=errors.CaseBudgetExceededError,
            )

    @property
    def max_tokens(self) -> int | None:
        """The scope's token budget (None: none)."""
        return None if self.book is None else self.book.budget.max_tokens

    def add(self, record: CallRecord) -> None:
        self.usage = self.usage + record.usage
        self.calls.append(record)


_scopes: contextvars.ContextVar[tuple[UsageScope, ...]] = contextvars.ContextVar(
    "faultfinder_usage_scopes", default=()
)
_run_index: contextvars.ContextVar[int] = contextvars.ContextVar("faultfinder_run", default=0)


@contextlib.contextmanager
def track_usage(max_tokens: int | None = None) -> Iterator[UsageScope]:
    """Record usage of LLM calls made in this context (and tasks started from it). With
    ``max_tokens``, those calls may spend at most that many tokens (prompt + completion,
    cache hits included, so a case's answer does not depend on the cache): a call that
    could overspend it raises ``CaseBudgetExceededError`` before it is sent. Scopes nest;
    every enclosing budget applies."""
    scope = UsageScope(max_tokens)
    token = _scopes.set((*_scopes.get(), scope))
    try:
        yield scope
    finally:
        _scopes.reset(token)


@contextlib.contextmanager
def run_index(run: int) -> Iterator[None]:
    """Mark calls in this context as belonging to repeat ``run`` (a distinct cache entry)."""
    token = _run_index.set(run)
    try:
        yield
    finally:
        _run_index.reset(token)


def active_scopes() -> tuple[UsageScope, ...]:
    """The scopes enclosing the current context, outermost first."""
    return _scopes.get()


def scope_books() -> list[BudgetBook]:
    """The token budgets of the enclosing scopes that have one."""
    return [s.book for s in _scopes.get() if s.book is not None]


def case_tokens_left() -> int | None:
    """Tokens the enclosing scope budgets still allow a new call (the smallest of them;
    None when no enclosing scope has a budget). Methods plan with it (``compose``)."""
    left = [book.tokens_left for book in scope_books()]
    known = [n for n in left if n is not None]
    return min(known) if known else None


def current_run() -> int:
    """The repeat-run index of the current context (0 outside ``run_index``)."""
    return _run_index.get()


def reserve_all(books: list[BudgetBook], need: int) -> None:
    """Reserve ``need`` tokens in every scope budget, or in none (raising the refusal)."""
    done: list[BudgetBook] = []
    try:
        for book in books:
            book.reserve(need)
            done.append(book)
    except BaseException:
        settle_all(done, need, 0, called=False)
        raise


def settle_all(books: list[BudgetBook], need: int, spent: int, *, called: bool = True) -> None:
    """Release a reservation of ``need`` tokens in every scope budget; ``spent`` were used."""
    for book in books:
        book.settle(need, spent, called=called)
