"""plainchat: ``--model plainchat:MODEL``, a backend for the PlainChat API (plainchat.md).

The factory builds the backend from the part of ``--model`` after the colon and the
endpoint options; the backend turns faultfinder's request (OpenAI-format messages) into
PlainChat's body and its reply into a ``Completion``. Retries, the response cache, budgets
and usage accounting are the LLM layer's, around this class: it sends one request and
says whether a failure is worth retrying.
"""

from __future__ import annotations

import os
from typing import Any

import httpx

from faultfinder.errors import ConfigError, LLMCallError
from faultfinder.llm.base import ChatRequest, Completion, TransientLLMError, approx_token_count
from faultfinder.llm.registry import require_name
from faultfinder.usage import Usage

DEFAULT_BASE_URL = "https://api.plainchat.invalid/v1"
KEY_ENV = "PLAINCHAT_API_KEY"
"""PlainChat's own variable: read when the user names none with --api-key-env."""
FINISH = {"end": "stop", "length": "length"}
"""PlainChat's stop reasons in faultfinder's (OpenAI's) words."""


def make_backend(
    model: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    api_key_env: str | None = None,
    **options: Any,
) -> PlainChatBackend:
    """``plainchat:MODEL`` (faultfinder.llm.registry.BackendFactory). The key comes from
    ``api_key``, else the variable ``--api-key-env`` names, else PLAINCHAT_API_KEY."""
    require_name(model, "plainchat", example="tiny-1")
    variable = api_key_env or KEY_ENV
    key = api_key if api_key is not None else os.environ.get(variable)
    if not key:
        raise ConfigError(
            f"No API key for plainchat:{model}. Set {variable}, or name the variable holding "
            "the key with --api-key-env."
        )
    return PlainChatBackend(model, base_url or DEFAULT_BASE_URL, key)


def plainchat_body(model: str, request: ChatRequest) -> dict[str, Any]:
    """The PlainChat body of a request: system messages joined into ``system``, the rest
    as turns (a tool result is a user turn: PlainChat has no tools)."""
    system: list[str] = []
    turns: list[dict[str, str]] = []
    for message in request.messages:
        text = _text(message.get("content"))
        if message.get("role") == "system":
            system.append(text)
        else:
            role = "model" if message.get("role") == "assistant" else "user"
            turns.append({"role": role, "text": text})
    body: dict[str, Any] = {"model": model, "turns": turns}
    if system:
        body["system"] = "\n\n".join(system)
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.stop:
        body["stop"] = list(request.stop)
    return body


def _text(content: Any) -> str:
    """A message's content as text (OpenAI content parts joined)."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


class PlainChatBackend:
    """One PlainChat model (faultfinder.llm.base.Backend)."""

    is_real = True  # refused while the test suite forbids model requests
    supports_tools = False

    def __init__(self, model: str, base_url: str, key: str, timeout: float = 120.0) -> None:
        self.model = model
        self.name = f"plainchat:{model}"  # the --model spec: results are labelled with it
        self.base_url = base_url.rstrip("/")
        self._key = key  # never written anywhere, nor part of the identity
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"PlainChatBackend(model={self.model!r}, base_url={self.base_url!r})"

    def identity(self) -> dict[str, Any]:
        # The response cache keys each reply by this (plus the request): everything that
        # changes the answer, never a credential. Change it when the behaviour changes.
        return {"backend": "plainchat", "base_url": self.base_url, "model": self.model}

    def count_tokens(self, text: str) -> int:
        return approx_token_count(text)  # PlainChat publishes no tokenizer

    async def complete(self, request: ChatRequest) -> Completion:
        url = f"{self.base_url}/plainchat/generate"
        body = plainchat_body(self.model, request)
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                reply = await client.post(url, json=body, headers={"x-api-key": self._key})
        except httpx.ConnectError as exc:
            refused = LLMCallError(f"{self.name}: cannot connect to {self.base_url}: {exc}")
            refused.sent = False  # nothing reached the endpoint
            raise refused from exc
        except httpx.HTTPError as exc:  # a timeout, a dropped connection: try again
            raise TransientLLMError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
        if reply.status_code == 429 or reply.status_code >= 500:
            retry_after = reply.headers.get("retry-after")
            wait = float(retry_after) if retry_after and retry_after.isdigit() else None
            raise TransientLLMError(f"{self.name}: HTTP {reply.status_code}", wait)
        try:
            data = reply.json()
        except ValueError as exc:
            raise TransientLLMError(f"{self.name}: malformed reply (not JSON)") from exc
        if reply.status_code != 200 or not isinstance(data, dict):
            error = data.get("error") if isinstance(data, dict) else None
            message = error.get("message") if isinstance(error, dict) else reply.text[:200]
            hint = " Check the key." if reply.status_code == 401 else ""
            raise LLMCallError(f"{self.name}: HTTP {reply.status_code}: {message}.{hint}")
        tokens = data.get("tokens")
        if not isinstance(tokens, dict):
            tokens = {}
        return Completion(
            text=str(data.get("text") or ""),
            usage=Usage(
                prompt_tokens=int(tokens.get("in", 0)),
                completion_tokens=int(tokens.get("out", 0)),
            ),
            model=str(data.get("model") or self.model),
            finish_reason=FINISH.get(str(data.get("stop")), data.get("stop")),
            raw=data,
        )
