"""Anthropic's Messages API (``POST /v1/messages``): Claude, and the gateways and local
servers that speak it, through the official ``anthropic`` SDK.

The LLM layer speaks OpenAI-format chat messages (:class:`~faultfinder.llm.base.ChatRequest`);
this module maps a request to a Messages body and the reply back:

- leading ``system`` (and ``developer``) messages become the top-level ``system`` blocks;
- ``assistant`` tool calls become ``tool_use`` blocks, ``tool`` messages ``tool_result``
  blocks in the next user turn; consecutive turns of one role are merged, as the API
  requires;
- OpenAI tool definitions become ``{name, description, input_schema}``; ``tool_choice``
  ``required`` is ``any``;
- ``seed`` has no counterpart and is not sent (a sample index still makes a distinct
  response-cache entry); ``max_tokens`` is required, so a request without one sends
  ``UNCAPPED_OUTPUT``.

Prompt caching (docs/llm.md, "Prompt caching"): ``cache_control`` marks go at the prefix
boundaries of the prompt — the end of the system prompt (which caches the tool
definitions with it); the end of each text part but the last of a message whose content
is a list of parts (a method can name a boundary inside a message so); inside a last user
message sent as one text, where it stops sharing its prefix with earlier ones
(:mod:`faultfinder.llm.prompt_prefixes`: the case-and-log prefix of ECHO's and CHIEF's
layouts); and, in a conversation that already holds a reply of the model, the end of the
last message (so the next turn reads the whole dialogue from the cache). At most four
marks are sent, as the API allows: the first and the last three.

What every SDK backend does (the key, the base URL, retries left to the LLM layer, telling
transient failures from the others) is :class:`faultfinder.llm.sdk.SDKBackend`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from collections.abc import Mapping
from typing import Any, ClassVar

import anthropic

from faultfinder.llm import json_text
from faultfinder.llm.base import ChatRequest, Completion
from faultfinder.llm.client import UNCAPPED_OUTPUT
from faultfinder.llm.prompt_prefixes import PrefixMemory
from faultfinder.llm.registry import require_name
from faultfinder.llm.sdk import PLACEHOLDER_KEY as PLACEHOLDER_KEY
from faultfinder.llm.sdk import SDKBackend, SDKErrors, StatusError
from faultfinder.llm.usage import messages_usage
from faultfinder.traces.schema import ToolCall

DEFAULT_BASE_URL = "https://api.anthropic.com"
MAX_CACHE_MARKS = 4
"""Cache breakpoints the API accepts in one request."""
CACHE_MARK: dict[str, str] = {"type": "ephemeral"}

_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
}
"""Messages stop reasons in the OpenAI names the rest of faultfinder reads; others
(``pause_turn``, ``refusal``) are kept as they are."""
_TOOL_ID = re.compile(r"[^A-Za-z0-9_-]")


# --- request ---------------------------------------------------------------------------


def _text_blocks(content: Any) -> list[dict[str, Any]]:
    """Text blocks of an OpenAI message content: one per non-empty text part (the API
    rejects empty text blocks); parts of other types are not sent."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    if isinstance(content, list):
        for part in content:
            if isinstance(part, str) and part:
                blocks.append({"type": "text", "text": part})
            elif isinstance(part, dict) and part.get("type", "text") == "text":
                text = part.get("text")
                if isinstance(text, str) and text:
                    blocks.append({"type": "text", "text": text})
    return blocks


def _tool_id(value: Any, fallback: str) -> str:
    """A tool-use id the API accepts (letters, digits, '_' and '-')."""
    text = value if isinstance(value, str) and value else fallback
    return _TOOL_ID.sub("_", text)


def _tool_input(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str) and arguments.strip():
        try:
            value = json_text.loads(arguments)
        except json_text.JSONTextError:
            return {"arguments": arguments}
        return value if isinstance(value, dict) else {"arguments": value}
    return {}


def _tool_use_blocks(calls: Any, turn: int) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for i, call in enumerate(calls if isinstance(calls, list) else []):
        if not isinstance(call, dict):
            continue
        nested = call.get("function")
        function: dict[str, Any] = nested if isinstance(nested, dict) else call
        name = function.get("name")
        if not isinstance(name, str) or not name:
            continue
        blocks.append(
            {
                "type": "tool_use",
                "id": _tool_id(call.get("id"), f"toolu_{turn}_{i}"),
                "name": name,
                "input": _tool_input(function.get("arguments")),
            }
        )
    return blocks


