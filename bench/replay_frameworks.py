"""Replay figures on real frameworks and probe programs (issue #12, bench/README.md (d)):

1. no-edit fidelity per framework (OpenAI Agents SDK, LangGraph supervisor, AG2 GroupChat,
   CrewAI: the programs and scripted models of tests/test_frameworks.py) and for the
   concurrency probes (12 same-role calls fired concurrently in random order; 3 agents
   interleaved across 4 threads): each recorded once, replayed REPLAYS times;
2. divergence detection on mutated programs: a recording of bench/mutant_team.py replayed
   with a changed system prompt, reordered agents or an extra call, and each framework's
   recording replayed with a changed task: detected = the replay reports a divergence;
   also counted: live calls made during those replays (should be 0);
3. per-call replay overhead on the framework programs: wall time of a no-edit replay minus
   wall time of a direct run (same program, no proxy), per recorded call.

Needs the dev extra (frameworks); CrewAI and AG2 0.14 environments are built on first use
(tests/framework_env.py).

    python bench/replay_frameworks.py [--replays 3] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from faultfinder.replay.replayer import ReplayOptions  # noqa: E402
from faultfinder.replay.report import ReplayReport  # noqa: E402
from faultfinder.replay.session import SessionOptions, record_run, replay_run  # noqa: E402
from faultfinder.testing import FakeOpenAIServer  # noqa: E402
from test_frameworks import CASES, NO_TELEMETRY, PROGRAMS  # noqa: E402

QUIET = SessionOptions(echo=False, timeout=300)
PROBES = ROOT / "tests" / "fixtures" / "replay"
MUTANT = ROOT / "bench" / "mutant_team.py"


def counting_reply() -> Any:
    counter = itertools.count()

    def reply(body: dict[str, Any]) -> str:
        return f"answer-{next(counter):03d}"

    return reply


async def record(command: list[str], upstream: str, out: Path) -> Path:
    outcome = await record_run(command, upstream, out, options=QUIET)
    if outcome.child.exit_code != 0:
        raise SystemExit(f"recording failed: {command}\n{outcome.child.stderr}")
    return outcome.run_dir


async def replay(run_dir: Path, command: list[str], upstream: str) -> tuple[ReplayReport, float]:
    started = time.perf_counter()
    outcome = await replay_run(run_dir, command, ReplayOptions(), upstream=upstream, options=QUIET)
    return outcome.report, time.perf_counter() - started


def direct_run(command: list[str], upstream: str) -> float:
    env = {
        **os.environ,
        "OPENAI_BASE_URL": upstream,
        "OPENAI_API_BASE": upstream,
        "OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY", "placeholder-key"),
    }
    started = time.perf_counter()
    subprocess.run(command, env=env, capture_output=True, check=True, timeout=300)
    return time.perf_counter() - started


def fidelity_row(name: str, steps: int, reports: list[ReplayReport]) -> str:
    reproduced = sum(r.reproduced for r in reports)
    prefix = sum(r.prefix_steps for r in reports)
    live = sum(r.live_calls for r in reports)
    diverged = sum(len(r.divergences) for r in reports)
    rate = reproduced / prefix if prefix else 1.0
    return (
        f"| {name} | {steps} | {len(reports)} | {reproduced}/{prefix} | {diverged} | {live} "
        f"| **{rate:.1%}** |"
    )


async def frameworks(names: list[str], replays: int, tmp: Path) -> tuple[list[str], list[str]]:
    fidelity, overhead = [], []
    for name in names:
        case = CASES[name]
        python = case.python()
        command = [python, str(PROGRAMS / case.program), case.task]
        with FakeOpenAIServer(reply=case.script) as upstream:
            run_dir = await record(command, upstream.base_url, tmp / name)
            steps = len((run_dir / "steps.jsonl").read_text().splitlines())
            reports, times = [], []
            for _ in range(replays):
                report, seconds = await replay(run_dir, command, upstream.base_url)
                reports.append(report)
                times.append(seconds)
            directs = [direct_run(command, upstream.base_url) for _ in range(replays)]
        fidelity.append(fidelity_row(name, steps, reports))
        replay_s, direct_s = sorted(times)[len(times) // 2], sorted(directs)[len(directs) // 2]
        overhead.append(
            f"| {name} | {steps} | {direct_s:.2f} s | {replay_s:.2f} s "
            f"| {(replay_s - direct_s) / steps * 1000:+.0f} ms |"
        )
        print(fidelity[-1], flush=True)
    return fidelity, overhead


async def probes(replays: int, tmp: Path) -> list[str]:
    rows = []
    for label, args in (
        ("probe: 12 same-role calls, concurrent, random order", ["probe_fanout.py", "12"]),
        ("probe: 3 agents interleaved across 4 threads", ["probe_threads.py", "4"]),
    ):
        command = [sys.executable, str(PROBES / args[0]), *args[1:]]
        with FakeOpenAIServer(reply=counting_reply()) as upstream:
            run_dir = await record(command, upstream.base_url, tmp / args[0])
            steps = len((run_dir / "steps.jsonl").read_text().splitlines())
            reports = [
                (await replay(run_dir, command, upstream.base_url))[0] for _ in range(replays)
            ]
        rows.append(fidelity_row(label, steps, reports))
        print(rows[-1], flush=True)
    return rows


MUTATIONS: list[tuple[str, list[str]]] = [
    *[("changed prompt", ["--prompt", agent]) for agent in ("Planner", "Researcher", "Writer")],
    ("reordered agents", ["--order", "Researcher,Planner,Writer"]),
    ("reordered agents", ["--order", "Planner,Writer,Researcher"]),
    ("reordered agents", ["--order", "Writer,Researcher,Planner"]),
    *[("extra call", ["--extra-at", str(k)]) for k in (0, 1, 3)],
]


async def divergences(names: list[str], tmp: Path) -> list[str]:
    tally: dict[str, list[int]] = {}

    def count(kind: str, report: ReplayReport) -> None:
        entry = tally.setdefault(kind, [0, 0, 0])
        entry[0] += bool(report.divergences)
        entry[1] += 1
        entry[2] += report.live_calls

    task = "What was the population of Avalon in 2020?"
    base = [sys.executable, str(MUTANT), task]
    with FakeOpenAIServer(reply=counting_reply()) as upstream:
        run_dir = await record(base, upstream.base_url, tmp / "mutant")
        for kind, flags in MUTATIONS:
            count(kind, (await replay(run_dir, [*base, *flags], upstream.base_url))[0])
    for name in names:
        case = CASES[name]
        python = case.python()
        command = [python, str(PROGRAMS / case.program), case.task]
        changed = [python, str(PROGRAMS / case.program), case.task.replace("2020", "2021")]
        with FakeOpenAIServer(reply=case.script) as upstream:
            run_dir = await record(command, upstream.base_url, tmp / f"{name}-mutated")
            count(f"changed task ({name})", (await replay(run_dir, changed, upstream.base_url))[0])
    return [
        f"| {kind} | {found}/{tried} | {live} |" for kind, (found, tried, live) in tally.items()
    ]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replays", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=list(CASES), choices=list(CASES))
    args = parser.parse_args()
    os.environ.update(NO_TELEMETRY)
    os.environ.pop("OPENAI_BASE_URL", None)
    with tempfile.TemporaryDirectory() as directory:
        tmp = Path(directory)
        print("| program | steps | replays | reproduced | divergences | live calls | fidelity |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        _, overhead = await frameworks(args.only, args.replays, tmp)
        await probes(args.replays, tmp)
        print("\n| mutation | detected / tried | live calls during those replays |")
        print("|---|---:|---:|")
        for row in await divergences(args.only, tmp):
            print(row)
        print("\n| program | steps | direct run | no-edit replay | replay overhead per call |")
        print("|---|---:|---:|---:|---:|")
        for row in overhead:
            print(row)


if __name__ == "__main__":
    asyncio.run(main())
