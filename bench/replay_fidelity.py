"""No-edit replay fidelity: steps reproduced / steps recorded (target 100%).

Records the demo team on every demo task through the proxy (scripted team model on a
loopback fake upstream; plain and streamed calls, agents named by header, by path and by
system prompt), replays each recording without an edit, and compares the replay with the
recording call by call: same agent, same call number, same request hash, same response.
Any call answered live, missing or diverged counts against fidelity.

    python bench/replay_fidelity.py
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from faultfinder.demo_team import TASKS, mock_model
from faultfinder.replay.recorder import load_calls
from faultfinder.replay.replayer import ReplayOptions
from faultfinder.replay.session import SessionOptions, record_run, replay_run
from faultfinder.testing import FakeOpenAIServer

VARIANTS = [
    ("plain/header", ["--identity", "header"]),
    ("stream/path", ["--stream", "--identity", "path"]),
    ("plain/system-prompt", ["--identity", "none"]),
]


async def main() -> int:
    quiet = SessionOptions(echo=False)
    total_recorded = total_reproduced = identical = 0
    rows = []
    started = time.perf_counter()
    with FakeOpenAIServer(reply=mock_model.reply) as upstream, tempfile.TemporaryDirectory() as tmp:
        for task in TASKS:
            for name, flags in VARIANTS:
                command = [
                    sys.executable,
                    "-m",
                    "faultfinder.demo_team",
                    "--quiet",
                    "--task-id",
                    task.id,
                    *flags,
                ]
                run_id = f"{task.id}-{name.replace('/', '-')}"
                recorded = await record_run(
                    command, upstream.base_url, Path(tmp), run_id=run_id, options=quiet
                )
                before = len(upstream.chat_requests)
                replayed = await replay_run(
                    recorded.run_dir, command, ReplayOptions(), options=quiet
                )
                upstream_calls = len(upstream.chat_requests) - before
                old, new = load_calls(recorded.run_dir), load_calls(replayed.branch_dir)
                same = sum(
                    1
                    for a, b in zip(old, new, strict=False)
                    if (a.agent, a.agent_call, a.request_hash, a.response)
                    == (b.agent, b.agent_call, b.request_hash, b.response)
                )
                report = replayed.report
                total_recorded += report.recorded_steps
                total_reproduced += report.reproduced
                identical += same
                rows.append(
                    (
                        run_id,
                        report.recorded_steps,
                        report.reproduced,
                        same,
                        len(report.divergences),
                        upstream_calls,
                        recorded.trace.final_answer == replayed.trace.final_answer,
                    )
                )
    head = ("recording", "steps", "reproduced", "identical", "diverged", "live")
    print("{:<38} {:>5} {:>10} {:>9} {:>8} {:>4}  answer".format(*head))
    for run_id, steps, reproduced, same, diverged, live, answer in rows:
        verdict = "same" if answer else "DIFFERENT"
        print(
            f"{run_id:<38} {steps:>5} {reproduced:>10} {same:>9} {diverged:>8} {live:>4}  {verdict}"
        )
    fidelity = total_reproduced / total_recorded if total_recorded else 0.0
    print(
        f"\nrecordings: {len(rows)}, steps recorded: {total_recorded}, "
        f"reproduced: {total_reproduced}, identical call records: {identical}"
    )
    elapsed = time.perf_counter() - started
    print(f"no-edit replay fidelity: {fidelity:.1%} (target 100%)  [{elapsed:.1f} s]")
    return 0 if total_reproduced == total_recorded == identical else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
