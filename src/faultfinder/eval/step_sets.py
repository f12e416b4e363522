"""Coverage of step sets: how often a result's step set holds the decisive step.

For every (subset, method, level) whose rows carry a step set and a gold label: the
share of cases whose set holds an acceptable step (a case's repeats are averaged first;
95% Wilson interval over cases), the mean set size, and the mean of set size / trace
length. A set that holds every step
always covers; the relative size says what the coverage cost. ``faultfinder report``
prints this section; ``bench/step_sets.py`` writes it for Who&When.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from faultfinder.eval.metrics import wilson
from faultfinder.eval.rows import EvalRow
from faultfinder.eval.tables import markdown_table, text_table


@dataclass(frozen=True)
class Coverage:
    """Step-set figures of one (subset, method, level)."""

    subset: str
    method: str
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
    model = (source or "?").split(" (", 1)[0]
    return model.rpartition(":")[2].split("-", 1)[0]


def coverage(rows: Iterable[EvalRow]) -> list[Coverage]:
    """Figures per (subset, method, level), sorted."""
    groups: dict[tuple[str, str, float], list[EvalRow]] = {}
    for row in rows:
        if covers(row) is None or row.step_set_level is None:
            continue
        groups.setdefault((row.subset, row.method, row.step_set_level), []).append(row)
    out: list[Coverage] = []
    for (subset, method, level), items in sorted(groups.items()):
        sizes = [len(r.step_set or []) for r in items]
        per_case: dict[str, list[bool]] = {}
        unclaimed: set[str] = set()
        for r in items:
            per_case.setdefault(r.trace_id, []).append(bool(covers(r)))
            if r.step_set_calibrated is False:
                unclaimed.add(r.trace_id)
        claimed = {k: v for k, v in per_case.items() if k not in unclaimed}
        out.append(
            Coverage(
                subset=subset,
                method=method,
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


def cells(c: Coverage) -> list[str]:
    low, high = c.ci
    if c.claimed:
        lo2, hi2 = wilson(c.claimed_covered, c.claimed)
        where = f"{100 * c.claimed_rate:.1f} ({100 * lo2:.1f}–{100 * hi2:.1f})"
    else:
        where = "-"
    return [
        c.subset,
        c.method,
        f"{100 * c.level:g}%",
        str(c.cases),
        f"{100 * c.rate:.1f} ({100 * low:.1f}–{100 * high:.1f})",
        f"{c.mean_size:.1f}",
        f"{100 * c.mean_relative_size:.0f}%",
        f"{c.claimed}/{c.cases}",
        where,
    ]


def markdown(figures: Sequence[Coverage]) -> str:
    return markdown_table(HEADERS, [cells(c) for c in figures], left=2)


def text(figures: Sequence[Coverage]) -> str:
    return text_table(HEADERS, [cells(c) for c in figures], left=2)


def render_rows(rows: Iterable[EvalRow], fmt: str = "text") -> str:
    """The ``report`` section ('' when no row carries a step set and a gold step)."""
    figures = coverage(rows)
    if not figures:
        return ""
    title = "Step sets: how often the set holds the decisive step"
    body = markdown(figures) if fmt == "markdown" else text(figures)
    notes = (
        "Coverage: cases whose set holds an acceptable step (repeats averaged), with the 95% "
        "Wilson interval over cases; size / length: mean of set size over trace length. A "
        "set is the offline shortlist's split-conformal set plus the method's own step "
        "(docs/step-sets.md)."
    )
    if any(c.claimed < c.cases for c in figures):
        notes += (
            " Claimed: cases like the calibration data; the others' sets carry no coverage "
            "claim (step_set_calibrated: false; shift score past the threshold)."
        )
    if any("single" in c.sources or "?" in c.sources for c in figures):
        notes += " Some sets come from a custom weights file: their level is not calibrated."
    heading = f"### {title}\n" if fmt == "markdown" else f"{title}:"
    return f"{heading}\n{body}\n\n{notes}"
