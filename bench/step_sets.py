"""Calibrated step sets on Who&When, through the evaluation harness.

Every method's result carries a step set: the offline shortlist's split-conformal set
plus the method's own step. This bench runs ``run_eval`` (the harness behind
``faultfinder eval``) over both Who&When subsets at each level (80 / 90 / 95%) for the
shortlist, the no-model floors (random over 10 repeats, first speaker, majority agent,
position) and all-at-once answered by the perfect and by the wrong oracle judge
(``faultfinder.testing.oracle``), and reports with ``faultfinder.eval.step_sets`` (the
code behind ``faultfinder report``'s step-set section): coverage with 95% Wilson intervals
over cases and mean set size relative to the trace's length.

Who&When traces get their set from the held-out model of their fold (shipped in
weights.json), which neither trained nor calibrated on them; the bench checks that every
row says so (``step_set_source``) and fails otherwise.

    python bench/step_sets.py [DATA] [--no-readme] [--out DIR]

``--out DIR`` keeps the results files (one per level) for ``faultfinder report``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path

from _readme import write_section

from faultfinder.eval.datasets import load_dataset, subset_of
from faultfinder.eval.floors import FLOORS, RANDOM_RUNS
from faultfinder.eval.metrics import step_correct, wilson
from faultfinder.eval.rows import EvalRow
from faultfinder.eval.runner import (
    Case,
    EvalOptions,
    plan_methods,
    run_case,
    run_eval,
)
from faultfinder.eval.step_sets import Coverage, coverage
from faultfinder.llm import LLM
from faultfinder.llm.doubles import FunctionBackend, NoModelBackend
from faultfinder.shortlist import sets
from faultfinder.shortlist.conformal import LEVELS
from faultfinder.testing.oracle import OracleJudge
from faultfinder.traces.schema import Trace

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "who-and-when"
README = ROOT / "bench" / "README.md"
BEGIN, END = "<!-- step-sets:begin -->", "<!-- step-sets:end -->"
ORACLES = {"perfect": False, "wrong": True}


class OracleExecutor:
    """Runs each case with an oracle judge of its own trace (the judge knows the label)."""

    def __init__(self, wrong: bool) -> None:
        self.wrong = wrong

    @property
    def model_name(self) -> str:
        return "function:wrong-oracle" if self.wrong else "function:oracle"

    async def run(self, cases: Sequence[Case], stop: asyncio.Event) -> AsyncIterator[EvalRow]:
        for case in cases:
            judge = OracleJudge(case.trace, wrong=self.wrong)
            backend = FunctionBackend(judge, model=self.model_name.partition(":")[2])
            yield await run_case(case, LLM(backend))


async def run_level(traces: list[Trace], level: float, folder: Path) -> list[EvalRow]:
    """Every method's rows at ``level`` (one results file per executor)."""
    rows: list[EvalRow] = []
    options = EvalOptions(force=True, progress=False, step_set=level, concurrency=4)
    no_model = LLM(NoModelBackend())
    offline = plan_methods(["shortlist", *(f for f in FLOORS if f != "random")])
    outcome = await run_eval(traces, offline, no_model, folder / f"offline-{level}.jsonl", options)
    rows += outcome.rows
    random_opts = options.model_copy(update={"runs": RANDOM_RUNS})
    outcome = await run_eval(
        traces, plan_methods(["random"]), no_model, folder / f"random-{level}.jsonl", random_opts
    )
    rows += outcome.rows
    for name, wrong in ORACLES.items():
        plans = plan_methods(["all-at-once"])
        plans = [replace(p, label=f"all-at-once ({name} judge)") for p in plans]
        outcome = await run_eval(
            traces,
            plans,
            None,
            folder / f"oracle-{name}-{level}.jsonl",
            options,
            executor=OracleExecutor(wrong),
        )
        rows += outcome.rows
    return rows


def check_sources(rows: Sequence[EvalRow]) -> None:
    """Every Who&When row's set must come from its fold's held-out model."""
    bad = [r for r in rows if not (r.step_set_source or "").startswith("shipped:fold-")]
    if bad:
        raise SystemExit(
            f"{len(bad)} row(s) have a step set not from a held-out fold model, e.g. "
            f"{bad[0].trace_id}: {bad[0].step_set_source}"
        )


