"""Non-LLM overhead of recording and replaying, on a 30-step recording.

A small program makes 30 sequential chat calls (three agents taking turns, each request
carrying the conversation so far, so requests grow as in a real team) and times its own
call loop, excluding interpreter start-up. It runs three ways against a zero-latency
loopback fake upstream:

- direct: straight to the upstream (the baseline HTTP + SDK cost);
- record: through the recording proxy (forwarding, fsynced append per step);
- replay: a no-edit replay, every call answered from the recording.

Target: the whole replay of the cached 30-step prefix under 1 s. Also timed in-process:
the replay decision (matching + normalised hash) and the durable append, per step.

    python bench/replay_overhead.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from faultfinder.replay.child import child_env, run_child
from faultfinder.replay.recorder import RecordedCall, RunStore, load_calls
from faultfinder.replay.replayer import ReplayOptions, ReplayPlan
from faultfinder.replay.session import SessionOptions, record_run, replay_run
from faultfinder.testing import FakeOpenAIServer

STEPS = 30

PROGRAM = (
    """
import sys, time, openai
client = openai.OpenAI(max_retries=0)
agents = ["Planner", "Coder", "Reviewer"]
history = [{"role": "system", "content": "You are a team member."},
           {"role": "user", "content": "Solve the task: " + "x" * 400}]
started = time.perf_counter()
for i in range(__STEPS__):
    agent = agents[i % 3]
    reply = client.chat.completions.create(
        model="m", messages=history, temperature=0,
        extra_headers={"X-Faultfinder-Agent": agent})
    history.append({"role": "assistant", "content": reply.choices[0].message.content})
    history.append({"role": "user", "content": f"{agent} continue with step {i}"})
print("LOOP_SECONDS", time.perf_counter() - started, flush=True)
"""
).replace("__STEPS__", str(STEPS))


def reply(body: dict) -> str:  # type: ignore[type-arg]
    return f"step output {len(body['messages'])}: " + "y" * 300


def loop_seconds(stdout: str) -> float:
    for line in stdout.splitlines():
        if line.startswith("LOOP_SECONDS"):
            return float(line.split()[1])
    raise RuntimeError(f"the program printed no timing: {stdout[-300:]}")


async def measure(repeats: int) -> dict[str, list[float]]:
    quiet = SessionOptions(echo=False)
    times: dict[str, list[float]] = {"direct": [], "record": [], "replay": []}
    with FakeOpenAIServer(reply=reply) as upstream, tempfile.TemporaryDirectory() as tmp:
        program = Path(tmp) / "thirty.py"
        program.write_text(PROGRAM)
        command = [sys.executable, str(program)]
        for n in range(repeats):
            direct_dir = Path(tmp) / f"direct{n}"
            direct_dir.mkdir()
            env = child_env(upstream.base_url, "", direct_dir, {})
            child = await run_child(command, env, direct_dir, quiet)
            times["direct"].append(loop_seconds(child.stdout))
            recorded = await record_run(
                command, upstream.base_url, tmp, run_id=f"rec{n}", options=quiet
            )
            assert len(recorded.trace.steps) == STEPS, recorded.child.stderr
            times["record"].append(loop_seconds(recorded.child.stdout))
            replayed = await replay_run(recorded.run_dir, command, ReplayOptions(), options=quiet)
            assert replayed.report.reproduced == STEPS and replayed.report.faithful
            times["replay"].append(loop_seconds(replayed.child.stdout))
        calls = load_calls(Path(tmp) / "rec0")
        times["decide"] = [_time_decisions(calls) for _ in range(repeats)]
        times["append"] = [_time_appends(calls, Path(tmp) / f"append{n}") for n in range(repeats)]
    return times


def _time_decisions(calls: list[RecordedCall]) -> float:
    plan = ReplayPlan(calls, ReplayOptions())
    started = time.perf_counter()
    for call in calls:
        plan.decide(call.agent, call.request)
    return time.perf_counter() - started


def _time_appends(calls: list[RecordedCall], directory: Path) -> float:
    store = RunStore(directory)
    now = datetime.now(UTC)
    started = time.perf_counter()
    for call in calls:
        store.append(call.model_copy(update={"started_at": now, "ended_at": now}))
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    times = asyncio.run(measure(args.repeats))
    median = {k: statistics.median(v) for k, v in times.items()}
    print(f"{STEPS}-step program, {args.repeats} repeats, medians (cpu count {os.cpu_count()}):")
    for name in ("direct", "record", "replay"):
        print(
            f"  {name:<7} call loop {median[name] * 1000:8.1f} ms  "
            f"({median[name] / STEPS * 1000:6.2f} ms/step)"
        )
    extra_record = (median["record"] - median["direct"]) / STEPS * 1000
    extra_replay = (median["replay"] - median["direct"]) / STEPS * 1000
    print(
        "  proxy overhead per step over direct calls: "
        f"record {extra_record:+.2f} ms, replay {extra_replay:+.2f} ms"
    )
    print(
        f"  in-process per step: replay decision {median['decide'] / STEPS * 1000:.3f} ms, "
        f"fsynced append {median['append'] / STEPS * 1000:.3f} ms"
    )
    ok = median["replay"] < 1.0
    print(
        f"whole replay of the cached {STEPS}-step prefix: {median['replay']:.3f} s "
        f"(target < 1 s): {'ok' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
