"""The evaluation page: the report's own tables (faultfinder.eval.report, the step sets of
faultfinder.eval.step_sets and the prompt tokens of faultfinder.eval.prompt_cost), the
tolerance curve as SVG, and a per-case drill-down of what each method said."""

from __future__ import annotations

from dataclasses import dataclass, field

from faultfinder.eval import prompt_cost, step_sets
from faultfinder.eval.floors import is_floor
from faultfinder.eval.metrics import TOLERANCES, score
from faultfinder.eval.report import (
    MAIN_HEADERS,
    TOLERANCE_HEADERS,
    GroupSummary,
    footnotes,
    main_cells,
    summarise,
    tolerance_cells,
)
from faultfinder.eval.rows import EvalRow
from faultfinder.traces.schema import GoldLabel

PLOT_W, PLOT_H, PAD = 420.0, 220.0, 36.0
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2")


@dataclass
class Curve:
    label: str
    colour: str
    points: str
    dots: list[tuple[float, float, int, str]]
    """(x, y, k, accuracy within ±k): the template names the line in each dot's title."""


@dataclass
class SubsetReport:
    subset: str
    main: list[list[str]]
    floors: list[bool]
    tolerance: list[list[str]]
    curves: list[Curve]
    cost: list[list[str]] = field(default_factory=list)
    """The prompt-token table's cells (without the subset); empty when no prompt was sent."""
    sets: list[list[str]] = field(default_factory=list)
    """The step-set table's cells (without the subset): per line and level, cases (the
    unlabelled in parentheses), coverage, sizes and how many claim their level; empty when
    no row carries a set."""


@dataclass
class Cell:
    """What one row said of a case. The agent is a trace's untrusted text: the template
    shows it through the ``name`` filter (clipped, whole once at the page's foot), never
    once per cell."""

    agent: str | None
    step: int | None
    status: str
    agent_ok: bool | None
    step_ok: bool | None
    answer_id: int | None


Column = tuple[str, int]
"""A per-case column: (method, run)."""


@dataclass
class CaseRow:
    trace_id: str
    subset: str
    gold: GoldLabel | None
    trace_key: str | None
    cells: dict[Column, Cell] = field(default_factory=dict)


def _curve(g: GroupSummary, colour: str) -> Curve:
    xs = [PAD + (PLOT_W - 2 * PAD) * k / max(TOLERANCES) for k in TOLERANCES]
    ys = []
    for k in TOLERANCES:
        mean = g.metrics.within[k].mean
        ys.append(PLOT_H - PAD - (PLOT_H - 2 * PAD) * (0.0 if mean != mean else mean))
    dots = [
        (x, y, k, g.metrics.within[k].format()) for x, y, k in zip(xs, ys, TOLERANCES, strict=True)
    ]
    points = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys, strict=True))
    return Curve(g.label, colour, points, dots)


def subset_reports(rows: list[EvalRow]) -> tuple[list[SubsetReport], list[str]]:
    """Per subset: main table cells, which lines are floors, tolerance cells and curves."""
    summaries = summarise(rows)
    grouped: dict[str, list[GroupSummary]] = {}
    for g in summaries:
        grouped.setdefault(g.key.subset, []).append(g)
    figures = step_sets.coverage(rows)
    sets: dict[str, list[list[str]]] = {}
    for c in figures:
        sets.setdefault(c.subset, []).append(step_sets.cells(c, SET_IDENTS)[1:])
    out = [
        SubsetReport(
            subset=subset,
            main=[main_cells(g) for g in groups],
            floors=[is_floor(g.key.method) for g in groups],
            tolerance=[tolerance_cells(g) for g in groups],
            curves=[_curve(g, COLOURS[i % len(COLOURS)]) for i, g in enumerate(groups)],
            cost=[prompt_cost.cells(g)[1:] for g in prompt_cost.costly(groups)],
            sets=sets.get(subset, []),
        )
        for subset, groups in grouped.items()
    ]
    notes = footnotes(summaries)
    if figures:
        notes += ["Step sets. " + " ".join(step_sets.notes(figures, rows))]
    return out, notes


def case_rows(
    rows: list[EvalRow], answer_ids: dict[int, int], trace_keys: dict[str, str]
) -> tuple[list[Column], list[CaseRow]]:
    """One line per case, one column per method (label, run): what it said and if it was right.

    ``answer_ids`` maps id(row) to the row's position in the catalog's attribution list
    (for the link to the trace page); ``trace_keys`` maps trace ids to trace pages.
    """
    columns: dict[Column, None] = {}
    cases: dict[str, CaseRow] = {}
    for row in sorted(rows, key=lambda r: (r.subset, r.trace_id, r.method, r.run)):
        column = (row.method, row.run)
        columns.setdefault(column, None)
        gold = row.gold
        case = cases.get(row.trace_id)
        if case is None:
            case = cases[row.trace_id] = CaseRow(
                row.trace_id, row.subset, gold, trace_keys.get(row.trace_id)
            )
        s = score(row.agent, row.step, gold) if gold is not None else None
        case.cells[column] = Cell(
            row.agent,
            row.step,
            row.status,
            None if s is None else s.agent,
            None if s is None else s.step,
            answer_ids.get(id(row)),
        )
    return list(columns), list(cases.values())


SET_IDENTS = ("model", "GT", "observability")
"""The step-set table shows every identifying column, as the main table does."""

HEADERS = {
    "main": MAIN_HEADERS,
    "tolerance": TOLERANCE_HEADERS,
    "cost": prompt_cost.HEADERS[1:],
    "sets": step_sets.headers(SET_IDENTS)[1:],
}
PLOT = {"w": PLOT_W, "h": PLOT_H, "pad": PAD, "ticks": list(TOLERANCES)}
