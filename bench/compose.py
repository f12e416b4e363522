"""Accuracy against tokens for ``compose``, per source, with the perfect judge as verifier.

The perfect judge (``faultfinder.testing.oracle``) names the gold step whenever it may:
``compose`` only accepts one of its k shortlisted steps, so its step accuracy is the
shortlist's recall@k (minus the cases whose labelled agent does not speak at the labelled
step, which the agent/step rule marks unparsed), and the curve is measurable offline.

The shortlist is the one users get: the shipped weights (or ``--weights FILE``), each
trace ranked by the model that file's own rule picks (``Weights.choose``): a trace of its
training data by the held-out model of its fold, which neither trained nor calibrated on
it; any other trace by the deploy model, which never saw its source. Every table says
which, and a trace the chosen model may have trained on (a near-copy the file cannot
route to a held-out model) is left out and named (``_held_out.py``). Sources: Who&When's
two subsets and every labelled directory passed with ``--also``
(``bench/fault_injection.py``'s generated runs), each reported on its own.

Tokens are the judge's prompt + completion as the test backend counts them (about 4
characters a token, marked estimated); the whole-log all-at-once and step-by-step judges
are the reference points. Rows with ``judge step-by-step`` run Who&When's step-by-step
judge over the shortlisted steps only (the oracle answers Yes at the gold step), so their
tokens show what a many-call judge costs on the abbreviated view.

``--against FILE`` runs compose's k = 1, 3, 5 points (abbreviated log always,
``min_saving=None``, so every case reads the ranking) with a second weights file too (for
example the previously shipped one, ``git show REV:src/faultfinder/shortlist/weights.json``)
and prints, per source, the paired exact McNemar test of step accuracy on the same traces.

    python bench/compose.py [DATA] [--also DIR ...] [--weights FILE] [--against FILE]
                            [--no-readme]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from _held_out import left_out_note, split_unrankable
from _readme import write_section
from _shared import WHO_AND_WHEN_DATA
from _stats import cell, paired

from faultfinder.eval.datasets import load_dataset, subset_of
from faultfinder.eval.metrics import step_correct
from faultfinder.eval.step_sets import model_family
from faultfinder.judging.method import run_method
from faultfinder.llm.client import LLM
from faultfinder.registry import create_method
from faultfinder.shortlist import conformal
from faultfinder.shortlist.rank import rank_trace
from faultfinder.shortlist.weights import Weights, load_weights
from faultfinder.testing.oracle import perfect_judge
from faultfinder.traces.schema import Trace

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = WHO_AND_WHEN_DATA
README = ROOT / "bench" / "README.md"
BEGIN, END = "<!-- compose:begin -->", "<!-- compose:end -->"
POINTS: list[tuple[str, dict[str, object]]] = [
    ("compose k=1", {"top_k": 1}),
    ("compose k=2", {"top_k": 2}),
    ("compose k=3", {"top_k": 3}),
    ("compose k=5", {"top_k": 5}),
    ("compose k=8", {"top_k": 8}),
    ("compose k=3, never the whole log", {"top_k": 3, "min_saving": None}),
    ("compose k=5, never the whole log", {"top_k": 5, "min_saving": None}),
    ("compose k=5, budget 2000", {"top_k": 5, "budget_tokens": 2000}),
    ("compose k=5, budget 4000", {"top_k": 5, "budget_tokens": 4000}),
    ("compose k=3, judge step-by-step", {"top_k": 3, "judge": "step-by-step"}),
    ("compose k=5, judge step-by-step", {"top_k": 5, "judge": "step-by-step"}),
    (
        "compose k=5, judge step-by-step, budget 4000",
        {"top_k": 5, "judge": "step-by-step", "budget_tokens": 4000},
    ),
]
"""Points of the curve. ``budget_tokens`` is the per-case budget (``--budget-tokens``):
prompt plus reply of every call of the case; compose lowers k to fit it. By default a log
where abbreviating saves less than ``min_saving`` (10%) of the prompt is judged whole;
``min_saving: None`` is the abbreviated log always (compose before 2026-11-26)."""
WHOLE_KS = (3, 5)
"""k of the paired comparison: the default against 'never the whole log'."""
REFERENCES = ("all-at-once", "step-by-step")
"""Whole-log judges the points are compared with (tokens relative to the first)."""
RECALL_KS = (1, 2, 3, 5, 8)
AGAINST_KS = (1, 3, 5)
"""The built-in-judge points compared between two weights files (``--against``)."""


@dataclass(frozen=True)
class Outcome:
    """One trace's result at one point."""

    correct: bool
    tokens: int
    status: str
    shown: float
    """Share of the trace's steps the judge saw in full (compose's candidates; 1 for a
    whole-log judge)."""
    whole: bool = False
    """compose judged the whole log: abbreviating would have saved under ``min_saving``."""


