"""Any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama, llama.cpp server,
gateways), through the official ``openai`` SDK.

The SDK's own retries are switched off: the LLM layer (:mod:`faultfinder.llm.client`)
owns retries, so this module only classifies failures as transient or not.
Token counts come from the API's ``usage``; only when an endpoint reports none does the
LLM layer fill in an estimate (:func:`faultfinder.llm.base.approx_token_count`), marked
``estimated``.
"""

from __future__ import annotations

import os
from typing import Any

import openai

from faultfinder import errors
from faultfinder.llm.base import ChatRequest, Completion, TransientLLMError, approx_token_count
from faultfinder.llm.sdk import ClientPerLoop, parse_retry_after, unreachable
from faultfinder.redact import Redactor
from faultfinder.traces.schema import ToolCall
from faultfinder.usage import Usage

DEFAULT_BASE_URL = "https://api.openai.com/v1"
PLACEHOLDER_KEY = "not-needed"
"""Sent when a custom endpoint is used without a key: most local servers ignore the key,
but the SDK insists on one."""

# The statuses the SDK itself would retry: timeouts, lock conflicts, rate limits, server errors.
_TRANSIENT_STATUSES = {408, 409, 429}


class OpenAICompatBackend:
    """A chat model behind an OpenAI-compatible ``/chat/completions`` endpoint."""

    is_real = True
    supports_tools = True

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 300.0,
        structured_output: bool = False,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        custom_url = base_url or os.environ.get("OPENAI_BASE_URL")
        if not api_key:
            if not custom_url:
                raise errors.ModelNotAvailableError(
                    f"No API key for openai:{model}. Set OPENAI_API_KEY, or name the variable "
                    "holding the key with --api-key-env (local servers: pass --base-url, "
                    "no key needed)."
                )
            api_key = PLACEHOLDER_KEY
        self.model = model
        self.name = f"openai:{model}"
        self.base_url = (custom_url or DEFAULT_BASE_URL).rstrip("/")
        self.timeout = timeout
        self.structured_output = structured_output
        self.extra_body = dict(extra_body or {})
        self._api_key = api_key
        # Error texts can echo the key (some endpoints quote it back); they end up in
        # result rows, so they are scrubbed.
        self._redactor = Redactor([api_key])
        self._clients = ClientPerLoop(self._new_client)

    def __repr__(self) -> str:
        # Never show the key.
        return f"OpenAICompatBackend(model={self.model!r}, base_url={self.base_url!r})"

    def identity(self) -> dict[str, Any]:
        return {"backend": "openai", "base_url": self.base_url, "model": self.model}

    def count_tokens(self, text: str) -> int:
        return approx_token_count(text)

    def _new_client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            api_key=self._api_key, base_url=self.base_url, timeout=self.timeout, max_retries=0
        )

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
        try:
            # The SDK's generic ``post`` skips its per-request parameter transformation and
            # model construction, which cost more CPU than everything else per call; errors
            # and authentication are handled exactly as in ``chat.completions.create``.
            data = await client.post(
                "/chat/completions", body=self._params(request), cast_to=object
            )
        except openai.APIStatusError as exc:
            raise self._status_error(exc) from exc
        except openai.APIConnectionError as exc:
            # Includes APITimeoutError. Nothing listening, or no such host, will not get
            # better by waiting: say so at once instead of retrying.
            why = unreachable(exc)
            if why:
                raise errors.LLMCallError(
                    f"{self.name}: cannot connect to {self.base_url}: {why}. Check "
                    "--base-url and that the server is running."
                ) from exc
            raise TransientLLMError(self._scrub(f"{self.name} at {self.base_url}: {exc}")) from exc
        except (openai.APIResponseValidationError, ValueError) as exc:
            # A 200 reply whose body is not JSON: retried, then reported.
            raise TransientLLMError(
                f"{self.name} at {self.base_url}: malformed reply (not JSON: {exc})"
            ) from exc
        except openai.OpenAIError as exc:
            raise errors.LLMCallError(
                self._scrub(
                    f"{self.name} at {self.base_url}: unexpected reply ({exc}). Check that "
                    "--base-url points at an OpenAI-compatible /v1 endpoint."
                )
            ) from exc
        if not isinstance(data, dict):
            raise TransientLLMError(
                f"{self.name} at {self.base_url}: malformed reply (not a JSON object). Check "
                "that --base-url points at an OpenAI-compatible /v1 endpoint."
            )
        return self._to_completion(data)

    def _status_error(self, exc: openai.APIStatusError) -> Exception:
        status = exc.status_code
        where = f"{self.name} at {self.base_url}"
        if status in _TRANSIENT_STATUSES or status >= 500:
            retry_after = parse_retry_after(dict(exc.response.headers))
            return TransientLLMError(
                self._scrub(f"{where}: HTTP {status}: {exc.message}"), retry_after
            )
        hint = {
            401: "Check the API key (OPENAI_API_KEY, or the variable named by --api-key-env).",
            403: "The key lacks access to this model or project; check its permissions.",
            404: (
                f"Check the model name ('{self.model}') and --base-url (it usually ends in /v1)."
            ),
            413: "The prompt is too large for the endpoint; lower the method's context budget.",
        }.get(status)
        if hint is None:
            hint = (
                "The endpoint rejected the request; check that this model supports the "
                "parameters used (tools, seed, max_tokens, response_format) and that the "
                "prompt fits its context window."
            )
        return errors.LLMCallError(self._scrub(f"{where}: HTTP {status}: {exc.message}. {hint}"))

    def _scrub(self, message: str) -> str:
        return self._redactor.text(message)

    def _to_completion(self, data: dict[str, Any]) -> Completion:
        """A reply as a Completion; a reply of the wrong shape is a TransientLLMError
        (retried, then reported), never a traceback."""
        choices = data.get("choices")
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

    def _malformed(self, what: str) -> TransientLLMError:
        return TransientLLMError(
            f"{self.name} at {self.base_url}: malformed reply ({what}). Check that the "
            "endpoint implements OpenAI chat completions."
        )


def reported_usage(reported: Any) -> Usage:
    """The usage a reply reports; counts that are missing, not integers or negative are
    left at 0, which the LLM layer replaces by its own estimate."""
    if not isinstance(reported, dict):
        return Usage()

    def count(key: str) -> int:
        value = reported.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            return 0
        return value if 0 <= value < 2**53 else 0

    details = reported.get("prompt_tokens_details")
    cached = 0
    if isinstance(details, dict):
        value = details.get("cached_tokens")
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53:
            cached = value
    prompt = count("prompt_tokens")
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=count("completion_tokens"),
        # Part of the prompt, served from the server's prefix cache (never more than it).
        cached_prompt_tokens=min(cached, prompt),
    )
