"""`serve-local` reports the prompt tokens its model served from a cache only when the
model measured them. Before, its Responses usage said `cached_tokens: 0` whatever the
model was, so a run through it claimed a measured 0% cached share.

The model behind it is a real backend on the loopback fake (whose usage reports, or does
not report, a cached count) or the embedded model (smoke), the client the OpenAI SDK."""

from __future__ import annotations

import asyncio

import openai
import pytest

from faultfinder.llm import LLM
from faultfinder.llm.base import Backend
from faultfinder.llm.openai_compat import OpenAICompatBackend
from faultfinder.replay.httpserver import ServerThread
from faultfinder.replay.local_server import LocalModelServer
from faultfinder.testing import FakeOpenAIServer

COUNTED = {
    "text": "Step 2.",
    "usage": {
        "prompt_tokens": 40,
        "completion_tokens": 3,
        "total_tokens": 43,
        "prompt_tokens_details": {"cached_tokens": 32},
    },
}
UNCOUNTED = {
    "text": "Step 2.",
    "usage": {"prompt_tokens": 40, "completion_tokens": 3, "total_tokens": 43},
}


def serving(backend: Backend) -> ServerThread:
    """``faultfinder serve-local``'s server on ``backend``, as the model "local" (for
    tests/test_serve_local_finish.py too)."""

    async def factory() -> LocalModelServer:
        return await LocalModelServer(LLM(backend), model_name="local").start()

    return ServerThread(factory)


def client(local: ServerThread) -> openai.OpenAI:
    """The OpenAI SDK's client of ``local``, retrying nothing."""
    return openai.OpenAI(api_key="not-needed", base_url=local.url + "/v1", max_retries=0)


@pytest.mark.usefixtures("loopback_requests")
def test_a_measured_count_is_passed_on_in_both_apis() -> None:
    with (
        FakeOpenAIServer(lambda body: COUNTED) as upstream,
        serving(OpenAICompatBackend("m", base_url=upstream.base_url)) as local,
    ):
        sdk = client(local)
        chat = sdk.chat.completions.create(
            model="local", messages=[{"role": "user", "content": "Which step?"}]
        )
        response = sdk.responses.create(model="local", input="Which step?")
    assert chat.usage is not None and chat.usage.prompt_tokens_details is not None
    assert chat.usage.prompt_tokens_details.cached_tokens == 32
    assert response.usage is not None
    assert response.usage.input_tokens_details.cached_tokens == 32


@pytest.mark.usefixtures("loopback_requests")
def test_no_count_is_not_measured_in_chat_and_the_required_zero_in_responses() -> None:
    with (
        FakeOpenAIServer(lambda body: UNCOUNTED) as upstream,
        serving(OpenAICompatBackend("m", base_url=upstream.base_url)) as local,
    ):
        sdk = client(local)
        chat = sdk.chat.completions.create(
            model="local", messages=[{"role": "user", "content": "Which step?"}]
        )
        response = sdk.responses.create(model="local", input="Which step?")
        # faultfinder's own client through serve-local: not measured, so `report` shows '-'.
        through = LLM(OpenAICompatBackend("local", base_url=local.url + "/v1"))
        reply = asyncio.run(through.chat("Which step?"))
    assert chat.usage is not None and chat.usage.prompt_tokens_details is None
    assert response.usage is not None
    assert response.usage.input_tokens_details.cached_tokens == 0  # the SDKs require it
    assert not reply.usage.cache_reported


@pytest.mark.smoke
def test_the_embedded_model_reports_the_prefix_llama_cpp_reused(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The count is the library's own: llama.cpp says on stderr (verbose) how many prompt
    tokens of its context it kept ('N prefix-match hit'); serve-local says the same."""
    pytest.importorskip("llama_cpp")
    from faultfinder.llm.local import LocalBackend

    backend = LocalBackend(n_ctx=1024)
    backend._model().verbose = True
    system = {"role": "system", "content": "You answer with one word. " * 12}
    with serving(backend) as local:
        sdk = client(local)
        first = sdk.chat.completions.create(
            model="local", messages=[system, {"role": "user", "content": "A colour?"}], max_tokens=2
        )
        capfd.readouterr()
        second = sdk.chat.completions.create(
            model="local", messages=[system, {"role": "user", "content": "A fruit?"}], max_tokens=2
        )
        said = capfd.readouterr().err
        third = sdk.responses.create(
            model="local", instructions=system["content"], input="A tree?", max_output_tokens=2
        )
        said_third = capfd.readouterr().err
    hits = [line for line in said.splitlines() if "prefix-match hit" in line]
    third_hits = [line for line in said_third.splitlines() if "prefix-match hit" in line]
    assert len(hits) == 1 and len(third_hits) == 1, (said, said_third)
    kept = int(hits[0].split("Llama.generate: ")[1].split()[0])
    kept_third = int(third_hits[0].split("Llama.generate: ")[1].split()[0])
    assert first.usage is not None and first.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens == 0  # a fresh context
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    assert second.usage.prompt_tokens_details.cached_tokens == kept > 20
    assert third.usage is not None
    assert third.usage.input_tokens_details.cached_tokens == kept_third > 20
