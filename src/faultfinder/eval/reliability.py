"""Reliability of stated confidences: does a 0.7 come true 70% of the time?

For results that carry a ``confidence`` (the probability the method gives its own step),
the pairs (confidence, step correct) are binned into equal-width bins; each bin shows its
count, mean confidence and accuracy, and the expected calibration error (ECE) is the
count-weighted mean gap. ``faultfinder report`` prints this, in its own format, for every
line of its main table whose rows carry confidences (models and configs of one method
apart) and can draw it as a reliability diagram.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from faultfinder.eval.metrics import step_correct
from faultfinder.eval.plotting import pyplot
from faultfinder.eval.report import (
    IDENT_FIELDS,
    GroupKey,
    group_key,
    group_labels,
    plot_literal,
    varying_idents,
)
from faultfinder.eval.rows import EvalRow
from faultfinder.eval.tables import text_table

BINS = 10


@dataclass(frozen=True)
class Bin:
    """One confidence bin."""

    low: float
    high: float
    count: int
    confidence: float
    """Mean stated confidence in the bin (nan when empty)."""
    accuracy: float
    """Fraction correct in the bin (nan when empty)."""


def reliability(pairs: Iterable[tuple[float, bool]], bins: int = BINS) -> list[Bin]:
    """Equal-width bins over [0, 1] of (confidence, correct) pairs."""
    members: list[list[tuple[float, bool]]] = [[] for _ in range(bins)]
    for conf, ok in pairs:
        members[min(int(conf * bins), bins - 1)].append((conf, ok))
    out: list[Bin] = []
    for b, items in enumerate(members):
        n = len(items)
        out.append(
            Bin(
                low=b / bins,
                high=(b + 1) / bins,
                count=n,
                confidence=sum(c for c, _ in items) / n if n else float("nan"),
                accuracy=sum(ok for _, ok in items) / n if n else float("nan"),
            )
        )
    return out


def ece(table: Sequence[Bin]) -> float:
    """Expected calibration error: count-weighted mean |accuracy - confidence|."""
    total = sum(b.count for b in table)
    if not total:
        return float("nan")
    return sum(b.count * abs(b.accuracy - b.confidence) for b in table if b.count) / total


def markdown(table: Sequence[Bin]) -> str:
    """A reliability table (non-empty bins) in Markdown."""
    lines = ["| confidence | cases | mean confidence | step accuracy |", "|---|---:|---:|---:|"]
    for b in table:
        if b.count:
            lines.append(
                f"| {b.low:.1f}–{b.high:.1f} | {b.count} | {b.confidence:.2f} | "
                f"{100 * b.accuracy:.1f}% |"
            )
    return "\n".join(lines)


TABLE_HEADERS = ["confidence", "cases", "mean confidence", "step accuracy"]


def text(table: Sequence[Bin]) -> str:
    """A reliability table (non-empty bins) as plain text, like the report's other tables."""
    body = [
        [
            f"{b.low:.1f}–{b.high:.1f}",
            str(b.count),
            f"{b.confidence:.2f}",
            f"{100 * b.accuracy:.1f}%",
        ]
        for b in table
        if b.count
    ]
    return text_table(TABLE_HEADERS, body, left=1)


def group_pairs(rows: Iterable[EvalRow]) -> dict[GroupKey, list[tuple[float, bool]]]:
    """Main-table group -> (confidence, step correct) of its scored rows with a confidence
    (models and configs of one method apart, as in the main table)."""
    out: dict[GroupKey, list[tuple[float, bool]]] = {}
    for row in rows:
        if row.confidence is None or row.gold is None:
            continue
        ok = step_correct(row.step, row.gold)
        out.setdefault(group_key(row), []).append((float(row.confidence), ok))
    return out


def row_pairs(rows: Iterable[EvalRow]) -> dict[tuple[str, str], list[tuple[float, bool]]]:
    """(subset, method) -> (confidence, step correct) of the scored rows with a confidence
    (every model and config of a method pooled; the report uses :func:`group_pairs`)."""
    out: dict[tuple[str, str], list[tuple[float, bool]]] = {}
    for key, pairs in group_pairs(rows).items():
        out.setdefault((key.subset, key.method), []).extend(pairs)
    return out


def _names(rows: Sequence[EvalRow]) -> dict[GroupKey, str]:
    """Each group's name: its main-table label, with the identifying columns that differ
    between the rows ('all-at-once (model function:a)')."""
    keys = [group_key(row) for row in rows]
    labels = group_labels(keys)
    idents = varying_idents(keys)
    out: dict[GroupKey, str] = {}
    for key, label in labels.items():
        extra = ", ".join(f"{h} {IDENT_FIELDS[h](key)}" for h in idents)
        out[key] = f"{label} ({extra})" if extra else label
    return out


def render_rows(rows: Iterable[EvalRow], fmt: str = "text") -> str:
    """The ``report`` section ('' when no row states a confidence): per main-table group
    with confidences, its bins and ECE, as a text or Markdown (``fmt``) table."""
    items = list(rows)
    groups = group_pairs(items)
    if not groups:
        return ""
    names = _names(items)
    parts: list[str] = []
    for key in sorted(groups, key=lambda k: (k.subset, names[k])):
        pairs = groups[key]
        table = reliability(pairs)
        caption = (
            f"Reliability of stated confidence: {names[key]} on {key.subset} "
            f"({len(pairs)} rows, ECE {ece(table):.3f})"
        )
        if fmt == "markdown":
            # Markdown needs a blank line between a paragraph and a table.
            parts += [caption, "", markdown(table)]
        else:
            parts += [caption + ":", text(table)]
        parts.append("")
    return "\n".join(parts).rstrip("\n")


def plot_rows(rows: Iterable[EvalRow], path: str | Path) -> Path | None:
    """Reliability diagram (one line per main-table group); None when no row has one."""
    items = list(rows)
    groups = group_pairs(items)
    if not groups:
        return None
    names = _names(items)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", label="perfectly calibrated")
    for key in sorted(groups, key=lambda k: (k.subset, names[k])):
        table = [b for b in reliability(groups[key]) if b.count]
        ax.plot(
            [b.confidence for b in table],
            [b.accuracy for b in table],
            marker="o",
            label=plot_literal(f"{names[key]} ({key.subset})"),
        )
    ax.set_xlabel("stated confidence")
    ax.set_ylabel("step accuracy")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