def to_messages(
    messages: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(system blocks, Messages turns) of OpenAI-format ``messages``."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": list(blocks)})

    for n, message in enumerate(messages):
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer"):
            if turns:  # a system message mid-conversation: the API has no place for it
                add("user", _text_blocks(content))
            else:
                system.extend(_text_blocks(content))
        elif role == "assistant":
            add("assistant", _text_blocks(content) + _tool_use_blocks(message.get("tool_calls"), n))
        elif role == "tool":
            text = "\n".join(b["text"] for b in _text_blocks(content))
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": _tool_id(message.get("tool_call_id"), f"toolu_{n}"),
            }
            if text:
                result["content"] = text
            add("user", [result])
        else:
            add("user", _text_blocks(content))
    for turn in turns:
        if turn["role"] == "user":
            # Tool results must open the user turn that answers the tool calls.
            turn["content"].sort(key=lambda b: b.get("type") != "tool_result")
    return system, turns


def to_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI function-tool definitions as Messages tools."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        nested = tool.get("function")
        function: dict[str, Any] = nested if isinstance(nested, dict) else tool
        name = function.get("name")
        if not isinstance(name, str):
            continue
        schema = function.get("parameters") or function.get("input_schema")
        entry: dict[str, Any] = {
            "name": name,
            "input_schema": schema if isinstance(schema, dict) else {"type": "object"},
        }
        if isinstance(function.get("description"), str):
            entry["description"] = function["description"]
        out.append(entry)
    return out


def to_tool_choice(choice: str | dict[str, Any]) -> dict[str, Any] | None:
    """An OpenAI ``tool_choice`` as a Messages one (None: send none)."""
    if isinstance(choice, str):
        return {
            "auto": {"type": "auto"},
            "required": {"type": "any"},
            "none": {"type": "none"},
        }.get(choice)
    function = choice.get("function")
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        return {"type": "tool", "name": function["name"]}
    if choice.get("type") in ("auto", "any", "tool", "none"):
        return dict(choice)
    return None


def place_cache_marks(body: dict[str, Any], limit: int = MAX_CACHE_MARKS) -> int:
    """Put ``cache_control`` marks on ``body`` at its prefix boundaries (see the module
    docstring); returns how many were placed."""
    marks: list[dict[str, Any]] = []
    system = body.get("system")
    if isinstance(system, list) and system:
        marks.append(system[-1])
    elif body.get("tools"):
        marks.append(body["tools"][-1])
    turns: list[dict[str, Any]] = body.get("messages") or []
    for turn in turns:
        texts = [b for b in turn["content"] if b.get("type") == "text"]
        marks.extend(texts[:-1])
    if turns and any(t["role"] == "assistant" for t in turns):
        marks.append(turns[-1]["content"][-1])
    chosen = marks if len(marks) <= limit else [marks[0], *marks[-(limit - 1) :]]
    unique = list({id(block): block for block in chosen}.values())
    for block in unique:
        block["cache_control"] = dict(CACHE_MARK)
    return len(unique)


def messages_body(request: ChatRequest, model: str, *, prompt_cache: bool = True) -> dict[str, Any]:
    """The ``POST /v1/messages`` body for ``request``."""
    system, turns = to_messages(request.messages)
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_tokens if request.max_tokens is not None else UNCAPPED_OUTPUT,
        "messages": turns,
    }
    if system:
        body["system"] = system
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    if request.tools:
        body["tools"] = to_tools(request.tools)
        choice = to_tool_choice(request.tool_choice) if request.tool_choice is not None else None
        if choice is not None:
            body["tool_choice"] = choice
    if prompt_cache:
        place_cache_marks(body)
    return body


# --- reply -----------------------------------------------------------------------------


def completion_of(data: dict[str, Any], model: str) -> Completion:
    """A Messages reply as a Completion; raises ValueError naming what is malformed."""
    content = data.get("content")
    if not isinstance(content, list):
        raise ValueError("no content list")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in content:
        if not isinstance(block, dict):
            raise ValueError("a content block is not an object")
        kind = block.get("type")
        if kind == "text":
            text = block.get("text")
            if not isinstance(text, str):
                raise ValueError("a text block without text")
            texts.append(text)
        elif kind == "tool_use":
            name = block.get("name")
            if not isinstance(name, str) or not name:
                raise ValueError("a tool_use block without a name")
            call_id = block.get("id")
            calls.append(
                ToolCall(
                    id=call_id if isinstance(call_id, str) else None,
                    name=name,
                    arguments=json.dumps(block.get("input") or {}, ensure_ascii=False),
                )
            )
        # thinking and other block kinds are kept in ``raw`` only
    stop = data.get("stop_reason")
    reported_model = data.get("model")
    return Completion(
        text="".join(texts),
        tool_calls=calls,
        usage=messages_usage(data.get("usage")),
        model=reported_model if isinstance(reported_model, str) and reported_model else model,
        finish_reason=_FINISH.get(stop, stop) if isinstance(stop, str) else None,
        raw=data,
    )


