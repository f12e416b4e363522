"""Throughput of `eval` on local threads vs. a local Ray cluster, at equal concurrency.

Every Who&When trace is one `all-at-once` case against the fake OpenAI-compatible server
(its own process, a fixed latency per call, as in `overhead.py`). The same cases run with
the local executor and with `--executor ray` on a Ray cluster started on this machine;
both use C cases in flight. Reported: cases per minute of each, and the time Ray adds to
one case, measured two ways: the wall-time difference spread over the cases at
concurrency C, and one case at a time with no latency (the round trip of a case through
the driver, the object store and an actor).

    python bench/ray_throughput.py --data ../shared/data/who-and-when [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _shared import WHO_AND_WHEN_DATA

sys.path.insert(0, str(Path(__file__).parent))

from overhead import _ServerProcess

from faultfinder.eval.cases import plan_methods
from faultfinder.eval.datasets import load_dataset
from faultfinder.eval.runner import EvalOptions, run_eval
from faultfinder.llm.spec import LLMSpec
from faultfinder.scale.cluster import connect, require_ray
from faultfinder.traces.schema import Trace

KEY_ENV = "FAULTFINDER_BENCH_FAKE_KEY"


def timed(traces: list[Trace], spec: LLMSpec, concurrency: int, executor: Any = None) -> float:
    """Wall seconds of one eval run (local, or on ``executor``); every case must be ok."""
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        outcome = asyncio.run(
            run_eval(
                traces,
                plan_methods(["all-at-once"]),
                None if executor else spec.build(),
                Path(tmp) / "out.jsonl",
                EvalOptions(concurrency=concurrency, progress=False),
                executor=executor,
            )
        )
        wall = time.perf_counter() - started
    bad = [r.status for r in outcome.rows if r.status != "ok"]
    if bad or len(outcome.rows) != len(traces):
        raise SystemExit(f"not every case ran ok: {len(outcome.rows)} rows, {bad[:5]}")
    return wall


def warm_pool(spec: LLMSpec, concurrency: int, workers: int, traces: list[Trace]) -> Any:
    """A started Ray executor whose workers have imported everything (not timed)."""
    from faultfinder.scale.ray_eval import RayExecutor

    executor = RayExecutor(spec, spec.build().name, concurrency=concurrency, workers=workers)
    executor.start()
    timed(traces[: 2 * concurrency], spec, concurrency, executor)
    return executor


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=WHO_AND_WHEN_DATA)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--workers", type=int, default=2, help="Ray worker actors")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each (best kept)")
    parser.add_argument("--sequential", type=int, default=40, help="cases timed one by one")
    args = parser.parse_args()

    traces = load_dataset(args.data)
    n, c = len(traces), args.concurrency
    os.environ[KEY_ENV] = "not-a-real-key"
    ray = require_ray()
    connect(None)
    print(
        f"{n} cases, concurrency {c}, latency {args.latency} s, {os.cpu_count()} CPUs, "
        f"{args.workers} Ray workers, load average {os.getloadavg()[0]:.1f}"
    )
    best: dict[str, float] = {}
    with _ServerProcess(args.latency) as server:
        spec = LLMSpec(
            model="openai:fake", base_url=server.base_url, api_key_env=KEY_ENV, concurrency=c
        )
        pool = warm_pool(spec, c, args.workers, traces)
        for name, executor in (("local", None), ("ray", pool)):
            walls = [timed(traces, spec, c, executor) for _ in range(args.repeats)]
            best[name] = min(walls)
            runs = ", ".join(f"{w:.2f}" for w in walls)
            rate = 60 * n / best[name]
            print(f"  {name:5s}: best {best[name]:6.2f} s ({runs})  {rate:7.1f} cases/min")
        pool.close()
    spread = (best["ray"] - best["local"]) * c / n
    print(f"Ray adds {1000 * spread:.0f} ms per case at concurrency {c} (wall difference × C / N)")

    with _ServerProcess(0.0) as server:
        spec = LLMSpec(
            model="openai:fake", base_url=server.base_url, api_key_env=KEY_ENV, concurrency=1
        )
        few = traces[: args.sequential]
        pool = warm_pool(spec, 1, 1, few)
        local = timed(few, spec, 1) / len(few)
        remote = timed(few, spec, 1, pool) / len(few)
        pool.close()
    print(
        f"one case at a time, no latency: local {1000 * local:.1f} ms, ray {1000 * remote:.1f} ms "
        f"per case: Ray adds {1000 * (remote - local):.1f} ms"
    )
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
