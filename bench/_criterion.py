"""The criterion that chose the shipped shortlist: one fact, read by two tables.

The mean of top-1 on each of Who&When's subsets (cross-validated) and of the mean top-1
over the generated training sources, each left out in turn. ``_selection.criterion`` uses it
to choose the configuration, ``_deploy_choice`` to choose how the deploy model is fitted.
"""

from __future__ import annotations

from collections.abc import Sequence

BEFORE = ("position", "agent", "errors", "cause")
"""The groups the criterion chose, shipped until the ``arguments`` group joined them: what
every change in ``_tried`` was tried against."""


def score(cv: Sequence[float], loso: Sequence[float]) -> float:
    """The criterion from the subsets' cross-validated top-1 % and the left-out sources'."""
    return (sum(cv) + sum(loso) / max(len(loso), 1)) / (len(cv) + 1)


def header(first: Sequence[str], names: Sequence[str], generated: Sequence[str]) -> list[str]:
    """A table's heading: the ``first`` columns (left-aligned first, numbers after), then a
    column per subset and per generated source, then the criterion."""
    columns = [*first, *(f"{s} (CV)" for s in names), *generated, "criterion"]
    rule = "|---|" + "---:|" * (len(columns) - 1)
    return ["| " + " | ".join(columns) + " |", rule]
