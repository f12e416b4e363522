"""One reading of a Messages reply's usage, shared by the LLM layer and the replay layer."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from faultfinder.llm.anthropic_messages import completion_of
from faultfinder.llm.openai_compat import reported_usage
from faultfinder.llm.usage import messages_usage
from faultfinder.replay.apis.chat import ChatAdapter
from faultfinder.replay.apis.messages import MessagesAdapter
from faultfinder.replay.apis.responses import ResponsesAdapter
from faultfinder.usage import Usage


def reply(usage: Any) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [{"type": "text", "text": "done"}],
        "stop_reason": "end_turn",
        "usage": usage,
    }


def test_prompt_is_input_plus_cache_reads_and_writes() -> None:
    usage = messages_usage(
        {
            "input_tokens": 10,
            "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 5,
            "output_tokens": 7,
        }
    )
    assert usage == Usage(
        prompt_tokens=115,
        completion_tokens=7,
        cached_prompt_tokens=100,
        cache_write_prompt_tokens=5,
        cache_reported=True,
    )


@pytest.mark.parametrize(
    ("reported", "expected"),
    [
        (None, Usage()),
        ("12", Usage()),
        ({}, Usage()),
        ({"input_tokens": -3, "output_tokens": True}, Usage()),
        ({"input_tokens": 2**53, "output_tokens": "4"}, Usage()),
        ({"input_tokens": 4, "output_tokens": 2}, Usage(prompt_tokens=4, completion_tokens=2)),
    ],
)
def test_implausible_counts_are_left_at_zero(reported: Any, expected: Usage) -> None:
    assert messages_usage(reported) == expected


@pytest.mark.parametrize(
    "reported",
    [
        {"input_tokens": 10, "output_tokens": 7},
        {"input_tokens": 3, "cache_read_input_tokens": 900, "output_tokens": 1},
        {"input_tokens": 3, "cache_creation_input_tokens": 40, "output_tokens": 0},
        {"input_tokens": -1, "cache_read_input_tokens": "x", "output_tokens": 5},
    ],
)
def test_a_recorded_reply_and_a_completion_count_the_same_tokens(reported: Any) -> None:
    completion = completion_of(reply(reported), "claude-test")
    canonical = MessagesAdapter().canonical_reply(reply(reported))
    assert canonical.prompt_tokens == completion.usage.prompt_tokens
    assert canonical.completion_tokens == completion.usage.completion_tokens
    # Not said is None in a recording, as a completion says it by cache_reported.
    cached = completion.usage
    assert canonical.cached_tokens == (
        cached.cached_prompt_tokens if cached.cache_reported else None
    )


def test_a_recorded_reply_without_usage_reports_none() -> None:
    canonical = MessagesAdapter().canonical_reply(reply(None))
    assert (canonical.prompt_tokens, canonical.completion_tokens, canonical.cached_tokens) == (
        None,
        None,
        None,
    )


def test_the_replay_layer_does_not_import_the_anthropic_sdk() -> None:
    code = (
        "import sys, faultfinder.replay.apis.messages, faultfinder.llm.usage; "
        "sys.exit('anthropic' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


CHAT_REPLY: dict[str, Any] = {
    "id": "chatcmpl-1",
    "model": "gpt-test",
    "choices": [{"message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
}
RESPONSES_REPLY: dict[str, Any] = {
    "id": "resp_1",
    "object": "response",
    "model": "gpt-test",
    "status": "completed",
    "output": [
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "done"}],
        }
    ],
}


@pytest.mark.parametrize(
    "usage",
    [
        {
            "prompt_tokens": 12,
            "completion_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": 8},
        },
        {"prompt_tokens": "12", "completion_tokens": -3},
        {
            "prompt_tokens": 5,
            "completion_tokens": 2**60,
            "prompt_tokens_details": {"cached_tokens": 9},
        },
    ],
)
def test_a_recorded_chat_reply_counts_what_the_llm_layer_bills(usage: dict[str, Any]) -> None:
    """A reply the proxy records and the same reply the OpenAI backend reads give the
    same tokens; a count that is no plausible integer is 0 on both sides (it used to
    crash the recording, or be copied into the trace)."""
    billed = reported_usage(usage)
    recorded = ChatAdapter().canonical_reply({**CHAT_REPLY, "usage": usage})
    assert (recorded.prompt_tokens, recorded.completion_tokens) == (
        billed.prompt_tokens,
        billed.completion_tokens,
    )
    said = "prompt_tokens_details" in usage
    assert recorded.cached_tokens == (billed.cached_prompt_tokens if said else None)


def test_a_recorded_responses_reply_reads_the_responses_key_names() -> None:
    usage = {
        "input_tokens": 40,
        "output_tokens": -1,
        "input_tokens_details": {"cached_tokens": 32},
    }
    recorded = ResponsesAdapter().canonical_reply({**RESPONSES_REPLY, "usage": usage})
    assert (recorded.prompt_tokens, recorded.completion_tokens, recorded.cached_tokens) == (
        40,
        0,
        32,
    )
    no_usage = ResponsesAdapter().canonical_reply(RESPONSES_REPLY)
    assert (no_usage.prompt_tokens, no_usage.cached_tokens) == (None, None)
