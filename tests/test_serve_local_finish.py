"""`serve-local` passes on why its model's reply ended: a reply cut off at the output limit
is `finish_reason: "length"` (a Responses reply `incomplete`), not `stop`. The model
behind it is a real backend on the loopback fake; the client is the OpenAI SDK."""

from __future__ import annotations

from typing import Any

import pytest

from faultfinder.llm.anthropic_messages import AnthropicBackend
from faultfinder.llm.openai_compat import OpenAICompatBackend
from faultfinder.testing import FakeOpenAIServer
from test_serve_local_cache import client, serving

pytestmark = pytest.mark.usefixtures("loopback_requests")


CUT = {"text": "The decisive step is", "finish_reason": "length"}


def test_a_cut_off_reply_is_length_in_chat_completions() -> None:
    with (
        FakeOpenAIServer(lambda body: CUT) as upstream,
        serving(OpenAICompatBackend("m", base_url=upstream.base_url)) as local,
    ):
        sdk = client(local)
        said = sdk.chat.completions.create(
            model="local", messages=[{"role": "user", "content": "Which step?"}], max_tokens=4
        )
        chunks = list(
            sdk.chat.completions.create(
                model="local",
                messages=[{"role": "user", "content": "Which step?"}],
                max_tokens=4,
                stream=True,
            )
        )
    assert said.choices[0].finish_reason == "length"
    assert said.choices[0].message.content == CUT["text"]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length"


def test_a_cut_off_reply_is_incomplete_in_the_responses_api() -> None:
    with (
        FakeOpenAIServer(lambda body: CUT) as upstream,
        serving(OpenAICompatBackend("m", base_url=upstream.base_url)) as local,
    ):
        response = client(local).responses.create(
            model="local", input="Which step?", max_output_tokens=4
        )
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == CUT["text"]


def test_anthropics_max_tokens_is_length_and_an_answer_stays_stop() -> None:
    replies: list[dict[str, Any]] = [
        {"text": "cut", "stop_reason": "max_tokens"},
        {"text": "whole"},
    ]
    with (
        FakeOpenAIServer(lambda body: replies.pop(0)) as upstream,
        serving(AnthropicBackend("m", base_url=upstream.base_url)) as local,
    ):
        sdk = client(local)
        said = [
            sdk.chat.completions.create(
                model="local", messages=[{"role": "user", "content": "Which step?"}]
            )
            for _ in range(2)
        ]
    assert [s.choices[0].finish_reason for s in said] == ["length", "stop"]