async def run_point(
    traces: Sequence[Trace], spec: str, settings: dict[str, object], weights: str | None
) -> list[Outcome]:
    """Each trace's outcome (same order as ``traces``), the perfect judge answering."""
    options = dict(settings)
    if spec == "compose" and weights is not None:
        options["model_path"] = weights
    method = create_method(spec, **options)
    out = []
    for trace in traces:
        result = await run_method(method, trace, LLM(perfect_judge(trace)), label=spec)
        assert trace.label is not None
        candidates = result.details.get("candidates")
        shown = len(candidates) / len(trace.steps) if isinstance(candidates, list) else 1.0
        out.append(
            Outcome(
                step_correct(result.step, trace.label),
                result.usage.total_tokens,
                result.status,
                shown,
                "whole_log" in result.details,
            )
        )
    return out


def ranked_by(traces: Sequence[Trace], weights: Weights) -> tuple[list[str], list[list[int]]]:
    """Per trace, the family of the model that ranks it ('fold' or 'deploy') and its
    ranking. Stops when a trace would be ranked by a model that may have trained on it."""
    families: list[str] = []
    rankings: list[list[int]] = []
    seen: list[str] = []
    for trace in traces:
        chosen = weights.choose(trace)
        if chosen.contaminated:
            seen.append(f"{subset_of(trace)} {trace.id} ({chosen.source})")
        families.append(model_family(chosen.source))
        rankings.append(conformal.ranking(rank_trace(trace, chosen.model).probs))
    if seen:
        raise SystemExit(
            f"{len(seen)} trace(s) would be ranked by a model that may have trained on them, "
            f"e.g. {seen[0]}: figures on them would not be out-of-sample"
        )
    return families, rankings


def provenance(families: Sequence[str]) -> str:
    counts = Counter(families)
    parts = []
    if counts["fold"]:
        parts.append(
            f"{counts['fold']} ranked by the held-out model of their fold, which trained and "
            "calibrated on neither them nor their fold"
        )
    if counts["deploy"]:
        parts.append(f"{counts['deploy']} by the deploy model: outside the weights' training data")
    return "; ".join(parts)


def describe_weights(weights: Weights, name: str) -> str:
    """'NAME (features ...; trained on ...[; calibrated only on ...])' from the file's
    own provenance."""
    about = weights.trained_on

    def listed(value: object) -> str:
        if isinstance(value, dict):
            return ", ".join(f"{k} {v}" for k, v in value.items())
        if isinstance(value, list):
            return ", ".join(map(str, value))
        return str(value)

    what = listed(about.get("sources") or about.get("dataset") or "unrecorded data")
    text = f"{name} (features {', '.join(weights.groups)}"
    if about.get("objective"):
        text += f", {about['objective']}"
    text += f"; trained on {what}"
    if about.get("calibrated_only_on"):
        text += f"; calibrated only on {listed(about['calibrated_only_on'])}"
    return text + ")"


def row(name: str, rs: Sequence[Outcome], recall: float | None, base_tokens: float) -> str:
    n = len(rs)
    acc = 100 * sum(r.correct for r in rs) / n
    tokens = sum(r.tokens for r in rs) / n
    unparsed = sum(r.status == "unparsed" for r in rs)
    over = sum(r.status == "budget-exceeded" for r in rs)
    rec = "-" if recall is None else f"{recall:.1f}"
    shown = 100 * sum(r.shown for r in rs) / n
    return (
        f"| {name} | {acc:.1f} | {rec} | {shown:.0f}% | {tokens:.0f} | "
        f"{100 * tokens / base_tokens:.0f}% | {unparsed} | {over} |"
    )


