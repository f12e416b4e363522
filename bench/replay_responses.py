"""Replay figures per model API for the OpenAI Responses API (issue 25), with Chat
Completions measured in the same run for comparison:

1. per-call overhead: a program on the OpenAI SDK makes 30 sequential calls (three agents
   taking turns, each request carrying the conversation so far) with
   ``chat.completions.create`` or ``responses.create``, plain or streamed (every event
   read), and times its own call loop (interpreter start-up excluded). Each variant runs
   direct to the zero-latency loopback fake upstream, recorded through the proxy, and
   replayed without an edit; every replay is checked (30/30 reproduced, 0 live calls).
2. fidelity and live calls on the real programs of tests/test_replay_apis.py (the Agents
   SDK at its default settings, ``Runner.run`` and ``Runner.run_streamed``;
   ``responses.create`` chained by ``previous_response_id``, plain and streamed; a
   program mixing chat completions, responses and, when present, messages): each
   recorded once and replayed REPLAYS times without an edit, the upstream's request
   count checked before and after.

    python bench/replay_responses.py [--repeats 3] [--replays 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from faultfinder.replay.child import child_env, run_child  # noqa: E402
from faultfinder.replay.replayer import ReplayOptions  # noqa: E402
from faultfinder.replay.session import SessionOptions, record_run, replay_run  # noqa: E402
from faultfinder.testing import FakeOpenAIServer  # noqa: E402

STEPS = 30

PROGRAM = (
    """
import sys, time, openai
client = openai.OpenAI(max_retries=0)
api, stream = sys.argv[1], "--stream" in sys.argv
agents = ["Planner", "Coder", "Reviewer"]
history = [{"role": "user", "content": "Solve the task: " + "x" * 400}]
started = time.perf_counter()
for i in range(__STEPS__):
    agent = agents[i % 3]
    headers = {"X-Faultfinder-Agent": agent}
    if api == "chat":
        messages = [{"role": "system", "content": f"You are the {agent}."}, *history]
        if stream:
            chunks = client.chat.completions.create(
                model="m", messages=messages, stream=True, extra_headers=headers)
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            text = client.chat.completions.create(
                model="m", messages=messages, extra_headers=headers).choices[0].message.content
    else:
        params = dict(model="m", instructions=f"You are the {agent}.", input=history,
                      extra_headers=headers)
        if stream:
            with client.responses.stream(**params) as events:
                for _ in events:
                    pass
                text = events.get_final_response().output_text
        else:
            text = client.responses.create(**params).output_text
    history.append({"role": "assistant", "content": text})
    history.append({"role": "user", "content": f"{agent} continue with step {i}"})
