"""A recorded error's ``retry-after`` given as an HTTP date is in the past when the run is
replayed; the replay sends it as the seconds it was ahead when recorded, so the program's
SDK waits as long, and gives up where it gave up. The real ``openai`` SDK against the
loopback fake upstream, the replay with no upstream named."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

from faultfinder.replay.failures import replayed_headers
from faultfinder.replay.recorder import STEPS_FILE, RecordedCall, load_calls
from faultfinder.replay.replayer import ReplayOptions
from faultfinder.replay.session import record_run, replay_run
from faultfinder.testing import FakeOpenAIServer
from test_replay_failed_calls import QUIET, branch_calls, failing

GIVES_UP = """
import openai
client = openai.OpenAI(max_retries=2)
def ask(text):
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": text}])
    print("retries taken:", raw.retries_taken)
    return raw.parse().choices[0].message.content
try:
    answer = ask("busy question")
except openai.RateLimitError as error:
    print("gave up after:", error.status_code)
    answer = ask("fallback question")
print("FINAL ANSWER:", answer)
"""

DAY = timedelta(days=1)


def http_date(when: datetime) -> str:
    return format_datetime(when.astimezone(UTC), usegmt=True)


def as_if_recorded_a_day_ago(run_dir: Path) -> None:
    """Move the recording's clock, and the dates its error replies name, a day back."""
    steps = run_dir / STEPS_FILE
    lines = [json.loads(line) for line in steps.read_text(encoding="utf-8").splitlines()]
    for line in lines:
        for key in ("started_at", "ended_at"):
            line[key] = (datetime.fromisoformat(line[key]) - DAY).isoformat()
        headers = line.get("error_headers") or {}
        if "retry-after" in headers:
            when = datetime.strptime(headers["retry-after"], "%a, %d %b %Y %H:%M:%S GMT")
            headers["retry-after"] = http_date(when.replace(tzinfo=UTC) - DAY)
    steps.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def test_a_retry_after_date_beyond_the_sdks_limit_still_makes_it_give_up(
    tmp_path: Path,
) -> None:
    """Five minutes ahead: the SDK did not retry (over its two minutes) and the program
    fell back. Replayed a day later, the date would be long past and the SDK would retry
    at once, a request the recording has no answer for."""
    later = http_date(datetime.now(UTC) + timedelta(minutes=5))
    argv = [sys.executable, "-c", GIVES_UP]
    with FakeOpenAIServer(failing("busy", 429, 1, {"retry-after": later})) as upstream:
        recorded = asyncio.run(
            record_run(argv, upstream.base_url, tmp_path, run_id="run", options=QUIET)
        )
    assert recorded.child.exit_code == 0, recorded.child.stderr[-2000:]
    assert "gave up after: 429" in recorded.child.stdout
    as_if_recorded_a_day_ago(recorded.run_dir)

    replayed = asyncio.run(replay_run(recorded.run_dir, argv, ReplayOptions(), options=QUIET))
    assert replayed.child.exit_code == 0, replayed.child.stderr[-2000:]
    assert replayed.child.stdout == recorded.child.stdout
    assert branch_calls(replayed.branch_dir) == [(429, "cached"), (200, "cached")]
    report = replayed.report
    assert (report.served_failures, report.live_calls, report.divergences) == ([0], 0, [])
    # The branch keeps what the program was sent: the seconds, not the date.
    [sent] = [c for c in load_calls(replayed.branch_dir, include_failed=True) if not c.ok]
    assert sent.error_headers is not None
    assert 290 <= int(sent.error_headers["retry-after"]) <= 300


def failure(headers: dict[str, str], at: datetime) -> RecordedCall:
    return RecordedCall(
        call=0,
        agent="A",
        request={},
        request_hash="-",
        status=429,
        error="upstream error: 429",
        error_body={"error": {"message": "busy"}},
        error_headers=headers,
        started_at=at,
        ended_at=at,
    )


def test_only_a_date_is_rewritten_to_the_seconds_it_was_ahead() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, 250_000, tzinfo=UTC)
    date = http_date(at.replace(microsecond=0) + timedelta(seconds=30))
    got = replayed_headers(failure({"retry-after": date, "content-type": "x"}, at))
    assert got == {"retry-after": "30", "content-type": "x"}  # 29.75 s, rounded up
    past = http_date(at - timedelta(seconds=5))
    assert replayed_headers(failure({"retry-after": past}, at)) == {"retry-after": "0"}
    for kept in ({"retry-after": "7"}, {"retry-after": "1.5"}, {"retry-after": "soon"}, {}):
        assert replayed_headers(failure(kept, at)) == kept
