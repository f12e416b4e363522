"""OpenAI Responses API (``POST /v1/responses``), the Agents SDK's default.

Request: ``instructions`` (the system prompt), ``input`` (a string, or a list of items:
messages with a role, ``function_call`` items the model made, ``function_call_output``
items carrying tool results, ``reasoning`` items), ``tools`` (function tools written flat:
``{"type": "function", "name", "parameters"}``), ``previous_response_id`` (the
conversation so far is that earlier response's input and output), ``store``.
Reply: a ``response`` object whose ``output`` lists ``message`` items (``output_text``
parts), ``function_call`` items (``call_id``, ``name``, ``arguments``) and ``reasoning``
items. A stream is named events (``response.created`` ... ``response.output_text.delta``,
``response.function_call_arguments.delta``, ``response.output_item.done``,
``response.completed``), each with a ``sequence_number``, and no ``[DONE]``.

Canonically: ``instructions`` is the system message; message items are messages;
consecutive assistant-side items (reasoning, an assistant message, function calls) are
one assistant message with ``tool_calls`` (ids: the ``call_id``) and ``reasoning`` (the
summaries' text); ``function_call_output`` items are ``tool`` messages. Item ids
(``msg_``, ``fc_``, ``rs_``) are dropped and ``call_`` ids renumbered by the matcher, so
ids minted afresh on each run do not break matching. A ``previous_response_id`` is
resolved through the run's :class:`~faultfinder.replay.apis.base.Chains` into the whole
conversation; one the run never saw stays in the canonical request as written.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

from faultfinder.replay.apis.base import (
    AdapterBase,
    CanonicalReply,
    Chains,
    SSEEvent,
    edited_id,
    encode_sse,
    openai_usage,
    split_after_spaces,
    tool_call,
)

TERMINAL = frozenset({"response.completed", "response.incomplete"})
"""Stream events that carry a finished reply."""
FAILED = frozenset({"response.failed", "error"})
OVERRIDABLE = frozenset({"temperature", "top_p", "max_output_tokens"})
"""Live-call overrides the Responses API has (it has no ``seed``)."""
_DROPPED = frozenset({"input", "instructions", "previous_response_id"})


def _text(content: Any) -> Any:
    """Item content as text when it is text only (input_text/output_text parts)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        kinds = {p.get("type") for p in content if isinstance(p, dict)}
        if kinds <= {"input_text", "output_text", "text"} and all(
            isinstance(p, dict) for p in content
        ):
            return "".join(str(p.get("text", "")) for p in content)
    return content


def _kind(item: Any) -> str | None:
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return str(kind) if kind is not None else None


def _summary(item: dict[str, Any]) -> str:
    parts = item.get("summary") or []
    return "\n".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


def input_items(body: dict[str, Any]) -> list[Any]:
    """``input`` as a list of items (a string is one user message)."""
    given = body.get("input")
    if given is None:
        return []
    if isinstance(given, str):
        return [{"role": "user", "content": given}]
    return list(given) if isinstance(given, list) else [given]


def conversation_items(body: dict[str, Any], chains: Chains) -> tuple[list[Any], bool]:
    """(every item of the conversation, chain resolved?): the chained response's items
    first, when ``previous_response_id`` names one ``chains`` knows."""
    previous = body.get("previous_response_id")
    history: list[Any] = []
    resolved = True
    if previous:
        known = chains.get(str(previous))
        if known is None:
            resolved = False
        else:
            history = list(known)
    return history + input_items(body), resolved


def items_to_messages(items: list[Any]) -> list[dict[str, Any]]:
    """Items as canonical chat messages (see the module docstring)."""
    out: list[dict[str, Any]] = []

    def assistant(fresh: bool) -> dict[str, Any]:
        if not fresh and out and out[-1].get("role") == "assistant" and out[-1].get("_open"):
            return out[-1]
        message: dict[str, Any] = {"role": "assistant", "content": None, "_open": True}
        out.append(message)
        return message

    for item in items:
        kind = _kind(item)
        if kind == "message":
            role = str(item.get("role") or "user")
            content = _text(item.get("content"))
            if role == "assistant":
                message = assistant(fresh=False)
                if message.get("content") is not None or message.get("tool_calls"):
                    message = assistant(fresh=True)
                message["content"] = content
            else:
                out.append({"role": role, "content": content})
        elif kind == "function_call":
            message = assistant(fresh=False)
            message.setdefault("tool_calls", []).append(_call_of(item))
        elif kind == "function_call_output":
            output = item.get("output")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id"),
                    "content": output if isinstance(output, str) else json.dumps(output),
                }
            )
        elif kind == "reasoning":
            message = assistant(fresh=True)
            message["reasoning"] = _summary(item)
        else:
            kept = {k: v for k, v in item.items() if k != "id"} if isinstance(item, dict) else item
            out.append({"role": "item", "item": kept})
    for message in out:
        opened = message.pop("_open", None)
        if (
            opened
            and message.get("content") is None
            and (message.get("tool_calls") or message.get("reasoning") is not None)
        ):
            message.pop("content")
    return out


