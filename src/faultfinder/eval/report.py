"""Tables and plots from result rows.

Rows are grouped by (subset, method label, model, with ground truth, observability,
config); each group's accuracies are per-run accuracies averaged across runs (± sample
standard deviation). Unparsed and failed rows count as wrong and are shown.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from faultfinder.eval.floors import is_floor
from faultfinder.eval.metrics import (
    TOLERANCES,
    GroupMetrics,
    MeanStd,
    ScoredRow,
    aggregate,
    score,
)
from faultfinder.eval.plotting import pyplot
from faultfinder.eval.rows import EvalRow
from faultfinder.eval.tables import markdown_table, text_table
from faultfinder.judging.method import NO_STEPS
from faultfinder.shown import clip_name

TableFormat = Literal["text", "markdown", "csv", "json"]
FORMATS: tuple[str, ...] = ("text", "markdown", "csv", "json")


@dataclass(frozen=True)
class GroupKey:
    """What distinguishes one line of the report."""

    subset: str
    method: str
    model: str
    with_ground_truth: bool
    observability: str
    config_id: str


@dataclass
class GroupSummary:
    """One report line: its key, the label to show and its metrics."""

    key: GroupKey
    label: str
    """Method label; suffixed with '#config' when one label ran with several configs."""
    metrics: GroupMetrics
    floor: bool = False
    """A floor (``random``, ``baseline:*``): a score the other methods must beat."""
    config: dict[str, Any] = field(default_factory=dict)
    """The method configuration of the group's first row (its ``config_id`` is the same for
    every row of the group)."""


def scored(row: EvalRow) -> ScoredRow:
    """The figures aggregation needs from one row."""
    return ScoredRow(
        case=row.trace_id,
        run=row.run,
        status=row.status,
        score=score(row.agent, row.step, row.gold) if row.gold is not None else None,
        total_tokens=row.usage.total_tokens,
        calls=row.usage.calls + row.usage.cached_calls,
        wall_time_s=row.wall_time_s,
        prompt_tokens=row.usage.prompt_tokens,
        cached_prompt_tokens=row.usage.cached_prompt_tokens,
        # Rows written before usages said so: a cached token was measured all the same.
        cache_reported=row.usage.cache_reported or row.usage.cached_prompt_tokens > 0,
        trace_tokens=row.trace_tokens,
        budget_stop=row.budget_stop,
        no_steps=row.status == "error" and row.error == NO_STEPS,
    )


def group_key(row: EvalRow) -> GroupKey:
    """The report line ``row`` belongs to."""
    return GroupKey(
        subset=row.subset,
        method=row.method,
        model=row.model,
        with_ground_truth=row.with_ground_truth,
        observability=row.observability,
        config_id=row.config_id,
    )


def group_labels(keys: Iterable[GroupKey]) -> dict[GroupKey, str]:
    """The label each group shows: its method, suffixed with '#config' when that method ran
    with several configs (same subset, model, GT and observability)."""
    unique = set(keys)
    configs: dict[tuple[str, str, str, bool, str], set[str]] = {}
    for key in unique:
        ident = (key.subset, key.method, key.model, key.with_ground_truth, key.observability)
        configs.setdefault(ident, set()).add(key.config_id)
    out: dict[GroupKey, str] = {}
    for key in unique:
        ident = (key.subset, key.method, key.model, key.with_ground_truth, key.observability)
        several = len(configs[ident]) > 1
        out[key] = f"{key.method}#{key.config_id[:6]}" if several else key.method
    return out


IDENT_FIELDS: dict[str, Callable[[GroupKey], str]] = {
    "model": lambda k: k.model,
    "GT": lambda k: "yes" if k.with_ground_truth else "no",
    "observability": lambda k: k.observability,
}
"""The identifying columns of a report line after its method label, by header."""


def varying_idents(keys: Iterable[GroupKey]) -> list[str]:
    """Headers of :data:`IDENT_FIELDS` whose value differs between ``keys``: what a section
    that leaves them out must show so that each of its lines names one main-table line."""
    unique = set(keys)
    return [h for h, get in IDENT_FIELDS.items() if len({get(k) for k in unique}) > 1]


def summarise(rows: Iterable[EvalRow]) -> list[GroupSummary]:
    """Group rows and aggregate each group, sorted by subset then method."""
    groups: dict[GroupKey, list[ScoredRow]] = {}
    first_config: dict[GroupKey, dict[str, Any]] = {}
    for row in rows:
        key = group_key(row)
        groups.setdefault(key, []).append(scored(row))
        first_config.setdefault(key, row.config)
    labels = group_labels(groups)
    out: list[GroupSummary] = []
    for key, items in groups.items():
        out.append(
            GroupSummary(
                key=key,
                label=labels[key],
                metrics=aggregate(items),
                floor=is_floor(key.method),
                config=first_config[key],
            )
        )
    out.sort(
        key=lambda g: (
            g.key.subset,
            g.floor,
            g.label,
            g.key.model,
            g.key.with_ground_truth,
            g.key.observability,
        )
    )
    return out


def ident_cells(g: GroupSummary) -> list[str]:
    """The cells under ``IDENT_HEADERS``: method label, model, GT, observability."""
    return [g.label, g.key.model, "yes" if g.key.with_ground_truth else "no", g.key.observability]


IDENT_HEADERS = ["method", "model", "GT", "observability"]
MAIN_HEADERS = [
    *IDENT_HEADERS,
    "cases",
    "runs",
    "agent %",
    "step %",
    "joint %",
    "tokens/case",
    "calls/case",
    "s/case",
    "unparsed",
    "errors",
]
TOLERANCE_HEADERS = [*IDENT_HEADERS, *(f"step ±{k} %" if k else "step %" for k in TOLERANCES)]


def with_ci(value: MeanStd) -> str:
    """'31.0 ± 2.0 (24.1–39.3)': mean (± std across runs) and the 95% interval, percent."""
    text = value.format()
    if value.ci is not None and value.n:
        low, high = value.ci
        text += f" ({100 * low:.1f}–{100 * high:.1f})"
    return text


def cases_cell(m: GroupMetrics) -> str:
    """The cases the accuracies are over (labelled ones), with the unlabelled ones of the
    group said apart: '2 (+1 unlabelled)'."""
    text = str(m.scored_cases)
    if m.unlabelled_cases:
        text += f" (+{m.unlabelled_cases} unlabelled)"
    return text


def main_cells(g: GroupSummary) -> list[str]:
    m = g.metrics
    return [
        *ident_cells(g),
        cases_cell(m),
        str(m.runs),
        with_ci(m.agent),
        with_ci(m.step),
        with_ci(m.joint),
        f"{m.tokens_per_case:.0f}",
        f"{m.calls_per_case:.1f}",
        f"{m.wall_time_per_case:.2f}",
        str(m.unparsed),
        str(m.errors),
    ]


def tolerance_cells(g: GroupSummary) -> list[str]:
    return [*ident_cells(g), *(with_ci(g.metrics.within[k]) for k in TOLERANCES)]


def _by_subset(summaries: Sequence[GroupSummary]) -> dict[str, list[GroupSummary]]:
    out: dict[str, list[GroupSummary]] = {}
    for g in summaries:
        out.setdefault(g.key.subset, []).append(g)
    return out


def records(summaries: Sequence[GroupSummary]) -> list[dict[str, Any]]:
    """One flat dict per group (fractions in [0, 1]), for CSV and JSON output."""

    def ms(prefix: str, value: MeanStd) -> dict[str, Any]:
        mean = None if value.n == 0 else round(value.mean, 6)
        std = None if value.std is None else round(value.std, 6)
        low, high = value.ci if value.ci is not None else (None, None)
        return {
            f"{prefix}_mean": mean,
            f"{prefix}_std": std,
            f"{prefix}_ci_low": None if low is None else round(low, 6),
            f"{prefix}_ci_high": None if high is None else round(high, 6),
        }

    out: list[dict[str, Any]] = []
    for g in summaries:
        m = g.metrics
        ratio = m.trace_ratio
        record: dict[str, Any] = {
            "subset": g.key.subset,
            "method": g.label,
            "floor": g.floor,
            "model": g.key.model,
            "with_ground_truth": g.key.with_ground_truth,
            "observability": g.key.observability,
            "config_id": g.key.config_id,
            "cases": m.cases,
            "scored_cases": m.scored_cases,
            "unlabelled_cases": m.unlabelled_cases,
            "runs": m.runs,
            "rows": m.rows,
            "scored_rows": m.scored_rows,
            **ms("agent", m.agent),
            **ms("step", m.step),
            **ms("joint", m.joint),
        }
        for k in TOLERANCES[1:]:
            record.update(ms(f"step_within_{k}", m.within[k]))
        record.update(
            {
                "tokens_per_case": round(m.tokens_per_case, 2),
                "prompt_tokens_per_case": round(m.prompt_tokens_per_case, 2),
                "cached_prompt_tokens_per_case": (
                    round(m.cached_prompt_tokens_per_case, 2) if m.cache_reported else None
                ),
                "uncached_x_trace": None if ratio is None else round(ratio.totals, 4),
                "uncached_x_trace_mean_of_cases": None if ratio is None else round(ratio.mean, 4),
                "calls_per_case": round(m.calls_per_case, 3),
                "wall_time_per_case_s": round(m.wall_time_per_case, 4),
                "unparsed": m.unparsed,
                "errors": m.errors,
                "no_error_found": m.no_error_found,
            }
        )
        # What the stderr notes say of this line, for a script reading the records
        # (:func:`caveats`): rows stopped by their own per-case budget (within ``errors``)
        # and the fewest and most labelled cases a run has (below ``scored_cases``: the
        # runs cover different cases; None: no labelled row), and the rows of ``errors``
        # whose trace has no steps (a retry fails them again).
        record.update(
            {
                "case_budget_stops": m.case_budget_stops,
                "min_run_cases": min(m.run_cases.values(), default=None),
                "max_run_cases": max(m.run_cases.values(), default=None),
                "empty_traces": m.empty_traces,
            }
        )
        out.append(record)
    return out


def render(
    summaries: Sequence[GroupSummary], fmt: TableFormat = "text", *, tolerances: bool = True
) -> str:
    """The report as text: per subset a main table and (optionally) a tolerance table."""
    if fmt == "json":
        return json.dumps(records(summaries), indent=2)
    if fmt == "csv":
        buffer = io.StringIO()
        recs = records(summaries)
        if recs:
            writer = csv.DictWriter(buffer, fieldnames=list(recs[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(recs)
        return buffer.getvalue().rstrip("\n")
    table = markdown_table if fmt == "markdown" else text_table
    left = len(IDENT_HEADERS)
    parts: list[str] = []
    for subset, groups in _by_subset(summaries).items():
        title = f"### {clip_name(subset)}" if fmt == "markdown" else f"== {clip_name(subset)} =="
        parts.append(title)
        parts.append(table(MAIN_HEADERS, [main_cells(g) for g in groups], left))
        if tolerances:
            parts.append("")
            # Markdown needs a blank line between a paragraph and a table.
            caption = "Step accuracy within ±k steps:"
            parts.append(caption if fmt == "text" else caption + "\n")
            parts.append(table(TOLERANCE_HEADERS, [tolerance_cells(g) for g in groups], left))
        parts.append("")
    notes = footnotes(summaries)
    if notes:
        parts.extend(notes)
    return "\n".join(parts).rstrip("\n")


READING_NOTE = (
    "Accuracies: per-run accuracy, mean ± sample std across runs, then the 95% Wilson "
    "interval over cases in parentheses; unparsed and failed rows count as wrong. Steps "
    "are scored by integer equality."
)
"""How to read the text and markdown tables' accuracy cells."""


