"""A call recorded before the run learned a secret it quotes is scrubbed again once the
secret is learned (``RunStore.rescrub``); its ``request_hash`` stays the hash of the
request as it was matched. A replay must still match that call: the same program sends
the same secret at the same place, which the recording now holds as ``[REDACTED]``, and
which the replay has not learned yet either. The real ``openai`` SDK, no upstream named
in the replay."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

from faultfinder.replay.recorder import STEPS_FILE, RecordedCall, load_calls, utcnow
from faultfinder.replay.replayer import ReplayOptions, ReplayPlan
from faultfinder.replay.session import record_run, replay_run
from faultfinder.testing import FakeOpenAIServer
from test_replay_failed_calls import QUIET, branch_calls
from test_replay_retry import last_user

KEY = "hunter2-correct-horse-battery"

QUOTES_A_LATER_KEY = f"""
import openai
first = openai.OpenAI().chat.completions.create(
    model="m", messages=[{{"role": "user", "content": "Is {KEY} a strong password?"}}])
# Only this client's headers tell the proxy that the string above is a key.
second = openai.OpenAI(api_key="{KEY}").chat.completions.create(
    model="m", messages=[{{"role": "user", "content": "second question"}}])
print("FINAL ANSWER:", first.choices[0].message.content, "/", second.choices[0].message.content)
"""


def test_a_call_rescrubbed_after_it_was_recorded_still_matches(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", QUOTES_A_LATER_KEY]

    def reply(body: dict[str, object]) -> str:
        return "strong" if "password" in last_user(body) else "fine"

    with FakeOpenAIServer(reply) as upstream:
        recorded = asyncio.run(
            record_run(argv, upstream.base_url, tmp_path, run_id="run", options=QUIET)
        )
    assert recorded.child.exit_code == 0, recorded.child.stderr[-2000:]
    assert KEY not in (recorded.run_dir / STEPS_FILE).read_text(encoding="utf-8")
    first = load_calls(recorded.run_dir)[0]
    assert "[REDACTED]" in first.request["messages"][0]["content"]

    replayed = asyncio.run(replay_run(recorded.run_dir, argv, ReplayOptions(), options=QUIET))
    assert replayed.child.exit_code == 0, replayed.child.stderr[-2000:]
    assert replayed.child.stdout == recorded.child.stdout == "FINAL ANSWER: strong / fine\n"
    report = replayed.report
    assert (report.divergences, report.live_calls, report.reproduced) == ([], 0, 2)
    assert branch_calls(replayed.branch_dir) == [(200, "cached"), (200, "cached")]
    # The secret the replay recognised in the first call is not written in its branch.
    assert KEY not in (replayed.branch_dir / STEPS_FILE).read_text(encoding="utf-8")


def recorded(text: str) -> RecordedCall:
    now = utcnow()
    reply = {
        "id": "r0",
        "object": "chat.completion",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
    }
    request = {"model": "m", "messages": [{"role": "user", "content": text}]}
    return RecordedCall(
        call=0, agent="A", request=request, request_hash="-", response=reply,
        started_at=now, ended_at=now,
    )  # fmt: skip


def ask(plan: ReplayPlan, text: str) -> tuple[str, tuple[str, ...]]:
    decision = plan.decide("A", {"model": "m", "messages": [{"role": "user", "content": text}]})
    return decision.action, decision.learned


def test_only_the_redacted_places_may_differ_and_what_fills_them_is_learned() -> None:
    secret = 'pa"ss\\word-42'
    plan = ReplayPlan([recorded("Is [REDACTED] a strong password?")], ReplayOptions())
    assert ask(plan, "Is it a weak password?") == ("reject", ())
    assert ask(plan, f"Is {secret} a strong password?") == ("serve", (secret,))
    # An exact match learns nothing: the replay scrubbed it as the recording did.
    plan = ReplayPlan([recorded("Is [REDACTED] a strong password?")], ReplayOptions())
    assert ask(plan, "Is [REDACTED] a strong password?") == ("serve", ())


def test_several_holes_in_one_string_each_learn_their_text() -> None:
    plan = ReplayPlan([recorded("keys: [REDACTED], [REDACTED].")], ReplayOptions())
    learned = ("sk-one-111", "sk-two-222")
    assert ask(plan, "keys: sk-one-111, sk-two-222.") == ("serve", learned)
    # Every hole stands for one character at least, and only the holes may differ.
    assert ask(plan, "keys: , sk-two-222.")[0] == "reject"
    assert ask(plan, "keys: sk-one-111; sk-two-222.")[0] == "reject"
    assert ask(plan, "keys: sk-one-111, sk-two-222!")[0] == "reject"


# A call after an edit matches no recorded request exactly, so it is tried against every
# recorded request of its agent that holds [REDACTED]: here one quoting three keys, and a
# replayed prompt of a few thousand characters that is not it.
HOSTILE = """
from faultfinder.replay.replayer import ReplayOptions, ReplayPlan
from test_replay_rescrubbed import ask, recorded

plan = ReplayPlan([recorded("keys: [REDACTED], [REDACTED], [REDACTED] end")], ReplayOptions())
print(ask(plan, "keys: " + "x, " * 3000 + "no closing word")[0])
"""


def test_a_long_prompt_is_matched_against_redacted_requests_in_linear_time() -> None:
    # In a process of its own: a regular expression that backtracks holds the interpreter,
    # so only a timeout from outside can stop it.
    tests = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*sys.path, tests])}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", HOSTILE], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "reject"
    assert time.monotonic() - started < 20
