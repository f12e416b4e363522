"""Step sets calibrated on a user's own labelled traces (`faultfinder calibrate`), per source.

For each labelled source (Who&When's two subsets and the generated frameworks of
``bench/fault_injection.py``), base weights are built as they are shipped but without that
source (``train.ship``: trained on the shipped weights' training sources other than it,
any other source for calibration only), so the source is a framework the weights never
saw. Its
traces are split in two halves by
task (the failures injected into one task's run are near-copies of each other, so they
stay together). The shipped weights are calibrated on one half
exactly as ``faultfinder calibrate`` does (``shortlist.calibrate.calibrate``), and every
trace of the other half gets the step set ``attribute --shortlist-weights`` would give it;
then the halves swap, so every trace is tested once by a calibration it was not part of.
Reported per source and level: coverage of the decisive step (95% Wilson interval), the
mean share of the trace's steps the set holds, and how many sets claimed their level
(the shift score of the calibrated file under its threshold). Beside it, the same base
weights without calibration (thresholds for a source never trained on).

    python bench/own_calibration.py [DATA] [--also DIR ...] [--no-readme]
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from _readme import write_section
from _shared import WHO_AND_WHEN_DATA
from _stats import cell, paired

from faultfinder.errors import ConfigError
from faultfinder.eval.datasets import load_dataset, subset_of
from faultfinder.shortlist import conformal, sets
from faultfinder.shortlist.calibrate import calibrate, train_on
from faultfinder.shortlist.rank import rank_trace
from faultfinder.shortlist.train import build_table, ship
from faultfinder.shortlist.weights import Weights, shipped_weights
from faultfinder.traces.schema import Trace

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "bench" / "README.md"
DEFAULT_DATA = WHO_AND_WHEN_DATA
BEGIN, END = "<!-- own-calibration:begin -->", "<!-- own-calibration:end -->"


def outcomes(
    traces: Sequence[Trace], weights: Weights, level: float
) -> list[tuple[bool, float, bool]]:
    """Per trace: (set holds the decisive step, set size / trace length, level claimed)."""
    out = []
    for trace in traces:
        assert trace.label is not None
        chosen = sets.step_set(trace, level, weights=weights)
        assert chosen is not None
        covers = bool(set(chosen.steps) & set(trace.label.acceptable_steps))
        out.append((covers, len(chosen.steps) / len(trace.steps), chosen.calibrated))
    return out


def halves_by_task(traces: Sequence[Trace], seed: int = 0) -> list[int]:
    """Half of each trace: every task's traces in one half, tasks shuffled and dealt in
    turn, so calibration and test share no task (the generated failures of one task are
    near-copies of each other)."""
    tasks = sorted({t.task for t in traces})
    random.Random(seed).shuffle(tasks)
    half = {task: n % 2 for n, task in enumerate(tasks)}
    return [half[t.task] for t in traces]


def base_weights(others: list[Trace], groups: Sequence[str]) -> Weights:
    """Weights as shipped, from ``others`` only: trained on those of the shipped training
    sources, any other source for calibration only."""
    sources = {subset_of(t) for t in others}
    apart = sorted(sources - set(shipped_weights().trained_sources))
    return ship(build_table(others, groups), groups, calibrate_only=apart)


def source_rows(name: str, traces: list[Trace], base: Weights) -> tuple[list[str], int]:
    halves = halves_by_task(traces)
    results: dict[float, list[tuple[bool, float, bool]]] = {a: [] for a in conformal.LEVELS}
    sizes = []
    for half in (0, 1):
        cal = [t for t, h in zip(traces, halves, strict=True) if h == half]
        test = [t for t, h in zip(traces, halves, strict=True) if h != half]
        weights, report = calibrate(base, cal, name)
        # A near-copy of a training trace cannot calibrate (``calibrate`` skips it).
        sizes.append(len(report.used))
        for a in conformal.LEVELS:
            results[a] += outcomes(test, weights, a)
    rows = []
    for a in conformal.LEVELS:
        got = results[a]
        plain = outcomes(traces, base, a)
        n = len(got)
        claimed = [r for r in got if r[2]]
        rows.append(
            f"| {name} | {100 * a:g}% | {'/'.join(map(str, sizes))} "
            f"| {cell(sum(r[0] for r in got), n)} "
            f"| {100 * sum(r[1] for r in got) / n:.0f}% | {len(claimed)}/{n} "
            f"| {cell(sum(r[0] for r in claimed), len(claimed)) if claimed else '-'} "
            f"| {cell(sum(r[0] for r in plain), n)} | {100 * sum(r[1] for r in plain) / n:.0f}% |"
        )
    return rows, len(traces)


def top_hits(traces: Sequence[Trace], weights: Weights, k: int) -> list[bool]:
    """Per trace: the decisive step is among the top ``k`` of the model ``weights`` pick."""
    out = []
    for trace in traces:
        assert trace.label is not None
        order = conformal.ranking(rank_trace(trace, weights.choose(trace).model).probs)
        out.append(bool(set(order[:k]) & set(trace.label.acceptable_steps)))
    return out


def prior_hits(train: Sequence[Trace], test: Sequence[Trace], k: int) -> list[bool]:
    """The position prior fitted on ``train``: steps by how often their index was decisive
    there (ties: earlier first)."""
    counts: dict[int, int] = {}
    for t in train:
        assert t.label is not None and t.label.step is not None
        counts[t.label.step] = counts.get(t.label.step, 0) + 1
    out = []
    for t in test:
        assert t.label is not None
        order = sorted(range(len(t.steps)), key=lambda i: (-counts.get(i, 0), i))
        out.append(bool(set(order[:k]) & set(t.label.acceptable_steps)))
    return out


def trained_rows(name: str, traces: list[Trace], base: Weights) -> list[str]:
    """The ranker trained on one half (``faultfinder calibrate --train``), tested on the
    other, against the position prior fitted on that half and the base weights."""
    halves = halves_by_task(traces)
    mine: dict[int, list[bool]] = {1: [], 3: []}
    prior: dict[int, list[bool]] = {1: [], 3: []}
    other: dict[int, list[bool]] = {1: [], 3: []}
    sets90: list[tuple[bool, float, bool]] = []
    for half in (0, 1):
        cal = [t for t, h in zip(traces, halves, strict=True) if h == half]
        test = [t for t, h in zip(traces, halves, strict=True) if h != half]
        weights, _ = train_on(cal, name, base.groups)
        for k in (1, 3):
            mine[k] += top_hits(test, weights, k)
            prior[k] += prior_hits(cal, test, k)
            other[k] += top_hits(test, base, k)
        sets90 += outcomes(test, weights, 0.9)
    n = len(traces)
    cells = []
    for k in (1, 3):
        cells += [
            cell(sum(mine[k]), n),
            cell(sum(prior[k]), n),
            paired(mine[k], prior[k]).text(),
            cell(sum(other[k]), n),
            paired(mine[k], other[k]).text(),
        ]
    covers = sum(r[0] for r in sets90)
    size = 100 * sum(r[1] for r in sets90) / n
    return [f"| {name} | {' | '.join(cells)} | {cell(covers, n)} | {size:.0f}% |"]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("data", nargs="?", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--also", type=Path, nargs="*", default=[], help="more labelled sources")
    parser.add_argument("--no-readme", action="store_true", help="print only")
    args = parser.parse_args()
    lines = [
        "| source | level | calibration traces (halves) | covers % | set size / length "
        "| claimed | covers where claimed % | uncalibrated: covers % | uncalibrated: size |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    traces = [
        t
        for folder in [args.data, *args.also]
        for t in load_dataset(folder)
        if t.steps and t.label is not None and t.label.acceptable_steps
    ]
    groups = shipped_weights().groups
    trained = [
        "",
        "Trained on your own traces (`faultfinder calibrate --train`): the ranker trained and "
        "calibrated on one half of the source's traces alone, tested on the other half and "
        "back; beside the position prior fitted on the same half and the base weights "
        "(trained without the source), paired exact McNemar (+ only the trained ranker "
        "right / − only the other right):",
        "",
        "| source | trained r@1 % | prior r@1 % | paired | base r@1 % | paired "
        "| trained r@3 % | prior r@3 % | paired | base r@3 % | paired "
        "| 90% sets cover % | 90% set size |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    unmeasured: list[str] = []
    for name in sorted({subset_of(t) for t in traces}):
        others = [t for t in traces if subset_of(t) != name]
        mine = [t for t in traces if subset_of(t) == name]
        base = base_weights(others, groups)
        try:
            rows, _ = source_rows(name, mine, base)
        except ConfigError as exc:
            routed = [base.choose(t) for t in mine]
            near = sum(c.contaminated or c.model is not base.deploy for c in routed)
            unmeasured.append(
                f"{name}: {exc} — {near} of its {len(mine)} traces are near-copies of the "
                "base weights' training traces (the same lookups run by other frameworks), "
                "which `calibrate` does not use"
            )
            rows = []
        lines += rows
        trained += trained_rows(name, mine, base)
    if unmeasured:
        lines += ["", "Calibration not measured: " + "; ".join(unmeasured) + "."]
    lines += trained
    total = len(traces)
    today = datetime.now(UTC).date().isoformat()
    text = "\n".join(
        [
            f"Measured {today}. {total} labelled traces; for each source, weights built as "
            "shipped from the other sources only (features "
            f"{', '.join(groups)}), calibrated on one half of the source's traces (split by "
            "task) and tested on the other, then the other way round; 'uncalibrated': the "
            "same weights with their thresholds for a source never trained on. Brackets: 95% "
            "Wilson interval.",
            "",
            *lines,
        ]
    )
    print(text)
    if not args.no_readme:
        heading = (
            "\n## Step sets calibrated on your own traces — `bench/own_calibration.py`\n\n"
            "Reproduce: `python bench/own_calibration.py --also .faultfinder/generated/*` "
            "(needs the `shortlist` extra).\n\n"
        )
        write_section(README, BEGIN, END, text, heading)
    return 0


if __name__ == "__main__":
    sys.exit(main())
