"""OpenAI Chat Completions (``POST /v1/chat/completions``): the canonical form itself.

A request is already canonical; a reply is ``choices[0].message``. Streams are
``chat.completion.chunk`` events ending with ``data: [DONE]``; for usage on streams the
proxy asks the upstream for ``stream_options.include_usage`` and hides that extra chunk
from clients that did not ask for it.
"""

from __future__ import annotations

import copy
from typing import Any

from faultfinder.replay.apis.base import (
    AdapterBase,
    CanonicalReply,
    Chains,
    SSEEvent,
    edited_id,
    encode_sse,
    openai_usage,
)

DONE = "[DONE]"


def _is_usage_only(chunk: Any) -> bool:
    return isinstance(chunk, dict) and not chunk.get("choices") and chunk.get("usage") is not None


def _include_usage(body: dict[str, Any]) -> bool:
    return bool((body.get("stream_options") or {}).get("include_usage"))


class CompletionBuilder:
    """Adds up ``chat.completion.chunk`` events into one ``chat.completion``."""

    def __init__(self) -> None:
        self.head: dict[str, Any] = {}
        self.choices: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] | None = None
        self.chunks = 0
        self.done = False

    def add(self, event: SSEEvent) -> None:
        if isinstance(event.data, dict):
            self.add_chunk(event.data)
        elif isinstance(event.data, str) and event.data.strip() == DONE:
            self.done = True

    @property
    def finished(self) -> bool:
        return self.done

    def add_chunk(self, chunk: dict[str, Any]) -> None:
        self.chunks += 1
        for key in ("id", "created", "model", "system_fingerprint", "service_tier"):
            if key in chunk and chunk[key] is not None and key not in self.head:
                self.head[key] = chunk[key]
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            index = int(choice.get("index", 0))
            state = self.choices.setdefault(
                index, {"message": {"role": "assistant"}, "tool_calls": {}, "finish_reason": None}
            )
            delta = choice.get("delta") or {}
            message = state["message"]
            for key, value in delta.items():
                if key == "tool_calls":
                    for call in value or []:
                        self._add_tool_call(state["tool_calls"], call)
                elif key == "role":
                    if value:
                        message["role"] = value
                elif isinstance(value, str):
                    message[key] = message.get(key, "") + value
                elif value is not None:
                    message[key] = value
            if choice.get("finish_reason") is not None:
                state["finish_reason"] = choice["finish_reason"]
            if choice.get("logprobs") is not None:
                state.setdefault("logprobs", choice["logprobs"])

    @staticmethod
    def _add_tool_call(calls: dict[int, dict[str, Any]], delta: dict[str, Any]) -> None:
        index = int(delta.get("index", len(calls)))
        call = calls.setdefault(index, {"id": None, "type": "function", "function": {}})
        if delta.get("id"):
            call["id"] = delta["id"]
        if delta.get("type"):
            call["type"] = delta["type"]
        function = delta.get("function") or {}
        for key in ("name", "arguments"):
            if function.get(key) is not None:
                call["function"][key] = call["function"].get(key, "") + function[key]

    def result(self) -> dict[str, Any] | None:
        complete = self.choices and all(
            c["finish_reason"] is not None for c in self.choices.values()
        )
        return self.completion() if self.chunks and complete else None

    def completion(self) -> dict[str, Any]:
        """The completion the chunks add up to."""
        choices = []
        for index in sorted(self.choices):
            state = self.choices[index]
            message = dict(state["message"])
            message.setdefault("content", None)
            if state["tool_calls"]:
                message["tool_calls"] = [
                    state["tool_calls"][i] for i in sorted(state["tool_calls"])
                ]
                for call in message["tool_calls"]:
                    call["function"].setdefault("arguments", "")
            choice: dict[str, Any] = {
                "index": index,
                "message": message,
                "finish_reason": state["finish_reason"],
            }
            if "logprobs" in state:
                choice["logprobs"] = state["logprobs"]
            choices.append(choice)
        out: dict[str, Any] = {**self.head, "object": "chat.completion", "choices": choices}
        if self.usage is not None:
            out["usage"] = self.usage
        return out


