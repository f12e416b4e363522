"""Endpoints that refuse a request field many local servers do not take (``tools``,
``response_format``): the error names the field and what to run instead, through the CLI
against the loopback fake with the real SDKs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder import errors
from faultfinder.cli import main as cli
from faultfinder.llm import LLM
from faultfinder.llm.base import OutputConstraint
from faultfinder.llm.openai_compat import OpenAICompatBackend
from faultfinder.testing import FakeOpenAIServer, ReplyError
from faultfinder.traces.schema import Step, Trace

VLLM = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
OLLAMA = "registry.ollama.ai/library/gemma2:2b does not support tools"
SUBMIT = 'THOUGHT: step 1 went wrong.\nACTION: submit {"agent": "b", "step": 1, "reason": "x"}'


pytestmark = pytest.mark.usefixtures("loopback_requests")


def no_tools(refusal: str) -> Any:
    """A server without tool calling: refuses any request offering tools."""

    def reply(body: dict[str, Any]) -> str:
        if body.get("tools"):
            raise ReplyError(400, refusal)
        return SUBMIT

    return reply


def attribute(tmp_path: Path, kind: str, server: FakeOpenAIServer, method: str) -> Any:
    trace = Trace(
        id="t", task="q", steps=[Step(index=0, agent="a", output="x"), Step(index=1, agent="b")]
    )
    path = tmp_path / "t.json"
    path.write_text(trace.model_dump_json(), encoding="utf-8")
    url = server.base_url if kind == "openai" else server.base_url.removesuffix("/v1")
    return CliRunner().invoke(
        cli,
        [
            "attribute", str(path), "--method", method, "--model", f"{kind}:m",
            "--base-url", url, "--cache", "none", "--no-save", "--step-set", "off", "--json",
        ],
    )  # fmt: skip


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("refusal", [VLLM, OLLAMA])
def test_a_refusal_of_tools_says_to_run_the_text_transport(
    kind: str, refusal: str, tmp_path: Path
) -> None:
    with FakeOpenAIServer(no_tools(refusal)) as server:
        out = attribute(tmp_path, kind, server, "agentic")
    assert out.exit_code == 4, out.output
    error = json.loads(out.stdout)["error"]
    assert refusal in error  # the endpoint's own words
    assert "no tool calling" in error and "--method agentic:text" in error
    assert "Traceback" not in out.output


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_the_text_transport_runs_where_tools_are_refused(kind: str, tmp_path: Path) -> None:
    with FakeOpenAIServer(no_tools(OLLAMA)) as server:
        out = attribute(tmp_path, kind, server, "agentic:text")
    assert out.exit_code == 0, out.output
    assert (json.loads(out.stdout)["agent"], json.loads(out.stdout)["step"]) == ("b", 1)


def test_a_refusal_of_the_json_schema_says_to_drop_structured_output() -> None:
    def reply(body: dict[str, Any]) -> str:
        if "response_format" in body:
            raise ReplyError(400, "response_format of type json_schema is not supported")
        return "{}"

    schema = {"type": "object"}
    with FakeOpenAIServer(reply) as server:
        backend = OpenAICompatBackend("m", base_url=server.base_url, structured_output=True)
        with pytest.raises(errors.LLMCallError) as caught:
            asyncio.run(LLM(backend).chat("hi", constraint=OutputConstraint(json_schema=schema)))
    assert "without structured_output" in str(caught.value)


def test_another_refusal_keeps_the_general_hint() -> None:
    def reply(body: dict[str, Any]) -> str:
        raise ReplyError(400, "temperature must be at most 1.0")

    with FakeOpenAIServer(reply) as server:
        llm = LLM(OpenAICompatBackend("m", base_url=server.base_url))
        with pytest.raises(errors.LLMCallError) as caught:
            asyncio.run(llm.chat("hi", tools=[{"type": "function", "function": {"name": "f"}}]))
    assert "check that this model supports the parameters used" in str(caught.value)
    assert "agentic:text" not in str(caught.value)
