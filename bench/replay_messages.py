"""Per-call overhead of recording and replaying Anthropic Messages API calls.

A program on the Anthropic SDK makes 30 sequential ``messages`` calls (three agents taking
turns, each request carrying the conversation so far, as in a real team) and times its own
call loop, excluding interpreter start-up: once with ``messages.create``, once with
``messages.stream`` (every event read). Each runs three ways against a zero-latency
loopback fake upstream (its Messages endpoint):

- direct: straight to the upstream (the SDK + HTTP baseline);
- record: through the recording proxy (forwarding, fsynced append per step);
- replay: a no-edit replay, every call answered from the recording (streams replayed
  from their recorded events).

Each replay is checked: every step reproduced, 0 live calls, fidelity 100%.

    python bench/replay_messages.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from faultfinder.replay.apis import adapter_named
from faultfinder.replay.child import child_env, run_child
from faultfinder.replay.recorder import RecordedCall, load_calls
from faultfinder.replay.replayer import ReplayOptions, ReplayPlan
from faultfinder.replay.session import SessionOptions, record_run, replay_run
from faultfinder.testing import FakeOpenAIServer

STEPS = 30

PROGRAM = (
    """
import sys, time, anthropic
client = anthropic.Anthropic(max_retries=0)
stream = "--stream" in sys.argv
agents = ["Planner", "Coder", "Reviewer"]
history = [{"role": "user", "content": "Solve the task: " + "x" * 400}]
started = time.perf_counter()
for i in range(__STEPS__):
    agent = agents[i % 3]
    params = dict(model="claude-bench", max_tokens=512, messages=history,
                  system=f"You are the {agent}.",
                  extra_headers={"X-Faultfinder-Agent": agent})
    if stream:
        with client.messages.stream(**params) as events:
            for _ in events:
                pass
            reply = events.get_final_message()
    else:
        reply = client.messages.create(**params)
    history.append({"role": "assistant", "content": reply.content[0].text})
    history.append({"role": "user", "content": f"{agent} continue with step {i}"})
print("LOOP_SECONDS", time.perf_counter() - started, flush=True)
"""
).replace("__STEPS__", str(STEPS))


def reply(body: dict) -> str:  # type: ignore[type-arg]
    return f"step output {len(body['messages'])}: " + "y " * 150


def loop_seconds(stdout: str) -> float:
    for line in stdout.splitlines():
        if line.startswith("LOOP_SECONDS"):
            return float(line.split()[1])
    raise RuntimeError(f"the program printed no timing: {stdout[-300:]}")


async def measure(repeats: int) -> dict[str, list[float]]:
    quiet = SessionOptions(echo=False)
    times: dict[str, list[float]] = {}
    with FakeOpenAIServer(reply=reply) as upstream, tempfile.TemporaryDirectory() as tmp:
        program = Path(tmp) / "thirty.py"
        program.write_text(PROGRAM)
        root = upstream.base_url.removesuffix("/v1")
        for variant, extra in (("create", []), ("stream", ["--stream"])):
            command = [sys.executable, str(program), *extra]
            for n in range(repeats):
                direct_dir = Path(tmp) / f"direct-{variant}{n}"
                direct_dir.mkdir()
                env = child_env(upstream.base_url, root, direct_dir, {})
                child = await run_child(command, env, direct_dir, quiet)
                times.setdefault(f"{variant} direct", []).append(loop_seconds(child.stdout))
                recorded = await record_run(
                    command, upstream.base_url, tmp, run_id=f"rec-{variant}{n}", options=quiet
                )
                assert len(recorded.trace.steps) == STEPS, recorded.child.stderr
                times.setdefault(f"{variant} record", []).append(
                    loop_seconds(recorded.child.stdout)
                )
                asked = len(upstream.requests_of("messages"))
                replayed = await replay_run(
                    recorded.run_dir, command, ReplayOptions(), options=quiet
                )
                report = replayed.report
                assert report.reproduced == STEPS and report.faithful, replayed.child.stderr
                assert report.live_calls == 0 and len(upstream.requests_of("messages")) == asked
                times.setdefault(f"{variant} replay", []).append(
                    loop_seconds(replayed.child.stdout)
                )
                calls = load_calls(recorded.run_dir)
                times.setdefault(f"{variant} decide", []).append(_time_decisions(calls))
    return times


def _time_decisions(calls: list[RecordedCall]) -> float:
    """In-process: the replay decision (canonical request, agent match, normalised hash)
    for every recorded call, as the proxy makes it."""
    plan = ReplayPlan(calls, ReplayOptions())
    adapter = adapter_named("messages")
    started = time.perf_counter()
    for call in calls:
        plan.decide(call.agent, call.request, adapter=adapter)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    times = asyncio.run(measure(args.repeats))
    median = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"{STEPS}-call Anthropic SDK program, {args.repeats} repeats, medians "
        f"(cpu count {os.cpu_count()}); every replay 30/30 reproduced, 0 live calls:"
    )
    for variant in ("create", "stream"):
        for mode in ("direct", "record", "replay"):
            value = median[f"{variant} {mode}"]
            print(
                f"  {variant:<6} {mode:<7} call loop {value * 1000:8.1f} ms  "
                f"({value / STEPS * 1000:6.2f} ms/call)"
            )
        direct = median[f"{variant} direct"]
        extra_record = (median[f"{variant} record"] - direct) / STEPS * 1000
        extra_replay = (median[f"{variant} replay"] - direct) / STEPS * 1000
        print(
            f"  {variant:<6} proxy overhead per call over direct: "
            f"record {extra_record:+.2f} ms, replay {extra_replay:+.2f} ms; in-process "
            f"replay decision {median[f'{variant} decide'] / STEPS * 1000:.3f} ms/call"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
