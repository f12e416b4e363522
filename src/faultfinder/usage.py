"""Token and call accounting shared by traces, the LLM layer and results."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer


class Usage(BaseModel):
    """Tokens and calls. Usages add up with ``+``."""

    prompt_tokens: int = 0
    """Tokens sent to the model (the prompt)."""
    completion_tokens: int = 0
    """Tokens the model produced."""
    cached_prompt_tokens: int = 0
    """Of ``prompt_tokens``, those the server reports it served from its prompt (prefix)
    cache: OpenAI-compatible ``usage.prompt_tokens_details.cached_tokens``. Included in
    ``prompt_tokens``; 0 when the server does not say (:attr:`cache_reported` tells)."""
    cache_reported: bool = False
    """Whether the server said, for some call, how many prompt tokens came from its cache
    (``cached_tokens``, ``cache_read_input_tokens``; a 0 included). Without it a
    ``cached_prompt_tokens`` of 0 is unknown, not measured. Written only when true."""
    cache_write_prompt_tokens: int = 0
    """Of ``prompt_tokens``, those the server wrote into its prompt cache for later calls
    (Anthropic's ``cache_creation_input_tokens``, billed above the plain input price).
    Included in ``prompt_tokens``; 0 when the server does not say."""
    calls: int = 0
    """Model calls made (cache hits are counted in ``cached_calls`` instead)."""
    cached_calls: int = 0
    """Calls answered from the response cache; their tokens are still counted."""
    estimated: bool = False
    """True when some token counts came from a local tokenizer, not the API."""

    @model_serializer(mode="wrap")
    def _without_unreported(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Usages that never heard of a cache (most endpoints, every older file) are written
        # as before.
        data = handler(self)
        if isinstance(data, dict) and not self.cache_reported:
            data.pop("cache_reported", None)
        return data

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def uncached_prompt_tokens(self) -> int:
        """Prompt tokens the server had to process anew (cached prefix aside)."""
        return self.prompt_tokens - self.cached_prompt_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cached_prompt_tokens=self.cached_prompt_tokens + other.cached_prompt_tokens,
            cache_reported=self.cache_reported or other.cache_reported,
            cache_write_prompt_tokens=self.cache_write_prompt_tokens
            + other.cache_write_prompt_tokens,
            calls=self.calls + other.calls,
            cached_calls=self.cached_calls + other.cached_calls,
            estimated=self.estimated or other.estimated,
        )


class Budget(BaseModel):
    """Limits that stop a run before it overspends. ``None`` means unlimited."""

    max_tokens: int | None = Field(default=None, ge=0)
    """Total prompt + completion tokens allowed."""
    max_calls: int | None = Field(default=None, ge=0)
    """Model calls allowed (cache hits do not count)."""
