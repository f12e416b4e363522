"""Token and call accounting shared by traces, the LLM layer and results."""

from __future__ import annotations

from pydantic import BaseModel, Field


class Usage(BaseModel):
    """Tokens and calls. Usages add up with ``+``."""

    prompt_tokens: int = 0
    """Tokens sent to the model (the prompt)."""
    completion_tokens: int = 0
    """Tokens the model produced."""
    calls: int = 0
    """Model calls made (cache hits are counted in ``cached_calls`` instead)."""
    cached_calls: int = 0
    """Calls answered from the response cache; their tokens are still counted."""
    estimated: bool = False
    """True when some token counts came from a local tokenizer, not the API."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
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
