"""A retried call is the same step: when the edited request of `replay --at K` gets a
retryable error (500, or 529 from Anthropic), the SDK's retry of the program's original
request carries the edit too, becomes step K of the branch, and the report says the edit
was applied only once an edited call was answered. Real SDKs, unmodified, against the
loopback fake upstream."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from faultfinder.cli import main
from faultfinder.replay.edits import Edit, ToolResultChange
from faultfinder.replay.recorder import RecordedCall, utcnow
from faultfinder.replay.replayer import ReplayOptions, ReplayPlan
from faultfinder.testing import FakeOpenAIServer
from faultfinder.testing.fake_openai import ReplyError

EDITED = "EDITED: ask about the second thing properly"

OPENAI_PROGRAM = """\
import openai
client = openai.OpenAI(max_retries=2)
def ask(text):
    reply = client.chat.completions.create(
        model="m",
        messages=[{"role": "system", "content": "You are Solver."},
                  {"role": "user", "content": text}],
    )
    return reply.choices[0].message.content
ask("first question")
print("FINAL ANSWER:", ask("second question"))
"""

ANTHROPIC_PROGRAM = """\
import anthropic
client = anthropic.Anthropic(max_retries=2)
def ask(text):
    reply = client.messages.create(
        model="claude-x", max_tokens=50, system="You are Solver.",
        messages=[{"role": "user", "content": text}],
    )
    return reply.content[0].text