# --- backend ---------------------------------------------------------------------------


def normalise_base_url(url: str) -> str:
    """The SDK's base URL: the server root, without the ``/v1`` that OpenAI-style URLs
    end with (the SDK adds ``/v1/messages`` itself)."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class AnthropicBackend(SDKBackend[anthropic.AsyncAnthropic]):
    """A model behind the Anthropic Messages API (``anthropic:MODEL``)."""

    kind = "anthropic"
    key_env = "ANTHROPIC_API_KEY"
    base_url_env = "ANTHROPIC_BASE_URL"
    default_base_url = DEFAULT_BASE_URL
    sdk_errors = SDKErrors(
        base=anthropic.AnthropicError,
        status=anthropic.APIStatusError,
        connection=anthropic.APIConnectionError,
        validation=anthropic.APIResponseValidationError,
    )
    keyless = "a gateway or local server without keys: pass --base-url"
    speaks = "an Anthropic Messages API endpoint"
    implements = "the Anthropic Messages API"
    status_hints: ClassVar[Mapping[int, str]] = {
        403: "The key lacks access to this model; check its permissions.",
        404: (
            "Check the model name ('{model}') and --base-url (the server's root; "
            "faultfinder adds /v1/messages)."
        ),
    }
    parameters = "tools, temperature with top_p, max_tokens"
    normalise_base_url = staticmethod(normalise_base_url)

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 300.0,
        prompt_cache: bool = True,
    ) -> None:
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key,
            timeout=timeout,
            sdk_client=anthropic.AsyncAnthropic,
            http_client=anthropic.DefaultAsyncHttpxClient,
        )
        # Cache marks change the bill, not the reply: they are not part of the identity.
        self.prompt_cache = prompt_cache
        self._prefixes = PrefixMemory()

    def body(self, request: ChatRequest) -> dict[str, Any]:
        """What :meth:`complete` sends for ``request`` (learning prefix boundaries)."""
        body = messages_body(request, self.model, prompt_cache=False)
        if self.prompt_cache:
            self._cut_shared_prefix(body)
            place_cache_marks(body)
        return body

    def _cut_shared_prefix(self, body: dict[str, Any]) -> None:
        """Cut a last user message sent as one text where it stops sharing its prefix with
        earlier ones sent after the same context (:mod:`faultfinder.llm.prompt_prefixes`),
        so the cache marks go there."""
        turns: list[dict[str, Any]] = body["messages"]
        if not turns or turns[-1]["role"] != "user" or len(turns[-1]["content"]) != 1:
            return
        (block,) = turns[-1]["content"]
        if block.get("type") != "text":
            return
        context = hashlib.sha256(
            json.dumps([body.get("tools"), body.get("system"), turns[:-1]], sort_keys=True).encode()
        ).hexdigest()
        text: str = block["text"]
        cuts = self._prefixes.cuts(context, text)
        if cuts:
            edges = [0, *cuts, len(text)]
            turns[-1]["content"] = [
                {"type": "text", "text": text[a:b]} for a, b in itertools.pairwise(edges)
            ]

    async def complete(self, request: ChatRequest) -> Completion:
        client = await self._clients.get()
        body = self.body(request)
        data = await self._reply(client.post("/v1/messages", body=body, cast_to=object), body)
        if not isinstance(data, dict):
            raise self._malformed("not a JSON object")
        if data.get("type") == "error" or ("error" in data and "content" not in data):
            raise self._error_in_reply(data, body)
        try:
            return completion_of(data, self.model)
        except ValueError as exc:
            raise self._malformed(str(exc)) from None

    def _status_message(self, exc: StatusError) -> str:
        """The error's own message from a Messages error body (``{"type": "error", "error":
        {"type", "message"}}``), else the SDK's text."""
        body = exc.body
        if isinstance(body, dict):
            error = body.get("error")
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                kind = error.get("type")
                return f"{kind}: {error['message']}" if isinstance(kind, str) else error["message"]
        return exc.message


def anthropic_backend(
    name: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    api_key_env: str | None = None,
    **options: Any,
) -> AnthropicBackend:
    """``anthropic:MODEL`` (registered in ``faultfinder.registry``). The key comes from
    ``api_key``, else the variable ``api_key_env`` names (the user's ``--api-key-env``),
    else ``ANTHROPIC_API_KEY``."""
    require_name(name, "anthropic", example="claude-sonnet-4-5")
    variable = api_key_env or AnthropicBackend.key_env
    key = api_key if api_key is not None else os.environ.get(variable)
    return AnthropicBackend(model=name, base_url=base_url, api_key=key, **options)
