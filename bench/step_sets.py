"""Calibrated step sets per source, through the evaluation harness.

Every method's result carries a step set: the offline shortlist's split-conformal set
plus the method's own step. This bench runs ``run_eval`` (the harness behind
``faultfinder eval``) over both Who&When subsets, and every labelled directory passed with
``--also`` (``bench/fault_injection.py``'s generated runs), at each level (80 / 90 / 95%) for the
shortlist, the no-model floors (random over 10 repeats, first speaker, majority agent,
position) and all-at-once answered by the perfect and by the wrong oracle judge
(``faultfinder.testing.oracle``), and reports with ``faultfinder.eval.step_sets`` (the
code behind ``faultfinder report``'s step-set section): coverage with 95% Wilson intervals
over cases and mean set size relative to the trace's length.

Who&When traces get their set from the held-out model of their fold (shipped in
weights.json), which neither trained nor calibrated on them; the bench checks that every
row says so (``step_set_source``) and fails otherwise. So does every trace of another
source that the weights trained on; a source outside the weights' training data is ranked
by the deploy model (its table says which), and a trace the chosen model may have trained
on (a near-copy the file cannot route to a held-out model) is left out and named
(``_held_out.py``). Each source
gets its own tables.

    python bench/step_sets.py [DATA] [--also DIR ...] [--no-readme] [--out DIR]

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
from datetime import UTC, datetime
from pathlib import Path

from _deploy_choice import WHO_AND_WHEN
from _held_out import left_out_note, split_unrankable
from _readme import write_section
from _shared import WHO_AND_WHEN_DATA
from compose import describe_weights, provenance

from faultfinder.eval.cases import Case, plan_methods, run_case
from faultfinder.eval.datasets import load_dataset, subset_of
from faultfinder.eval.floors import FLOORS, RANDOM_RUNS
from faultfinder.eval.metrics import step_correct, wilson
from faultfinder.eval.rows import EvalRow
from faultfinder.eval.runner import EvalOptions, run_eval
from faultfinder.eval.step_sets import Coverage, coverage, model_family
from faultfinder.llm import LLM
from faultfinder.llm.doubles import FunctionBackend, NoModelBackend
from faultfinder.shortlist import sets
from faultfinder.shortlist.conformal import LEVELS
from faultfinder.shortlist.model import trace_hash
from faultfinder.shortlist.weights import Weights, shipped_weights
from faultfinder.testing.oracle import OracleJudge
from faultfinder.traces.schema import Trace

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = WHO_AND_WHEN_DATA
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


def has_wrong_step(trace: Trace) -> bool:
    """The wrong judge needs a step that is not decisive (a trace whose every step is
    acceptable has none; it is left out of the wrong judge's rows)."""
    assert trace.label is not None
    return any(s.index not in trace.label.acceptable_steps for s in trace.steps)


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
            [t for t in traces if has_wrong_step(t)] if wrong else traces,
            plans,
            None,
            folder / f"oracle-{name}-{level}.jsonl",
            options,
            executor=OracleExecutor(wrong),
        )
        rows += outcome.rows
    return rows


def check_sources(rows: Sequence[EvalRow], traces: Sequence[Trace]) -> None:
    """A trace of the weights' training data (every Who&When trace) must get its set from
    its fold's held-out model; no trace may be ranked by a model that trained on it."""
    weights = shipped_weights()
    trained = {trace_hash(t) for t in traces if trace_hash(t) in weights.fold_of}
    by_id = {(subset_of(t), t.id): t for t in traces}
    bad = []
    for r in rows:
        trace = by_id[(r.subset, r.trace_id)]
        must_fold = r.subset in WHO_AND_WHEN or trace_hash(trace) in trained
        if must_fold and model_family(r.step_set_source) != "fold":
            bad.append(r)
    if bad:
        raise SystemExit(
            f"{len(bad)} row(s) have a step set not from a held-out fold model, e.g. "
            f"{bad[0].subset} {bad[0].trace_id}: {bad[0].step_set_source}"
        )
    seen = [t for t in traces if weights.choose(t).contaminated]
    if seen:
        raise SystemExit(
            f"{len(seen)} trace(s) would be ranked by a model that may have trained on them, "
            f"e.g. {subset_of(seen[0])} {seen[0].id}: their coverage would not be out-of-sample"
        )


def provenance_of(rows: Sequence[EvalRow], subset: str) -> str:
    """Which models ranked one source's shortlist sets."""
    families = [model_family(r.step_set_source) for r in rows if r.subset == subset]
    return provenance(families) or "no shortlist rows"


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


