"""Anthropic Messages streams, both ways: a complete reply sent again as the named
events the API streams, and a stream added up into the reply it carries.

The events are ``message_start``, ``content_block_start``, ``ping``,
``content_block_delta`` (``text_delta``, ``input_json_delta``, ``thinking_delta``,
``signature_delta``, ``citations_delta``), ``content_block_stop``, ``message_delta``
(stop reason, output tokens), ``message_stop``; an ``error`` event ends a failed
stream. Usage is always in the stream, so nothing is hidden from a client.

The adapter that uses them is :class:`~faultfinder.replay.apis.messages.MessagesAdapter`.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from faultfinder.llm import json_text
from faultfinder.replay.apis.base import SSEEvent, split_after_spaces

__all__ = ["MessageBuilder", "message_events"]


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
                    block["input"] = json_text.loads(raw) if raw.strip() else {}
                except json_text.JSONTextError:
                    block["input"] = {}
            content.append(block)
        message["content"] = content
        return message
