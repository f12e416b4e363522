"""Reliability of stated confidences: does a 0.7 come true 70% of the time?

For results that carry a ``confidence`` (the probability the method gives its own step),
the pairs (confidence, step correct) are binned into equal-width bins; each bin shows its
count, mean confidence and accuracy, and the expected calibration error (ECE) is the
count-weighted mean gap. ``faultfinder report`` prints this for every method whose rows
carry confidences and can draw it as a reliability diagram.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from faultfinder.eval.metrics import step_correct
from faultfinder.eval.plotting import pyplot
from faultfinder.eval.rows import EvalRow

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


def row_pairs(rows: Iterable[EvalRow]) -> dict[tuple[str, str], list[tuple[float, bool]]]:
    """(subset, method) -> (confidence, step correct) of the scored rows with a confidence."""
    out: dict[tuple[str, str], list[tuple[float, bool]]] = {}
    for row in rows:
        if row.confidence is None or row.gold is None:
            continue
        ok = step_correct(row.step, row.gold)
        out.setdefault((row.subset, row.method), []).append((float(row.confidence), ok))
    return out


def render_rows(rows: Iterable[EvalRow]) -> str:
    """Text section for ``report``: per (subset, method) with confidences, bins and ECE."""
    parts: list[str] = []
    for (subset, method), pairs in sorted(row_pairs(rows).items()):
        table = reliability(pairs)
        parts.append(
            f"Reliability of stated confidence: {method} on {subset} "
            f"({len(pairs)} rows, ECE {ece(table):.3f})"
        )
        parts.append(markdown(table))
        parts.append("")
    return "\n".join(parts).rstrip("\n")


def plot_rows(rows: Iterable[EvalRow], path: str | Path) -> Path | None:
    """Reliability diagram (one line per subset × method); None when no row has one."""
    groups = row_pairs(rows)
    if not groups:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", label="perfectly calibrated")
    for (subset, method), pairs in sorted(groups.items()):
        table = [b for b in reliability(pairs) if b.count]
        ax.plot(
            [b.confidence for b in table],
            [b.accuracy for b in table],
            marker="o",
            label=f"{method} ({subset})",
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
