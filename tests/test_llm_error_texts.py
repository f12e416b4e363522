"""What a failed model call says: the model named once, the endpoint's own message
without the SDK's "Error code: N -" or its closing full stop, then what to do; the real
SDKs against the loopback fake."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from faultfinder import errors
from faultfinder.llm import LLM, FunctionBackend, TransientLLMError
from faultfinder.llm.anthropic_messages import AnthropicBackend
from faultfinder.llm.openai_compat import OpenAICompatBackend
from faultfinder.testing import FakeOpenAIServer, ReplyError

pytestmark = pytest.mark.usefixtures("loopback_requests")


async def _no_sleep(seconds: float) -> None:
    return None


def refusing(status: int, message: str, headers: dict[str, str] | None = None) -> Any:
    def refuse(body: dict[str, Any]) -> str:
        raise ReplyError(status, message, headers)

    return refuse


def failure(llm: LLM) -> str:
    with pytest.raises(errors.LLMCallError) as info:
        asyncio.run(llm.chat("hi"))
    text = str(info.value)
    assert ".." not in text and ".;" not in text and "Error code" not in text, text
    assert text.count(llm.name) == 1, text
    return text


def test_a_refused_key_reads_as_one_sentence_and_a_hint() -> None:
    with FakeOpenAIServer(refusing(401, "Incorrect API key provided.")) as server:
        url = server.base_url
        text = failure(LLM(OpenAICompatBackend("m", base_url=url)))
    assert text == (
        f"openai:m at {url}: HTTP 401: Incorrect API key provided. Check the "
        "API key (OPENAI_API_KEY, or the variable named by --api-key-env)."
    )


def test_retries_used_up_name_the_model_once() -> None:
    with FakeOpenAIServer(refusing(503, "overloaded.")) as server:
        url = server.base_url
        backend = OpenAICompatBackend("m", base_url=url)
        llm = LLM(backend, max_retries=1, sleep=_no_sleep)
        text = failure(llm)
    assert text == (
        f"openai:m at {url}: still failing after 2 attempts: HTTP 503: "
        "overloaded. Check the endpoint, or lower --concurrency."
    )


def test_a_retry_past_the_deadline_has_no_stray_full_stop() -> None:
    with FakeOpenAIServer(refusing(429, "slow down.", {"retry-after": "100"})) as server:
        url = server.base_url
        llm = LLM(OpenAICompatBackend("m", base_url=url), timeout=5)
        text = failure(llm)
    assert text == (
        f"openai:m at {url}: HTTP 429: slow down; the next retry (in 60 s) "
        "would pass the 5 s deadline. Raise --timeout, or check the endpoint."
    )


def test_anthropic_refusals_read_the_same_way() -> None:
    with FakeOpenAIServer(refusing(404, "model: m.")) as server:
        backend = AnthropicBackend("m", base_url=server.base_url)
        text = failure(LLM(backend))
    assert text == (
        f"anthropic:m at {backend.base_url}: HTTP 404: not_found_error: model: m. Check the "
        "model name ('m') and --base-url (the server's root; faultfinder adds /v1/messages)."
    )


def test_a_backend_error_without_the_name_gets_it_in_front() -> None:
    def busy(request: Any) -> str:
        raise TransientLLMError("busy.")

    llm = LLM(FunctionBackend(busy, model="busy"), max_retries=1, sleep=_no_sleep)
    text = failure(llm)
    assert text == (
        "function:busy: still failing after 2 attempts: busy. Check the endpoint, or lower "
        "--concurrency."
    )
