r"""The offline step shortlist on Who&When, cross-validated, beside the floors.

Five folds by trace (identical logs share a fold); every figure comes from a model that
never saw the trace it scores. Reports recall@1/3/5 of the decisive step and top-1 agent
accuracy per subset with 95% Wilson intervals, beside four floors (uniform random, the
first speaker's steps, the majority agent's steps, a position prior learned on the same
training folds), the CPU cost per trace, an ablation by feature group, split-conformal
coverage and set sizes, and the reliability of the stated confidence.

    python bench/shortlist.py [DATA] [--also DIR ...] [--no-readme] [--ship] [--surprisal]

``--also`` adds labelled sources (the generated failures of ``bench/fault_injection.py``):
they train beside Who&When, weighing as ``train.source_weights`` says, and get tables of
their own. The shipped weights are built with four of the seven generated sources; the
demo team (the first command's demo: a ranker trained on its runs would show a memorised
answer there), the software team and the support desk stay frameworks the file never
saw:

    python bench/shortlist.py --ship --also \
        .faultfinder/generated/{ag2,agents-sdk,crewai,langgraph}

``--ship`` also writes src/faultfinder/shortlist/weights.json: the held-out model of each
fold (trained on three folds, calibrated on a fourth) and a deploy model for traces
outside the training data (the mean of the five fits that each leave one fold out,
calibrated on every trace's score under the fit that left its fold out).
``--surprisal`` computes missing token surprisal with the embedded model (slow on CPU;
cached under .faultfinder/surprisal/); without it, the surprisal ablation uses the traces
whose surprisal is already cached.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from _readme import write_section
from _shared import WHO_AND_WHEN_DATA

from faultfinder.eval.datasets import load_dataset, subset_of
from faultfinder.eval.metrics import normalise_agent
from faultfinder.eval.reliability import ece, markdown, reliability
from faultfinder.shortlist import conformal
from faultfinder.shortlist.features import FeatureSpec, trace_features
from faultfinder.shortlist.model import softmax
from faultfinder.shortlist.surprisal import CachedSurprisal, LlamaSurprisal
from faultfinder.shortlist.train import build_table, cross_validate, held_out_models, ship
from faultfinder.traces.schema import Trace

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = WHO_AND_WHEN_DATA
README = ROOT / "bench" / "README.md"
WEIGHTS = ROOT / "src" / "faultfinder" / "shortlist" / "weights.json"
BEGIN, END = "<!-- shortlist:begin -->", "<!-- shortlist:end -->"
DEFAULT_GROUPS = FeatureSpec().groups
KS = (1, 3, 5)
ABLATIONS: list[tuple[str, ...]] = [
    ("position",),
    ("agent",),
    ("structure",),
    ("errors",),
    ("cause",),
    ("position", "agent", "errors"),
    ("structure", "errors"),
    ("errors", "cause"),
    ("structure", "cause"),
    ("position", "structure", "errors", "cause"),
    ("position", "agent", "errors", "cause"),
]


def wilson(hits: float, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (float("nan"), float("nan"))
    p = hits / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def cell(hits: float, n: int, ci: bool = True) -> str:
    if not n:
        return "-"
    text = f"{100 * hits / n:.1f}"
    if ci:
        lo, hi = wilson(hits, n)
        text += f" [{100 * lo:.0f}–{100 * hi:.0f}]"
    return text


def same_agent(a: str, b: str | None) -> bool:
    return b is not None and normalise_agent(a) == normalise_agent(b)


class Ranked:
    """A ranking of one trace's steps plus the agent it names."""

    def __init__(self, order: list[int], agent: str | None) -> None:
        self.order = order
        self.agent = agent


def agent_first(trace: Trace, agent: str) -> list[int]:
    mine = [s.index for s in trace.steps if s.agent == agent]
    return mine + [s.index for s in trace.steps if s.agent != agent]


def first_speaker(trace: Trace) -> Ranked:
    agent = trace.steps[0].agent
    return Ranked(agent_first(trace, agent), agent)


def majority_agent(trace: Trace) -> Ranked:
    counts = Counter(s.agent for s in trace.steps)
    agent = max(trace.agent_names(), key=lambda a: counts[a])  # ties: first to appear
    return Ranked(agent_first(trace, agent), agent)


def position_prior(train: Sequence[Trace]) -> Callable[[Trace], Ranked]:
    """Steps by how often their index was decisive in ``train`` (same subset), earlier first."""
    return prior_from(train, by_subset=True)


