"""Chance floors on Who&When through the whole harness: importer, runner, metrics.

Runs the ``random`` method (uniform over a log's distinct agents and over its steps) for
20 repeats over every labelled trace and compares the accuracies with the reference
floors of ../shared/data/README.md and with the exact expectation of a uniform draw
on the traces as imported. A mismatch points at the importer (agents, steps, labels) or
the metrics.

    python bench/floors.py [--data PATH] [--runs 20]

Exit status 1 when a measured figure is more than 3 standard errors from the reference.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import tempfile
import time
from pathlib import Path

from faultfinder.eval.datasets import load_dataset, subset_of
from faultfinder.eval.metrics import normalise_agent
from faultfinder.eval.report import summarise
from faultfinder.eval.runner import EvalOptions, plan_methods, run_eval
from faultfinder.llm import LLM, ScriptedBackend
from faultfinder.traces.schema import Trace

# ../shared/data/who-and-when, seen from the repository root
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "who-and-when"

EXPECTED = {
    # (subset, metric): percent, from the data README's reference floors.
    ("Algorithm-Generated", "agent"): 29.1,
    ("Hand-Crafted", "agent"): 29.2,
    ("Algorithm-Generated", "step"): 12.0,
    ("Hand-Crafted", "step"): 4.2,
}


def exact_expectation(traces: list[Trace], metric: str) -> float:
    """Expected accuracy (percent) of a uniform draw on these traces."""
    total = 0.0
    for trace in traces:
        assert trace.label is not None
        if metric == "agent":
            agents = trace.agent_names()
            gold = normalise_agent(trace.label.agent or "")
            hits = sum(normalise_agent(a) == gold for a in agents)
            total += hits / len(agents)
        else:
            total += len(set(trace.label.acceptable_steps)) / len(trace.steps)
    return 100 * total / len(traces)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()

    traces = load_dataset(args.data)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "floors.jsonl"
        outcome = asyncio.run(
            run_eval(
                traces,
                plan_methods(["random"]),
                LLM(ScriptedBackend([])),  # `random` makes no model call
                out,
                EvalOptions(runs=args.runs, concurrency=32, progress=False),
            )
        )
    elapsed = time.perf_counter() - started
    print(
        f"random × {args.runs} runs over {len(traces)} traces: {outcome.ran} rows in "
        f"{elapsed:.1f} s"
    )
    summaries = {g.key.subset: g.metrics for g in summarise(outcome.rows)}
    print(
        f"{'subset':<20} {'metric':<6} {'measured %':>16} {'expected %':>10} "
        f"{'exact E %':>9} {'3·SE':>5}  ok"
    )
    failures = 0
    for (subset, metric), expected in EXPECTED.items():
        members = [t for t in traces if subset_of(t) == subset]
        m = summaries[subset]
        value = m.agent if metric == "agent" else m.step
        measured = 100 * value.mean
        std = 100 * (value.std or 0.0)
        draws = len(members) * m.runs
        p = expected / 100
        three_se = 300 * math.sqrt(p * (1 - p) / draws)
        ok = abs(measured - expected) <= three_se
        failures += not ok
        print(
            f"{subset:<20} {metric:<6} {measured:>8.1f} ± {std:>4.1f} {expected:>10.1f} "
            f"{exact_expectation(members, metric):>9.1f} {three_se:>5.1f}  "
            f"{'yes' if ok else 'NO'}"
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
