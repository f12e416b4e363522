"""What `attribute` charges for a call, as the endpoint reports it or not: a reply without
`usage` is charged an estimate marked as one (never 0), and Anthropic's cache reads and
writes are part of the prompt; against the loopback fake, with the real SDKs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faultfinder.testing import FakeOpenAIServer
from test_llm_cut_replies import ANSWER, attribute, write_trace

pytestmark = pytest.mark.usefixtures("loopback_requests")


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_reply_without_usage_is_charged_an_estimate_marked_as_one(
    kind: str, tmp_path: Path
) -> None:
    trace = write_trace(tmp_path)
    with FakeOpenAIServer(lambda body: {"text": ANSWER, "usage": None}) as server:
        out = attribute(trace, kind, server, "--cache", "none")
    assert out.exit_code == 0, out.output
    usage = json.loads(out.stdout)["usage"]
    assert usage["calls"] == 1 and usage["estimated"] is True
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0


def test_anthropic_cache_reads_and_writes_are_part_of_the_prompt(tmp_path: Path) -> None:
    trace = write_trace(tmp_path)
    reported = {
        "input_tokens": 10,
        "cache_read_input_tokens": 80,
        "cache_creation_input_tokens": 20,
        "output_tokens": 15,
    }
    with FakeOpenAIServer(lambda body: {"text": ANSWER, "usage": reported}) as server:
        out = attribute(trace, "anthropic", server, "--cache", "none")
    usage = json.loads(out.stdout)["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (110, 15)
    assert (usage["cached_prompt_tokens"], usage["cache_write_prompt_tokens"]) == (80, 20)
    assert usage["estimated"] is False
