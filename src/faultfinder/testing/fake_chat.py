"""The Chat Completions wire format of the loopback fake upstream
(:class:`faultfinder.testing.FakeOpenAIServer`): the completion built from a scripted
reply, its stream of chunks, and errors, as the OpenAI API writes them. The server
decides when to answer (faults, latency, routing); this module decides what the answer
looks like, as :mod:`faultfinder.testing.fake_responses` does for the Responses API.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from faultfinder.llm.base import approx_token_count
from faultfinder.replay.httpserver import Response, json_response


def messages_text(body: dict[str, Any]) -> str:
    """The text of a chat request's messages, one per line."""
    parts: list[str] = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "\n".join(parts)


def chat_completion(
    body: dict[str, Any],
    value: str | dict[str, Any],
    *,
    model: str,
    ids: Iterator[int],
    cached: int | None = None,
) -> dict[str, Any]:
    """The ``chat.completion`` answering ``body`` with a reply callable's ``value``: a
    complete completion (one with ``choices``) as is; otherwise one built from text or a
    spec (``text``, ``tool_calls``, ``usage`` — ``"auto"`` by default, estimated at ~4
    characters a token —, ``finish_reason``). ``cached``: prompt tokens a prefix cache
    holds, reported as ``prompt_tokens_details.cached_tokens`` in ``"auto"`` usage."""
    if isinstance(value, dict) and "choices" in value:
        return value
    spec: dict[str, Any] = {"text": value} if isinstance(value, str) else dict(value)
    text = str(spec.get("text") or "")
    tool_calls = [
        {
            "id": call.get("id") or f"call_{i}",
            "type": "function",
            "function": {
                "name": call["name"],
                "arguments": call["arguments"]
                if isinstance(call.get("arguments"), str)
                else json.dumps(call.get("arguments", {})),
            },
        }
        for i, call in enumerate(spec.get("tool_calls") or [])
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text if text else None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    finish = spec.get("finish_reason") or ("tool_calls" if tool_calls else "stop")
    completion: dict[str, Any] = {
        "id": f"chatcmpl-fake-{next(ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }
    usage = spec.get("usage", "auto")
    if usage == "auto":
        prompt = approx_token_count(messages_text(body))
        produced = approx_token_count(text + "".join(json.dumps(c) for c in tool_calls))
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": produced,
            "total_tokens": prompt + produced,
        }
        if cached is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": min(cached, prompt)}
    if usage is not None:
        completion["usage"] = usage
    return completion


def chat_chunks(
    body: dict[str, Any], completion: dict[str, Any], model: str
) -> list[dict[str, Any]]:
    """``completion`` as the ``chat.completion.chunk`` objects a streaming server sends:
    the role, the text in word-sized pieces, each tool call's name then its arguments, the
    finish reason, and the usage when ``stream_options.include_usage`` asks for it."""
    choice = completion["choices"][0]
    message = choice.get("message") or {}
    base = {
        "id": completion.get("id", "chatcmpl-fake"),
        "object": "chat.completion.chunk",
        "created": completion.get("created", int(time.time())),
        "model": completion.get("model", model),
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    text = message.get("content") or ""
    # Split on word boundaries so clients reassemble several pieces, as with real servers.
    pieces = [p for p in text.replace(" ", " \0").split("\0") if p]
    chunks.extend(chunk({"content": piece}) for piece in pieces)
    for i, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        chunks.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": function["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        chunks.append(
            chunk({"tool_calls": [{"index": i, "function": {"arguments": function["arguments"]}}]})
        )
    chunks.append(chunk({}, choice.get("finish_reason") or "stop"))
    options = body.get("stream_options") or {}
    if options.get("include_usage") and completion.get("usage") is not None:
        chunks.append({**base, "choices": [], "usage": completion["usage"]})
    return chunks


async def chat_stream(
    body: dict[str, Any],
    completion: dict[str, Any],
    model: str,
    linger: float = 0.0,
    error: dict[str, Any] | None = None,
) -> AsyncIterator[bytes]:
    """The server-sent-events body of a streamed ``completion``, ``linger`` seconds
    between ``[DONE]`` and its end. ``error`` (a reply spec's ``stream_error``): the
    stream breaks off after its first chunk with that error chunk (``data: {"error":
    ...}``, as OpenAI-compatible servers report a failure once a stream has begun),
    followed by ``[DONE]`` when its ``done`` is true (vLLM's way), else by nothing."""
    events = [f"data: {json.dumps(c)}\n\n".encode() for c in chat_chunks(body, completion, model)]
    done = b"data: [DONE]\n\n"
    if error is not None:
        chunk = {"error": error.get("error") or {"message": "fake stream error"}}
        events = [*events[:1], f"data: {json.dumps(chunk)}\n\n".encode()]
        done = done if error.get("done") else b""
    # One write for the whole reply, as a fast server's single TCP segment would be.
    yield b"".join(events) + done
    if linger:
        await asyncio.sleep(linger)


SSE_HEADERS = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]


def chat_error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    """An error response in the OpenAI format."""
    payload = {"error": {"message": message, "type": "fake_error", "param": None, "code": status}}
    return json_response(status, payload, list((headers or {}).items()))
