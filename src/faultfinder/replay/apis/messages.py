"""Anthropic's Messages API (``POST /v1/messages``): the Anthropic SDK, ChatAnthropic
(langchain-anthropic), and every client of a Claude model or an Anthropic-compatible
gateway.

Requests map to the canonical call as follows: ``system`` (a string or text blocks)
becomes a system message; a user turn's text blocks its text (other blocks, such as
images, kept as parts); each ``tool_result`` block a ``tool`` message carrying
``tool_call_id`` (``is_error`` kept), placed before the turn's text; an assistant turn's
``tool_use`` blocks its ``tool_calls`` (the input as JSON arguments) and its ``thinking``
blocks a ``thinking`` list; ``tools`` become chat-style function tools. Every other
parameter keeps its name. ``cache_control`` marks are dropped: they change the bill, not
the answer.

A reply (``{"type": "message", "content": [...], "stop_reason", "usage"}``) is one
assistant message: text blocks joined, ``tool_use`` blocks as tool calls (ids
``toolu_...`` kept), the stop reason in chat's words (``end_turn`` → stop, ``tool_use``
→ tool_calls, ``max_tokens`` → length), prompt tokens as input + cache reads + cache
writes (cache reads as cached tokens), read by the LLM layer's own
:func:`~faultfinder.llm.usage.messages_usage`.

Streams are named events, sent and added up in
:mod:`faultfinder.replay.apis.messages_stream`; usage is always in the stream, so
nothing is hidden from a client.

Programs are pointed at the proxy through ``ANTHROPIC_BASE_URL`` (the SDK) and
``ANTHROPIC_API_URL`` (which ChatAnthropic reads first); a key from ``--api-key-env``
goes upstream as ``x-api-key``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from faultfinder.llm import json_text
from faultfinder.llm.usage import messages_usage
from faultfinder.replay.apis.base import (
    AdapterBase,
    CanonicalReply,
    Chains,
    edited_id,
    encode_sse,
    tool_call,
)
from faultfinder.replay.apis.messages_stream import MessageBuilder, message_events

STOP_TO_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
}
"""Stop reasons in chat's words; others (``pause_turn``, ``refusal``) are kept."""
OVERRIDABLE = frozenset({"temperature", "top_p", "max_tokens"})
"""Live-call overrides the Messages API has (it has no ``seed``)."""
_MOVED = frozenset({"system", "messages", "tools"})


# --- requests -------------------------------------------------------------------------


def _blocks(content: Any) -> list[dict[str, Any]]:
    """A turn's content as blocks (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def _text(blocks: list[dict[str, Any]]) -> str:
    return "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")


def _uncached(block: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def _user_content(blocks: list[dict[str, Any]]) -> Any:
    """Text blocks as one string; with other blocks, a list of parts."""
    if all(b.get("type") == "text" for b in blocks):
        return _text(blocks)
    return [
        {"type": "text", "text": str(b.get("text", ""))}
        if b.get("type") == "text"
        else _uncached(b)
        for b in blocks
    ]


def _arguments(value: Any) -> str:
    return json.dumps(value if value is not None else {}, ensure_ascii=False)


def _tool_call(block: dict[str, Any]) -> dict[str, Any]:
    return tool_call(block.get("id"), block.get("name"), _arguments(block.get("input")))


def _assistant(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": _text(blocks) or None}
    calls = [_tool_call(b) for b in blocks if b.get("type") in ("tool_use", "server_tool_use")]
    if calls:
        message["tool_calls"] = calls
    thinking = [str(b.get("thinking", "")) for b in blocks if b.get("type") == "thinking"] + [
        "[redacted]" for b in blocks if b.get("type") == "redacted_thinking"
    ]
    if thinking:
        message["thinking"] = thinking
    return message


def canonical_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation of a Messages request in chat form (see the module docstring)."""
    out: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        text = system if isinstance(system, str) else _text(_blocks(system))
        out.append({"role": "system", "content": text})
    for turn in body.get("messages") or []:
        if not isinstance(turn, dict):
            continue
        blocks = _blocks(turn.get("content"))
        if turn.get("role") == "assistant":
            out.append(_assistant(blocks))
            continue
        for block in blocks:
            if block.get("type") == "tool_result":
                message: dict[str, Any] = {
                    "role": "tool",
                    "tool_call_id": block.get("tool_use_id"),
                    "content": _result_text(block.get("content")),
                }
                if block.get("is_error"):
                    message["is_error"] = True
                out.append(message)
        rest = [b for b in blocks if b.get("type") != "tool_result"]
        if rest or not blocks:
            out.append({"role": "user", "content": _user_content(rest)})
    return out


def _result_text(content: Any) -> Any:
    if content is None or isinstance(content, str):
        return content or ""
    return _user_content(_blocks(content))


def canonical_tools(tools: Any) -> list[dict[str, Any]]:
    """Messages tools as chat function tools (server tools keep their own shape)."""
    out: list[dict[str, Any]] = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        if "input_schema" not in tool:
            out.append(_uncached(tool))
            continue
        function: dict[str, Any] = {"name": tool.get("name"), "parameters": tool["input_schema"]}
        if tool.get("description") is not None:
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    return out


def request_to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """A Messages request as a canonical call."""
    chat = {k: v for k, v in body.items() if k not in _MOVED}
    chat["messages"] = canonical_messages(body)
    if body.get("tools"):
        chat["tools"] = canonical_tools(body["tools"])
    return chat


