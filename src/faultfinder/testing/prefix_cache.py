"""A stand-in for a server's automatic prompt (prefix) cache, for tests and benches.

OpenAI-compatible servers (OpenAI, vLLM with prefix caching, llama.cpp's server) reuse
the computation of the longest prompt prefix they have seen before and report it as
``usage.prompt_tokens_details.cached_tokens``. This class applies the same rule offline so
a method's prompt layout can be measured without a paid endpoint: a prompt's cached
tokens are those of the longest prefix it shares with a prompt seen earlier, rounded down
to whole blocks, and nothing when that prefix is shorter than the minimum. The defaults
are OpenAI's documented ones (a 1,024-token minimum, 128-token increments).

Prompts are compared as the text of their messages in order, each introduced by its
role, which is what a chat template does; tool definitions, when present, come first.

A server caches a prompt only once it has processed it: requests sent at the same time
do not serve each other. :meth:`PrefixCache.request` models that for asynchronous
backends (a prompt is looked up when its request arrives and remembered when it
completes); :meth:`PrefixCache.cached_tokens` is the sequential shorthand.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from faultfinder.llm.base import (
    Backend,
    ChatRequest,
    Completion,
    approx_token_count,
    messages_text,
)
from faultfinder.usage import Usage

MIN_TOKENS = 1024
"""Shortest prefix a cache serves (OpenAI: 1,024 tokens)."""
BLOCK_TOKENS = 128
"""Cached prefixes are counted in whole blocks of this many tokens (OpenAI: 128)."""


def prompt_text(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
    """The prompt as a server's template lays it out: tools, then each message's role and
    text, in order."""
    parts = [json.dumps(tools, sort_keys=True)] if tools else []
    for message in messages:
        parts.append(f"<|{message.get('role', '')}|>\n{messages_text([message])}\n")
    return "".join(parts)


def shared_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix of ``a`` and ``b``: doubling, then a binary
    search over slices, so long prompts compare at C speed and unrelated ones stop early."""
    limit = min(len(a), len(b))
    low, probe = 0, 256
    while probe < limit and a[:probe] == b[:probe]:
        low, probe = probe, probe * 2
    high = min(probe, limit)
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


class PrefixCache:
    """Remembers recent prompts and says how many tokens of a new one a server would
    serve from its prefix cache."""

    def __init__(
        self,
        count_tokens: Callable[[str], int] = approx_token_count,
        *,
        min_tokens: int = MIN_TOKENS,
        block_tokens: int = BLOCK_TOKENS,
        capacity: int = 256,
    ) -> None:
        self.count_tokens = count_tokens
        self.min_tokens = min_tokens
        self.block_tokens = block_tokens
        self._seen: deque[str] = deque(maxlen=capacity)

    def lookup(self, text: str) -> int:
        """Tokens of ``text`` a server would serve from its cache now (nothing remembered)."""
        best = max((shared_prefix(text, earlier) for earlier in self._seen), default=0)
        if best == 0:
            return 0
        tokens = self.count_tokens(text[:best])
        if tokens < self.min_tokens:
            return 0
        return tokens - tokens % self.block_tokens

    def remember(self, text: str) -> None:
        """``text`` has been processed: later prompts may share its prefix."""
        self._seen.append(text)

    def cached_tokens(self, text: str) -> int:
        """Tokens of ``text`` served from the cache; ``text`` is remembered afterwards
        (a request that completes before the next one arrives)."""
        cached = self.lookup(text)
        self.remember(text)
        return cached

    @asynccontextmanager
    async def request(self, text: str) -> AsyncIterator[int]:
        """One request in flight: yields its cached tokens, counted against the prompts of
        requests that completed before it arrived; ``text`` is remembered when the block
        ends without an error. The pause after the lookup lets requests sent together
        (``asyncio.gather``) all arrive before any completes, so they miss each other's
        prefixes as on a real server."""
        cached = self.lookup(text)
        await asyncio.sleep(0)
        yield cached
        self.remember(text)

    def usage_for(self, request: ChatRequest, completion_tokens: int = 0) -> Usage:
        """The usage a caching server would report for ``request``."""
        cached = self.cached_tokens(prompt_text(request.messages, request.tools))
        return self.usage_with(request, cached, completion_tokens)

    def usage_with(self, request: ChatRequest, cached: int, completion_tokens: int = 0) -> Usage:
        """The usage of ``request`` when ``cached`` of its prompt tokens were served."""
        prompt = self.count_tokens(messages_text(request.messages))
        return Usage(
            prompt_tokens=prompt,
            completion_tokens=completion_tokens,
            cached_prompt_tokens=min(cached, prompt),
        )


class PrefixCachingBackend:
    """Wraps a test backend so its completions report prefix-cache usage."""

    def __init__(self, inner: Backend, cache: PrefixCache | None = None) -> None:
        self.inner = inner
        self.cache = cache or PrefixCache(inner.count_tokens)
        self.name = inner.name
        self.model = inner.model
        self.is_real = inner.is_real
        self.supports_tools = inner.supports_tools

    def identity(self) -> dict[str, Any]:
        return {"prefix_cache": True, **self.inner.identity()}

    async def complete(self, request: ChatRequest) -> Completion:
        text = prompt_text(request.messages, request.tools)
        async with self.cache.request(text) as cached:
            completion = await self.inner.complete(request)
        produced = completion.usage.completion_tokens or self.inner.count_tokens(
            completion.text + "".join(t.name + t.arguments for t in completion.tool_calls)
        )
        usage = self.cache.usage_with(request, cached, produced)
        return completion.model_copy(update={"usage": usage})

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)
