"""Serve any faultfinder model (the embedded one, a scripted or function double, or another
endpoint) as an OpenAI-compatible endpoint on loopback: Chat Completions, and the
Responses API (what the OpenAI Agents SDK speaks at its default settings).

This is how an unmodified agent program runs offline: ``faultfinder serve-local`` and
``OPENAI_BASE_URL=http://127.0.0.1:8080/v1``. Requests go through the LLM layer, so the
global ALLOW_MODEL_REQUESTS switch, budgets and token accounting apply.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator
from typing import Any

from faultfinder.errors import FaultfinderError
from faultfinder.llm import json_text
from faultfinder.llm.base import CUT_OFF, WITHHELD
from faultfinder.llm.client import LLM, Reply
from faultfinder.replay.apis import Chains, ChatAdapter
from faultfinder.replay.apis.base import tool_call
from faultfinder.replay.apis.responses import (
    ResponsesAdapter,
    function_call_item,
    message_item,
    response_events,
    response_object,
)
from faultfinder.replay.endpoint import Endpoint
from faultfinder.replay.httpserver import (
    LOOPBACK,
    HttpServer,
    Request,
    Response,
    error_response,
    from_a_web_page,
    json_response,
)
from faultfinder.replay.matching import split_agent_path

_CHAT = ChatAdapter()
_RESPONSES = ResponsesAdapter()
_CHAT_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")

DEFAULT_MAX_TOKENS = 512
"""Reply length when the request names none (small models ramble)."""


class LocalModelServer(Endpoint):
    """An OpenAI-compatible endpoint answering with ``llm``."""

    def __init__(
        self, llm: LLM, *, host: str = LOOPBACK, port: int = 0, model_name: str | None = None
    ) -> None:
        self.llm = llm
        self.model_name = model_name or llm.model or llm.name
        self._server = HttpServer(self.handle, host, port)
        self._ids = itertools.count(1)
        self.requests = 0
        self.chains = Chains()
        """Responses by id, for ``previous_response_id``."""

    async def handle(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        _agent, path = split_agent_path(request.path)
        path = path.rstrip("/")
        if request.method == "GET" and path.endswith("/models"):
            return json_response(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": self.model_name,
                            "object": "model",
                            "created": 0,
                            "owned_by": "faultfinder",
                        }
                    ],
                },
            )
        if _RESPONSES.handles(request.method, path):
            return await self._responses(request)
        if not _CHAT.handles(request.method, path):
            return error_response(404, f"no route {request.method} {request.path}", "not_found")
        body = _json_body(request)
        if isinstance(body, Response):
            return body
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return error_response(
                400, "expected a JSON object with 'messages'", "invalid_request_error"
            )
        completion = await self._answer(body)
        if isinstance(completion, Response):
            return completion
        if body.get("stream"):
            return _event_stream(_CHAT.synthesise(completion, body))
        return json_response(200, completion)

    def _refused(self, request: Request) -> Response | None:
        """The answer to a request a web page could have sent, or None to serve it:
        :func:`~faultfinder.replay.httpserver.from_a_web_page` (a foreign Host or Origin on
        loopback), and, since a "simple" cross-origin POST (a form, ``fetch`` in no-cors
        mode) cannot carry ``Content-Type: application/json``, every POST must be JSON."""
        refused = from_a_web_page(request, self._server.host)
        if refused is not None:
            return error_response(*refused, "invalid_request_error")
        if request.method == "POST":
            kind = (request.header("content-type") or "").split(";", 1)[0].strip().lower()
            if kind != "application/json":
                return error_response(
                    415,
                    f"the request body must be application/json (got {kind or 'none'})",
                    "invalid_request_error",
                )
        return None

    async def _responses(self, request: Request) -> Response:
        """``POST /v1/responses``: the request in canonical form answered by the model, the
        reply as a ``response`` object (streamed as the Responses API streams); replies
        are kept for ``previous_response_id`` unless the request says ``store: false``."""
        body = _json_body(request)
        if isinstance(body, Response):
            return body
        if not isinstance(body, dict):
            return error_response(400, "expected a JSON object", "invalid_request_error")
        previous = body.get("previous_response_id")
        if previous and str(previous) not in self.chains:
            message = f"Previous response with id '{previous}' not found."
            return error_response(400, message, "invalid_request_error")
        canonical = _RESPONSES.canonical_request(body, self.chains)
        chat: dict[str, Any] = {
            "messages": [
                {k: v for k, v in m.items() if k in _CHAT_KEYS}
                for m in canonical["messages"]
                if m.get("role") in ("system", "developer", "user", "assistant", "tool")
            ],
            "temperature": body.get("temperature"),
            "max_tokens": body.get("max_output_tokens"),
        }
        tools = [t for t in canonical.get("tools") or [] if isinstance(t, dict) and "function" in t]
        if tools:
            chat["tools"] = tools
            choice = body.get("tool_choice")
            if isinstance(choice, dict) and choice.get("name"):
                choice = {"type": "function", "function": {"name": choice["name"]}}
            chat["tool_choice"] = choice
        completion = await self._answer(chat)
        if isinstance(completion, Response):
            return completion
        response = self._as_response(body, completion)
        if body.get("store", True) is not False:
            _RESPONSES.remember(self.chains, body, response)
        if body.get("stream"):
            return _event_stream(response_events(response))
        return json_response(200, response)

    def _as_response(self, body: dict[str, Any], completion: dict[str, Any]) -> dict[str, Any]:
        number = next(self._ids)
        message = completion["choices"][0]["message"]
        output: list[dict[str, Any]] = []
        if message.get("content"):
            output.append(message_item(f"msg_local_{number}", message["content"]))
        for position, call in enumerate(message.get("tool_calls") or []):
            function = call["function"]
            item_id = f"fc_local_{number}_{position}"
            output.append(
                function_call_item(item_id, call["id"], function["name"], function["arguments"])
            )
        usage = completion["usage"]
        # The Responses API has no way to say "not measured": its SDKs require the count,
        # so a model that measured none (a double, an endpoint reporting none) answers 0,
        # as the API's own servers do without a cache hit. Chat Completions leaves it out.
        cached = usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
        response = response_object(body, f"resp_local_{number}", self.model_name, output)
        unfinished = INCOMPLETE.get(completion["choices"][0]["finish_reason"])
        if unfinished is not None:
            # As the Responses API says a reply was cut off at max_output_tokens.
            response["status"] = "incomplete"
            response["incomplete_details"] = {"reason": unfinished}
        response["usage"] = {
            "input_tokens": usage["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": usage["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage["total_tokens"],
        }
        return response

    async def _answer(self, body: dict[str, Any]) -> dict[str, Any] | Response:
        """The chat completion ``llm`` answers ``body`` with, or the error (502) it raised;
        counted in :attr:`requests` either way."""
        self.requests += 1
        try:
            return await self._complete(body)
        except FaultfinderError as exc:
            return error_response(502, str(exc), "model_error")

    async def _complete(self, body: dict[str, Any]) -> dict[str, Any]:
        stop = body.get("stop")
        messages, tools = body["messages"], body.get("tools")
        if tools and not self.llm.supports_tools:
            messages, tools = tools_as_text(messages, tools), None
        reply: Reply[Any] = await self.llm.chat(
            messages,
            purpose="serve-local",
            temperature=float(body.get("temperature") or 0.0),
            max_tokens=body.get("max_tokens")
            or body.get("max_completion_tokens")
            or DEFAULT_MAX_TOKENS,
            seed=body.get("seed"),
            stop=[stop] if isinstance(stop, str) else stop,
            tools=tools,
            tool_choice=body.get("tool_choice") if tools else None,
        )
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.tool_calls:
            message["tool_calls"] = [
                tool_call(call.id or f"call_{i}", call.name, call.arguments)
                for i, call in enumerate(reply.tool_calls)
            ]
        elif message["content"] is None:
            message["content"] = ""
        usage = reply.usage
        counts: dict[str, Any] = {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        }
        if usage.cache_reported:
            # Only a count the model measured (the embedded model's reuse of its context,
            # an upstream's report): without one, 'not measured' is the field left out.
            counts["prompt_tokens_details"] = {"cached_tokens": usage.cached_prompt_tokens}
        return {
            "id": f"chatcmpl-local-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": chat_finish(reply),
                }
            ],
            "usage": counts,
        }


INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
"""The Responses API's ``incomplete_details.reason`` for a Chat Completions finish reason
that ends a reply before its end."""


def chat_finish(reply: Reply[Any]) -> str:
    """The Chat Completions ``finish_reason`` of ``reply``, from what its backend said:
    ``length`` when it was cut off at the output limit (OpenAI's ``length``, Anthropic's
    ``max_tokens``), ``content_filter`` when withheld, ``tool_calls`` when it calls
    tools, ``stop`` otherwise (a backend that says nothing included)."""
    if reply.finish_reason in CUT_OFF:
        return "length"
    if reply.finish_reason in WITHHELD:
        return "content_filter"
    return "tool_calls" if reply.tool_calls else "stop"


def _json_body(request: Request) -> Any:
    """The request's body parsed (an empty body is ``{}``), or a 400 when it is not JSON."""
    try:
        return json_text.loads(request.body or b"{}")
    except json_text.JSONTextError as exc:
        return error_response(
            400, f"the request body is unreadable: {exc}", "invalid_request_error"
        )