def against_lines(
    traces: Sequence[Trace],
    mine: dict[str, list[Outcome]],
    theirs: dict[str, list[Outcome]],
    other: str,
    other_families: Sequence[str],
) -> list[str]:
    """Per source and k: step accuracy with both weights files, paired exact McNemar."""
    out = [
        "",
        f"**Against {other}** (same traces, same perfect judge, built-in judge over the "
        "abbreviated log always, `min_saving=null`, so that every case reads the ranking; "
        "+ only these weights right / − only the other right, two-sided exact McNemar p; "
        "the last column says which model of the other file ranked the source):",
        "",
        "| source | k | these weights % | other weights % | paired | other ranked by |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for subset in sorted({subset_of(t) for t in traces}):
        idx = [i for i, t in enumerate(traces) if subset_of(t) == subset]
        fams = Counter(other_families[i] for i in idx)
        by = ", ".join(f"{k} {v}" for k, v in sorted(fams.items()))
        for k in AGAINST_KS:
            a = [mine[f"compose k={k}"][i].correct for i in idx]
            b = [theirs[f"compose k={k}"][i].correct for i in idx]
            test = paired(a, b)
            out.append(
                f"| {subset} | {k} | {cell(sum(a), len(idx))} | {cell(sum(b), len(idx))} "
                f"| {test.text()} | {by} |"
            )
    return out


def whole_log_lines(traces: Sequence[Trace], results: dict[str, list[Outcome]]) -> list[str]:
    """Per source and k: compose as shipped (the whole log where abbreviating saves little)
    against the abbreviated log always, on the same traces, paired exact McNemar."""
    out = [
        "",
        "**Short logs judged whole** (compose's default `min_saving` 10% against "
        "`min_saving=null`, the abbreviated log always; same traces, perfect judge; + only "
        "the default right / − only the other right, two-sided exact McNemar p; tokens per "
        "case):",
        "",
        "| source | k | judged whole | default % | tokens | abbreviated always % | tokens "
        "| paired |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for subset in sorted({subset_of(t) for t in traces}):
        idx = [i for i, t in enumerate(traces) if subset_of(t) == subset]
        for k in WHOLE_KS:
            mine = [results[f"compose k={k}"][i] for i in idx]
            never = [results[f"compose k={k}, never the whole log"][i] for i in idx]
            a, b = [r.correct for r in mine], [r.correct for r in never]
            whole = sum(r.whole for r in mine)
            out.append(
                f"| {subset} | {k} | {whole}/{len(idx)} | {cell(sum(a), len(idx))} "
                f"| {sum(r.tokens for r in mine) / len(idx):.0f} | {cell(sum(b), len(idx))} "
                f"| {sum(r.tokens for r in never) / len(idx):.0f} | {paired(a, b).text()} |"
            )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("data", nargs="?", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--also", type=Path, nargs="*", default=[], help="more labelled sources")
    parser.add_argument(
        "--weights", type=Path, default=None, help="shortlist weights file (default: shipped)"
    )
    parser.add_argument(
        "--against",
        type=Path,
        default=None,
        help="a second weights file: paired tests of compose k=1,3,5 against it",
    )
    parser.add_argument("--no-readme", action="store_true", help="print only")
    args = parser.parse_args()
    traces = load_dataset(args.data)
    for extra in args.also:
        traces += load_dataset(extra)
    weights_path = str(args.weights) if args.weights else None
    weights = load_weights(weights_path)
    rivals = [weights] if args.against is None else [weights, load_weights(args.against)]
    traces, left_out = split_unrankable(traces, *rivals)
    started = time.perf_counter()
    families, rankings = ranked_by(traces, weights)
    recall = {
        k: [
            any(s in order[:k] for s in t.label.acceptable_steps)  # type: ignore[union-attr]
            for t, order in zip(traces, rankings, strict=True)
        ]
        for k in RECALL_KS
    }
    whole = {spec: asyncio.run(run_point(traces, spec, {}, None)) for spec in REFERENCES}
    results = {
        name: asyncio.run(run_point(traces, "compose", s, weights_path)) for name, s in POINTS
    }
    extra: list[str] = []
    if args.against is not None:
        other = load_weights(args.against)
        other_families, _ = ranked_by(traces, other)

        # The abbreviated log always: a log judged whole does not read the ranking.
        def abbreviated(path: str | None) -> dict[str, list[Outcome]]:
            return {
                f"compose k={k}": asyncio.run(
                    run_point(traces, "compose", {"top_k": k, "min_saving": None}, path)
                )
                for k in AGAINST_KS
            }

        extra = against_lines(
            traces,
            abbreviated(weights_path),
            abbreviated(str(args.against)),
            describe_weights(other, f"the weights file {args.against.name}"),
            other_families,
        )
    elapsed = time.perf_counter() - started
    counts = Counter(subset_of(t) for t in traces)
    today = datetime.now(UTC).date().isoformat()
    name = f"the weights file {args.weights.name}" if args.weights else "the shipped weights"
    lines = [
        f"Measured {today}. {len(traces)} labelled traces "
        f"({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}); perfect judge; "
        f"shortlist: {describe_weights(weights, name)}, each trace ranked by the model the "
        f"file picks for it (below, per source); {elapsed:.0f} s in all. Tokens estimated "
        "by the test backend (about 4 characters a token)."
        + (f" {left_out_note(left_out)}" if left_out else ""),
    ]
    for subset in sorted(counts):
        idx = [i for i, t in enumerate(traces) if subset_of(t) == subset]
        base = [whole[REFERENCES[0]][i] for i in idx]
        base_tokens = sum(r.tokens for r in base) / len(base)
        lines += [
            "",
            f"**{subset}** ({len(idx)} traces; {provenance([families[i] for i in idx])})",
            "",
            "| method | step accuracy % | shortlist recall@k % | steps in full | tokens/case "
            "| tokens vs all-at-once | unparsed | budget-exceeded |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for spec in REFERENCES:
            lines.append(
                row(f"{spec} (whole log)", [whole[spec][i] for i in idx], None, base_tokens)
            )
        for point, settings in POINTS:
            k = int(settings["top_k"])  # type: ignore[call-overload]
            rec = None
            if "budget_tokens" not in settings:
                rec = 100 * sum(recall[k][i] for i in idx) / len(idx)
            lines.append(row(point, [results[point][i] for i in idx], rec, base_tokens))
    lines += whole_log_lines(traces, results)
    lines += extra
    text = "\n".join(lines)
    print(text)
    if not args.no_readme:
        write_readme(text)
    return 0


def write_readme(text: str) -> None:
    heading = (
        "\n## Budgeted composition (`bench/compose.py`)\n\n"
        "Reproduce: `python bench/compose.py`.\n\n"
    )
    write_section(README, BEGIN, END, text, heading)


if __name__ == "__main__":
    sys.exit(main())
