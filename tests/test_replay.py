"""Replay: no-edit replays reproduce a recording step for step; edits at step k change what
follows; divergences are reported, never papered over."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from demo_recording import demo_command, record_demo
from faultfinder.demo_team import mock_model
from faultfinder.demo_team.tasks import find_task
from faultfinder.replay.matching import Matcher, first_difference, request_hash
from faultfinder.replay.recorder import RecordedCall, load_calls
from faultfinder.replay.replayer import Edit, ReplayOptions, ReplayPlan, apply_input_edit
from faultfinder.replay.session import SessionOptions, record_run, replay_run
from faultfinder.testing import FakeOpenAIServer

NOW = datetime(2026, 1, 1, tzinfo=UTC)


# --- whole programs -------------------------------------------------------------------

AVALON = find_task("avalon-2020")
assert AVALON is not None


@pytest.fixture(scope="module")
def upstream() -> Any:
    with FakeOpenAIServer(reply=mock_model.reply) as server:
        yield server


@pytest.fixture(scope="module")
def recorded(upstream: FakeOpenAIServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    outcome = record_demo(out, upstream.base_url, ground_truth=AVALON.answer)
    assert outcome.child.exit_code == 0
    assert outcome.trace.final_answer == "154131" and outcome.trace.metadata["outcome"] == "failure"
    return outcome.run_dir


def test_replay_without_edit_reproduces_the_recording_step_for_step(
    recorded: Path, upstream: FakeOpenAIServer
) -> None:
    before = len(upstream.chat_requests)
    outcome = asyncio.run(
        replay_run(
            recorded,
            demo_command("avalon-2020"),
            ReplayOptions(),
            options=SessionOptions(echo=False),
        )
    )
    assert len(upstream.chat_requests) == before, "a faithful replay never calls the upstream"
    original = load_calls(recorded)
    replayed = load_calls(outcome.branch_dir)
    assert len(replayed) == len(original) == 8
    for old, new in zip(original, replayed, strict=True):
        assert (new.agent, new.agent_call, new.request_hash) == (
            old.agent,
            old.agent_call,
            old.request_hash,
        )
        assert new.response == old.response and new.origin == "cached"
    report = outcome.report
    assert report.fidelity == 1.0 and report.faithful and report.live_calls == 0
    assert outcome.trace.final_answer == "154131"
    assert (outcome.branch_dir / "report.json").exists()


def test_editing_the_orchestrators_instruction_fixes_the_run(
    recorded: Path, upstream: FakeOpenAIServer
) -> None:
    fixed = "NEXT: Researcher | Look up the population of Avalon in 2020"
    outcome = asyncio.run(
        replay_run(
            recorded,
            demo_command("avalon-2020"),
            ReplayOptions(at=1, edit=Edit(output=fixed)),
            upstream=upstream.base_url,
            options=SessionOptions(echo=False),
        )
    )
    steps = outcome.trace.steps
    assert [s.metadata["origin"] for s in steps[:3]] == ["cached", "edited", "live"]
    assert steps[1].content == fixed
    assert outcome.trace.final_answer == "144630"
    assert outcome.trace.metadata["outcome"] == "success"
    assert outcome.report.edit_applied and outcome.report.reproduced == 1
    assert outcome.meta.parent == str(recorded) and outcome.meta.replay is not None


SEES_ITS_RUN = """
import json, os, pathlib
run = pathlib.Path(os.environ["FAULTFINDER_RUN_DIR"])
parent = json.loads((run / "meta.json").read_text()).get("parent")
print("run dir", run.is_absolute(), (run / "meta.json").is_file())
print("parent", parent is not None and (pathlib.Path(parent) / "steps.jsonl").is_file())
"""


def test_a_program_run_elsewhere_finds_its_branch_and_the_recording(
    upstream: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FAULTFINDER_RUN_DIR and a branch's meta.json ``parent`` are absolute: a program run
    with --cwd elsewhere, given relative run directories, can open both (docs/replay.md:
    a tool reads FAULTFINDER_RUN_DIR to stay dry in a replay)."""
    monkeypatch.chdir(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    command = [sys.executable, "-c", SEES_ITS_RUN]
    options = SessionOptions(echo=False, cwd=str(elsewhere))
    recorded = asyncio.run(
        record_run(command, upstream.base_url, "runs", run_id="r", options=options)
    )
    assert recorded.child.exit_code == 0 and "run dir True True" in recorded.child.stdout
    outcome = asyncio.run(replay_run(Path("runs/r"), command, ReplayOptions(), options=options))
    assert outcome.child.exit_code == 0, outcome.child.stderr
    assert "run dir True True" in outcome.child.stdout
    assert "parent True" in outcome.child.stdout
    assert outcome.meta.parent == str((tmp_path / "runs" / "r").resolve())


def test_a_program_that_diverges_on_its_own_is_reported(recorded: Path) -> None:
    # Same recording, different task: the very first request differs.
    outcome = asyncio.run(
        replay_run(
            recorded,
            demo_command("round-trip"),
            ReplayOptions(),
            options=SessionOptions(echo=False),
        )
    )
    [divergence] = outcome.report.divergences
    assert divergence.step == 0 and divergence.action == "refused"
    assert "messages[1].content" in (divergence.difference or "")
    assert divergence.diff and "-" in divergence.diff and "+" in divergence.diff
    assert outcome.child.exit_code != 0
    assert not outcome.trace.steps


# --- the replay plan, call by call ------------------------------------------------


def call(index: int, agent: str, text: str, answer: str, agent_call: int) -> RecordedCall:
    request = {"model": "m", "messages": [{"role": "user", "content": text}]}
    return RecordedCall(
        call=index,
        agent=agent,
        agent_call=agent_call,
        request=request,
        request_hash=request_hash(request),
        response={
            "id": f"r{index}",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer},
                    "finish_reason": "stop",
                }
            ],
        },
        started_at=NOW,
        ended_at=NOW,
    )


