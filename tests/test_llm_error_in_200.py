"""A 200 reply that holds an error instead of an answer: OpenRouter passes a provider's
failure on as ``{"error": {"message", "code"}}`` with status 200. It is told as an error
status of its code would be, the provider's words quoted, not as a reply of the wrong
shape that points at ``--base-url``. Raw loopback servers, the real SDKs, the CLI."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder import errors
from faultfinder.cli import main as cli
from faultfinder.llm import LLM
from faultfinder.llm.anthropic_messages import AnthropicBackend
from faultfinder.llm.openai_compat import OpenAICompatBackend
from faultfinder.traces.schema import Step, Trace

FLAGGED = {"error": {"message": "This content was flagged by the provider", "code": 502}}
GONE = {"error": {"message": "Model meta/llama-3-8b is not available", "code": 400}}
OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


pytestmark = pytest.mark.usefixtures("loopback_requests")


@contextmanager
def answering_200(reply: dict[str, Any]) -> Iterator[tuple[str, list[str]]]:
    """A loopback server answering every POST with status 200 and ``reply``; yields its
    root URL and the paths it was asked for."""
    asked: list[str] = []
    raw = json.dumps(reply).encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


async def no_sleep(seconds: float) -> None:
    return None


def test_a_provider_failure_in_a_200_is_retried_and_quoted() -> None:
    with answering_200(FLAGGED) as (url, asked):
        llm = LLM(OpenAICompatBackend("m", base_url=f"{url}/v1"), sleep=no_sleep, max_retries=2)
        with pytest.raises(errors.LLMCallError) as raised:
            asyncio.run(llm.chat("hi"))
    assert len(asked) == 3  # a failing upstream (502): retried
    assert "a 200 reply held error 502: This content was flagged" in str(raised.value)
    assert "--base-url" not in str(raised.value)


def test_a_refusal_in_a_200_is_not_retried_and_says_what_to_check() -> None:
    with answering_200(GONE) as (url, asked):
        llm = LLM(OpenAICompatBackend("m", base_url=f"{url}/v1"), sleep=no_sleep, max_retries=2)
        with pytest.raises(errors.LLMCallError) as raised:
            asyncio.run(llm.chat("hi"))
    assert len(asked) == 1
    assert "error 400: Model meta/llama-3-8b is not available" in str(raised.value)
    assert "The endpoint rejected the request" in str(raised.value)


def test_an_anthropic_error_event_in_a_200_is_retried_and_quoted() -> None:
    with answering_200(OVERLOADED) as (url, asked):
        llm = LLM(AnthropicBackend("m", base_url=url), sleep=no_sleep, max_retries=1)
        with pytest.raises(errors.LLMCallError) as raised:
            asyncio.run(llm.chat("hi"))
    assert len(asked) == 2
    assert "a 200 reply held an error: Overloaded" in str(raised.value)


def test_attribute_shows_the_provider_s_words_and_exits_4(tmp_path: Path) -> None:
    trace = Trace(
        id="t", task="q", steps=[Step(index=0, agent="a", output="x"), Step(index=1, agent="b")]
    )
    path = tmp_path / "t.json"
    path.write_text(trace.model_dump_json(), encoding="utf-8")
    with answering_200(GONE) as (url, _):
        out = CliRunner().invoke(
            cli,
            [
                "attribute", str(path), "--model", "openai:m", "--base-url", f"{url}/v1",
                "--cache", "none", "--no-save", "--step-set", "off",
            ],
        )  # fmt: skip
    assert out.exit_code == 4, out.output
    assert "Model meta/llama-3-8b is not available" in out.output
    assert "Traceback" not in out.output