print("LOOP_SECONDS", time.perf_counter() - started, flush=True)
"""
).replace("__STEPS__", str(STEPS))

VARIANTS = [
    ("chat", False),
    ("chat", True),
    ("responses", False),
    ("responses", True),
]


def reply(body: dict) -> str:  # type: ignore[type-arg]
    return f"step output {len(body['messages'])}: " + "y " * 150


def loop_seconds(stdout: str) -> float:
    for line in stdout.splitlines():
        if line.startswith("LOOP_SECONDS"):
            return float(line.split()[1])
    raise RuntimeError(f"the program printed no timing: {stdout[-300:]}")


async def overhead(repeats: int) -> dict[str, list[float]]:
    quiet = SessionOptions(echo=False)
    times: dict[str, list[float]] = {}
    with FakeOpenAIServer(reply=reply) as upstream, tempfile.TemporaryDirectory() as tmp:
        program = Path(tmp) / "thirty.py"
        program.write_text(PROGRAM)
        root = upstream.base_url.removesuffix("/v1")
        for n in range(repeats):
            for api, stream in VARIANTS:
                name = f"{api}{' stream' if stream else ''}"
                command = [sys.executable, str(program), api, *(["--stream"] if stream else [])]
                direct_dir = Path(tmp) / f"direct-{api}-{stream}-{n}"
                direct_dir.mkdir()
                env = child_env(upstream.base_url, root, direct_dir, {})
                child = await run_child(command, env, direct_dir, quiet)
                times.setdefault(f"{name}|direct", []).append(loop_seconds(child.stdout))
                recorded = await record_run(
                    command, upstream.base_url, tmp, run_id=f"rec-{api}-{stream}-{n}",
                    options=quiet,
                )  # fmt: skip
                assert len(recorded.trace.steps) == STEPS, recorded.child.stderr
                times.setdefault(f"{name}|record", []).append(loop_seconds(recorded.child.stdout))
                asked = len(upstream.requests)
                replayed = await replay_run(
                    recorded.run_dir, command, ReplayOptions(), options=quiet
                )
                report = replayed.report
                assert report.reproduced == STEPS and report.faithful, replayed.child.stderr
                assert report.live_calls == 0 and len(upstream.requests) == asked
                times.setdefault(f"{name}|replay", []).append(loop_seconds(replayed.child.stdout))
    return times


async def fidelity(replays: int) -> list[tuple[str, int, int, int, int, int]]:
    """(program, steps, replays, reproduced, live calls, upstream requests seen)."""
    import test_replay_apis as programs

    quiet = SessionOptions(echo=False, timeout=300)
    os.environ.update(programs.NO_TELEMETRY)
    os.environ.pop("OPENAI_BASE_URL", None)
    rows = []
    for name, program in programs.PROGRAMS.items():
        with (
            FakeOpenAIServer(reply=program.script) as upstream,
            tempfile.TemporaryDirectory() as tmp,
        ):
            recorded = await record_run(
                program.command(), upstream.base_url, tmp, run_id="run", options=quiet
            )
            if recorded.child.exit_code != 0:
                raise SystemExit(f"{name}: recording failed\n{recorded.child.stderr[-2000:]}")
            steps = len(recorded.trace.steps)
            asked = len(upstream.requests)
            reproduced = live = 0
            for _ in range(replays):
                same = await replay_run(
                    recorded.run_dir, program.command(), ReplayOptions(), options=quiet
                )
                reproduced += same.report.reproduced
                live += same.report.live_calls
                if same.trace.final_answer != recorded.trace.final_answer:
                    raise SystemExit(f"{name}: the replay's answer differs")
            rows.append((name, steps, replays, reproduced, live, len(upstream.requests) - asked))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="overhead runs (medians)")
    parser.add_argument("--replays", type=int, default=3, help="replays per real program")
    args = parser.parse_args()
    print(f"{datetime.now(UTC):%Y-%m-%d}, cpu count {os.cpu_count()}")
    times = asyncio.run(overhead(args.repeats))
    median = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"\n{STEPS}-call OpenAI SDK program, {args.repeats} repeats, medians; every replay "
        f"{STEPS}/{STEPS} reproduced, 0 live calls\n"
    )
    print("| variant | direct | recording | no-edit replay |")
    print("|---|---:|---:|---:|")
    for api, stream in VARIANTS:
        name = f"{api}{' stream' if stream else ''}"
        direct = median[f"{name}|direct"] / STEPS * 1000
        cells = [f"{direct:.1f} ms/call"]
        for mode in ("record", "replay"):
            value = median[f"{name}|{mode}"] / STEPS * 1000
            cells.append(f"{value:.1f} ms/call ({value - direct:+.1f})")
        label = {"chat": "`chat.completions.create`", "responses": "`responses.create`"}[api]
        print(f"| {label}{', streamed' if stream else ''} | " + " | ".join(cells) + " |")
    rows = asyncio.run(fidelity(args.replays))
    print(
        "\n| program | steps | replays | reproduced | live calls | upstream requests | fidelity |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, steps, replays, reproduced, live, seen in rows:
        print(
            f"| {name} | {steps} | {replays} | {reproduced}/{steps * replays} | {live} | "
            f"{seen} | {reproduced / (steps * replays):.0%} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