def recall_hits(trace: Trace, order: Sequence[int], k: int) -> bool:
    assert trace.label is not None
    return any(s in order[:k] for s in trace.label.acceptable_steps)


def prior_from(train: Sequence[Trace], by_subset: bool) -> Callable[[Trace], Ranked]:
    """Steps by how often their index was decisive in ``train`` (ties: earlier first);
    per subset when ``by_subset`` (cross-validation), pooled otherwise (transfer)."""
    counts: dict[str, Counter[int]] = {}
    for t in train:
        assert t.label is not None and t.label.step is not None
        key = subset_of(t) if by_subset else "*"
        counts.setdefault(key, Counter())[t.label.step] += 1

    def rank(trace: Trace) -> Ranked:
        c = counts.get(subset_of(trace) if by_subset else "*", Counter())
        order = sorted(range(len(trace.steps)), key=lambda i: (-c[i], i))
        return Ranked(order, trace.steps[order[0]].agent)

    return rank


def ranked_of(trace: Trace, probs: Sequence[float]) -> Ranked:
    order = conformal.ranking(probs)
    return Ranked(order, trace.steps[order[0]].agent)


def hits(traces: Sequence[Trace], ranked: Sequence[Ranked], k: int | None) -> list[bool]:
    """Per trace: recall@k of the decisive step, or (k None) the top-1 agent."""
    if k is None:
        return [
            same_agent(r.agent or "", t.label.agent if t.label else None)
            for t, r in zip(traces, ranked, strict=True)
        ]
    return [recall_hits(t, r.order, k) for t, r in zip(traces, ranked, strict=True)]


def table_rows(
    name: str, traces: Sequence[Trace], ranked: Sequence[Ranked], ci: bool = True
) -> str:
    n = len(traces)
    cells = [
        cell(sum(recall_hits(t, r.order, k) for t, r in zip(traces, ranked, strict=True)), n, ci)
        for k in KS
    ]
    agent = sum(
        same_agent(r.agent or "", t.label.agent if t.label else None)
        for t, r in zip(traces, ranked, strict=True)
    )
    return f"| {name} | " + " | ".join(cells) + f" | {cell(agent, n, ci)} |"


def random_row(traces: Sequence[Trace]) -> str:
    """Exact expectations of a uniform draw (no interval: not a sample)."""
    n = len(traces)
    cells = [
        f"{100 * sum(min(k, len(t.steps)) / len(t.steps) for t in traces) / n:.1f}" for k in KS
    ]
    agent = 0.0
    for t in traces:
        names = t.agent_names()
        agent += sum(same_agent(a, t.label.agent if t.label else None) for a in names) / len(names)
    return "| random (expectation) | " + " | ".join(cells) + f" | {100 * agent / n:.1f} |"


HEAD = (
    "| ranking | recall@1 % | recall@3 % | recall@5 % | top-1 agent % |\n|---|---:|---:|---:|---:|"
)

