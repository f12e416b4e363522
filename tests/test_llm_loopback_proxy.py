"""A model endpoint on this machine (Ollama, vLLM, LM Studio, ``serve-local``) is reached
directly when the environment names an HTTP proxy.

httpx, under both SDKs, applies HTTP_PROXY to every host, loopback included, unless
NO_PROXY names it: with a corporate proxy set, every call to ``--base-url
http://localhost:11434/v1`` went to the proxy, which cannot reach this machine, and failed
as the endpoint being down. A remote endpoint still goes through the proxy."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from faultfinder.llm.anthropic_messages import AnthropicBackend
from faultfinder.llm.base import ChatRequest
from faultfinder.llm.openai_compat import OpenAICompatBackend
from faultfinder.llm.sdk import SDKBackend
from faultfinder.testing import FakeOpenAIServer


@pytest.fixture
def proxy_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment names a proxy nothing listens on, and no NO_PROXY."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    for variable in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(variable, dead)
        monkeypatch.setenv(variable.lower(), dead)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)


def _ask(backend: SDKBackend[Any]) -> str:
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=20)
    return asyncio.run(backend.complete(request)).text


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.usefixtures("proxy_set")
def test_a_loopback_endpoint_is_reached_past_the_environments_proxy(kind: str) -> None:
    with FakeOpenAIServer(reply="Agent Name: Planner") as server:
        backend: SDKBackend[Any] = (
            OpenAICompatBackend("m", base_url=server.base_url, api_key="k", timeout=10)
            if kind == "openai"
            else AnthropicBackend("m", base_url=server.base_url, api_key="k", timeout=10)
        )
        assert _ask(backend) == "Agent Name: Planner"


@pytest.mark.usefixtures("proxy_set")
def test_a_remote_endpoint_still_goes_through_the_proxy() -> None:
    backend = OpenAICompatBackend("m", base_url="http://models.example/v1", api_key="k")
    client = backend._new_client()
    # The SDK's own httpx client, built from the environment: its proxy mounts stand.
    transports = [t for t in client._client._mounts.values() if t is not None]
    assert transports, "the proxy of the environment should apply to a remote host"