RECORDING = [
    call(0, "A", "q0", "a0", 0),
    call(1, "B", "q1", "b1", 0),
    call(2, "A", "q2", "a2", 1),
    call(3, "B", "q3", "b3", 1),
]


def body(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], **extra}


# --- matching -------------------------------------------------------------------------


def test_hash_ignores_transport_details_but_not_content() -> None:
    base = body("hi")
    assert request_hash(base) == request_hash(
        {**base, "stream": True, "stream_options": {"include_usage": True}, "user": "u"}
    )
    as_parts = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}], "name": None}],
    }
    assert request_hash(as_parts) == request_hash(base)
    assert request_hash(body("hi", temperature=0.5)) != request_hash(base)
    assert request_hash(body("hello")) != request_hash(base)


def test_masks_hide_volatile_text() -> None:
    one, two = body("ticket AB-1041 opened"), body("ticket AB-2207 opened")
    assert request_hash(one) != request_hash(two)
    mask = [r"AB-\d+"]
    assert request_hash(one, mask) == request_hash(two, mask)


def test_first_difference_names_the_field() -> None:
    matcher = Matcher()
    found = first_difference(matcher.normalise(body("a")), matcher.normalise(body("b")))
    assert found == "messages[0].content: 'a' != 'b'"


# --- the plan -------------------------------------------------------------------------


def test_no_edit_replay_serves_every_recorded_step() -> None:
    plan = ReplayPlan(RECORDING, ReplayOptions())
    served = [
        plan.decide(agent, body(text))
        for agent, text in [("A", "q0"), ("B", "q1"), ("A", "q2"), ("B", "q3")]
    ]
    assert [d.action for d in served] == ["serve"] * 4
    assert [d.response["choices"][0]["message"]["content"] for d in served if d.response] == [
        "a0",
        "b1",
        "a2",
        "b3",
    ]
    report = plan.finish()
    assert report.fidelity == 1.0 and report.faithful and report.served_steps == [0, 1, 2, 3]


def test_calls_are_matched_per_agent_whatever_the_interleaving() -> None:
    plan = ReplayPlan(RECORDING, ReplayOptions())
    order = [("B", "q1"), ("A", "q0"), ("B", "q3"), ("A", "q2")]
    assert all(plan.decide(agent, body(text)).action == "serve" for agent, text in order)
    assert plan.finish().faithful


def test_divergence_is_refused_and_reported() -> None:
    plan = ReplayPlan(RECORDING, ReplayOptions())
    assert plan.decide("A", body("q0")).action == "serve"
    decision = plan.decide("B", body("something else"))
    assert decision.action == "reject" and decision.status == 422
    assert "matches no recorded call (nearest recorded step 1: " in decision.message
    assert decision.message.count("matches no recorded call") == 1  # said once
    report = plan.finish()
    assert not report.faithful and report.reproduced == 1 and report.missing_steps == [1, 2, 3]
    [divergence] = report.divergences
    assert divergence.step == 1 and divergence.action == "refused"
    assert divergence.difference == "messages[0].content: 'q1' != 'something else'"


