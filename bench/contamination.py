"""Near-copies of the training traces must never be ranked by a model that saw them.

Every Who&When trace is perturbed the way another release or an edited log would differ,
then handed to the shipped weights' choice rule (``Weights.choose``, what ``shortlist``,
``compose`` and every step set use). For each perturbation the bench counts the traces
ranked by a model that never trained on the original (a held-out model that excludes its
fold; the deploy model, the mean of fits on every fold, saw them all), the traces flagged
``trained_on_this_trace`` (honest: the model may have seen them and says so), and the
leaks: traces silently ranked by a model that trained on the original.

It also shows what the rule costs on traces that are not copies: each Who&When trace with
its own log taken out of the weights (what a new trace of the same benchmark would get),
and the generated traces of ``bench/fault_injection.py`` (demo team, LangGraph: out of
domain, they should get the deploy model). And it prints the similarities between distinct Who&When
traces from which ``neardup.FLOOR`` is set.

    python bench/contamination.py [DATA] [--also DIR ...] [--no-readme]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from _readme import write_section
from _shared import WHO_AND_WHEN_DATA

from faultfinder.eval.datasets import load_dataset, subset_of
from faultfinder.shortlist import neardup
from faultfinder.shortlist.model import trace_hash
from faultfinder.shortlist.weights import Chosen, Weights, shipped_weights
from faultfinder.traces.schema import Trace

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = WHO_AND_WHEN_DATA
GENERATED = ROOT / ".faultfinder" / "generated"
README = ROOT / "bench" / "README.md"
BEGIN, END = "<!-- contamination:begin -->", "<!-- contamination:end -->"


def _edit_steps(trace: Trace, edit: Callable[[int, str], str]) -> Trace:
    steps = [s.model_copy(update={"content": edit(s.index, s.content)}) for s in trace.steps]
    return trace.model_copy(update={"steps": steps})


def trailing_space(trace: Trace) -> Trace:
    return _edit_steps(trace, lambda _i, c: c + " ")


def reflowed(trace: Trace) -> Trace:
    """Line breaks become spaces, runs of blanks one space, upper-cased first letter."""
    return _edit_steps(trace, lambda _i, c: " ".join(c.split()).capitalize())


def one_step_rewritten(trace: Trace) -> Trace:
    """One step (a third of the way in) replaced by other text."""
    target = len(trace.steps) // 3
    return _edit_steps(
        trace, lambda i, c: "I have rewritten this message entirely." if i == target else c
    )


def words_dropped(trace: Trace, share: float = 0.1) -> Trace:
    """About ``share`` of the words of every step dropped (seeded per trace)."""
    rng = random.Random(trace.id)

    def drop(_i: int, c: str) -> str:
        return " ".join(w for w in c.split(" ") if rng.random() >= share)

    return _edit_steps(trace, drop)


def truncated(trace: Trace) -> Trace:
    """The last quarter of the steps cut off (a log exported before the run ended)."""
    keep = max(1, len(trace.steps) - len(trace.steps) // 4)
    return trace.model_copy(update={"steps": trace.steps[:keep]})


PERTURBATIONS: dict[str, Callable[[Trace], Trace]] = {
    "unchanged": lambda t: t,
    "one trailing space per step": trailing_space,
    "whitespace and case re-flowed": reflowed,
    "one step rewritten": one_step_rewritten,
    "10% of words dropped": words_dropped,
    "last quarter of the steps cut": truncated,
}


def saw(chosen: Chosen, fold: int) -> bool:
    """Whether the model of ``chosen`` trained on fold ``fold``."""
    trained = chosen.model.trained_on.get("trained_on_folds")
    return not isinstance(trained, list) or fold in trained


def without(weights: Weights, trace: Trace) -> Weights:
    """``weights`` with ``trace``'s log (and identical logs) taken out of ``fold_of`` and
    ``sketches``: what a new trace like it would meet."""
    own = weights.sketches[trace_hash(trace)]
    gone = {h for h, sk in weights.sketches.items() if sk == own} | {trace_hash(trace)}
    return dataclasses.replace(
        weights,
        fold_of={h: f for h, f in weights.fold_of.items() if h not in gone},
        sketches={h: sk for h, sk in weights.sketches.items() if h not in gone},
    )


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[round(q * (len(ordered) - 1))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", type=Path, default=DEFAULT_DATA)
    parser.add_argument(
        "--also",
        type=Path,
        nargs="*",
        default=sorted(d for d in GENERATED.iterdir() if d.is_dir()) if GENERATED.is_dir() else [],
        help="traces outside the training data (default: each generated source present)",
    )
    parser.add_argument("--no-readme", action="store_true", help="print only")
    args = parser.parse_args()
    traces = load_dataset(args.data)
    weights = shipped_weights()
    fold_of = {trace_hash(t): weights.fold_of[trace_hash(t)] for t in traces}
    lines = [
        f"Measured {datetime.now(UTC).date().isoformat()}. {len(traces)} Who&When traces, "
        "each perturbed and handed to the shipped weights' choice rule (a trace at least "
        f"{neardup.FLOOR} similar to a training trace is ranked by a held-out model that "
        "trained on none of its possible originals, or flagged). Never saw it: ranked by a "
        "model that did not train on the original's fold. Flagged: "
        "`trained_on_this_trace: true`. Leak: ranked by a model that trained on the original "
        "without saying so.",
        "",
        "| perturbation | never saw it | flagged | leak | ms per choice |",
        "|---|---:|---:|---:|---:|",
    ]
    leaks = 0
    for name, perturb in PERTURBATIONS.items():
        counts: Counter[str] = Counter()
        started = time.process_time()
        for trace in traces:
            chosen = weights.choose(perturb(trace))
            if chosen.contaminated:
                counts["flagged"] += 1
            elif saw(chosen, fold_of[trace_hash(trace)]):
                counts["leak"] += 1
            else:
                counts["clean"] += 1
        cost = 1000 * (time.process_time() - started) / len(traces)
        leaks += counts["leak"]
        lines.append(
            f"| {name} | {counts['clean']} | {counts['flagged']} | {counts['leak']} | {cost:.1f} |"
        )

    # What the rule costs on traces that are not copies of a training trace.
    pairs: list[float] = []
    nearest: list[float] = []
    others: list[tuple[str, list[Chosen], float]] = []
    fresh: list[Chosen] = []
    for trace in traces:
        rest = without(weights, trace)
        found = neardup.matches(neardup.shingle_hashes(trace), rest.sketches, floor=0.0)
        pairs += [m.similarity for m in found]
        nearest.append(found[0].similarity)
        fresh.append(rest.choose(trace))
    label = f"Who&When, own log taken out of the weights ({len(traces)})"
    others.append((label, fresh, max(nearest)))
    trained_sources = set(weights.trained_sources)
    for extra in args.also:
        outside = load_dataset(extra)
        if any(subset_of(t) in trained_sources for t in outside):
            # A training source of the weights: its traces are the file's own, each routed
            # to the held-out model of its fold (the rows above are about copies).
            label = f"{extra.name} (a training source of the weights, {len(outside)})"
        else:
            label = f"{extra.name} (never trained on, {len(outside)})"
        highest = max(
            (
                m.similarity
                for t in outside
                for m in neardup.matches(neardup.shingle_hashes(t), weights.sketches, floor=0.0)[:1]
            ),
            default=0.0,
        )
        others.append((label, [weights.choose(t) for t in outside], highest))
    lines += [
        "",
        "Traces that are not copies of a training trace: which model ranks them. A flag here "
        "is a false alarm (the trace was not trained on; no model could be shown not to have). "
        "A training source's traces are listed for what they are: each is ranked by the "
        "held-out model of its fold.",
        "",
        "| traces | deploy model | a held-out model | flagged | highest similarity |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, chosen, highest in others:
        deploy = sum(1 for c in chosen if c.source.endswith(":deploy") and not c.contaminated)
        flagged = sum(1 for c in chosen if c.contaminated)
        held = len(chosen) - deploy - flagged
        lines.append(f"| {label} | {deploy} | {held} | {flagged} | {highest:.3f} |")
    lines += [
        "",
        f"Similarity between distinct Who&When traces ({len(pairs)} ordered pairs): median "
        f"{quantile(pairs, 0.5):.3f}, 99th percentile {quantile(pairs, 0.99):.3f}, highest "
        f"{max(pairs):.3f}. Each trace's nearest distinct trace: median "
        f"{quantile(nearest, 0.5):.3f}, 75th percentile {quantile(nearest, 0.75):.3f}, highest "
        f"{max(nearest):.3f}. `neardup.FLOOR` = {neardup.FLOOR}.",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_readme:
        heading = (
            "\n## Contamination by content — `bench/contamination.py`\n\n"
            "Reproduce: `python bench/contamination.py` (no model, seconds). How near-copies "
            'are found: docs/methods/shortlist.md, "Near-copies of training traces".\n\n'
        )
        write_section(README, BEGIN, END, text, heading)
    return 1 if leaks else 0


if __name__ == "__main__":
    sys.exit(main())
