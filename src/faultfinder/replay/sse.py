"""Server-sent events for streamed chat completions: parse, rebuild, synthesise.

A streamed reply is recorded as the complete ``chat.completion`` object it adds up to,
so a trace holds one message per call whether or not the client streamed; replays of a
streamed call are served as a fresh stream made from that object.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

DONE = "[DONE]"


class SSEParser:
    """Splits a byte stream into SSE events; feed bytes as they arrive."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        """Complete events (each including its blank-line terminator) found so far."""
        self._buffer += data.replace(b"\r\n", b"\n")
        events: list[bytes] = []
        while b"\n\n" in self._buffer:
            event, self._buffer = self._buffer.split(b"\n\n", 1)
            events.append(event + b"\n\n")
        return events

    def flush(self) -> list[bytes]:
        """Whatever is left when the stream ends (an unterminated last event)."""
        rest, self._buffer = self._buffer, b""
        return [rest + b"\n\n"] if rest.strip() else []


def event_data(event: bytes) -> str | None:
    """The joined ``data:`` lines of one event, or None when it has none (a comment)."""
    lines = [
        line[5:].lstrip(b" ") if line.startswith(b"data:") else None for line in event.split(b"\n")
    ]
    data = [line for line in lines if line is not None]
    if not data:
        return None
    return b"\n".join(data).decode("utf-8", errors="replace")


def is_usage_only(chunk: dict[str, Any]) -> bool:
    """The final chunk some servers send with ``stream_options.include_usage``."""
    return not chunk.get("choices") and chunk.get("usage") is not None


class CompletionBuilder:
    """Adds up ``chat.completion.chunk`` objects into one ``chat.completion``."""

    def __init__(self) -> None:
        self.head: dict[str, Any] = {}
        self.choices: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] | None = None
        self.chunks = 0

    def add(self, chunk: dict[str, Any]) -> None:
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


def completion_chunks(
    completion: dict[str, Any], *, include_usage: bool
) -> Iterator[dict[str, Any]]:
    """The chunks of a stream that adds up to ``completion`` (role, content, tools, finish)."""
    base = {
        "id": completion.get("id", "chatcmpl-faultfinder"),
        "object": "chat.completion.chunk",
        "created": completion.get("created", 0),
        "model": completion.get("model", ""),
    }
    if completion.get("system_fingerprint"):
        base["system_fingerprint"] = completion["system_fingerprint"]
    for choice in completion.get("choices") or []:
        index = choice.get("index", 0)
        message = choice.get("message") or {}

        def chunk(
            delta: dict[str, Any], finish: str | None = None, i: int = index
        ) -> dict[str, Any]:
            return {**base, "choices": [{"index": i, "delta": delta, "finish_reason": finish}]}

        first: dict[str, Any] = {"role": message.get("role", "assistant"), "content": ""}
        yield chunk(first)
        for key, value in message.items():
            if key in ("role", "tool_calls") or value is None:
                continue
            if value != "" or key != "content":
                yield chunk({key: value})
        for position, call in enumerate(message.get("tool_calls") or []):
            function = call.get("function") or {}
            yield chunk(
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
        yield chunk({}, choice.get("finish_reason") or "stop")
    if include_usage and completion.get("usage") is not None:
        yield {**base, "choices": [], "usage": completion["usage"]}


def encode_event(payload: dict[str, Any] | str) -> bytes:
    """One SSE ``data:`` event."""
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {text}\n\n".encode()


def stream_bytes(completion: dict[str, Any], *, include_usage: bool) -> list[bytes]:
    """The whole SSE body for ``completion``, ending with ``[DONE]``."""
    events = [encode_event(c) for c in completion_chunks(completion, include_usage=include_usage)]
    events.append(encode_event(DONE))
    return events