def _last_user_turn(messages: list[Any]) -> int | None:
    """The last user turn that says something (not only tool results)."""
    for position in range(len(messages) - 1, -1, -1):
        turn = messages[position]
        if (
            isinstance(turn, dict)
            and turn.get("role") == "user"
            and any(b.get("type") != "tool_result" for b in _blocks(turn.get("content")))
        ):
            return position
    return None


# --- replies --------------------------------------------------------------------------


def _edited_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The text and tool-use blocks of a canonical assistant message."""
    blocks: list[dict[str, Any]] = []
    text = message.get("content")
    if isinstance(text, str) and text:
        blocks.append({"type": "text", "text": text})
    for position, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        arguments = function.get("arguments")
        try:
            value = json_text.loads(arguments) if isinstance(arguments, str) and arguments else {}
        except json_text.JSONTextError:
            value = {"arguments": arguments}
        blocks.append(
            {
                "type": "tool_use",
                "id": call.get("id") or f"toolu_faultfinder_{position}",
                "name": function.get("name"),
                "input": value if isinstance(value, dict) else {"value": value},
            }
        )
    return blocks


# --- the adapter ----------------------------------------------------------------------


class MessagesAdapter(AdapterBase):
    """Anthropic Messages. Every request carries its whole conversation, and streams
    report usage anyway: the defaults of ``for_upstream``, ``remember`` and ``visible``
    hold."""

    name = "messages"
    path = "/v1/messages"
    """'/v1/messages' only: OpenAI's '/v1/threads/<id>/messages' is not a model call."""
    overridable = OVERRIDABLE

    def canonical_request(self, body: dict[str, Any], chains: Chains) -> dict[str, Any]:
        return request_to_chat(body)

    def rewrite_tool_result(
        self, body: dict[str, Any], call_id: str, content: str
    ) -> dict[str, Any] | None:
        changed = copy.deepcopy(body)
        found = False
        for turn in changed.get("messages") or []:
            if not isinstance(turn, dict) or turn.get("role") != "user":
                continue
            if not isinstance(turn.get("content"), list):
                continue
            for block in turn["content"]:
                if (
                    isinstance(block, dict)
                    and block.get("type") == "tool_result"
                    and block.get("tool_use_id") == call_id
                ):
                    block["content"] = content
                    found = True
        return changed if found else None

    def edit_input(self, body: dict[str, Any], text: str, mode: str) -> dict[str, Any]:
        changed = copy.deepcopy(body)
        messages: list[Any] = list(changed.get("messages") or [])
        position = _last_user_turn(messages)
        if mode == "append-user" or position is None:
            messages.append({"role": "user", "content": text})
        else:
            turn = messages[position]
            results = [b for b in _blocks(turn.get("content")) if b.get("type") == "tool_result"]
            content: Any = [*results, {"type": "text", "text": text}] if results else text
            messages[position] = {**turn, "content": content}
        changed["messages"] = messages
        return changed

    def reply_ok(self, payload: Any) -> bool:
        return (
            isinstance(payload, dict)
            and payload.get("type") == "message"
            and isinstance(payload.get("content"), list)
        )

    def canonical_reply(self, response: dict[str, Any]) -> CanonicalReply:
        blocks = _blocks(response.get("content"))
        message = _assistant(blocks)
        extra: dict[str, Any] = {}
        if "thinking" in message:
            extra["thinking"] = message.pop("thinking")
        others = sorted(
            {str(b.get("type")) for b in blocks}
            - {"text", "tool_use", "server_tool_use", "thinking", "redacted_thinking"}
        )
        if others:
            extra["other_blocks"] = others
        stop = response.get("stop_reason")
        # The LLM layer's reading of the same usage object (None: the reply has none).
        reported = response.get("usage")
        usage = messages_usage(reported) if isinstance(reported, dict) else None
        return CanonicalReply(
            message=message,
            finish_reason=STOP_TO_FINISH.get(stop, stop) if isinstance(stop, str) else None,
            model=response.get("model"),
            prompt_tokens=None if usage is None else usage.prompt_tokens,
            completion_tokens=None if usage is None else usage.completion_tokens,
            cached_tokens=usage.cached_prompt_tokens if usage and usage.cache_reported else None,
            cache_write_tokens=None if usage is None else usage.cache_write_prompt_tokens,
            reply_id=response.get("id"),
            extra=extra,
        )

    def with_reply(self, response: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = copy.deepcopy(response) if response else {}
        # Thinking and other blocks the edit does not speak of stay, before the new ones.
        kept = [
            b
            for b in _blocks(out.get("content"))
            if b.get("type") not in ("text", "tool_use", "server_tool_use")
        ]
        out["content"] = kept + _edited_blocks(message)
        out.update(
            {
                "id": edited_id(out, "msg_faultfinder"),
                "type": "message",
                "role": "assistant",
                "stop_reason": "tool_use" if message.get("tool_calls") else "end_turn",
                "stop_sequence": None,
            }
        )
        out.setdefault("model", None)
        out.setdefault("usage", {"input_tokens": 0, "output_tokens": 0})
        return out

    def accumulator(self) -> MessageBuilder:
        return MessageBuilder()

    def synthesise(self, response: dict[str, Any], body: dict[str, Any]) -> list[bytes]:
        return [encode_sse(data, name) for name, data in message_events(response)]

    def error_body(self, status: int, message: str, kind: str) -> dict[str, Any]:
        return {"type": "error", "error": {"type": kind, "message": message}}

    def client_env(self, proxy_url: str) -> dict[str, str]:
        # The SDK adds /v1/messages itself; ChatAnthropic reads ANTHROPIC_API_URL first.
        return {"ANTHROPIC_BASE_URL": proxy_url, "ANTHROPIC_API_URL": proxy_url}

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}
