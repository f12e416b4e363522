"""A prompt longer than the model's context window: the error says what to pass.

A long agent run in one all-at-once prompt passes any window. The endpoints say so in
their own words (OpenAI's chat and Responses APIs, Anthropic's Messages API, servers
that copy OpenAI's); each is answered by the loopback fake upstream in that API's error
format, and read by the real SDK.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder import errors
from faultfinder.cli import main
from faultfinder.llm import LLM
from faultfinder.llm.anthropic_messages import AnthropicBackend
from faultfinder.llm.openai_compat import OpenAICompatBackend
from faultfinder.llm.sdk import context_overflow_hint
from faultfinder.testing.fake_openai import FakeOpenAIServer, ReplyError
from faultfinder.traces.schema import Step, Trace

OPENAI = (
    "This model's maximum context length is 128000 tokens. However, your messages resulted "
    "in 440213 tokens. Please reduce the length of the messages."
)
ANTHROPIC = "prompt is too long: 208656 tokens > 200000 maximum"
RESPONSES = (
    "Your input exceeds the context window of this model. Please adjust your input and try again."
)


pytestmark = pytest.mark.usefixtures("loopback_requests")


async def _no_sleep(_: float) -> None:
    return None


def _refusing(message: str) -> Any:
    def refuse(body: dict[str, Any]) -> str:
        raise ReplyError(400, message)

    return refuse


@pytest.mark.parametrize(
    ("message", "window"),
    [(OPENAI, "(128000 tokens)"), (ANTHROPIC, "(200000 tokens)"), (RESPONSES, "")],
)
def test_each_wording_of_an_overflow_gets_the_hint(message: str, window: str) -> None:
    hint = context_overflow_hint(message)
    assert hint is not None and "--set context_budget=N" in hint and "compose" in hint
    assert f"context window {window}".strip() in hint or not window


def test_other_client_errors_get_no_overflow_hint() -> None:
    assert context_overflow_hint("max_tokens: 300000 > 64000, which is the maximum") is None
    assert context_overflow_hint("temperature and top_p cannot both be specified") is None


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_the_backends_turn_an_overflow_into_the_hint(kind: str) -> None:
    message = OPENAI if kind == "openai" else ANTHROPIC
    with FakeOpenAIServer(_refusing(message)) as server:
        backend = (
            OpenAICompatBackend("m", base_url=server.base_url)
            if kind == "openai"
            else AnthropicBackend("m", base_url=server.base_url)
        )
        with pytest.raises(errors.LLMCallError) as info:
            asyncio.run(LLM(backend, sleep=_no_sleep).chat("a very long log"))
    text = str(info.value)
    assert "HTTP 400" in text and message.split(".")[0] in text
    assert "--set context_budget=N" in text


def test_attribute_on_a_long_run_says_to_set_a_context_budget(tmp_path: Path) -> None:
    steps = [Step(index=i, agent=f"agent{i % 3}", content=f"step {i}") for i in range(30)]
    trace = tmp_path / "run.json"
    trace.write_text(Trace(id="run", task="q", steps=steps).model_dump_json(), encoding="utf-8")
    with FakeOpenAIServer(_refusing(OPENAI)) as server:
        args = ["attribute", str(trace), "--method", "all-at-once", "--model", "openai:m"]
        result = CliRunner().invoke(
            main, [*args, "--base-url", server.base_url, "--cache", "none", "--no-save"]
        )
    assert result.exit_code != 0
    assert "--set context_budget=N" in result.output
    assert "440213 tokens" in result.output  # the endpoint's own words, printed whole
    assert "Traceback" not in result.output