def footnotes(summaries: Sequence[GroupSummary]) -> list[str]:
    """Warnings a reader of the table needs: how to read it, then :func:`caveats`."""
    return [READING_NOTE, *caveats(summaries)]


def caveats(summaries: Sequence[GroupSummary]) -> list[str]:
    """The notes that qualify these results' numbers (floors, failed rows, per-case budget
    stops, runs over different cases, unlabelled rows), one line each, in every format:
    under the tables in text and markdown, on stderr beside csv and json."""
    errors = sum(g.metrics.errors for g in summaries)
    notes: list[str] = []
    floors = sorted({clip_name(g.label) for g in summaries if g.floor})
    if floors:
        notes.append(
            f"Floors (no model; listed last in each subset): {', '.join(floors)}. A method "
            "whose interval overlaps a floor's has not been shown to beat it."
        )
    elif summaries:
        notes.append(
            "No floors in these results: add `--floors DATASET` (computed from the traces, "
            "no model), or run `faultfinder eval --method random,baseline:first-speaker,"
            "baseline:majority-agent,baseline:position`."
        )
    case_stops = sum(g.metrics.case_budget_stops for g in summaries)
    empty = sum(g.metrics.empty_traces for g in summaries)
    if errors > case_stops + empty:
        notes.append(
            f"{errors - case_stops - empty} row(s) failed (status error/budget-exceeded) and "
            "count as wrong: rerun the same `faultfinder eval` command with --resume to retry "
            "them."
        )
    if empty:
        notes.append(
            f"{empty} row(s) are of traces with no steps (status error): there was nothing to "
            "attribute, and --resume fails them again until the trace is imported with its "
            "steps (docs/import.md says what becomes a step)."
        )
    if case_stops:
        notes.append(
            f"{case_stops} row(s) stopped on their own per-case token budget (budget-exceeded, "
            "budget_stop: case) and count as wrong; --resume keeps them, as they would stop "
            "again. To give them more tokens, run `faultfinder eval` again with a larger "
            "--budget-tokens into a new --out: that is a new configuration, so every case of "
            "the method runs again."
        )
    if short := short_runs_note(summaries):
        notes.append(short)
    unlabelled = sum(g.metrics.rows - g.metrics.scored_rows for g in summaries)
    if unlabelled:
        notes.append(
            f"{unlabelled} row(s) have no gold label and are not scored: `cases` counts the "
            "labelled cases the accuracies and intervals are over, the unlabelled ones in "
            "parentheses."
        )
    return notes


