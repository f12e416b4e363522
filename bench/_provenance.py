"""Value provenance, a candidate feature group for the shortlist (issue 26), pre-registered.

Written down, with its rule, before any of its rows was read (2026-11-27).

**Mechanism.** Many failures start where an agent writes a value that has no source in the
run, or that contradicts the value an earlier step gave for the same thing: a
specification that copies a ticket but changes an argument, a tool call whose amount
appears nowhere before it. The step that does so is the cause; the steps that reuse the
value later are symptoms. The shipped groups see numbers only as "new" or "reused"
(``cause.new_numbers``), not as unsupported or contradicting, and no column names the
*first* such step. Every column below is computed from the trace alone, reads no agent
name and does not grow with the trace's length.

**Columns** (group ``provenance``, appended to the shipped groups):

* ``conflicts``: log(1 + the values in the step whose key — the word before the value and
  the value's place after it — was given earlier in the run, task included, with other
  values only);
* ``first_conflict``: the first step with a conflict;
* ``unsupported_args``: log(1 + the values in the step's tool-call arguments found
  nowhere earlier, task and the step's own text included);
* ``first_unsupported_arg``: the first step with such an argument;
* ``unsupported_text``: log(1 + the values the step's own text (not its tool results)
  states that appear nowhere earlier).

Values are numbers compared by their numeric value (``45``, ``45.0`` and ``45.00`` are
one); whole numbers under 10 count for conflicts only (list markers and counts are
everywhere).

**Variant B** (written down 2026-11-27 after the row above was read, with the same rule;
bench/README.md shows both): the mechanism is an *agent* writing a contradicting value, but
the columns above also count contradictions inside tool results, where a web page or a
listing gives one key many values. Variant B counts conflicts in the step's own text and
its tool-call arguments only; everything else is as above.

**Rule.** Adopt (ship ``position + agent + errors + cause + provenance``, same λ, source
weights and deploy fit, then rank the warehouse team blind once) only if its criterion
(``_criterion.score`` on the training sources, deploy fit as the inner fit) leads the
shipped configuration's by at least ``MARGIN`` (1.0) point. The spent sources (software
team, support desk) and top-1 agent are printed beside it and decide nothing.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from _criterion import BEFORE, header
from _deploy_choice import MARGIN, WHO_AND_WHEN, criterion_parts, mean_of_folds, row

from faultfinder.eval.datasets import load_dataset, subset_of
from faultfinder.shortlist import features
from faultfinder.shortlist.arguments import keyed_values, values
from faultfinder.shortlist.train import Table, build_table
from faultfinder.shortlist.weights import shipped_weights
from faultfinder.traces.schema import Step, Trace

SPENT = ("generated:swe-team", "generated:support-desk")
"""Sources ranked blind once and never trained on: candidates for training data."""
COLUMNS = (
    "conflicts",
    "first_conflict",
    "unsupported_args",
    "first_unsupported_arg",
    "unsupported_text",
)
_keyed = keyed_values
"""Each value with its key: the package's parser (``shortlist.arguments``), as shipped."""
_values = values


def _own_text(step: Step) -> str:
    return step.content


def _args(step: Step) -> str:
    return "\n".join(c.arguments for c in step.tool_calls or [])


def _results(step: Step) -> str:
    return "\n".join(r.content for r in step.tool_results or [])


def provenance(trace: Trace, own_only: bool = False) -> list[list[float]]:
    """One row of ``COLUMNS`` per step of ``trace`` (``own_only``: variant B, conflicts
    counted in what the agent wrote only, not in its tools' results)."""
    seen: set[float] = _values(trace.task, True)
    given: dict[tuple[str, int], set[float]] = {}
    for key, value in _keyed(trace.task):
        given.setdefault(key, set()).add(value)
    rows: list[list[float]] = []
    any_conflict = any_unsupported = False
    for step in trace.steps:
        text, args, results = _own_text(step), _args(step), _results(step)
        conflicts = 0
        for part in (text, args) if own_only else (text, args, results):
            for key, value in _keyed(part):
                before = given.get(key)
                if before and value not in before:
                    conflicts += 1
        unsupported_args = len(_values(args, False) - seen - _values(text, False))
        unsupported_text = len(_values(text, False) - seen)
        first_conflict = conflicts > 0 and not any_conflict
        first_unsupported = unsupported_args > 0 and not any_unsupported
        any_conflict |= conflicts > 0
        any_unsupported |= unsupported_args > 0
        rows.append(
            [
                math.log1p(conflicts),
                float(first_conflict),
                math.log1p(unsupported_args),
                float(first_unsupported),
                math.log1p(unsupported_text),
            ]
        )
        for part in (text, args, results):
            seen |= _values(part, True)
            for key, value in _keyed(part):
                given.setdefault(key, set()).add(value)
    return rows