FLOOR_NAMES = [m for m in ORDER if m == "random" or m.startswith("baseline:")]


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
    whole95 = [s for s in subsets if get(s, "shortlist", LEVELS[-1]).mean_relative_size > 0.995]
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
    between = all(
        get(s, "shortlist", a).rate - 1e-9
        <= get(s, f, a).rate
        <= get(s, "all-at-once (perfect judge)", a).rate + 1e-9
        for s in subsets
        for a in LEVELS
        for f in FLOOR_NAMES
        if (s, f, a) in by
    )
    return (
        "Reading: "
        + (
            "the shortlist's sets meet every level on "
            + ("both subsets" if len(subsets) == 2 else ", ".join(subsets))
            + ", with room to spare — each model's thresholds come from one calibration "
            "fold (about a fifth of each subset's traces"
            + (
                f"; on {' and '.join(whole95)} the 95% threshold takes the whole trace"
                if whole95
                else ""
            )
            + "), and the set keeps the step that crosses the threshold whole (no "
            "randomisation), so coverage lands above the target rather than on it. "
            if met
            else "the shortlist's sets miss a level on at least one subset (see the tables): "
            "the guarantee is marginal over traces, and one calibration fold (about a fifth "
            "of each subset's traces) sets each model's thresholds, so a realised coverage "
            "can fall below it. "
        )
        + f"The price is size: at 80% a set holds {rel80} of a trace and at 95% {rel95}. "
        f"The union behaves as designed at both extremes: with the perfect judge coverage "
        f"at 80% is {perfect} "
        "(any miss is a label oddity whose gold step the agent/step rule rejects), for "
        f"at most {extra:.1f} extra step(s) on average; the wrong judge, whose step is never "
        "decisive, "
        + (
            "adds a step and no coverage — its coverage equals the shortlist's at every "
            "level, so the stated level never rests on the method being right."
            if same_wrong
            else "changes coverage (unexpected: check the rows)."
        )
        + (
            " The floors fall in between."
            if between
            else " The floors' unions are not all between the shortlist and the perfect "
            "judge (see the tables)."
        )
    )


def other_sources(
    figures: Sequence[Coverage], rows: Sequence[EvalRow], subsets: list[str], weights: Weights
) -> str:
    """The paragraph on sources outside Who&When: the shortlist's own sets per level, and
    whether the thresholds those sets used were calibrated on these very traces."""
    by = {(c.subset, c.method, c.level): c for c in figures}
    only = weights.trained_on.get("calibrated_only_on")
    calibrated = [s for s in subsets if isinstance(only, dict) and s in only]
    trained = [s for s in subsets if s in weights.trained_sources]
    unseen = [s for s in subsets if s not in calibrated and s not in trained]
    parts = []
    for s in subsets:
        cells = []
        for a in LEVELS:
            c = by[(s, "shortlist", a)]
            low, high = c.ci
            mark = "" if low >= a else (" (interval below the level)" if high < a else "")
            cells.append(
                f"{100 * a:g}%: {100 * c.rate:.1f} [{100 * low:.0f}–{100 * high:.0f}], size "
                f"{100 * c.mean_relative_size:.0f}%{mark}"
            )
        c90 = by[(s, "shortlist", 0.9)]
        parts.append(
            f"{s} ({provenance_of([r for r in rows if r.method == 'shortlist'], s)}) — "
            + "; ".join(cells)
            + f"; claimed at 90% on {c90.claimed} of {c90.cases}"
        )
    return (
        "Outside Who&When, the shortlist's own sets (coverage % [95% Wilson], mean size / "
        "length): "
        + ". ".join(parts)
        + ". On a short trace a set that covers often also holds most of the trace: compare "
        "the size column with the coverage."
        + (
            f" {', '.join(calibrated)}: not trained on, but they calibrated the thresholds "
            "the weights give a source they never trained on (`step_set_source` ends in "
            "'calibrated on sources never trained on'), which these sets use — so their "
            "coverage here is in-sample for those thresholds and shows only what the "
            "thresholds cost in size. The out-of-sample figure (each source left out of "
            'training and calibration) is "90% step sets on a source never trained on" in '
            '"Transfer and paired tests".'
            if calibrated
            else ""
        )
        + (
            f" {', '.join(trained)}: trained on, each trace ranked and given its set by the "
            "held-out model of its fold (or, for a near-copy of training traces, by one "
            "that trained on none of them), so their coverage here is out-of-sample."
            if trained
            else ""
        )
        + (
            f" {', '.join(unseen)}: neither trained nor calibrated on, so their coverage "
            "here is out-of-sample."
            if unseen
            else ""
        )
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
        "trained on three folds of five, the deploy model is the mean of five fits on four "
        "folds each): "
        f'{", ".join(parts)}; compare recall@1 in "Offline step shortlist" and "Transfer '
        'and paired tests", whose cross-validation trains on four.'
    )


