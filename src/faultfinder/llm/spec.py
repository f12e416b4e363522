"""What it takes to build an :class:`~faultfinder.llm.client.LLM`, as plain data.

A spec names the model and the LLM layer's settings but never holds a credential: the
key is read from the environment variable ``api_key_env`` (or the backend's own variable)
by whoever builds the LLM. That
is what lets a spec travel to another process (a Ray worker) without a secret in it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from faultfinder.llm.cache import ResponseCache
from faultfinder.llm.client import DEFAULT_TIMEOUT, LLM
from faultfinder.llm.limits import Ledger, RateLimiter
from faultfinder.llm.registry import make_backend
from faultfinder.usage import Budget


class LLMSpec(BaseModel):
    """The model and the LLM layer's knobs, without credentials."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = "local"
    """Model spec, e.g. ``openai:gpt-4o``, ``local``, ``function:pkg.mod:fn``."""
    base_url: str | None = None
    """OpenAI-compatible endpoint URL (``openai:`` models)."""
    api_key_env: str | None = None
    """Environment variable the key is read from, where the LLM is built (the user's
    ``--api-key-env``); None: the backend's own (``OPENAI_API_KEY`` for ``openai:``,
    ``ANTHROPIC_API_KEY`` for ``anthropic:``, a plugin's documented one)."""
    cache_path: str | None = None
    """SQLite response cache file; None: no cache."""
    concurrency: int = Field(default=8, ge=1)
    """Model calls in flight at once, per built LLM."""
    budget: Budget = Field(default_factory=Budget)
    """Token and call limits (held by one ledger when the LLM is built with one)."""
    rate_limit: float | None = Field(default=None, gt=0)
    """Requests per second allowed to the endpoint; None: unlimited."""
    timeout: float | None = Field(default=DEFAULT_TIMEOUT, gt=0)
    """Seconds one model call may take, retries included (``--timeout``); None: no limit."""

    def build(self, *, ledger: Ledger | None = None, limiter: RateLimiter | None = None) -> LLM:
        """The LLM this spec describes; ``ledger``/``limiter`` replace the in-process ones."""
        backend = make_backend(self.model, base_url=self.base_url, api_key_env=self.api_key_env)
        cache = ResponseCache(self.cache_path) if self.cache_path else None
        return LLM(
            backend,
            cache=cache,
            concurrency=self.concurrency,
            budget=self.budget,
            ledger=ledger,
            limiter=limiter,
            rate_limit=self.rate_limit,
            timeout=self.timeout,
        )
