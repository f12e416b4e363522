"""Floors on Who&When through the whole harness: importer, runner, metrics.

1. ``random`` (uniform over a log's distinct agents and over its steps), 20 repeats over
   every labelled trace, compared with the reference floors of ../shared/data/README.md
   and with the exact expectation of a uniform draw on the traces as imported. A
   mismatch points at the importer (agents, steps, labels) or the metrics.
2. The ``baseline`` floors (first speaker, majority agent, fixed position 0.5), once each
   (they are deterministic), with 95% Wilson intervals over cases.
3. ``baseline:position`` with its relative position *fitted out of fold*: per subset, the
   traces are split into 5 folds (trace i of the natural order goes to fold i mod 5); the
   position for a fold is the grid value (0, 0.05, ..., 1) with the best exact-step
   accuracy on the other four folds (ties: nearest 0.5), and the fold is then scored with
   that position through the harness. For comparison it also prints the best position
   fitted *in sample* (on the very traces scored), which is optimistic by construction.

    python bench/floors.py [--data PATH] [--runs 20]

Exit status 1 when a measured ``random`` figure is more than 3 standard errors from the
reference.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import tempfile
import time
from pathlib import Path

from _shared import WHO_AND_WHEN_DATA

from faultfinder.eval.cases import plan_methods
from faultfinder.eval.datasets import load_dataset, subset_of
from faultfinder.eval.floors import FLOORS
from faultfinder.eval.metrics import GroupMetrics, MeanStd, normalise_agent, step_correct
from faultfinder.eval.report import summarise
from faultfinder.eval.rows import EvalRow
from faultfinder.eval.runner import EvalOptions, run_eval
from faultfinder.llm import LLM
from faultfinder.llm.doubles import NoModelBackend
from faultfinder.methods.baseline import BaselineConfig, pick
from faultfinder.traces.schema import Trace

DEFAULT_DATA = WHO_AND_WHEN_DATA

EXPECTED = {
    # (subset, metric): percent, from the data README's reference floors.
    ("Algorithm-Generated", "agent"): 29.1,
    ("Hand-Crafted", "agent"): 29.2,
    ("Algorithm-Generated", "step"): 12.0,
    ("Hand-Crafted", "step"): 4.2,
}
FOLDS = 5
GRID = [i / 20 for i in range(21)]


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


def run(traces: list[Trace], specs: list[str], runs: int, **overrides: object) -> list[EvalRow]:
    """Rows of ``specs`` on ``traces`` through the harness, with no model."""
    with tempfile.TemporaryDirectory() as tmp:
        outcome = asyncio.run(
            run_eval(
                traces,
                plan_methods(specs, dict(overrides)),
                LLM(NoModelBackend()),
                Path(tmp) / "floors.jsonl",
                EvalOptions(runs=runs, concurrency=32, progress=False),
            )
        )
    return outcome.rows


def cell(value: MeanStd) -> str:
    low, high = value.ci or (float("nan"), float("nan"))
    return f"{100 * value.mean:5.1f} ({100 * low:4.1f}–{100 * high:4.1f})"


def step_hits(traces: list[Trace], position: float) -> int:
    """Exact-step hits of the position rule at ``position`` (the method's own ``pick``)."""
    config = BaselineConfig(rule="position", relative_position=position)
    hits = 0
    for trace in traces:
        chosen = pick(trace, config)
        assert trace.label is not None
        hits += chosen is not None and step_correct(chosen.index, trace.label)
    return hits


def best_position(traces: list[Trace]) -> float:
    return max(GRID, key=lambda p: (step_hits(traces, p), -abs(p - 0.5)))


def random_check(traces: list[Trace], runs: int) -> tuple[int, list[EvalRow]]:
    started = time.perf_counter()
    rows = run(traces, ["random"], runs)
    elapsed = time.perf_counter() - started
    print(f"random × {runs} runs over {len(traces)} traces: {len(rows)} rows in {elapsed:.1f} s")
    summaries = {g.key.subset: g.metrics for g in summarise(rows)}
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
    return failures, rows


def print_table(title: str, groups: dict[tuple[str, str], GroupMetrics]) -> None:
    print(f"\n{title}")
    print(
        f"{'subset':<20} {'floor':<34} {'n':>4} {'agent % (95% CI)':>20} "
        f"{'step % (95% CI)':>20} {'joint % (95% CI)':>20} {'step ±1 %':>20}"
    )
    for (subset, label), m in groups.items():
        print(
            f"{subset:<20} {label:<34} {m.cases:>4} {cell(m.agent):>20} {cell(m.step):>20} "
            f"{cell(m.joint):>20} {cell(m.within[1]):>20}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()

    traces = load_dataset(args.data)
    failures, random_rows = random_check(traces, args.runs)

    groups: dict[tuple[str, str], GroupMetrics] = {}
    for g in summarise([*random_rows, *run(traces, list(FLOORS[1:]), 1)]):
        label = g.label + (f" (×{g.metrics.runs} runs)" if g.metrics.runs > 1 else "")
        groups[(g.key.subset, label)] = g.metrics
    print_table("Floors (fixed rules; 95% Wilson interval over cases):", groups)

    fitted: dict[tuple[str, str], GroupMetrics] = {}
    for subset in sorted({subset_of(t) for t in traces}):
        members = [t for t in traces if subset_of(t) == subset]
        out_of_fold: list[EvalRow] = []
        chosen: list[float] = []
        for fold in range(FOLDS):
            test = [t for i, t in enumerate(members) if i % FOLDS == fold]
            train = [t for i, t in enumerate(members) if i % FOLDS != fold]
            position = best_position(train)
            chosen.append(position)
            out_of_fold.extend(run(test, ["baseline:position"], 1, relative_position=position))
        (oof,) = summarise(out_of_fold)
        label = "position, out of fold (p = " + ", ".join(f"{p:g}" for p in chosen) + ")"
        fitted[(subset, label)] = oof.metrics
        in_sample = best_position(members)
        (ins,) = summarise(run(members, ["baseline:position"], 1, relative_position=in_sample))
        fitted[(subset, f"position, in sample (p = {in_sample:g})")] = ins.metrics
    print_table(f"baseline:position with a fitted position ({FOLDS}-fold, grid step 0.05):", fitted)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
