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
writes (cache reads as cached tokens).

Streams are named events: ``message_start``, ``content_block_start``, ``ping``,
``content_block_delta`` (``text_delta``, ``input_json_delta``, ``thinking_delta``,
``signature_delta``, ``citations_delta``), ``content_block_stop``, ``message_delta``
(stop reason, output tokens), ``message_stop``; an ``error`` event ends a failed
stream. Usage is always in the stream, so nothing is hidden from a client.

Programs are pointed at the proxy through ``ANTHROPIC_BASE_URL`` (the SDK) and
``ANTHROPIC_API_URL`` (which ChatAnthropic reads first); a key from ``--api-key-env``
goes upstream as ``x-api-key``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from faultfinder.replay.apis.base import (
    AdapterBase,
    CanonicalReply,
    Chains,
    SSEEvent,
    edited_id,
    encode_sse,
    split_after_spaces,
    tool_call,
)

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


def reply_usage(usage: Any) -> tuple[int, int, int] | None:
    """(prompt, completion, cached) tokens of a reply's usage; the prompt is input +
    cache reads + cache writes (``input_tokens`` counts only what follows the last cache
    mark)."""
    if not isinstance(usage, dict):
        return None

    def count(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    read = count("cache_read_input_tokens")
    prompt = count("input_tokens") + read + count("cache_creation_input_tokens")
    return prompt, count("output_tokens"), read


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
            value = json.loads(arguments) if isinstance(arguments, str) and arguments else {}
        except json.JSONDecodeError:
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


# --- streams --------------------------------------------------------------------------


def _block_events(index: int, block: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    kind = block.get("type")
    deltas: list[dict[str, Any]] = []
    if kind == "text":
        start = {**block, "text": ""}
        start.pop("citations", None)
        pieces = split_after_spaces(str(block.get("text", "")))
        deltas = [{"type": "text_delta", "text": p} for p in pieces if p]
        deltas += [{"type": "citations_delta", "citation": c} for c in block.get("citations") or []]
    elif kind in ("tool_use", "server_tool_use"):
        start = {**block, "input": {}}
        raw = json.dumps(block.get("input") or {}, ensure_ascii=False)
        cut = max(len(raw) // 2, 1)
        deltas = [
            {"type": "input_json_delta", "partial_json": part}
            for part in (raw[:cut], raw[cut:])
            if part
        ]
    elif kind == "thinking":
        start = {**block, "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": str(block.get("thinking", ""))}]
        if block.get("signature"):
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
    else:
        start = dict(block)
    events = [
        (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        )
    ]
    events += [
        ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
        for d in deltas
    ]
    events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    return events


def message_events(message: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The named events a complete reply is streamed as (see the module docstring):
    ``message_start`` carries the reply without content and with the input usage, each
    block its start, deltas and stop, ``message_delta`` the stop reason and output
    tokens."""
    usage = dict(message.get("usage") or {})
    head = {k: v for k, v in message.items() if k not in ("content", "usage")}
    head.update({"content": [], "stop_reason": None, "stop_sequence": None})
    if usage:
        head["usage"] = {**usage, "output_tokens": min(int(usage.get("output_tokens") or 0), 1)}
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": head}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(message.get("content") or []):
        if isinstance(block, dict):
            events += _block_events(index, block)
    delta: dict[str, Any] = {
        "type": "message_delta",
        "delta": {
            "stop_reason": message.get("stop_reason"),
            "stop_sequence": message.get("stop_sequence"),
        },
    }
    if usage:
        delta["usage"] = {"output_tokens": usage.get("output_tokens", 0)}
    events.append(("message_delta", delta))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


class MessageBuilder:
    """Adds up a Messages event stream into the reply it carries."""

    def __init__(self) -> None:
        self.message: dict[str, Any] | None = None
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial_json: dict[int, list[str]] = {}
        self.stopped = False
        self.error: str | None = None

    def add(self, event: SSEEvent) -> None:
        if isinstance(event.data, dict):
            self.add_data(event.data)

    def add_data(self, data: dict[str, Any]) -> None:
        kind = data.get("type")
        if kind == "message_start" and isinstance(data.get("message"), dict):
            self.message = copy.deepcopy(data["message"])
        elif kind == "content_block_start" and isinstance(data.get("content_block"), dict):
            index = data.get("index")
            position = index if isinstance(index, int) else len(self.blocks)
            self.blocks[position] = copy.deepcopy(data["content_block"])
        elif kind == "content_block_delta" and isinstance(data.get("delta"), dict):
            index = data.get("index")
            self._delta(index if isinstance(index, int) else 0, data["delta"])
        elif kind == "message_delta" and self.message is not None:
            delta = data.get("delta")
            if isinstance(delta, dict):
                self.message.update({k: v for k, v in delta.items() if k != "type"})
            usage = data.get("usage")
            if isinstance(usage, dict):
                merged = dict(self.message.get("usage") or {})
                merged.update({k: v for k, v in usage.items() if v is not None})
                self.message["usage"] = merged
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            error = data.get("error")
            self.error = str(error.get("message")) if isinstance(error, dict) else "error event"

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self.blocks.setdefault(index, {"type": "text", "text": ""})
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = str(block.get("text", "")) + str(delta.get("text", ""))
        elif kind == "input_json_delta":
            self.partial_json.setdefault(index, []).append(str(delta.get("partial_json", "")))
        elif kind == "thinking_delta":
            block["thinking"] = str(block.get("thinking", "")) + str(delta.get("thinking", ""))
        elif kind == "signature_delta":
            block["signature"] = str(block.get("signature", "")) + str(delta.get("signature", ""))
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(delta.get("citation"))

    @property
    def finished(self) -> bool:
        return self.stopped or self.error is not None

    def result(self) -> dict[str, Any] | None:
        if not self.stopped or self.message is None or self.error is not None:
            return None
        return self.reply()

    def reply(self) -> dict[str, Any]:
        """The reply the events so far add up to."""
        message = dict(self.message or {"type": "message", "role": "assistant"})
        content: list[dict[str, Any]] = []
        for index in sorted(self.blocks):
            block = dict(self.blocks[index])
            if index in self.partial_json:
                raw = "".join(self.partial_json[index])
                try:
                    block["input"] = json.loads(raw) if raw.strip() else {}
                except json.JSONDecodeError:
                    block["input"] = {}
            content.append(block)
        message["content"] = content
        return message


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
        counts = reply_usage(response.get("usage"))
        return CanonicalReply(
            message=message,
            finish_reason=STOP_TO_FINISH.get(stop, stop) if isinstance(stop, str) else None,
            model=response.get("model"),
            prompt_tokens=None if counts is None else counts[0],
            completion_tokens=None if counts is None else counts[1],
            cached_tokens=None if counts is None else counts[2],
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