ORDER = [
    "shortlist",
    "all-at-once (perfect judge)",
    "all-at-once (wrong judge)",
    "random",
    "baseline:first-speaker",
    "baseline:majority-agent",
    "baseline:position",
]


def table(figures: Sequence[Coverage], subset: str) -> list[str]:
    by = {(c.method, c.level): c for c in figures if c.subset == subset}
    head = "| method | " + " | ".join(
        f"{100 * a:g}%: coverage % | {100 * a:g}%: size / length" for a in LEVELS
    )
    lines = [head + " |", "|---|" + "---:|---:|" * len(LEVELS)]
    for method in ORDER:
        parts = []
        for a in LEVELS:
            c = by.get((method, a))
            if c is None:
                parts += ["-", "-"]
                continue
            low, high = c.ci
            parts.append(f"{100 * c.rate:.1f} [{100 * low:.0f}–{100 * high:.0f}]")
            parts.append(f"{100 * c.mean_relative_size:.0f}% ({c.mean_size:.1f})")
        lines.append(f"| {method} | " + " | ".join(parts) + " |")
    return lines


def reading(figures: Sequence[Coverage], subsets: Sequence[str]) -> str:
    """The paragraph under the tables, its figures taken from this run."""
    by = {(c.subset, c.method, c.level): c for c in figures}

    def get(subset: str, method: str, level: float) -> Coverage:
        return by[(subset, method, level)]

    met = all(c.rate >= c.level for c in figures if c.method == "shortlist" and c.subset in subsets)
    rel80 = " and ".join(
        f"{100 * get(s, 'shortlist', LEVELS[0]).mean_relative_size:.0f}% ({s})" for s in subsets
    )
    rel95 = " and ".join(
        f"{100 * get(s, 'shortlist', LEVELS[-1]).mean_relative_size:.0f}%" for s in subsets
    )
    same_wrong = all(
        abs(get(s, "all-at-once (wrong judge)", a).rate - get(s, "shortlist", a).rate) < 1e-9
        for s in subsets
        for a in LEVELS
    )
    perfect = ", ".join(
        f"{100 * get(s, 'all-at-once (perfect judge)', LEVELS[0]).rate:.1f}% ({s})" for s in subsets
    )
    extra = max(
        get(s, "all-at-once (perfect judge)", a).mean_size - get(s, "shortlist", a).mean_size
        for s in subsets
        for a in LEVELS
    )
    return (
        "Reading: "
        + (
            "the shortlist's sets meet every level on both subsets, with room to spare — "
            "each model is calibrated per subset on one fold (about 25 Algorithm-Generated "
            "and 12 Hand-Crafted traces; with 12, the 95% threshold is the whole trace), and "
            "the set keeps the step that crosses the threshold whole (no randomisation), so "
            "coverage lands above the target rather than on it. "
            if met
            else "the shortlist's sets miss a level on at least one subset (see the tables): "
            "the guarantee is marginal over traces, and one fold (about 25 Algorithm-Generated "
            "and 12 Hand-Crafted traces) calibrates each model per subset, so a realised "
            "coverage can fall below it. "
        )
        + f"The price is size: the ranker's probabilities are spread out, so at 80% a set "
        f"holds {rel80} of a trace and at 95% {rel95} — at 80% it still rules out tens of "
        "steps of a long Hand-Crafted log, few of a short Algorithm-Generated one. "
        f"The union behaves as designed at both extremes: with the perfect judge coverage "
        f"at 80% is {perfect} "
        "(the misses are label oddities whose gold step the agent/step rule rejects), for "
        f"at most {extra:.1f} extra step(s) on average; the wrong judge, whose step is never "
        "decisive, "
        + (
            "adds a step and no coverage — its coverage equals the shortlist's at every "
            "level, so the stated level never rests on the method being right."
            if same_wrong
            else "changes coverage (unexpected: check the rows)."
        )
        + " The floors fall in between."
    )


