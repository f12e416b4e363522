"""Coverage of step sets: how often a result's step set holds the decisive step.

For every line of the report's main table (subset, method label, model, GT,
observability, config) and level whose rows carry a step set: the share of labelled
cases whose set holds an acceptable step (a case's repeats are averaged first; 95% Wilson
interval over cases), the mean set size, the mean of set size / trace length, and how
many cases' sets claim their level, unlabelled ones included (a claim needs no label,
its coverage does). A set that holds every step
always covers; the relative size says what the coverage cost. ``faultfinder report``
prints this section; ``bench/step_sets.py`` writes it for Who&When.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from faultfinder.eval.metrics import wilson
from faultfinder.eval.report import (
    IDENT_FIELDS,
    GroupKey,
    group_key,
    group_labels,
    varying_idents,
)
from faultfinder.eval.rows import EvalRow
from faultfinder.eval.tables import markdown_table, text_table
from faultfinder.shortlist.weights import source_parts


@dataclass(frozen=True)
class Coverage:
    """Step-set figures of one main-table group (subset, method, model, GT, observability,
    config) at one level."""

    subset: str
    method: str
    """The method's label as the main table shows it ('#config' suffixed when the method
    ran with several configs)."""
    level: float
    cases: int
    covered: float
    """Sum over cases of the share of the case's rows whose set covers."""
    mean_size: float
    mean_relative_size: float
    """Mean over rows of set size / trace length."""
    sources: tuple[str, ...]
    """Model families that ranked the steps ('fold', 'deploy', ...)."""
    claimed: int = 0
    """Cases whose set claims its level (``step_set_calibrated`` not False): the trace is
    like the calibration data. The others' sets are shown without a coverage claim."""
    claimed_covered: float = 0.0
    """``covered`` over the claimed cases only."""
    group: GroupKey | None = None
    """The main-table group of the figures (None: not known)."""
    unlabelled: int = 0
    """Cases with a set but no gold step (``eval --include-unlabelled``): their coverage
    cannot be checked, so ``cases``, ``covered`` and the coverage figures leave them out;
    the sizes and :attr:`all_claimed` count them."""
    unlabelled_claimed: int = 0
    """Unlabelled cases whose set claims its level."""

    @property
    def all_cases(self) -> int:
        """Every case with a set, labelled or not."""
        return self.cases + self.unlabelled

    @property
    def all_claimed(self) -> int:
        """Every case whose set claims its level, labelled or not."""
        return self.claimed + self.unlabelled_claimed

    def ident(self, header: str) -> str:
        """The group's cell under an identifying header of the main table ('model', 'GT',
        'observability')."""
        return "" if self.group is None else IDENT_FIELDS[header](self.group)

    @property
    def claimed_rate(self) -> float:
        return self.claimed_covered / self.claimed if self.claimed else float("nan")

    @property
    def rate(self) -> float:
        return self.covered / self.cases if self.cases else float("nan")

    @property
    def ci(self) -> tuple[float, float]:
        return wilson(self.covered, self.cases)


def covers(row: EvalRow) -> bool | None:
    """Whether the row's step set holds an acceptable step (None: no set or no label)."""
    if row.step_set is None or row.gold is None or row.gold.step is None:
        return None
    return any(s in row.step_set for s in row.gold.acceptable_steps)


def model_family(source: str | None) -> str:
    """'shipped:fold-3' -> 'fold'; 'shipped:deploy' -> 'deploy', whatever note follows in
    parentheses ('shipped:deploy (calibrated on sources never trained on)' -> 'deploy')."""
    return source_parts(source or "?")[1].split("-", 1)[0]


def coverage(rows: Iterable[EvalRow]) -> list[Coverage]:
    """Figures per main-table group and level, sorted by subset, label, model, GT,
    observability and level. Rows of different models or configs of one method are never
    pooled: each line stands for the cases of one line of the main table."""
    items_of: list[EvalRow] = list(rows)
    labels = group_labels(group_key(row) for row in items_of)
    groups: dict[tuple[GroupKey, float], list[EvalRow]] = {}
    for row in items_of:
        if row.step_set is None or row.step_set_level is None:
            continue
        groups.setdefault((group_key(row), row.step_set_level), []).append(row)

    def order(entry: tuple[tuple[GroupKey, float], list[EvalRow]]) -> tuple[object, ...]:
        (key, level), _ = entry
        return (key.subset, labels[key], key.model, key.with_ground_truth, key.observability, level)

    out: list[Coverage] = []
    for (key, level), items in sorted(groups.items(), key=order):
        sizes = [len(r.step_set or []) for r in items]
        per_case: dict[str, list[bool]] = {}
        unlabelled: set[str] = set()
        unclaimed: set[str] = set()
        for r in items:
            covered = covers(r)
            if covered is None:
                unlabelled.add(r.trace_id)
            else:
                per_case.setdefault(r.trace_id, []).append(covered)
            if r.step_set_calibrated is False:
                unclaimed.add(r.trace_id)
        unlabelled -= set(per_case)
        claimed = {k: v for k, v in per_case.items() if k not in unclaimed}
        out.append(
            Coverage(
                subset=key.subset,
                method=labels[key],
                level=level,
                cases=len(per_case),
                covered=sum(sum(v) / len(v) for v in per_case.values()),
                mean_size=sum(sizes) / len(items),
                mean_relative_size=sum(
                    s / r.n_steps if r.n_steps else 1.0 for s, r in zip(sizes, items, strict=True)
                )
                / len(items),
                sources=tuple(sorted({model_family(r.step_set_source) for r in items})),
                claimed=len(claimed),
                claimed_covered=sum(sum(v) / len(v) for v in claimed.values()),
                group=key,
                unlabelled=len(unlabelled),
                unlabelled_claimed=len(unlabelled - unclaimed),
            )
        )
    return out


