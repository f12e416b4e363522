"""The Responses API's background mode through the recording proxy, with the real
``openai`` SDK against the loopback fake: a call cancelled by the program and one it
never polls to completion are failed calls that say why, beside the steps that finished;
in a replay, the polls and cancel of a live background call are reported as parts of
that call. (A background call polled to completion is a step: ``test_replay_apis.py``,
``responses-chain-background``.)"""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path

import pytest

from faultfinder.cli.replay_cmd import report_lines
from faultfinder.replay.proxy_notes import recording_notes
from faultfinder.replay.recorder import load_calls
from faultfinder.replay.replayer import ReplayOptions
from faultfinder.replay.session import SessionOptions, record_run, replay_run
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

POLLED = """
import sys, time
from openai import OpenAI

client = OpenAI()
answers = []
for question in ("first", "second"):
    response = client.responses.create(model="fake-model", input=question, background=True)
    if question == "second" and "--cancel" in sys.argv:
        response = client.responses.retrieve(response.id)
        assert response.status == "in_progress", response.status
        response = client.responses.cancel(response.id)
    while response.status in ("queued", "in_progress"):
        time.sleep(0.02)
        response = client.responses.retrieve(response.id)
    answers.append(response.status)
if "--cancel-done" in sys.argv:  # a no-op on a finished response, which it returns
    answers.append(client.responses.cancel(response.id).status)
print("FINAL ANSWER:", " ".join(answers))
"""
QUIET = SessionOptions(echo=False, timeout=60)
OLD_RUN = Path(__file__).parent / "fixtures" / "replay" / "old-background"
"""A run of ``program.py`` recorded by faultfinder before it recorded background mode
(commit c08b896's parent): the background call is a failed call, its polls unrecorded."""


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


def test_polls_and_cancel_of_a_live_background_call_are_parts_of_it(tmp_path: Path) -> None:
    with FakeOpenAIServer(reply="done") as upstream:
        program = [sys.executable, "-c", POLLED]
        recorded = asyncio.run(
            record_run(program, upstream.base_url, tmp_path, run_id="run", options=QUIET)
        )
        assert recorded.child.exit_code == 0, recorded.child.stderr[-2000:]
        assert len(recorded.trace.steps) == 2
        # Step 1 goes live, is polled once, then cancelled by the program.
        replayed = asyncio.run(
            replay_run(
                recorded.run_dir,
                [*program, "--cancel"],
                ReplayOptions(at=1),
                upstream=upstream.base_url,
                options=QUIET,
            )
        )
    assert replayed.child.exit_code == 0, replayed.child.stderr[-2000:]
    report = replayed.report
    assert [(live.method, live.background) for live in report.live] == [
        ("POST", None),
        ("GET", "poll"),
        ("POST", "cancel"),
    ]
    assert {(live.api, live.agent, live.step) for live in report.live} == {
        ("responses", "assistant", 1)
    }
    assert (report.live_calls, report.model_calls_live) == (3, 1)
    assert (report.background_requests, report.passthrough_calls) == (2, 0)
    lines = report_lines(report, replayed.branch_dir, replayed.trace)
    assert (
        "live calls:  3 sent to the upstream (1 model call(s), 0 matching no recorded request; "
        "2 poll(s) or cancel(s) of background calls; 0 other request(s))"
    ) in lines
    poll, cancel = report.live[1].path, report.live[2].path
    assert f"    GET {poll} (poll of responses call by assistant, step 1) -> 200" in lines
    assert f"    POST {cancel} (cancel of responses call by assistant, step 1) -> 200" in lines
    assert not any("not a model call" in line for line in lines)


def test_a_finished_background_call_cancelled_is_answered_from_the_recording(
    tmp_path: Path,
) -> None:
    program = [sys.executable, "-c", POLLED, "--cancel-done"]
    with FakeOpenAIServer(reply="done") as upstream:
        recorded = asyncio.run(
            record_run(program, upstream.base_url, tmp_path, run_id="run", options=QUIET)
        )
        assert recorded.child.exit_code == 0, recorded.child.stderr[-2000:]
        assert recorded.trace.final_answer == "completed completed completed"
        # The cancel is part of the recorded call: no request left unrecorded.
        assert recorded.meta.unrecorded == {}
        asked = len(upstream.requests)
        # No upstream named: the recording answers the cancel as it answers the polls.
        replayed = asyncio.run(
            replay_run(recorded.run_dir, program, ReplayOptions(), options=QUIET)
        )
        assert len(upstream.requests) == asked
    assert replayed.child.exit_code == 0, replayed.child.stderr[-2000:]
    assert replayed.trace.final_answer == "completed completed completed"
    report = replayed.report
    assert report.faithful and report.live_calls == 0 and report.blocked == []


def test_a_call_recorded_only_as_failed_is_refused_saying_so(tmp_path: Path) -> None:
    run = tmp_path / "old-background"
    shutil.copytree(OLD_RUN, run)
    program = [sys.executable, str(OLD_RUN / "program.py")]
    replayed = asyncio.run(replay_run(run, program, ReplayOptions(), options=QUIET))
    report = replayed.report
    assert report.reproduced == 1 and report.live_calls == 0
    [divergence] = report.divergences
    assert divergence.action == "refused" and divergence.step is None
    assert divergence.difference == (
        "its request was recorded only as a failed call (call 1: upstream reply is not a "
        "complete responses reply), which has no reply to replay"
    )
    # The program is told what to do, not that it diverged on its own.
    stderr = replayed.child.stderr
    assert "Record the run again if an older faultfinder made it, or replay with" in stderr
    assert "diverged from the recording on its own" not in stderr


def test_a_call_cancelled_while_queued_is_refused_not_sent_live(tmp_path: Path) -> None:
    """The program creates a background response and cancels it while it is queued:
    recorded is a failed call with no reply (the program got a 200 queued and a 200
    cancelled, neither a reply to replay). The replay refuses its create, sends nothing
    upstream even though one is named, and says why; it used to advise recording the run
    again, which records the same."""
    program = [sys.executable, "-c", PROGRAM]
    with FakeOpenAIServer(reply="done") as upstream:
        recorded = asyncio.run(
            record_run(program, upstream.base_url, tmp_path, run_id="run", options=QUIET)
        )
        assert recorded.child.exit_code == 0, recorded.child.stderr[-2000:]
        (cancelled, *_) = load_calls(recorded.run_dir, include_failed=True)
        assert cancelled.request.get("background") and cancelled.error_body is None
        asked = len(upstream.requests)
        replayed = asyncio.run(
            replay_run(
                recorded.run_dir, program, ReplayOptions(), upstream=upstream.base_url,
                options=QUIET,
            )
        )  # fmt: skip
        assert len(upstream.requests) == asked
    report = replayed.report
    assert (report.live_calls, report.refused_calls) == (0, 1)
    [divergence] = report.divergences
    assert divergence.action == "refused" and "cancelled by the program" in divergence.difference
    stderr = replayed.child.stderr
    assert replayed.child.exit_code != 0 and "UnprocessableEntityError" in stderr
    assert "A background call cancelled or left before it finished keeps no reply" in stderr
    assert "Record the run again" not in stderr
