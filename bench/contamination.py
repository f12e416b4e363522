"""Near-copies of the training traces must never be ranked by a model that saw them.

Every Who&When trace is perturbed the way another release or an edited log would differ,
then handed to the shipped weights' choice rule (``Weights.choose``, what ``shortlist``,
``compose`` and every step set use). For each perturbation the bench counts the traces
answered by the held-out model of their fold (correct: it never saw them), the traces
flagged ``trained_on_this_trace`` (honest: the model saw them and says so), and the
traces silently answered by the deploy model, which trained on four folds of five
(a leak, unless the trace is in the deploy model's held-out fold 0).

    python bench/contamination.py [DATA] [--no-readme]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from _readme import write_section

from faultfinder.eval.datasets import load_dataset
from faultfinder.shortlist.model import trace_hash
from faultfinder.shortlist.weights import shipped_weights
from faultfinder.traces.schema import Trace

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "who-and-when"
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--no-readme", action="store_true", help="print only")
    args = parser.parse_args()
    traces = load_dataset(args.data)
    weights = shipped_weights()
    fold_of = {trace_hash(t): weights.fold_of[trace_hash(t)] for t in traces}
    lines = [
        f"Measured {datetime.now(UTC).date().isoformat()}. {len(traces)} Who&When traces, "
        "each perturbed and handed to the shipped weights' choice rule. Own fold: ranked by "
        "the held-out model of the original trace's fold (never saw it). Flagged: "
        "`trained_on_this_trace: true`. Leak: ranked by a model that trained on the original "
        "without saying so.",
        "",
        "| perturbation | own fold model | flagged | leak | ms per choice |",
        "|---|---:|---:|---:|---:|",
    ]
    leaks = 0
    for name, perturb in PERTURBATIONS.items():
        counts: Counter[str] = Counter()
        started = time.process_time()
        for trace in traces:
            fold = fold_of[trace_hash(trace)]
            chosen = weights.choose(perturb(trace))
            if chosen.source.endswith(f":fold-{fold}"):
                counts["own"] += 1
            elif chosen.contaminated:
                counts["flagged"] += 1
            elif chosen.source.endswith(":deploy") and fold == 0:
                counts["own"] += 1  # the deploy model never saw fold 0
            else:
                counts["leak"] += 1
        cost = 1000 * (time.process_time() - started) / len(traces)
        leaks += counts["leak"]
        lines.append(
            f"| {name} | {counts['own']} | {counts['flagged']} | {counts['leak']} | {cost:.1f} |"
        )
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