def _event_stream(events: list[bytes]) -> Response:
    async def send() -> AsyncIterator[bytes]:
        for event in events:
            yield event

    return Response(200, [("content-type", "text/event-stream")], send())


TOOLS_NOTE = (
    "You can use these tools. To call one, write a line '<tool name>: <argument>' and "
    "nothing else; its result will be given to you.\n{tools}"
)


def tools_as_text(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The conversation rewritten for a model without function calling: tools described
    in the system prompt, earlier tool calls and results as plain text."""
    described = []
    for tool in tools:
        function = tool.get("function") or {}
        params = ", ".join((function.get("parameters") or {}).get("properties") or {})
        described.append(f"- {function.get('name')}({params}): {function.get('description', '')}")
    note = TOOLS_NOTE.format(tools="\n".join(described))
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "tool":
            out.append({"role": "user", "content": f"Tool result: {message.get('content', '')}"})
        elif role == "assistant" and message.get("tool_calls"):
            functions = [c.get("function") or {} for c in message["tool_calls"]]
            calls = [f"{f.get('name')}: {f.get('arguments')}" for f in functions]
            out.append(
                {
                    "role": "assistant",
                    "content": "\n".join(filter(None, [message.get("content"), *calls])),
                }
            )
        else:
            out.append(dict(message))
    if out and out[0].get("role") == "system":
        out[0] = {**out[0], "content": f"{out[0].get('content') or ''}\n\n{note}"}
    else:
        out.insert(0, {"role": "system", "content": note})
    return out
