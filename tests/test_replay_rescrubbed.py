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

from faultfinder.redact import Redactor
from faultfinder.replay.recorder import STEPS_FILE, RecordedCall, load_calls, utcnow
from faultfinder.replay.replayer import ReplayOptions, ReplayPlan
from faultfinder.replay.rescrubbed import likely_fills
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
    # A divergence learns what stands in the hole too (its diff quotes it); "it" is too
    # short to be scrubbed.
    assert ask(plan, "Is it a weak password?") == ("reject", ("it",))
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
from faultfinder.replay.rescrubbed import likely_fills
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


# The recording learns that the prompt quotes a key only from the second call's headers;
# the replayed program changes its prompt elsewhere, so its first call diverges and is
# refused, and it never makes the call that would tell the replay what the key is. It
# writes the refusal it got to a file of its own (what the program was shown).
DIVERGES_BEFORE_THE_KEY = f"""
import openai, pathlib, sys
try:
    first = openai.OpenAI(max_retries=0).chat.completions.create(
        model="m", messages=[{{"role": "user", "content": "Is {KEY} a strong password? "
        + sys.argv[1]}}])
except openai.APIStatusError as exc:
    pathlib.Path(sys.argv[2]).write_text(exc.response.text)
    print("refused:", exc.response.text, file=sys.stderr)
    raise SystemExit(3)
openai.OpenAI(api_key="{KEY}").chat.completions.create(
    model="m", messages=[{{"role": "user", "content": "second question"}}])
"""


def test_a_divergence_quotes_no_secret_the_recording_scrubbed(tmp_path: Path) -> None:
    """The refusal of a diverged call and the report's diff quoted the replayed request,
    and the replay did not know the key in it (only the recording's later call revealed
    it): the key was in the 422 the program got, in report.json, stderr.txt, steps.jsonl,
    trace.json and meta.json. What stands where the nearest recorded request says
    [REDACTED] is now learned as a secret, and the refusal is scrubbed as written files
    are."""
    shown = tmp_path / "refusal.json"
    argv = [sys.executable, "-c", DIVERGES_BEFORE_THE_KEY]
    with FakeOpenAIServer(reply="ok") as upstream:
        recorded = asyncio.run(
            record_run(
                [*argv, "v1", str(shown)], upstream.base_url, tmp_path, run_id="run", options=QUIET
            )
        )
    assert recorded.child.exit_code == 0, recorded.child.stderr[-2000:]
    replayed = asyncio.run(
        replay_run(recorded.run_dir, [*argv, "v2", str(shown)], ReplayOptions(), options=QUIET)
    )
    assert replayed.child.exit_code == 3
    (divergence,) = replayed.report.divergences
    assert divergence.action == "refused" and divergence.diff
    assert "[REDACTED] a strong password? v2" in divergence.difference
    assert "[REDACTED] a strong password? v2" in shown.read_text(encoding="utf-8")
    written = [p for p in replayed.branch_dir.rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"report.json", "steps.jsonl", "stderr.txt"}
    for path in [*written, shown]:
        assert KEY not in path.read_text(encoding="utf-8"), path.name


def test_likely_fills_place_each_hole_between_the_text_around_it() -> None:
    recorded = {"messages": [{"content": "Is [REDACTED] strong? v1"}], "model": "m"}
    replayed = {"messages": [{"content": "Is hunter2-xyz strong? v2"}], "model": "n"}
    assert likely_fills(recorded, replayed) == ["hunter2-xyz"]
    # A hole ending the string runs to its end; a hole ends where the longest found
    # beginning of the text after it starts; one whose edges are not found, and those
    # after it, are not guessed.
    assert likely_fills("key: [REDACTED]", "key: abc-123 and more") == ["abc-123 and more"]
    assert likely_fills("a [REDACTED] b [REDACTED] c", "a 1 b 2 d") == ["1", "2"]
    assert likely_fills("a [REDACTED] b [REDACTED] c", "x 1 b 2 c") == []
    assert likely_fills("a [REDACTED]-bcd", "a 1 xyz") == []
    assert likely_fills(["[REDACTED]"], []) == []


def test_harmless_text_in_a_hole_is_scrubbed_too() -> None:
    """The documented trade-off (docs/replay.md): the replay cannot tell the recorded
    secret from other text in its place, so it learns, and the branch scrubs, whatever
    fills the hole; only texts too short to be secrets are left alone."""
    plan = ReplayPlan([recorded("Summarise [REDACTED] for me")], ReplayOptions())
    assert ask(plan, "Summarise the quarterly report for me") == (
        "serve",
        ("the quarterly report",),
    )
    redactor = Redactor(["the quarterly report", "it"])
    assert redactor.text("Read the quarterly report; it is long.") == (
        "Read [REDACTED]; it is long."
    )