def shift_note(figures: Sequence[Coverage], subsets: Sequence[str]) -> str:
    """How many traces the shift score withdraws the claim from, and coverage where claimed."""
    parts = []
    for subset in subsets:
        c = next(
            f for f in figures if f.subset == subset and f.method == "shortlist" and f.level == 0.9
        )
        where = "no trace claimed"
        if c.claimed:
            low, high = wilson(c.claimed_covered, c.claimed)
            where = (
                f"90% coverage where claimed {100 * c.claimed_rate:.1f}% "
                f"[{100 * low:.0f}–{100 * high:.0f}]"
            )
        parts.append(
            f"{subset}: {c.cases - c.claimed} of {c.cases} traces past the shift threshold; "
            + where
        )
    return (
        'Shift score (docs/step-sets.md, "When a trace is unlike the calibration data"; '
        "each trace of the weights' training data compared with the other folds' traces "
        "only): " + "; ".join(parts) + ". Those traces' sets are shown without a coverage claim."
    )


def set_cost(traces: Sequence[Trace]) -> float:
    """CPU milliseconds per trace to compute a set from scratch (the memo emptied)."""
    sets._memo.clear()
    started = time.process_time()
    for t in traces:
        sets.step_set(t, 0.9)
    return 1000 * (time.process_time() - started) / len(traces)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("data", nargs="?", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--also", type=Path, nargs="*", default=[], help="more labelled sources")
    parser.add_argument("--no-readme", action="store_true", help="print only")
    parser.add_argument("--out", type=Path, default=None, help="keep the results files here")
    args = parser.parse_args()
    traces = load_dataset(args.data)
    for extra in args.also:
        # Generated sources reuse scenario names across programs; the harness keys by id.
        traces += [
            t.model_copy(update={"id": f"{subset_of(t)}/{t.id}"}) for t in load_dataset(extra)
        ]
    traces, left_out = split_unrankable(traces, shipped_weights())
    started = time.perf_counter()
    cost = set_cost(traces)
    figures: list[Coverage] = []
    shortlist_rows: list[EvalRow] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.out or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for level in LEVELS:
            rows = asyncio.run(run_level(traces, level, folder))
            check_sources(rows, traces)
            figures += coverage(rows)
            shortlist_rows = [r for r in rows if r.method == "shortlist"]
    n = {s: sum(subset_of(t) == s for t in traces) for s in sorted({subset_of(t) for t in traces})}
    ww = [s for s in n if s in WHO_AND_WHEN]
    others = [s for s in n if s not in WHO_AND_WHEN]
    today = datetime.now(UTC).date().isoformat()
    weights = shipped_weights()
    no_wrong = sum(not has_wrong_step(t) for t in traces)
    out = [
        f"Measured {today}. {len(traces)} labelled traces "
        f"({', '.join(f'{k} {v}' for k, v in n.items())}), run through `run_eval` once per "
        f"level ({time.perf_counter() - started:.0f} s). "
        f"{describe_weights(weights, 'Shipped weights')}. Every trace of "
        "the weights' training data got its set from the held-out model of its fold "
        "(checked on every row: `step_set_source` is `shipped:fold-N`), which neither "
        "trained nor calibrated on it; each table says which model ranked its source. "
        "Cells: coverage % of cases [95% Wilson interval] and mean set size / trace length "
        "(mean size in steps). random: 10 repeats, averaged per case. Computing a set: "
        f"{cost:.1f} ms CPU per trace, no model call."
        + (
            f" The wrong judge is not run on the {no_wrong} trace(s) whose every step is "
            "decisive (it has no step to name)."
            if no_wrong
            else ""
        )
        + (f" {left_out_note(left_out)}" if left_out else ""),
    ]
    for subset in n:
        out += [
            "",
            f"**{subset}** ({n[subset]} traces; {provenance_of(shortlist_rows, subset)})",
            "",
            *table(figures, subset),
        ]
    if ww:
        out += ["", reading(figures, ww)]
    if others:
        out += ["", other_sources(figures, shortlist_rows, others, weights)]
    out += ["", ranked_note(shortlist_rows, list(n)), "", shift_note(figures, list(n))]
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
