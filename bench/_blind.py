"""A second rule's test: two rankings of a program no table had read, scored once.

``_arguments`` (the warehouse team) and ``_experts`` (the expense desk) each let a program
generated for the purpose decide a change the criterion could not. Both score the shipped
ranking and the candidate's on the same traces, print the same table with paired tests,
and apply their rule to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from _stats import cell, paired

from faultfinder.eval.metrics import normalise_agent
from faultfinder.shortlist import conformal
from faultfinder.shortlist.model import softmax
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
