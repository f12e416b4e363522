"""The loopback fake's Anthropic Messages endpoint (``POST /v1/messages``), mounted by
:class:`faultfinder.testing.FakeOpenAIServer` (which gives it its faults, latency and
scripted replies).

It answers as the real API does in what programs and the judge rely on: a request needs
``max_tokens`` and ``messages``; the reply is ``{"type": "message", "id": "msg_...",
"content": [text and tool_use blocks], "stop_reason", "usage"}`` with tool-use ids
``toolu_...``; errors are ``{"type": "error", "error": {"type", "message"}}``;
``stream: true`` gives the API's named events (``message_start`` ... ``message_stop``,
text in several ``text_delta`` s, tool input in ``input_json_delta`` s), each event its
own write.

The reply callable gets the request in canonical chat form (``messages``, chat-style
``tools``; the Messages adapter's own mapping), with ``api: "messages"`` and the body as
sent under ``raw``; it may answer with text, a spec (``text``, ``tool_calls``, ``usage``,
``stop_reason``) or a complete reply (a dict with ``content``).

Usage is estimated (~4 characters per token) unless the spec gives one. With a
:class:`PromptCache` (``server.mount(FakeMessages(prompt_cache=PromptCache()))``),
``cache_control`` marks are honoured as the API documents them: a marked block writes
the prompt up to it into the cache (prefixes under the minimum are not cached), and a
request reads the longest cached prefix ending at one of its block boundaries, looking
back at most 20 blocks from its last mark; usage then splits the prompt into
``input_tokens``, ``cache_read_input_tokens`` and ``cache_creation_input_tokens``. The
cache is consulted and filled as each reply is built (the fake builds one at a time), so
unlike a real server it lets requests that arrive together serve each other.
Anthropic clients take the server's root as base URL: :func:`anthropic_base_url`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from faultfinder.llm.base import approx_token_count
from faultfinder.replay.apis.base import Chains
from faultfinder.replay.apis.messages import MessagesAdapter

if TYPE_CHECKING:
    from faultfinder.testing.fake_openai import FakeOpenAIServer

LOOKBACK_BLOCKS = 20
"""Block boundaries before a cache mark the API checks for a hit."""

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def anthropic_base_url(server: FakeOpenAIServer) -> str:
    """What an Anthropic client takes as base URL (``ANTHROPIC_BASE_URL``): the root."""
    return server.base_url.removesuffix("/v1")


def _block_text(block: dict[str, Any]) -> str:
    clean = {k: v for k, v in block.items() if k != "cache_control"}
    if clean.get("type") == "text":
        return str(clean.get("text", ""))
    return json.dumps(clean, sort_keys=True)


def prompt_blocks(body: dict[str, Any]) -> list[tuple[str, bool]]:
    """The prompt in the order the cache reads it (tools, system, then each turn's
    blocks), each block as (its text, carries a cache mark)."""
    out: list[tuple[str, bool]] = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            out.append((_block_text(tool), "cache_control" in tool))
    system = body.get("system")
    if isinstance(system, str) and system:
        out.append((system, False))
    elif isinstance(system, list):
        out += [(_block_text(b), "cache_control" in b) for b in system if isinstance(b, dict)]
    for turn in body.get("messages") or []:
        if not isinstance(turn, dict):
            continue
        role, content = str(turn.get("role", "")), turn.get("content")
        if isinstance(content, str):
            out.append((f"{role}: {content}", False))
        elif isinstance(content, list):
            out += [
                (f"{role}: {_block_text(b)}", "cache_control" in b)
                for b in content
                if isinstance(b, dict)
            ]
    return out


@dataclass
class PromptCache:
    """A stand-in for the Messages API's prompt cache (see the module docstring)."""

    min_tokens: int = 1024
    """Shortest prefix kept (the API's minimum for most models)."""
    entries: set[str] = field(default_factory=set)
    """Digests of the cached prefixes."""

    def usage(self, body: dict[str, Any]) -> tuple[int, int, int]:
        """(input, cache read, cache write) tokens of ``body``; caches what it marks."""
        blocks = prompt_blocks(body)
        sizes = list(itertools.accumulate(approx_token_count(text) for text, _ in blocks))
        total = sizes[-1] if sizes else 0
        marked = [i for i, (_, mark) in enumerate(blocks) if mark]
        if not marked:
            return total, 0, 0
        digests: list[str] = []
        digest = hashlib.sha256()
        for text, _ in blocks:
            digest.update(text.encode("utf-8") + b"\x00")
            digests.append(digest.copy().hexdigest())
        last = marked[-1]
        hit = next(
            (
                i
                for i in range(last, max(last - LOOKBACK_BLOCKS, -1), -1)
                if digests[i] in self.entries
            ),
            -1,
        )
        read = sizes[hit] if hit >= 0 else 0
        written = 0
        for i in marked:
            if i > hit and sizes[i] >= self.min_tokens:
                self.entries.add(digests[i])
                written = sizes[i] - read
        return total - read - written, read, written


