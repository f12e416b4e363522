"""A second rule's test: two rankings of a program no table had read, scored once.

``_arguments`` (the warehouse team) and ``_experts`` (the expense desk) each let a program
generated for the purpose decide a change the criterion could not. Both score the shipped
ranking and the candidate's on the same traces, print the same table with paired tests,
and apply their rule to it.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from _deploy_choice import MARGIN, mean_of_folds
from _readme import write_section
from _stats import cell, paired

from faultfinder.eval.datasets import load_dataset, subset_of
from faultfinder.eval.metrics import normalise_agent
from faultfinder.shortlist import conformal
from faultfinder.shortlist.model import softmax
from faultfinder.shortlist.train import Table
from faultfinder.shortlist.weights import shipped_weights
from faultfinder.traces.schema import Trace

Hits = dict[str, list[bool]]
COLUMNS = ("top-1 step", "recall@3", "top-1 agent")


def score(traces: Sequence[Trace], logits_of: Callable[[int], Sequence[float]]) -> Hits:
    """Each trace's hits under a ranking (``logits_of(i)``: the scores of trace ``i``'s
    steps): its top step decisive, a decisive step in its top three, its top step's agent
    the labelled one."""
    got: Hits = {c: [] for c in COLUMNS}
    for i, trace in enumerate(traces):
        order = conformal.ranking(softmax(list(logits_of(i))))
        want = trace.label.acceptable_steps if trace.label else []
        agent = normalise_agent(trace.label.agent or "") if trace.label else ""
        got["top-1 step"].append(order[0] in want)
        got["recall@3"].append(any(s in want for s in order[:3]))
        got["top-1 agent"].append(normalise_agent(trace.steps[order[0]].agent) == agent)
    return got


def table(first: str, old: tuple[str, Hits], new: tuple[str, Hits]) -> list[str]:
    """Both rows (95% Wilson intervals) and the paired row (exact McNemar, + only the
    new ranking right / − only the old one right)."""
    n = len(old[1]["top-1 step"])
    out = [f"| {first} | " + " | ".join(f"{c} %" for c in COLUMNS) + " |", "|---|---:|---:|---:|"]
    for label, got in (old, new):
        out.append(f"| {label} | " + " | ".join(cell(sum(got[c]), n) for c in COLUMNS) + " |")
    pairs = [paired(new[1][c], old[1][c]).text() for c in COLUMNS]
    return [*out, "| paired | " + " | ".join(pairs) + " |"]


def wins(old: Hits, new: Hits) -> tuple[int, int, float]:
    """Traces whose top-1 step only the new ranking gets right, only the old one, and the
    fall in top-1 agent (points)."""
    step = paired(new["top-1 step"], old["top-1 step"])
    n = max(len(old["top-1 agent"]), 1)
    fall = 100 * (sum(old["top-1 agent"]) - sum(new["top-1 agent"])) / n
    return step.only_a, step.only_b, fall


Tables = Callable[[list[Trace], Sequence[str], Sequence[str]], list[str]]
"""A candidate's table: (traces, the shipped training sources present, shipped groups)."""
README = Path(__file__).resolve().parent / "README.md"


def candidate_main(
    argv: Sequence[str] | None,
    doc: str,
    blind_source: str,
    criterion: Tables,
    blind: Tables,
    section: tuple[str, str, str],
) -> int:
    """The command line of a pre-registered candidate: rule (1), the criterion table, with
    the blind source left out; ``--blind`` rule (2), ranking it; ``--write`` puts what was
    printed into bench/README.md between ``section``'s markers (begin, end, heading)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("data", nargs="+", help="Who&When and the generated directories")
    parser.add_argument(
        "--blind",
        action="store_true",
        help=f"rule (2): rank {blind_source} once (give its directory under "
        ".faultfinder/blind/ too)",
    )
    parser.add_argument("--write", action="store_true", help="write the table into bench/README.md")
    args = parser.parse_args(argv)
    traces: list[Trace] = []
    for p in args.data:
        traces += load_dataset(Path(p))
    present = {subset_of(t) for t in traces}
    weights = shipped_weights()
    trained = [s for s in weights.trained_sources if s in present]
    groups = tuple(weights.deploy.groups)
    if args.blind:
        lines = blind(traces, trained, groups)
    else:
        traces = [t for t in traces if subset_of(t) != blind_source]
        lines = criterion(traces, trained, groups)
    counts = ", ".join(f"{s} {n}" for s, n in sorted(Counter(map(subset_of, traces)).items()))
    text = "\n".join(
        [f"Measured {datetime.now(UTC).date().isoformat()}. {len(traces)} labelled traces "
         f"({counts}); features: {', '.join(groups)}.", *lines]
    )  # fmt: skip
    print(text)
    if args.write:
        begin, end, heading = section
        write_section(README, begin, end, text, heading)
    return 0


def section(tag: str, title: str, script: str, minutes: str) -> tuple[str, str, str]:
    """A candidate's section of bench/README.md: its markers and its heading."""
    heading = (
        f"\n## {title}, tried and not adopted — `bench/{script}`\n\n"
        f"Reproduce: `python bench/{script} ../shared/data/who-and-when "
        ".faultfinder/generated/* --write` (needs the `shortlist` extra and the generated "
        f"sources of `bench/fault_injection.py`; {minutes} on two busy cores). The "
        "candidate, its rule and its result are in the script's docstring, committed before "
        "its first row was read.\n\n"
    )
    return f"<!-- {tag}:begin -->", f"<!-- {tag}:end -->", heading


def rank_once(
    traces: Sequence[Trace],
    trained: Sequence[str],
    source: str,
    configurations: Sequence[tuple[str, Table, tuple[str, ...]]],
) -> dict[str, Hits]:
    """Each configuration (label, feature table, groups), a deploy fit trained on the
    ``trained`` sources, ranking the traces of ``source`` once."""
    train = [i for i, t in enumerate(traces) if subset_of(t) in trained]
    test = [i for i, t in enumerate(traces) if subset_of(t) == source]
    chosen = [traces[i] for i in test]
    hits: dict[str, Hits] = {}
    for label, rows, used in configurations:
        model = mean_of_folds(rows, used, train, 5)
        hits[label] = score(
            chosen,
            lambda n, rows=rows, model=model: model.logits(rows.rows[slice(*rows.spans[test[n]])]),
        )
    return hits


def rule_two(old: Hits, new: Hits) -> str:
    """The second rule of ``_experts`` and ``_verdict``: adopt when the traces whose top-1
    step only the candidate gets right are not fewer than those only the shipped model gets
    right, and top-1 agent falls by at most ``MARGIN`` points."""
    won, lost, fall = wins(old, new)
    return f"Rule (2): {'adopt' if won >= lost and fall <= MARGIN else 'not adopted'}."