def short_runs_note(summaries: Sequence[GroupSummary]) -> str | None:
    """The note for lines whose runs cover different cases (None: every run of every line
    has every case): which runs lack cases, and how many they have."""
    idents = varying_idents(g.key for g in summaries)
    parts: list[str] = []
    for g in summaries:
        short = g.metrics.short_runs
        if not short:
            continue
        extra = ", ".join(f"{h} {clip_name(IDENT_FIELDS[h](g.key))}" for h in idents)
        name = f"{clip_name(g.label)} ({extra})" if extra else clip_name(g.label)
        by_count: dict[int, list[int]] = {}
        for run, n in sorted(short.items()):
            by_count.setdefault(n, []).append(run)
        runs = "; ".join(
            f"{n} of {g.metrics.scored_cases} cases in run{'s' * (len(rs) > 1)} "
            + ", ".join(map(str, rs))
            for n, rs in sorted(by_count.items())
        )
        parts.append(f"{name} on {clip_name(g.key.subset)}: {runs}")
    if not parts:
        return None
    return (
        "Runs cover different cases: each run's accuracy is over the cases it has, so the "
        "mean ± std mixes different cases (the interval is over every case; `cases` counts "
        f"them all). {'. '.join(parts)}. If a run was cut short, its `faultfinder eval` "
        "command rerun with --resume runs the missing cases."
    )


