"""Any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama, llama.cpp server,
gateways), through the official ``openai`` SDK.

What every SDK backend does (the key, the base URL, retries left to the LLM layer, telling
transient failures from the others) is :class:`faultfinder.llm.sdk.SDKBackend`; this
module builds the Chat Completions body and reads the reply.
Token counts come from the API's ``usage``; only when an endpoint reports none does the
LLM layer fill in an estimate (:func:`faultfinder.llm.base.approx_token_count`), marked
``estimated``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import openai

from faultfinder.llm.base import ChatRequest, Completion, TransientLLMError
from faultfinder.llm.sdk import PLACEHOLDER_KEY as PLACEHOLDER_KEY
from faultfinder.llm.sdk import SDKBackend, SDKErrors
from faultfinder.llm.usage import openai_usage
from faultfinder.traces.schema import ToolCall
from faultfinder.usage import Usage

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAICompatBackend(SDKBackend[openai.AsyncOpenAI]):
    """A chat model behind an OpenAI-compatible ``/chat/completions`` endpoint."""

    kind = "openai"
    key_env = "OPENAI_API_KEY"
    base_url_env = "OPENAI_BASE_URL"
    default_base_url = DEFAULT_BASE_URL
    sdk_errors = SDKErrors(
        base=openai.OpenAIError,
        status=openai.APIStatusError,
        connection=openai.APIConnectionError,
        validation=openai.APIResponseValidationError,
    )
    keyless = "local servers: pass --base-url, no key needed"
    speaks = "an OpenAI-compatible /v1 endpoint"
    implements = "OpenAI chat completions"
    status_hints: ClassVar[Mapping[int, str]] = {
        403: "The key lacks access to this model or project; check its permissions.",
        404: "Check the model name ('{model}') and --base-url (it usually ends in /v1).",
    }
    parameters = "tools, seed, max_tokens, response_format"

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 300.0,
        structured_output: bool = False,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key,
            timeout=timeout,
            sdk_client=openai.AsyncOpenAI,
            http_client=openai.DefaultAsyncHttpxClient,
        )
        self.structured_output = structured_output
        self.extra_body = dict(extra_body or {})

    def _params(self, request: ChatRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            "messages": request.messages,
        }
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if request.top_p is not None:
            params["top_p"] = request.top_p
        if request.max_tokens is not None:
            params["max_tokens"] = request.max_tokens
        if request.seed is not None:
            # Another sample index is another draw, as with the embedded model.
            params["seed"] = request.seed + request.sample
        if request.stop:
            params["stop"] = request.stop
        if request.tools:
            params["tools"] = request.tools
            if request.tool_choice is not None:
                params["tool_choice"] = request.tool_choice
        schema = request.constraint.json_schema if request.constraint else None
        if self.structured_output and schema is not None:
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": schema},
            }
        params.update(self.extra_body)
        return params

    async def complete(self, request: ChatRequest) -> Completion:
        client = await self._clients.get()
        body = self._params(request)
        data = await self._reply(client.post("/chat/completions", body=body, cast_to=object), body)
        if not isinstance(data, dict):
            raise TransientLLMError(
                f"{self._where}: malformed reply (not a JSON object). Check that --base-url "
                f"points at {self.speaks}."
            )
        return self._to_completion(data, body)

    def _to_completion(self, data: dict[str, Any], body: Mapping[str, Any]) -> Completion:
        """A reply as a Completion; a reply of the wrong shape is a TransientLLMError
        (retried, then reported), never a traceback."""
        choices = data.get("choices")
        if "error" in data and not choices:
            raise self._error_in_reply(data, body)
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise self._malformed("no choices")
        choice = choices[0]
        message = choice.get("message")
        if not isinstance(message, dict):
            raise self._malformed("choices[0] has no message object")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise self._malformed("choices[0].message.content is not text")
        raw_calls = message.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise self._malformed("choices[0].message.tool_calls is not a list")
        calls: list[ToolCall] = []
        for call in raw_calls:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise self._malformed("a tool call without a function name")
            arguments = function.get("arguments")
            call_id = call.get("id")
            calls.append(
                ToolCall(
                    id=call_id if isinstance(call_id, str) else None,
                    name=function["name"],
                    arguments=arguments if isinstance(arguments, str) else "",
                )
            )
        finish = choice.get("finish_reason")
        model = data.get("model")
        return Completion(
            text=content or "",
            tool_calls=calls,
            usage=reported_usage(data.get("usage")),
            model=model if isinstance(model, str) and model else self.model,
            finish_reason=finish if isinstance(finish, str) else None,
            raw=data,
        )


def reported_usage(reported: Any) -> Usage:
    """The usage a Chat Completions reply reports (see :func:`openai_usage`)."""
    return openai_usage(reported)
