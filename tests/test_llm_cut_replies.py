"""Replies that are not whole answers: cut off at the output limit (``finish_reason:
"length"``, Anthropic's ``stop_reason: "max_tokens"``), withheld (a content filter, a
refusal) or empty. Each is recorded as such, never read as an answer, and never kept in
the response cache; through the CLI against the loopback fake, with the real SDKs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main as cli
from faultfinder.llm import LLM
from faultfinder.llm.base import ChatRequest, Completion
from faultfinder.llm.cache import ResponseCache, cache_key
from faultfinder.llm.openai_compat import OpenAICompatBackend
from faultfinder.testing import FakeOpenAIServer
from faultfinder.traces.schema import GoldLabel, Step, Trace

ANSWER = "Agent Name: b\nStep Number: 12\nReason for Mistake: it opened the wrong page"
CUT = "Agent Name: b\nStep Number: 12\nReason for Mistake: it opened the wr"
"""The answer cut off in its reason: read as complete, its reason is a fragment."""


pytestmark = pytest.mark.usefixtures("loopback_requests")


def write_trace(tmp_path: Path, steps: int = 14) -> Path:
    trace = Trace(
        id="t",
        task="q",
        steps=[Step(index=i, agent="a" if i % 2 else "b", output=f"out {i}") for i in range(steps)],
        label=GoldLabel(agent="b", step=12),
    )
    path = tmp_path / "t.json"
    path.write_text(trace.model_dump_json(), encoding="utf-8")
    return path


def attribute(trace: Path, kind: str, server: FakeOpenAIServer, *extra: str) -> Any:
    url = server.base_url if kind == "openai" else server.base_url.removesuffix("/v1")
    return CliRunner().invoke(
        cli,
        [
            "attribute", str(trace), "--method", "all-at-once", "--model", f"{kind}:m",
            "--base-url", url, "--no-save", "--step-set", "off", "--json", *extra,
        ],
    )  # fmt: skip


def calls(server: FakeOpenAIServer) -> int:
    return sum(1 for r in server.requests if r.method == "POST")


def cut_reply(body: dict[str, Any]) -> dict[str, Any]:
    return {"text": CUT, "finish_reason": "length", "stop_reason": "max_tokens"}


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_cut_off_reply_is_unparsed_and_says_to_raise_the_limit(kind: str, tmp_path: Path) -> None:
    trace = write_trace(tmp_path)
    with FakeOpenAIServer(cut_reply) as server:
        out = attribute(trace, kind, server, "--cache", "none")
    assert out.exit_code == 3, out.output
    result = json.loads(out.stdout)
    assert result["status"] == "unparsed"
    assert result["reason"] is None  # never the fragment "it opened the wr"
    (call,) = result["calls"]  # a new sample under the same limit is cut the same way
    assert call["finish_reason"] == "length"
    assert "cut off at its 304-token limit" in call["parse_error"]
    assert "--max-output-tokens" in out.stderr + call["parse_error"]
    assert result["usage"]["calls"] == 1 and result["usage"]["completion_tokens"] > 0


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_cut_off_reply_is_not_cached_and_the_rerun_reaches_the_model(
    kind: str, tmp_path: Path
) -> None:
    trace = write_trace(tmp_path)
    cache = str(tmp_path / "cache.sqlite")
    with FakeOpenAIServer(cut_reply) as server:
        assert attribute(trace, kind, server, "--cache", cache).exit_code == 3
    assert len(ResponseCache(cache)) == 0
    replies = iter([ANSWER])  # the server's limit raised: now the whole answer
    with FakeOpenAIServer(lambda body: next(replies)) as server:
        out = attribute(trace, kind, server, "--cache", cache)
        assert calls(server) == 1
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["step"] == 12
    assert len(ResponseCache(cache)) == 1


def test_a_cut_off_reply_cached_by_an_older_version_is_not_served(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache.sqlite")
    with FakeOpenAIServer(ANSWER) as server:
        llm = LLM(OpenAICompatBackend("m", base_url=server.base_url), cache=cache)
        request = ChatRequest(messages=[{"role": "user", "content": "who?"}])
        key = cache_key(llm.backend.identity(), request)
        cache.put(key, request, Completion(text=CUT, finish_reason="length"))
        reply = asyncio.run(llm.chat("who?"))
        assert calls(server) == 1
    assert (reply.text, reply.cached, reply.finish_reason) == (ANSWER, False, "stop")
    stored = cache.get(key)  # the whole answer replaced the cut-off one
    assert stored is not None and stored.text == ANSWER


@pytest.mark.parametrize(
    ("reply", "kind", "said"),
    [
        ({"text": "", "finish_reason": "content_filter"}, "openai", "'content_filter'"),
        ({"text": "I can't help with that.", "stop_reason": "refusal"}, "anthropic", "'refusal'"),
    ],
)
def test_a_withheld_reply_says_so_and_is_not_resampled(
    reply: dict[str, Any], kind: str, said: str, tmp_path: Path
) -> None:
    trace = write_trace(tmp_path)
    with FakeOpenAIServer(lambda body: reply) as server:
        out = attribute(trace, kind, server, "--cache", str(tmp_path / "c.sqlite"))
    assert out.exit_code == 3, out.output
    result = json.loads(out.stdout)
    (call,) = result["calls"]
    assert "withheld the reply" in call["parse_error"] and said in call["parse_error"]
    assert len(ResponseCache(tmp_path / "c.sqlite")) == 0


def test_an_empty_reply_is_named_as_such_and_resampled(tmp_path: Path) -> None:
    trace = write_trace(tmp_path)
    replies = iter(["", ANSWER])
    with FakeOpenAIServer(lambda body: next(replies)) as server:
        out = attribute(trace, "openai", server, "--cache", str(tmp_path / "c.sqlite"))
    assert out.exit_code == 0, out.output
    first, second = json.loads(out.stdout)["calls"]
    assert "empty reply (finish_reason 'stop')" in first["parse_error"]
    assert second["parsed"] and json.loads(out.stdout)["step"] == 12
    assert len(ResponseCache(tmp_path / "c.sqlite")) == 1  # only the answer is kept


def test_a_caller_without_a_parser_sees_the_finish_reason() -> None:
    with FakeOpenAIServer(cut_reply) as server:
        llm = LLM(OpenAICompatBackend("m", base_url=server.base_url))
        reply = asyncio.run(llm.chat("who?", max_tokens=8))
    assert (reply.text, reply.finish_reason, reply.parse_error) == (CUT, "length", None)