def plot_literal(text: str) -> str:
    """Text matplotlib shows as written: '$' would start mathtext (and fail on '$x'), and
    a leading '_' would hide the legend entry."""
    text = text.replace("$", r"\$")
    return "\u200b" + text if text.startswith("_") else text


def plot_tolerance(summaries: Sequence[GroupSummary], path: str | Path) -> Path:
    """Step accuracy against tolerance (0..5): one panel per subset, one line per method."""
    plt = pyplot()
    by_subset = _by_subset(summaries)
    if not by_subset:
        raise ValueError("no results to plot")
    n = len(by_subset)
    fig, axes = plt.subplots(1, n, figsize=(5.5 * n, 4.2), squeeze=False, sharey=True)
    models = {g.key.model for g in summaries}
    settings = {(g.key.with_ground_truth, g.key.observability) for g in summaries}
    for ax, (subset, groups) in zip(axes[0], by_subset.items(), strict=True):
        for g in groups:
            name = g.label
            if len(models) > 1:
                name += f" [{g.key.model}]"
            if len(settings) > 1:
                name += f" ({'GT, ' if g.key.with_ground_truth else ''}{g.key.observability})"
            xs = list(TOLERANCES)
            ys = [100 * g.metrics.within[k].mean for k in xs]
            errs = [100 * (g.metrics.within[k].std or 0.0) for k in xs]
            ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, label=plot_literal(name))
        ax.set_title(plot_literal(subset))
        ax.set_xlabel("tolerance k (steps)")
        ax.set_xticks(list(TOLERANCES))
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    axes[0][0].set_ylabel("step accuracy within ±k (%)")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