def _call_of(item: dict[str, Any]) -> dict[str, Any]:
    """A ``function_call`` item as a canonical tool call."""
    return tool_call(
        item.get("call_id") or item.get("id"), item.get("name", ""), item.get("arguments", "")
    )


def message_item(item_id: str, text: str) -> dict[str, Any]:
    """A completed assistant ``message`` output item saying ``text``."""
    return {
        "type": "message",
        "id": item_id,
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def function_call_item(item_id: str, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """A completed ``function_call`` output item."""
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def response_object(
    body: dict[str, Any], reply_id: str, model: str, output: list[dict[str, Any]]
) -> dict[str, Any]:
    """A completed ``response`` to the request ``body``, with ``output``: the request's
    parameters echoed back as the API does; no usage (the caller counts it)."""
    return {
        "id": reply_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "model": model,
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "store": body.get("store", True),
        "temperature": body.get("temperature"),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p"),
        "metadata": body.get("metadata") or {},
    }


def _canonical_tool(tool: Any) -> Any:
    if isinstance(tool, dict) and tool.get("type") == "function" and "function" not in tool:
        function = {k: v for k, v in tool.items() if k != "type"}
        return {"type": "function", "function": function}
    return tool


def _strip_for_input(item: Any) -> Any:
    """An item of an earlier response fit to send back without that response: item ids
    dropped (the upstream may never have stored them), assistant messages as text."""
    kind = _kind(item)
    if kind == "message" and item.get("role") == "assistant":
        return {"role": "assistant", "content": _text(item.get("content")) or ""}
    if kind == "function_call":
        return {k: v for k, v in item.items() if k not in ("id", "status")}
    return item


class ResponseAccumulator:
    """A Responses stream adds up to the ``response`` of its terminal event."""

    def __init__(self) -> None:
        self.response: dict[str, Any] | None = None
        self.failed = False

    def add(self, event: SSEEvent) -> None:
        data = event.data
        if not isinstance(data, dict):
            return
        kind = data.get("type") or event.name
        if kind in TERMINAL and isinstance(data.get("response"), dict):
            self.response = data["response"]
        elif kind in FAILED:
            self.failed = True

    @property
    def finished(self) -> bool:
        return self.failed or self.response is not None

    def result(self) -> dict[str, Any] | None:
        return None if self.failed else self.response


class ResponsesAdapter(AdapterBase):
    """OpenAI Responses API."""

    name = "responses"
    path = "/responses"
    overridable = OVERRIDABLE

    def canonical_request(self, body: dict[str, Any], chains: Chains) -> dict[str, Any]:
        items, resolved = conversation_items(body, chains)
        canonical: dict[str, Any] = {"api": self.name}
        canonical.update({k: v for k, v in body.items() if k not in _DROPPED})
        if not resolved:
            canonical["previous_response_id"] = body.get("previous_response_id")
        if isinstance(body.get("tools"), list):
            canonical["tools"] = [_canonical_tool(t) for t in body["tools"]]
        messages: list[dict[str, Any]] = []
        if body.get("instructions"):
            messages.append({"role": "system", "content": _text(body["instructions"])})
        messages.extend(items_to_messages(items))
        canonical["messages"] = messages
        return canonical

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
        previous = body.get("previous_response_id")
        if expand and previous and str(previous) in chains:
            history = [
                _strip_for_input(i) for i in chains.get(str(previous)) if _kind(i) != "reasoning"
            ]
            sent["input"] = history + input_items(body)
            sent.pop("previous_response_id")
        return sent

    def rewrite_tool_result(
        self, body: dict[str, Any], call_id: str, content: str
    ) -> dict[str, Any] | None:
        items = body.get("input")
        if not isinstance(items, list):
            return None
        positions = [
            i
            for i, item in enumerate(items)
            if _kind(item) == "function_call_output" and item.get("call_id") == call_id
        ]
        if not positions:
            return None
        changed = copy.deepcopy(body)
        for position in positions:
            changed["input"][position]["output"] = content
        return changed

    def edit_input(self, body: dict[str, Any], text: str, mode: str) -> dict[str, Any]:
        changed = copy.deepcopy(body)
        items = input_items(changed)
        users = [
            i
            for i, item in enumerate(items)
            if _kind(item) == "message" and item.get("role") == "user"
        ]
        if mode == "append-user" or not users:
            items.append({"role": "user", "content": text})
        else:
            items[users[-1]] = {**items[users[-1]], "content": text}
        changed["input"] = items
        return changed

    def reply_ok(self, payload: Any) -> bool:
        return (
            isinstance(payload, dict)
            and isinstance(payload.get("output"), list)
            and payload.get("status", "completed") in ("completed", "incomplete")
        )

    def canonical_reply(self, response: dict[str, Any]) -> CanonicalReply:
        output = [i for i in response.get("output") or [] if isinstance(i, dict)]
        texts = [
            str(_text(i.get("content")) or "")
            for i in output
            if _kind(i) == "message" and i.get("role", "assistant") == "assistant"
        ]
        calls = [_call_of(i) for i in output if _kind(i) == "function_call"]
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(texts) if texts else None,
        }
        if calls:
            message["tool_calls"] = calls
        extra: dict[str, Any] = {}
        reasoning = [_summary(i) for i in output if _kind(i) == "reasoning"]
        if reasoning:
            extra["reasoning"] = reasoning
        others = sorted({str(_kind(i)) for i in output} - {"message", "function_call", "reasoning"})
        if others:
            extra["other_items"] = others
        prompt, completion, cached = openai_usage(
            response, "input_tokens", "output_tokens", "input_tokens_details"
        )
        status = response.get("status")
        finish = "tool_calls" if calls else ("length" if status == "incomplete" else "stop")
        return CanonicalReply(
            message=message,
            finish_reason=finish,
            model=response.get("model"),
            prompt_tokens=prompt,
            completion_tokens=completion,
            cached_tokens=cached,
            reply_id=response.get("id"),
            extra=extra,
        )

    def with_reply(self, response: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = (
            copy.deepcopy(response) if response else {"object": "response", "output": []}
        )
        recorded = [i for i in out.get("output") or [] if isinstance(i, dict)]
        content = message.get("content")
        unchanged_text = content == self.canonical_reply(out).message.get("content")
        by_call = {i.get("call_id"): i for i in recorded if _kind(i) == "function_call"}
        first_message = next((i for i in recorded if _kind(i) == "message"), None)
        items: list[dict[str, Any]] = []
        if unchanged_text:
            items.extend(i for i in recorded if _kind(i) == "reasoning")
        if content:
            items.append(message_item((first_message or {}).get("id") or "msg_edited", content))
        for position, call in enumerate(message.get("tool_calls") or []):
            function = call.get("function") or {}
            call_id = call.get("id") or f"call_edit_{position}"
            old = by_call.get(call_id) or {}
            item_id = old.get("id") or f"fc_edit_{position}"
            name, arguments = function.get("name", ""), function.get("arguments", "")
            items.append(function_call_item(item_id, call_id, name, arguments))
        out["output"] = items
        out["status"] = "completed"
        out["id"] = edited_id(out, "resp_faultfinder")
        return out

    def remember(self, chains: Chains, body: dict[str, Any], response: dict[str, Any]) -> None:
        reply_id = response.get("id")
        if not reply_id:
            return
        items, _ = conversation_items(body, chains)
        output = [i for i in response.get("output") or [] if isinstance(i, dict)]
        chains.put(str(reply_id), items + output)

    def accumulator(self) -> ResponseAccumulator:
        return ResponseAccumulator()

    def synthesise(self, response: dict[str, Any], body: dict[str, Any]) -> list[bytes]:
        return response_events(response)

    def error_body(self, status: int, message: str, kind: str) -> dict[str, Any]:
        return {"error": {"message": message, "type": kind, "code": status, "param": None}}


def response_events(response: dict[str, Any], pieces: int = 1) -> list[bytes]:
    """A conformant Responses event stream of a complete ``response``: created, in
    progress, each output item added / its deltas / done, completed; numbered in order.
    Text is sent in ``pieces`` deltas (split on spaces, at most that many)."""
    events: list[bytes] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append(encode_sse({"type": kind, **fields, "sequence_number": len(events)}, kind))

    opening = {**copy.deepcopy(response), "status": "in_progress", "output": [], "usage": None}
    emit("response.created", response=opening)
    emit("response.in_progress", response=opening)
    for index, item in enumerate(response.get("output") or []):
        kind = _kind(item)
        item_id = item.get("id", "")
        if kind == "message":
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "content": []},
            )
            for part_index, part in enumerate(item.get("content") or []):
                text = str(part.get("text", "")) if isinstance(part, dict) else ""
                where = {"item_id": item_id, "output_index": index, "content_index": part_index}
                empty = {**part, "text": ""} if isinstance(part, dict) else part
                emit("response.content_part.added", **where, part=empty)
                for delta in _split(text, pieces):
                    emit("response.output_text.delta", **where, delta=delta, logprobs=[])
                emit("response.output_text.done", **where, text=text, logprobs=[])
                emit("response.content_part.done", **where, part=part)
        elif kind == "function_call":
            arguments = str(item.get("arguments", ""))
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "arguments": "", "status": "in_progress"},
            )
            where = {"item_id": item_id, "output_index": index}
            for delta in _split(arguments, pieces):
                emit("response.function_call_arguments.delta", **where, delta=delta)
            emit(
                "response.function_call_arguments.done",
                **where,
                arguments=arguments,
                name=item.get("name", ""),
            )
        else:
            emit("response.output_item.added", output_index=index, item=item)
        emit("response.output_item.done", output_index=index, item=item)
    final = (
        "response.incomplete" if response.get("status") == "incomplete" else "response.completed"
    )
    emit(final, response=response)
    return events


def _split(text: str, pieces: int) -> list[str]:
    if pieces <= 1 or not text:
        return [text] if text else []
    words = split_after_spaces(text)
    size = max(1, -(-len(words) // pieces))
    return ["".join(words[i : i + size]) for i in range(0, len(words), size)]