HEADERS = [
    "subset",
    "method",
    "level",
    "cases",
    "coverage %",
    "mean size",
    "size / length",
    "claimed",
    "coverage where claimed %",
]
"""The section's columns; :func:`headers` adds the identifying ones that vary."""


def headers(idents: Sequence[str] = ()) -> list[str]:
    """:data:`HEADERS` with ``idents`` (model, GT, observability) after the method, as in
    the main table."""
    return [*HEADERS[:2], *idents, *HEADERS[2:]]


def cells(c: Coverage, idents: Sequence[str] = ()) -> list[str]:
    low, high = c.ci
    rate = f"{100 * c.rate:.1f} ({100 * low:.1f}–{100 * high:.1f})" if c.cases else "-"
    if c.claimed:
        lo2, hi2 = wilson(c.claimed_covered, c.claimed)
        where = f"{100 * c.claimed_rate:.1f} ({100 * lo2:.1f}–{100 * hi2:.1f})"
    else:
        where = "-"
    return [
        c.subset,
        c.method,
        *(c.ident(h) for h in idents),
        f"{100 * c.level:g}%",
        f"{c.cases} (+{c.unlabelled} unlabelled)" if c.unlabelled else str(c.cases),
        rate,
        f"{c.mean_size:.1f}",
        f"{100 * c.mean_relative_size:.0f}%",
        f"{c.all_claimed}/{c.all_cases}",
        where,
    ]


def _idents(figures: Sequence[Coverage], idents: Sequence[str] | None) -> Sequence[str]:
    if idents is not None:
        return idents
    return varying_idents(c.group for c in figures if c.group is not None)


def markdown(figures: Sequence[Coverage], idents: Sequence[str] | None = None) -> str:
    """The figures as a Markdown table; ``idents``: the identifying columns to show
    (default: those whose value differs between the figures)."""
    shown = _idents(figures, idents)
    return markdown_table(headers(shown), [cells(c, shown) for c in figures], left=2 + len(shown))


def text(figures: Sequence[Coverage], idents: Sequence[str] | None = None) -> str:
    """The figures as a text table (``idents`` as for :func:`markdown`)."""
    shown = _idents(figures, idents)
    return text_table(headers(shown), [cells(c, shown) for c in figures], left=2 + len(shown))


def notes(figures: Sequence[Coverage], rows: Sequence[EvalRow]) -> list[str]:
    """What the section's figures mean, and which rows they leave out: coverage needs a
    gold label, ``claimed`` does not (issue 26: a withdrawn claim is shown wherever the
    rows are)."""
    out = [
        "Coverage: cases whose set holds an acceptable step (repeats averaged), with the 95% "
        "Wilson interval over cases; size / length: mean of set size over trace length. A "
        "set is the offline shortlist's split-conformal set plus the method's own step "
        "(docs/step-sets.md)."
    ]
    if any(c.all_claimed < c.all_cases for c in figures):
        out.append(
            "Claimed: cases like the calibration data, out of every case with a set; the "
            "others' sets carry no coverage claim (step_set_calibrated: false: the trace's "
            "shift score is past its limit, step_set_shift_limit, or the ranker trained on "
            "the trace, or the step sets were calibrated on it)."
        )
    unlabelled = sum(c.unlabelled for c in figures)
    if unlabelled:
        out.append(
            f"{unlabelled} case(s) with a set have no gold step: coverage needs one, so it is "
            "over the labelled cases only (`cases`, the unlabelled in parentheses; `-` when "
            "none is labelled), while the sizes and `claimed` count every case."
        )
    if any("single" in c.sources or "?" in c.sources for c in figures):
        out.append("Some sets come from a custom weights file: their level is not calibrated.")
    labels = group_labels(group_key(row) for row in rows)
    without: dict[str, list[int]] = {}
    for row in rows:
        counts = without.setdefault(labels[group_key(row)], [0, 0])
        counts[0] += row.step_set is None
        counts[1] += 1
    missing = [f"{label} {n} of {total}" for label, (n, total) in without.items() if n]
    if missing:
        out.append(
            "Rows that carry no step set (eval --step-set off, a trace with no steps, or a "
            "case that failed before its set was made), in no line here: "
            + ", ".join(missing)
            + "."
        )
    return out


def render_rows(rows: Iterable[EvalRow], fmt: str = "text") -> str:
    """The ``report`` section ('' when no row carries a step set). Its lines are the main
    table's groups: the model, GT and observability columns are shown when they differ
    between the rows, as is needed to tell two lines of one method apart. Rows without a
    gold label count in ``claimed`` and the sizes, not in coverage (:func:`notes`).
    """
    items = list(rows)
    figures = coverage(items)
    if not figures:
        return ""
    idents = varying_idents(group_key(row) for row in items)
    title = "Step sets: how often the set holds the decisive step"
    body = markdown(figures, idents) if fmt == "markdown" else text(figures, idents)
    heading = f"### {title}\n" if fmt == "markdown" else f"{title}:"
    return f"{heading}\n{body}\n\n{' '.join(notes(figures, items))}"