def test_a_call_to_a_recording_of_no_model_call_says_so() -> None:
    # "every recorded call was already matched" is true of an empty recording only in the
    # empty sense: it says what the recording holds instead.
    plan = ReplayPlan([], ReplayOptions())
    decision = plan.decide("A", body("q0"))
    assert decision.action == "reject"
    assert "(the recording holds no model call to answer it)" in decision.message
    assert "already matched" not in decision.message


def test_divergence_can_go_live_for_that_agent() -> None:
    plan = ReplayPlan(RECORDING, ReplayOptions(on_divergence="live"))
    assert plan.decide("A", body("changed")).action == "live"
    # Agent A stays live even if its next request happened to match again.
    assert plan.decide("A", body("q2")).action == "live"
    assert plan.decide("B", body("q1")).action == "serve"
    assert plan.finish().divergences[0].action == "went live"


def test_output_edit_is_served_at_step_and_later_steps_go_live() -> None:
    plan = ReplayPlan(RECORDING, ReplayOptions(at=2, edit=Edit(output="EDITED")))
    assert plan.decide("A", body("q0")).action == "serve"
    assert plan.decide("B", body("q1")).action == "serve"
    edited = plan.decide("A", body("q2"))
    assert edited.action == "serve" and edited.origin == "edited"
    assert edited.response is not None
    assert edited.response["choices"][0]["message"] == {"role": "assistant", "content": "EDITED"}
    after = plan.decide("B", body("q3 now different"))
    assert after.action == "live" and after.origin == "live"
    report = plan.finish()
    assert report.edit_applied and report.reproduced == 2 and report.prefix_steps == 2


def test_input_edit_sends_the_changed_request_live() -> None:
    plan = ReplayPlan(RECORDING, ReplayOptions(at=1, edit=Edit(input="better question")))
    plan.decide("A", body("q0"))
    decision = plan.decide("B", body("q1"))
    assert decision.action == "live" and decision.origin == "edited-input"
    assert (
        decision.body is not None and decision.body["messages"][-1]["content"] == "better question"
    )


def test_append_mode_adds_a_user_message() -> None:
    changed = apply_input_edit(body("q"), "hint", "append-user")
    assert [m["content"] for m in changed["messages"]] == ["q", "hint"]


def test_window_stops_after_k_steps_and_refuses_more() -> None:
    plan = ReplayPlan(
        RECORDING,
        ReplayOptions(
            at=1, edit=Edit(input="x"), stop_after_live=2, live_overrides={"temperature": 0.3}
        ),
    )
    plan.decide("A", body("q0"))
    first = plan.decide("B", body("q1"))
    assert first.body is not None and first.body["temperature"] == 0.3
    plan.live_finished()
    assert not plan.should_stop
    assert plan.decide("A", body("live")).action == "live"
    plan.live_finished()
    assert plan.should_stop
    assert plan.decide("B", body("more")).status == 422


def test_step_outside_recording_and_edit_without_step_are_errors() -> None:
    with pytest.raises(ValueError, match="outside the recording"):
        ReplayPlan(RECORDING, ReplayOptions(at=4))
    with pytest.raises(ValueError, match="needs the step"):
        ReplayOptions(edit=Edit(output="x"))
    with pytest.raises(ValueError, match="an edit changes one thing"):
        Edit(output="x", input="y")


def test_a_call_beyond_the_recording_is_a_divergence_not_a_live_call() -> None:
    plan = ReplayPlan(RECORDING[:1], ReplayOptions())
    plan.decide("A", body("q0"))
    extra = plan.decide("A", body("q9"))
    assert extra.action == "reject"
    report = plan.finish()
    assert report.live_calls == 0 and report.divergences[0].step is None


def test_calls_beyond_the_recording_go_live_once_the_edited_step_was_reached() -> None:
    plan = ReplayPlan(RECORDING[:2], ReplayOptions(at=1, edit=Edit(output="x")))
    plan.decide("A", body("q0"))
    assert plan.decide("B", body("q1")).origin == "edited"
    assert plan.decide("A", body("q9")).action == "live"
    assert plan.finish().extra_calls == 1