def appended(table: Table, columns_of: Callable[[Trace], list[list[float]]]) -> Table:
    """``table`` with a candidate group's columns (``columns_of(trace)``, one row per step)
    appended to every step's row."""
    rows: list[list[float]] = []
    for trace, (start, end) in zip(table.traces, table.spans, strict=True):
        extra = columns_of(trace)
        assert len(extra) == end - start
        rows += [[*table.rows[r], *extra[r - start]] for r in range(start, end)]
    return Table(table.traces, rows, table.targets, table.spans)


def with_provenance(table: Table, own_only: bool = False) -> Table:
    """``table`` with the ``provenance`` columns appended to every step's row."""
    return appended(table, lambda trace: provenance(trace, own_only))


def name_group(group: str, columns: tuple[str, ...]) -> None:
    """The model checks its columns against its groups' names: name a candidate group."""
    if group not in features.GROUPS:
        features.GROUPS = (*features.GROUPS, group)
        features._NAMES[group] = columns


def _name_group() -> None:
    name_group("provenance", COLUMNS)


Candidate = tuple[str, Table, tuple[str, ...]]
"""A row of a candidate table: its label, its feature table and its groups."""


def spent_table(
    traces: list[Trace], trained: Sequence[str], intro: str, rows: Sequence[Candidate], folds: int
) -> list[str]:
    """Candidates under the criterion (training sources, deploy fit as the inner fit), the
    spent sources' top-1 after the criterion, deciding nothing."""
    present = {subset_of(t) for t in traces}
    names = [s for s in WHO_AND_WHEN if s in present]
    generated = [s for s in trained if s not in WHO_AND_WHEN]
    spent = [s for s in SPENT if s in present]
    out = ["", intro, "", *header(["features"], names, generated)[:1]]
    out[-1] = out[-1].removesuffix(" |") + "".join(f" | {s}" for s in spent) + " |"
    out.append("|---|" + "---:|" * (len(names) + len(generated) + 1 + len(spent)))
    for label, table_, used in rows:
        cv, loso = criterion_parts(traces, table_, used, mean_of_folds, generated, spent, folds)
        others = "".join(f" {v:.1f} |" for v in loso[len(generated) :])
        out.append(row(label, cv, loso[: len(generated)]) + others)
    return out


def table(
    traces: list[Trace], trained: Sequence[str], groups: Sequence[str], folds: int = 5
) -> list[str]:
    """The candidate beside the shipped configuration under the criterion (training
    sources), with the spent sources' top-1 after the criterion (deciding nothing)."""
    base = build_table(traces, groups)
    _name_group()
    intro = (
        "Value provenance (`bench/_provenance.py`: five columns on values with no source "
        "earlier in the run, or contradicting an earlier one; the software team and the "
        "support desk, ranked blind before, are shown after the criterion and decide "
        "nothing; trained on the shipped sources). Top-1 %:"
    )
    tried = " + ".join(groups)
    return spent_table(
        traces,
        trained,
        intro,
        [
            (tried + " (shipped then)", base, tuple(groups)),
            (tried + " + provenance", with_provenance(base), (*groups, "provenance")),
            (
                tried + " + provenance, conflicts in the agent's own text only",
                with_provenance(base, own_only=True),
                (*groups, "provenance"),
            ),
        ],
        folds,
    )


def main(paths: Sequence[str]) -> int:
    traces: list[Trace] = []
    for p in paths:
        traces += load_dataset(Path(p))
    present = {subset_of(t) for t in traces}
    trained = [s for s in shipped_weights().trained_sources if s in present]
    print(*table(traces, trained, BEFORE), sep="\n")
    print(f"Rule: adopt only for a criterion lead of at least {MARGIN:.1f} point.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
