"""The Responses API's background mode through the recording proxy, with the real
``openai`` SDK against the loopback fake: a call cancelled by the program and one it
never polls to completion are failed calls that say why, beside the steps that finished.
(A background call polled to completion is a step: ``test_replay_apis.py``,
``responses-chain-background``.)"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from faultfinder.replay.proxy_notes import recording_notes
from faultfinder.replay.recorder import load_calls
from faultfinder.replay.session import SessionOptions, record_run
from faultfinder.testing import FakeOpenAIServer

PROGRAM = """
from openai import OpenAI

client = OpenAI()
cancelled = client.responses.create(model="fake-model", input="first", background=True)
assert cancelled.status == "queued", cancelled.status
assert client.responses.cancel(cancelled.id).status == "cancelled"
forgotten = client.responses.create(model="fake-model", input="second", background=True)
done = client.responses.create(model="fake-model", input="third")
print("FINAL ANSWER:", done.output_text)
"""


@pytest.fixture(autouse=True)
def no_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def test_cancelled_and_unfinished_background_calls_say_why(tmp_path: Path) -> None:
    with FakeOpenAIServer(reply="done") as upstream:
        outcome = asyncio.run(
            record_run(
                [sys.executable, "-c", PROGRAM],
                upstream.base_url,
                tmp_path,
                run_id="run",
                options=SessionOptions(echo=False, timeout=60),
            )
        )
    assert outcome.child.exit_code == 0, outcome.child.stderr[-2000:]
    assert len(outcome.trace.steps) == 1
    failed = [c for c in load_calls(outcome.run_dir, include_failed=True) if not c.ok]
    assert [c.call for c in failed] == [0, 1]
    assert "cancelled by the program" in (failed[0].error or "")
    assert "never fetched it to completion" in (failed[1].error or "")
    # The cancel is part of the call, not an unrecorded request to warn about.
    assert outcome.meta.unrecorded == {}
    notes = recording_notes(outcome.meta, outcome.run_dir, len(outcome.trace.steps))
    assert not any("forwarded without recording" in line for line in notes)