CV_ROW = "**shortlist** (cross-validated, one fit per fold)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--no-readme", action="store_true", help="print only")
    parser.add_argument("--ship", action="store_true", help="write the shipped weights")
    parser.add_argument("--surprisal", action="store_true", help="compute missing surprisal")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument(
        "--also", type=Path, nargs="*", default=[], help="more labelled sources to train on"
    )
    parser.add_argument(
        "--calibrate-on",
        type=Path,
        nargs="*",
        default=[],
        help="labelled sources --ship never trains on: they calibrate the step sets of a "
        "source never trained on",
    )
    args = parser.parse_args()
    traces = load_dataset(args.data)
    for extra in args.also:
        traces += load_dataset(extra)
    held_apart = [t for d in args.calibrate_on for t in load_dataset(d)]
    subsets = sorted({subset_of(t) for t in traces})
    out: list[str] = []

    # Cost of the default features (CPU seconds per trace).
    started = time.process_time()
    for t in traces:
        trace_features(t, DEFAULT_GROUPS)
    feat_cpu = (time.process_time() - started) / len(traces)

    table = build_table(traces, DEFAULT_GROUPS)
    cv = cross_validate(table, DEFAULT_GROUPS, k=args.folds)
    model_rank = [
        Ranked(conformal.ranking(p), t.steps[conformal.ranking(p)[0]].agent)
        for t, p in zip(traces, cv.probs, strict=True)
    ]
    priors = {
        f: position_prior([t for t, g in zip(traces, cv.folds, strict=True) if g != f])
        for f in set(cv.folds)
    }
    prior_rank = [priors[f](t) for t, f in zip(traces, cv.folds, strict=True)]

    out.append(
        f"Measured {datetime.now(UTC).date().isoformat()}. {len(traces)} labelled traces ("
        + ", ".join(f"{s} {n}" for s, n in sorted(Counter(map(subset_of, traces)).items()))
        + f"), {args.folds} folds by content (near-duplicate logs share a fold, each source "
        "spread over every fold); every score below comes from a model that did not see the "
        "trace. Training weighs a Who&When trace 1 and gives the other sources, in equal "
        "shares, as much weight again (`train.source_weights`). Each fold is scored by one "
        "fit on the other folds; the shipped deploy model is the mean of such fits, and "
        'its cross-validated figures are in "Transfer and paired tests". '
        "Brackets: 95% Wilson interval. Features: "
        f"{', '.join(DEFAULT_GROUPS)} (no surprisal); {feat_cpu * 1000:.1f} ms CPU per trace "
        "to compute them, no model call."
    )
    for subset in subsets:
        idx = [i for i, t in enumerate(traces) if subset_of(t) == subset]
        ts = [traces[i] for i in idx]
        out += ["", f"**{subset}** ({len(ts)} traces)", "", HEAD]
        out.append(table_rows(CV_ROW, ts, [model_rank[i] for i in idx]))
        out.append(table_rows("position prior (training folds)", ts, [prior_rank[i] for i in idx]))
        out.append(table_rows("first speaker's steps", ts, [first_speaker(t) for t in ts]))
        out.append(table_rows("majority agent's steps", ts, [majority_agent(t) for t in ts]))
        out.append(random_row(ts))

    # Ablation by feature group.
    out += ["", "Ablation (cross-validated recall@1/3/5 and top-1 agent, %, AG / HC):", ""]
    out.append(
        "| features | AG r@1 | AG r@3 | AG r@5 | AG agent | HC r@1 | HC r@3 | HC r@5 | HC agent |"
    )
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for groups in ABLATIONS:
        out.append(ablation_row(traces, groups, args.folds))

    surprisal_lines, surprisal_cost = surprisal_ablation(traces, args.folds, args.surprisal)
    out += surprisal_lines

    # Conformal sets: the held-out models the weights file ships (split conformal).
    held = held_out_models(table, DEFAULT_GROUPS, k=args.folds)
    out += [
        "",
        "Split-conformal step sets of the shortlist alone, from the held-out model of each "
        "trace's fold (trained on three folds, calibrated on a fourth, tested on the fifth; "
        "the models `--ship` writes), with the thresholds of the trace's own subset. "
        "With every method's step added, through the eval "
        'harness: section "Calibrated step sets".',
        "",
    ]
    out.append(
        "| subset | target coverage | coverage % | mean set size | set size / trace length |"
    )
    out.append("|---|---:|---:|---:|---:|")
    for subset in subsets:
        idx = [i for i, t in enumerate(traces) if subset_of(t) == subset]
        for level in conformal.LEVELS:
            covered, sizes, rel = 0, 0.0, 0.0
            for i in idx:
                t = traces[i]
                model = held.models[held.folds[i]]
                start, end = table.spans[i]
                probs = softmax(model.logits(table.rows[start:end]))
                tau = model.conformal.get(
                    conformal.source_key(subset, level), model.conformal[str(level)]
                )
                chosen = conformal.prediction_set(probs, tau)
                covered += any(s in chosen for s in t.label.acceptable_steps)  # type: ignore[union-attr]
                sizes += len(chosen)
                rel += len(chosen) / len(t.steps)
            n = len(idx)
            out.append(
                f"| {subset} | {100 * level:.0f}% | {cell(covered, n)} | {sizes / n:.1f} | "
                f"{100 * rel / n:.0f}% |"
            )

    # Reliability of the confidence (top step's probability).
    pairs = [
        (max(p), recall_hits(t, conformal.ranking(p), 1))
        for t, p in zip(traces, cv.probs, strict=True)
    ]
    bins = reliability(pairs)
    out += [
        "",
        f"Reliability of the stated confidence (top step's probability), all traces, ECE "
        f"{ece(bins):.3f}:",
        "",
        markdown(bins),
        "",
        f"Cost per trace: features {feat_cpu * 1000:.1f} ms CPU; {surprisal_cost}",
    ]
    if args.ship:
        apart = sorted({subset_of(t) for t in held_apart})
        everything = build_table([*traces, *held_apart], DEFAULT_GROUPS)
        weights = ship(everything, DEFAULT_GROUPS, k=args.folds, calibrate_only=apart)
        WEIGHTS.write_text(weights.dumps())
        unseen = weights.deploy.conformal.get(conformal.source_key(conformal.UNSEEN, 0.9))
        out += [
            "",
            f"Shipped weights written: a deploy model and {args.folds} held-out fold models "
            f"over {len(traces)} traces ("
            + ", ".join(f"{s} {n}" for s, n in sorted(Counter(map(subset_of, traces)).items()))
            + "); "
            + (
                "thresholds for a source never trained on calibrated on "
                + (f"{', '.join(apart)} (never trained on) and on " if apart else "")
                + f"each trained source left out in turn: 90% at {unseen}."
                if unseen is not None
                else "no thresholds for a source never trained on (fewer than three sources)."
            ),
        ]
    text = "\n".join(out)
    print(text)
    if not args.no_readme:
        write_readme(text)
    return 0


