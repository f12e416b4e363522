"""DoVer (`faultfinder debug`) on the demo team's failures: flip rate and verdicts.

The demo team runs on the scripted team model (loopback fake upstream), whose plans carry
the demo's deliberate mistakes; every task it fails is recorded (with reference answer
and reference steps) and debugged with DoVer: segmentation, an all-at-once:refined
hypothesis per trial, an intervention, --repeats replays, judgements and verdicts. The
debugging model is the embedded one (``--debugger local``, the default; needs the
[local] extra) or the scripted debugger (``--debugger scripted``: a rule-based double
that knows the demo's mistakes, i.e. a ceiling for the pipeline, not a result).

    python bench/debug_demo.py [--debugger local|scripted] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from faultfinder.demo_team import TASKS, mock_debugger, mock_model
from faultfinder.dover.models import DoverConfig
from faultfinder.dover.pipeline import run_dover
from faultfinder.dover.replays import ReplayExecutor
from faultfinder.dover.report import aggregate, format_summary
from faultfinder.llm.client import LLM
from faultfinder.llm.doubles import FunctionBackend
from faultfinder.llm.registry import make_backend
from faultfinder.registry import create_method
from faultfinder.replay.session import SessionOptions, record_run
from faultfinder.testing import FakeOpenAIServer


def debugger(kind: str) -> LLM:
    if kind == "scripted":
        return LLM(FunctionBackend(mock_debugger.respond, model="scripted-debugger"))
    return LLM(make_backend(kind))


async def main(kind: str, repeats: int, budget: int | None, out: Path | None) -> int:
    llm = debugger(kind)
    quiet = SessionOptions(echo=False)
    config = DoverConfig(repeats=repeats, context_budget=budget)
    rows = []
    started = time.perf_counter()
    with FakeOpenAIServer(reply=mock_model.reply) as upstream, tempfile.TemporaryDirectory() as tmp:
        for task in TASKS:
            command = [
                sys.executable,
                "-m",
                "faultfinder.demo_team",
                "--quiet",
                "--task-id",
                task.id,
            ]
            recorded = await record_run(
                command,
                upstream.base_url,
                Path(tmp),
                run_id=task.id,
                ground_truth=task.answer,
                reference_steps=task.reference_steps,
                options=quiet,
            )
            if recorded.trace.metadata.get("outcome") == "success":
                print(f"{task.id}: succeeded as recorded; not debugged")
                continue
            method = create_method(
                "all-at-once:refined", with_ground_truth=True, context_budget=budget
            )
            executor = ReplayExecutor(
                recorded.run_dir, command, upstream=upstream.base_url, options=quiet
            )
            task_started = time.perf_counter()
            found = await run_dover(recorded.run_dir, llm, method, executor, config, out=out)
            rows.extend(found)
            for row in found:
                iv = row.intervention
                what = (
                    f"{iv.category} at step {iv.step}: {iv.replacement[:70]!r}"
                    if iv
                    else f"{row.status}: {row.verdict_reason[:90]}"
                )
                print(
                    f"{task.id} trial {row.trial.index}: hypothesis {row.hypothesis.agent} @ "
                    f"{row.hypothesis.step} -> {row.verdict or '-'}; {what}"
                )
            print(f"  ({time.perf_counter() - task_started:.0f} s)")
    print(f"\ndebugger: {llm.name}; repeats {repeats}; {time.perf_counter() - started:.0f} s")
    print(format_summary(aggregate(rows)))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--debugger", default="local", help="local, scripted, or a model spec")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--context-budget", type=int, default=6000)
    parser.add_argument("--out", type=Path, default=None, help="append DoVer rows to this JSONL")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.debugger, args.repeats, args.context_budget, args.out)))
