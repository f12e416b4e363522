"""A recorded step keeps whether its reply said how many prompt tokens came from the
provider's cache (``Usage.cache_reported``). Before, the recorder dropped the flag, so a
loaded or replayed run showed a measured 0% cached where the endpoint said nothing, and
a reported 0 and an unreported one could not be told apart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from faultfinder.replay.httpserver import ServerThread
from faultfinder.replay.proxy import ProxyConfig, RecordingProxy
from faultfinder.replay.recorder import RunMeta, RunStore, build_trace
from faultfinder.testing import FakeOpenAIServer
from faultfinder.traces.io import write_trace
from faultfinder.traces.loader import load_trace

CHAT_SAID = {
    "prompt_tokens": 40,
    "completion_tokens": 2,
    "prompt_tokens_details": {"cached_tokens": 0},
}
CHAT_SILENT = {"prompt_tokens": 40, "completion_tokens": 2}
MESSAGES_SAID = {"input_tokens": 40, "output_tokens": 2, "cache_read_input_tokens": 0}
MESSAGES_SILENT = {"input_tokens": 40, "output_tokens": 2}


def _recorded(tmp_path: Path, usages: list[dict[str, Any]], api: str) -> list[Any]:
    """The steps of a run whose calls got ``usages`` in turn, after a write and a read."""
    answers = iter(usages)
    run_dir = tmp_path / "run"
    with FakeOpenAIServer(reply=lambda body: {"text": "ok", "usage": next(answers)}) as up:

        async def factory() -> RecordingProxy:
            return await RecordingProxy(
                ProxyConfig(upstream=up.base_url), RunStore(run_dir)
            ).start()

        with ServerThread(factory) as proxy:
            for _ in usages:
                if api == "chat":
                    openai.OpenAI(
                        base_url=proxy.url + "/v1", api_key="none"
                    ).chat.completions.create(
                        model="m", messages=[{"role": "user", "content": "hi"}]
                    )
                else:
                    anthropic.Anthropic(base_url=proxy.url, api_key="none").messages.create(
                        model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
                    )
    path = tmp_path / "trace.json"
    write_trace(build_trace(run_dir, RunMeta(run_id="run")), path)
    return load_trace(path).steps


@pytest.mark.parametrize(
    ("api", "said", "silent"),
    [("chat", CHAT_SAID, CHAT_SILENT), ("messages", MESSAGES_SAID, MESSAGES_SILENT)],
)
def test_a_recorded_step_says_whether_its_cache_count_was_reported(
    tmp_path: Path, api: str, said: dict[str, Any], silent: dict[str, Any]
) -> None:
    reported, unreported = _recorded(tmp_path, [said, silent], api)
    assert reported.usage is not None and unreported.usage is not None
    assert (reported.usage.cached_prompt_tokens, reported.usage.cache_reported) == (0, True)
    assert (unreported.usage.cached_prompt_tokens, unreported.usage.cache_reported) == (0, False)
    # The run's total is measured because one call said so.
    assert (reported.usage + unreported.usage).cache_reported