def completion_chunks(completion: dict[str, Any], *, include_usage: bool) -> list[dict[str, Any]]:
    """The chunks of a stream that adds up to ``completion`` (role, content, tools, finish)."""
    base = {
        "id": completion.get("id", "chatcmpl-faultfinder"),
        "object": "chat.completion.chunk",
        "created": completion.get("created", 0),
        "model": completion.get("model", ""),
    }
    if completion.get("system_fingerprint"):
        base["system_fingerprint"] = completion["system_fingerprint"]
    out: list[dict[str, Any]] = []
    for choice in completion.get("choices") or []:
        index = choice.get("index", 0)
        message = choice.get("message") or {}

        def chunk(
            delta: dict[str, Any], finish: str | None = None, i: int = index
        ) -> dict[str, Any]:
            return {**base, "choices": [{"index": i, "delta": delta, "finish_reason": finish}]}

        out.append(chunk({"role": message.get("role", "assistant"), "content": ""}))
        for key, value in message.items():
            if key in ("role", "tool_calls") or value is None:
                continue
            if value != "" or key != "content":
                out.append(chunk({key: value}))
        for position, call in enumerate(message.get("tool_calls") or []):
            function = call.get("function") or {}
            out.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": position,
                                "id": call.get("id"),
                                "type": call.get("type", "function"),
                                "function": {
                                    "name": function.get("name", ""),
                                    "arguments": function.get("arguments", ""),
                                },
                            }
                        ]
                    }
                )
            )
        out.append(chunk({}, choice.get("finish_reason") or "stop"))
    if include_usage and completion.get("usage") is not None:
        out.append({**base, "choices": [], "usage": completion["usage"]})
    return out


def stream_bytes(completion: dict[str, Any], *, include_usage: bool) -> list[bytes]:
    """The whole SSE body for ``completion``, ending with ``[DONE]``."""
    events = [encode_sse(c) for c in completion_chunks(completion, include_usage=include_usage)]
    events.append(encode_sse(DONE))
    return events


def last_user_index(messages: list[dict[str, Any]]) -> int | None:
    for position in range(len(messages) - 1, -1, -1):
        if isinstance(messages[position], dict) and messages[position].get("role") == "user":
            return position
    return None


class ChatAdapter(AdapterBase):
    """OpenAI Chat Completions."""

    name = "chat"
    path = "/chat/completions"

    def canonical_request(self, body: dict[str, Any], chains: Chains) -> dict[str, Any]:
        return body

    def for_upstream(
        self,
        body: dict[str, Any],
        chains: Chains,
        *,
        overrides: dict[str, Any],
        stream_usage: bool,
        expand: bool,
    ) -> dict[str, Any]:
        sent = self.overridden(body, overrides)
        if self.is_stream(body) and stream_usage and not _include_usage(body):
            sent["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        return sent

    def rewrite_tool_result(
        self, body: dict[str, Any], call_id: str, content: str
    ) -> dict[str, Any] | None:
        messages = body.get("messages") or []
        positions = [
            i
            for i, m in enumerate(messages)
            if isinstance(m, dict) and m.get("role") == "tool" and m.get("tool_call_id") == call_id
        ]
        if not positions:
            return None
        changed = copy.deepcopy(body)
        for position in positions:
            changed["messages"][position]["content"] = content
        return changed

    def edit_input(self, body: dict[str, Any], text: str, mode: str) -> dict[str, Any]:
        changed = copy.deepcopy(body)
        messages: list[dict[str, Any]] = list(changed.get("messages") or [])
        position = last_user_index(messages)
        if mode == "append-user" or position is None:
            messages.append({"role": "user", "content": text})
        else:
            messages[position] = {**messages[position], "content": text}
        changed["messages"] = messages
        return changed

    def reply_ok(self, payload: Any) -> bool:
        return isinstance(payload, dict) and bool(payload.get("choices"))

    def canonical_reply(self, response: dict[str, Any]) -> CanonicalReply:
        choices = response.get("choices") or [{}]
        message = dict(choices[0].get("message") or {})
        message.setdefault("role", "assistant")
        prompt, completion, cached = openai_usage(
            response, "prompt_tokens", "completion_tokens", "prompt_tokens_details"
        )
        return CanonicalReply(
            message=message,
            finish_reason=choices[0].get("finish_reason"),
            model=response.get("model"),
            prompt_tokens=prompt,
            completion_tokens=completion,
            cached_tokens=cached,
            reply_id=response.get("id"),
        )

    def with_reply(self, response: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = copy.deepcopy(response) if response else {"object": "chat.completion"}
        choices = out.get("choices") or [{"index": 0}]
        first = dict(choices[0])
        first["message"] = message
        first["finish_reason"] = "tool_calls" if message.get("tool_calls") else "stop"
        out["choices"] = [first]
        out["id"] = edited_id(out, "chatcmpl-faultfinder")
        return out

    def accumulator(self) -> CompletionBuilder:
        return CompletionBuilder()

    def synthesise(self, response: dict[str, Any], body: dict[str, Any]) -> list[bytes]:
        return stream_bytes(response, include_usage=_include_usage(body))

    def visible(self, event: SSEEvent, body: dict[str, Any]) -> bool:
        return _include_usage(body) or not _is_usage_only(event.data)