ask("first question")
print("FINAL ANSWER:", ask("second question"))
"""


def last_user(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return str(content)
    return ""


def failing_edited(status: int, times: int) -> Callable[[dict[str, Any]], str]:
    """A scripted model answering 'echo: <question>', and ``status`` to the first
    ``times`` requests carrying the edit (with a short retry-after-ms, so the SDK's
    retry comes at once)."""
    failed = [0]
    lock = threading.Lock()

    def reply(body: dict[str, Any]) -> str:
        text = last_user(body)
        with lock:
            if EDITED in text and failed[0] < times:
                failed[0] += 1
                raise ReplyError(status, "try again", {"retry-after-ms": "10"})
        return f"echo: {text}"

    return reply


def write_program(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "program.py"
    path.write_text(text, encoding="utf-8")
    return [sys.executable, str(path)]


def record_and_replay(
    tmp_path: Path, program: list[str], status: int, times: int
) -> tuple[Result, FakeOpenAIServer, Path]:
    """Record ``program`` (no error), then replay it with an input edit at step 1 against
    a fresh upstream that fails the first ``times`` edited requests with ``status``."""
    run = tmp_path / "runs" / "run"
    with FakeOpenAIServer(failing_edited(status, 0)) as recording:
        recorded = CliRunner().invoke(
            main,
            ["record", "--upstream", recording.base_url, "--out", str(tmp_path / "runs"),
             "--run-id", "run", "--quiet", "--", *program],
        )  # fmt: skip
        assert recorded.exit_code == 0, recorded.output
    with FakeOpenAIServer(failing_edited(status, times)) as upstream:
        replayed = CliRunner().invoke(
            main,
            ["replay", str(run), "--at", "1", "--edit-input", EDITED, "--branch-id", "b",
             "--upstream", upstream.base_url, "--quiet", "--", *program],
        )  # fmt: skip
    return replayed, upstream, run / "branches" / "b"


def branch_steps(branch: Path) -> list[dict[str, Any]]:
    trace = json.loads((branch / "trace.json").read_text(encoding="utf-8"))
    steps: list[dict[str, Any]] = trace["steps"]
    return steps


@pytest.mark.parametrize(
    ("program_text", "status", "api"),
    [(OPENAI_PROGRAM, 500, "chat"), (ANTHROPIC_PROGRAM, 529, "messages")],
    ids=["openai-500", "anthropic-529"],
)
def test_the_retry_of_an_edited_request_carries_the_edit(
    tmp_path: Path, program_text: str, status: int, api: str
) -> None:
    if api == "messages":
        pytest.importorskip("anthropic")
    program = write_program(tmp_path, program_text)
    replayed, upstream, branch = record_and_replay(tmp_path, program, status, times=1)
    assert replayed.exit_code == 0, replayed.output
    # Step 0 came from the recording; both tries of step 1 reached the upstream, the
    # retry edited as the first try was: the unedited request never went out.
    sent = [last_user(r.body or {}) for r in upstream.requests_of(api)]
    assert sent == [EDITED, EDITED]
    steps = branch_steps(branch)
    assert len(steps) == 2
    assert steps[1]["metadata"]["origin"] == "edited-input"
    assert steps[1]["metadata"]["replay_of"] == 1
    assert steps[1]["input_messages"][-1]["content"] == EDITED
    assert steps[1]["content"] == f"echo: {EDITED}"
    report = json.loads((branch / "report.json").read_text(encoding="utf-8"))
    assert report["edit_applied"] is True and report["at_reached"] is True
    assert report["extra_calls"] == 0
    assert [(live["step"], live["origin"], live["status"]) for live in report["live"]] == [
        (1, "edited-input", status),
        (1, "edited-input", 200),
    ]
    assert "edit:        applied at step 1" in replayed.output
    assert f"answer:      'echo: {EDITED}'" in replayed.output
    # The failed try is kept in steps.jsonl as a failed call, not as a step.
    calls = [
        json.loads(line)
        for line in (branch / "steps.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert [(c["status"], c.get("replay_of")) for c in calls] == [(200, 0), (status, 1), (200, 1)]


def test_an_edited_request_the_upstream_never_answers_is_not_reported_applied(
    tmp_path: Path,
) -> None:
    program = write_program(tmp_path, OPENAI_PROGRAM)
    replayed, upstream, branch = record_and_replay(tmp_path, program, 500, times=99)
    # Every try (the SDK's first and its two retries) carried the edit, none was answered:
    # the program failed and the edit is not claimed.
    assert [last_user(r.body or {}) for r in upstream.chat_requests] == [EDITED] * 3
    assert replayed.exit_code == 4, replayed.output
    report = json.loads((branch / "report.json").read_text(encoding="utf-8"))
    assert report["edit_applied"] is False and report["at_reached"] is True
    assert "edit:        NOT applied (the step was reached, but the upstream never" in (
        replayed.output
    )
    assert branch_steps(branch)[1:] == []


# --- the plan: a failed call opens its step again ---------------------------------------


def call(number: int, text: str, reply: str, agent: str = "A") -> RecordedCall:
    request = {"model": "m", "messages": [{"role": "user", "content": text}]}
    now = utcnow()
    return RecordedCall(
        call=number,
        agent=agent,
        request=request,
        request_hash="-",
        response={
            "id": f"r{number}",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply},
                    "finish_reason": "stop",
                }
            ],
        },
        started_at=now,
        ended_at=now,
    )


def body(text: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}]}


RECORDING = [call(0, "q0", "a0"), call(1, "q1", "a1"), call(2, "q1", "a1 again")]


def test_a_failed_edited_call_is_retried_as_the_same_step_with_the_edit() -> None:
    plan = ReplayPlan(RECORDING, ReplayOptions(at=1, edit=Edit(input="better"), stop_after_live=1))
    assert plan.decide("A", body("q0")).action == "serve"
    first = plan.decide("A", body("q1"))
    assert first.action == "live" and first.step == 1 and first.edited
    plan.call_failed(first)
    assert not plan.report.edit_applied
    # The retry: step 1 again (not the identical later step 2, not an extra call), edited,
    # and the window of one step is not used up by the failed try.
    retry = plan.decide("A", body("q1"))
    assert retry.action == "live" and retry.step == 1 and retry.origin == "edited-input"
    assert retry.body is not None and retry.body["messages"][-1]["content"] == "better"
    plan.live_finished(retry)
    assert plan.report.edit_applied and plan.should_stop
    assert plan.report.extra_calls == 0


def test_an_answered_edited_call_leaves_the_next_identical_request_to_the_next_step() -> None:
    plan = ReplayPlan(RECORDING, ReplayOptions(at=1, edit=Edit(input="better")))
    plan.decide("A", body("q0"))
    edited = plan.decide("A", body("q1"))
    plan.live_finished(edited)
    later = plan.decide("A", body("q1"))
    assert later.step == 2 and later.origin == "live" and not later.edited


def test_the_retry_of_a_step_whose_own_request_carries_the_edited_tool_result() -> None:
    asked = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "real result"},
        ],
    }
    recorded = call(0, "x", "done")
    recorded.request = asked
    edit = Edit(tool_result=ToolResultChange(tool_call_id="c1", content="EDITED RESULT"))
    plan = ReplayPlan([recorded], ReplayOptions(at=0, edit=edit))
    for attempt in range(2):
        decision = plan.decide("A", json.loads(json.dumps(asked)))
        assert decision.action == "live" and decision.step == 0 and decision.edited, attempt
        assert decision.body is not None
        assert decision.body["messages"][-1]["content"] == "EDITED RESULT"
        if attempt == 0:
            plan.call_failed(decision)
            assert not plan.report.edit_applied
    plan.live_finished(decision)
    assert plan.report.edit_applied and plan.report.extra_calls == 0


def test_an_edit_refused_at_its_step_is_refused_again_on_a_retry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan = ReplayPlan(RECORDING, ReplayOptions(at=1, edit=Edit(input="better")))

    def cannot(*args: Any) -> None:
        raise ValueError("no user message to replace")

    monkeypatch.setattr(plan, "_apply_edit", cannot)
    plan.decide("A", body("q0"))
    first = plan.decide("A", body("q1"))
    assert first.action == "reject" and first.status == 400
    plan.call_failed(first)
    # A client that retries anyway is refused again, never sent live unedited.
    again = plan.decide("A", body("q1"))
    assert again.action == "reject" and again.step == 1
    report = plan.finish()
    assert not report.edit_applied and report.edit_error and report.extra_calls == 0