class FakeMessages:
    """``POST /v1/messages`` for the fake server."""

    name = "messages"

    def __init__(self, prompt_cache: PromptCache | None = None) -> None:
        self.prompt_cache = prompt_cache
        self._adapter = MessagesAdapter()
        self._ids = itertools.count(1)

    def handles(self, method: str, path: str) -> bool:
        return self._adapter.handles(method, path)

    def check(self, body: dict[str, Any]) -> str | None:
        if not isinstance(body.get("max_tokens"), int):
            return "max_tokens: Field required"
        if not isinstance(body.get("messages"), list):
            return "messages: Field required"
        return None

    def canonical(self, body: dict[str, Any]) -> dict[str, Any]:
        canonical = self._adapter.canonical_request(body, Chains())
        canonical["api"] = self.name
        canonical["raw"] = body
        return canonical

    def is_complete(self, value: Any) -> bool:
        return isinstance(value, dict) and "content" in value

    def build(
        self, body: dict[str, Any], spec: dict[str, Any], model: str, cached: int | None
    ) -> dict[str, Any]:
        number = next(self._ids)
        text = str(spec.get("text") or "")
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        for position, call in enumerate(spec.get("tool_calls") or []):
            arguments = call.get("arguments", {})
            content.append(
                {
                    "type": "tool_use",
                    "id": call.get("id") or f"toolu_fake_{number}_{position}",
                    "name": call["name"],
                    "input": json.loads(arguments) if isinstance(arguments, str) else arguments,
                }
            )
        uses_tools = any(b["type"] == "tool_use" for b in content)
        stop = spec.get("stop_reason") or ("tool_use" if uses_tools else "end_turn")
        usage = spec.get("usage", "auto")
        if usage == "auto":
            if self.prompt_cache is not None:
                fresh, read, written = self.prompt_cache.usage(body)
            else:
                fresh = sum(approx_token_count(t) for t, _ in prompt_blocks(body))
                read = written = 0
            produced = text + "".join(json.dumps(b) for b in content if b["type"] != "text")
            usage = {
                "input_tokens": fresh,
                "cache_creation_input_tokens": written,
                "cache_read_input_tokens": read,
                "output_tokens": max(approx_token_count(produced), 1),
            }
        reply: dict[str, Any] = {
            "id": f"msg_fake_{number}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model") or model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
        }
        if usage is not None:
            reply["usage"] = usage
        return reply

    def remember(self, body: dict[str, Any], response: dict[str, Any]) -> None:
        return None  # every request carries its whole conversation

    def stream(self, response: dict[str, Any]) -> list[bytes]:
        return self._adapter.synthesise(response, {})

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return self._adapter.error_body(status, message, _ERROR_TYPES.get(status, "api_error"))
