"""Token counts as a model API reports them, read into faultfinder's :class:`Usage`.

SDK-free, so that what the LLM layer bills for a call and what the replay layer writes
into a recorded trace are one reading of the same ``usage`` object.
"""

from __future__ import annotations

from typing import Any

from faultfinder.llm.sdk import reported_count
from faultfinder.usage import Usage

__all__ = ["messages_usage", "openai_usage"]


def openai_usage(
    reported: Any,
    *,
    prompt: str = "prompt_tokens",
    completion: str = "completion_tokens",
    details: str = "prompt_tokens_details",
) -> Usage:
    """The usage an OpenAI reply reports (its ``usage`` object), under the API's own key
    names: Chat Completions' by default; the Responses API's are ``input_tokens``,
    ``output_tokens`` and ``input_tokens_details``. Cached tokens (``cached_tokens``
    under ``details``) are part of the prompt, never more than it; ``cache_reported``
    says whether the reply gave them. Counts that are
    missing, not integers or negative are left at 0 (the LLM layer then estimates them);
    anything but a JSON object gives an empty Usage.
    """
    if not isinstance(reported, dict):
        return Usage()
    cache = reported.get(details)
    cached = reported_count(cache, "cached_tokens") if isinstance(cache, dict) else 0
    total = reported_count(reported, prompt)
    return Usage(
        prompt_tokens=total,
        completion_tokens=reported_count(reported, completion),
        cached_prompt_tokens=min(cached, total),
        cache_reported=_counted(cache, "cached_tokens"),
    )


def messages_usage(reported: Any) -> Usage:
    """The usage an Anthropic Messages reply reports (its ``usage`` object).

    ``input_tokens`` counts only the prompt tokens after the last cache breakpoint, so
    the prompt is input + cache reads + cache writes; cache reads are the cached prompt
    tokens, cache writes the tokens written to the cache. Counts that are missing, not
    integers or negative are left at 0 (the LLM layer then estimates them); anything but
    a JSON object gives an empty Usage.
    """
    if not isinstance(reported, dict):
        return Usage()
    read = reported_count(reported, "cache_read_input_tokens")
    written = reported_count(reported, "cache_creation_input_tokens")
    return Usage(
        prompt_tokens=reported_count(reported, "input_tokens") + read + written,
        completion_tokens=reported_count(reported, "output_tokens"),
        cached_prompt_tokens=read,
        cache_write_prompt_tokens=written,
        cache_reported=_counted(reported, "cache_read_input_tokens"),
    )


def _counted(reported: Any, key: str) -> bool:
    """Whether ``reported`` gives a count under ``key`` (0 included): the server said how
    many prompt tokens its cache served."""
    if not isinstance(reported, dict):
        return False
    value = reported.get(key)
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53
