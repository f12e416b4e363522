"""Reliability of stated confidences: does a 0.7 come true 70% of the time?

For results that carry a ``confidence`` (the probability the method gives its own step),
the pairs (confidence, step correct) are binned into equal-width bins; each bin shows its
cases (and its rows, when repeats make them more), mean confidence and accuracy, and the
expected calibration error (ECE) is the row-weighted mean gap. ``faultfinder report``
prints this, in its own format, for every line of its main table whose rows carry
confidences (models and configs of one method apart) and can draw it as a reliability
diagram.
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
from faultfinder.shown import clip_name

BINS = 10


@dataclass(frozen=True)
class Bin:
    """One confidence bin."""

    low: float
    high: float
    count: int
    """Pairs (result rows) in the bin."""
    confidence: float
    """Mean stated confidence in the bin (nan when empty)."""
    accuracy: float
    """Fraction correct in the bin (nan when empty)."""
    cases: int
    """Distinct cases in the bin: ``count`` less the repeats of a case (a case whose
    repeats fall in two bins counts in each)."""


def reliability(
    pairs: Iterable[tuple[float, bool]], bins: int = BINS, cases: Iterable[str] | None = None
) -> list[Bin]:
    """Equal-width bins over [0, 1] of (confidence, correct) pairs; ``cases``: the case
    of each pair, in order (None: every pair is a case of its own)."""
    members: list[list[tuple[float, bool]]] = [[] for _ in range(bins)]
    ids: list[set[object]] = [set() for _ in range(bins)]
    names = iter(cases) if cases is not None else None
    for i, (conf, ok) in enumerate(pairs):
        b = min(int(conf * bins), bins - 1)
        members[b].append((conf, ok))
        ids[b].add(next(names) if names is not None else i)
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
                cases=len(ids[b]),
            )
        )
    return out


def ece(table: Sequence[Bin]) -> float:
    """Expected calibration error: count-weighted mean |accuracy - confidence|."""
    total = sum(b.count for b in table)
    if not total:
        return float("nan")
    return sum(b.count * abs(b.accuracy - b.confidence) for b in table if b.count) / total


TABLE_HEADERS = ["confidence", "cases", "mean confidence", "step accuracy"]


def repeated(table: Sequence[Bin]) -> bool:
    """Whether a bin holds more rows than cases (repeats of a case): the table then shows
    the rows in a column of their own."""
    return any(b.count != b.cases for b in table)


def _table(table: Sequence[Bin]) -> tuple[list[str], list[list[str]]]:
    """Headers and cells of the non-empty bins ('rows' after 'cases' when repeated)."""
    rows = repeated(table)
    headers = [*TABLE_HEADERS[:2], *(["rows"] if rows else []), *TABLE_HEADERS[2:]]
    body = [
        [
            f"{b.low:.1f}–{b.high:.1f}",
            str(b.cases),
            *([str(b.count)] if rows else []),
            f"{b.confidence:.2f}",
            f"{100 * b.accuracy:.1f}%",
        ]
        for b in table
        if b.count
    ]
    return headers, body


def markdown(table: Sequence[Bin]) -> str:
    """A reliability table (non-empty bins) in Markdown."""
    headers, body = _table(table)
    align = "|---|" + "---:|" * (len(headers) - 1)
    lines = ["| " + " | ".join(headers) + " |", align]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines)


def text(table: Sequence[Bin]) -> str:
    """A reliability table (non-empty bins) as plain text, like the report's other tables."""
    headers, body = _table(table)
    return text_table(headers, body, left=1)


def group_pairs(rows: Iterable[EvalRow]) -> dict[GroupKey, list[tuple[float, bool]]]:
    """Main-table group -> (confidence, step correct) of its scored rows with a confidence
    (models and configs of one method apart, as in the main table)."""
    return {key: [(c, ok) for _, c, ok in items] for key, items in group_cases(rows).items()}


def group_cases(rows: Iterable[EvalRow]) -> dict[GroupKey, list[tuple[str, float, bool]]]:
    """As :func:`group_pairs`, each pair with its case (trace id) first."""
    out: dict[GroupKey, list[tuple[str, float, bool]]] = {}
    for row in rows:
        if row.confidence is None or row.gold is None:
            continue
        ok = step_correct(row.step, row.gold)
        out.setdefault(group_key(row), []).append((row.trace_id, float(row.confidence), ok))
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
        extra = ", ".join(f"{h} {clip_name(IDENT_FIELDS[h](key))}" for h in idents)
        out[key] = f"{clip_name(label)} ({extra})" if extra else clip_name(label)
    return out


def render_rows(rows: Iterable[EvalRow], fmt: str = "text") -> str:
    """The ``report`` section ('' when no row states a confidence): per main-table group
    with confidences, its bins and ECE, as a text or Markdown (``fmt``) table."""
    items = list(rows)
    groups = group_cases(items)
    if not groups:
        return ""
    names = _names(items)
    parts: list[str] = []
    for key in sorted(groups, key=lambda k: (k.subset, names[k])):
        triples = groups[key]
        table = reliability([(c, ok) for _, c, ok in triples], cases=[t for t, _, _ in triples])
        cases = len({t for t, _, _ in triples})
        counts = f"{cases} case{'s' * (cases != 1)}"
        if len(triples) != cases:
            counts += f", {len(triples)} rows"
        caption = (
            f"Reliability of stated confidence: {names[key]} on {clip_name(key.subset)} "
            f"({counts}, ECE {ece(table):.3f})"
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