def ranked_note(rows: Sequence[EvalRow], subsets: Sequence[str]) -> str:
    """The shortlist's own step accuracy through the harness (held-out fold models)."""
    parts = []
    for subset in subsets:
        mine = [r for r in rows if r.subset == subset and r.gold is not None]
        hits = sum(step_correct(r.step, r.gold) for r in mine if r.gold is not None)
        low, high = wilson(hits, len(mine))
        parts.append(f"{100 * hits / len(mine):.1f}% [{100 * low:.0f}–{100 * high:.0f}] ({subset})")
    return (
        "The shortlist's own step accuracy in these runs (its held-out fold models are "
        f'trained on three folds of five): {", ".join(parts)}; compare recall@1 in "Offline '
        'step shortlist", whose cross-validation trains on four.'
    )


def shift_note(figures: Sequence[Coverage], subsets: Sequence[str]) -> str:
    """How many traces the shift score withdraws the claim from, and coverage where claimed."""
    parts = []
    for subset in subsets:
        c = next(
            f for f in figures if f.subset == subset and f.method == "shortlist" and f.level == 0.9
        )
        low, high = wilson(c.claimed_covered, c.claimed) if c.claimed else (0.0, 0.0)
        parts.append(
            f"{subset}: {c.cases - c.claimed} of {c.cases} traces past the shift threshold; "
            f"90% coverage where claimed {100 * c.claimed_rate:.1f}% "
            f"[{100 * low:.0f}–{100 * high:.0f}]"
        )
    return (
        'Shift score (docs/step-sets.md, "When a trace is unlike the calibration data"; '
        "each Who&When trace compared with the other folds' traces only): "
        + "; ".join(parts)
        + ". Those traces' sets are shown without a coverage claim."
    )


def set_cost(traces: Sequence[Trace]) -> float:
    """CPU milliseconds per trace to compute a set from scratch (the memo emptied)."""
    sets._memo.clear()
    started = time.process_time()
    for t in traces:
        sets.step_set(t, 0.9)
    return 1000 * (time.process_time() - started) / len(traces)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--no-readme", action="store_true", help="print only")
    parser.add_argument("--out", type=Path, default=None, help="keep the results files here")
    args = parser.parse_args()
    traces = load_dataset(args.data)
    cost = set_cost(traces)
    figures: list[Coverage] = []
    shortlist_rows: list[EvalRow] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.out or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for level in LEVELS:
            rows = asyncio.run(run_level(traces, level, folder))
            check_sources(rows)
            figures += coverage(rows)
            shortlist_rows = [r for r in rows if r.method == "shortlist"]
    n = {s: sum(subset_of(t) == s for t in traces) for s in sorted({subset_of(t) for t in traces})}
    out = [
        f"{len(traces)} labelled traces ({', '.join(f'{k} {v}' for k, v in n.items())}), run "
        "through `run_eval` once per level. Every set was ranked by the held-out model of the "
        "trace's fold (checked on every row: `step_set_source` is `shipped:fold-N`), which "
        "neither trained nor calibrated on the trace. Cells: coverage % of cases [95% Wilson "
        "interval] and mean set size / trace length (mean size in steps). random: 10 repeats, "
        f"averaged per case. Computing a set: {cost:.1f} ms CPU per trace, no model call.",
    ]
    for subset in n:
        out += ["", f"**{subset}** ({n[subset]} traces)", "", *table(figures, subset)]
    out += ["", reading(figures, list(n)), "", ranked_note(shortlist_rows, list(n))]
    out += ["", shift_note(figures, list(n))]
    text = "\n".join(out)
    print(text)
    if not args.no_readme:
        heading = (
            "\n## Calibrated step sets — `bench/step_sets.py`\n\n"
            "Reproduce: `python bench/step_sets.py` (no model, no scikit-learn; about two "
            "minutes). How a set is made and why these figures are out-of-sample: "
            "[docs/step-sets.md](../docs/step-sets.md).\n\n"
        )
        write_section(README, BEGIN, END, text, heading)
    return 0


if __name__ == "__main__":
    sys.exit(main())