def ablation_row(traces: Sequence[Trace], groups: Sequence[str], folds: int, surprisal=None) -> str:
    table = build_table(traces, groups, surprisal)
    cv = cross_validate(table, groups, k=folds)
    cells: list[str] = []
    for subset in ("Algorithm-Generated", "Hand-Crafted"):
        idx = [i for i, t in enumerate(traces) if subset_of(t) == subset]
        n = len(idx)
        for k in KS:
            hits = sum(recall_hits(traces[i], conformal.ranking(cv.probs[i]), k) for i in idx)
            cells.append(cell(hits, n, ci=False))
        agent = sum(
            same_agent(
                traces[i].steps[conformal.ranking(cv.probs[i])[0]].agent, traces[i].label.agent
            )  # type: ignore[union-attr]
            for i in idx
        )
        cells.append(cell(agent, n, ci=False))
    return f"| {' + '.join(groups)} | " + " | ".join(cells) + " |"


def surprisal_ablation(traces: Sequence[Trace], folds: int, compute: bool) -> tuple[list[str], str]:
    scorer = CachedSurprisal(LlamaSurprisal())
    try:
        have = [t for t in traces if compute or scorer.cpu_seconds(t) is not None]
    except Exception as exc:  # the embedded model is not installed
        return ["", f"Surprisal ablation not run: {exc}"], "surprisal not measured"
    if len(have) < 2 * folds:
        return [
            "",
            f"Surprisal ablation not run: {len(have)} traces have surprisal cached "
            "(run with --surprisal).",
        ], "surprisal not measured"
    lines = [
        "",
        f"Surprisal ablation on the {len(have)} traces whose surprisal is computed "
        f"({sum(subset_of(t) == 'Algorithm-Generated' for t in have)} AG, "
        f"{sum(subset_of(t) == 'Hand-Crafted' for t in have)} HC; same folds rule):",
        "",
        "| features | AG r@1 | AG r@3 | AG r@5 | AG agent | HC r@1 | HC r@3 | HC r@5 | HC agent |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for groups in [DEFAULT_GROUPS, (*DEFAULT_GROUPS, "surprisal"), ("position", "surprisal")]:
        lines.append(ablation_row(have, groups, folds, scorer.score))
    costs = [c for t in have if (c := scorer.cpu_seconds(t)) is not None]
    steps = sum(len(t.steps) for t in have)
    cost = (
        f"surprisal {sum(costs) / len(costs):.1f} s CPU per trace "
        f"({sum(costs) / steps:.2f} s per step; SmolLM2-135M, {scorer.identity()}, "
        "measured on this shared 2-core machine under load)"
    )
    return lines, cost


def write_readme(text: str) -> None:
    heading = (
        "\n## Offline step shortlist (`bench/shortlist.py`)\n\n"
        "Reproduce: `python bench/shortlist.py --also .faultfinder/generated/{ag2,agents-sdk,"
        "crewai,langgraph}` (add `--ship` to rewrite the shipped weights).\n\n"
    )
    write_section(README, BEGIN, END, text, heading)


if __name__ == "__main__":
    sys.exit(main())
