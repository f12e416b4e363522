"""Plain-text and Markdown tables for the report's sections: the first ``left`` columns
are names (left-aligned, clipped as every name shown is: `faultfinder.shown.clip_name`),
the rest figures (right-aligned)."""

from __future__ import annotations

from collections.abc import Sequence

from faultfinder.shown import clip_name


def _clipped(rows: Sequence[Sequence[str]], left: int) -> list[list[str]]:
    """``rows`` with their name cells clipped: a results file's 100,000-character method
    label would otherwise widen every line of the table to its length."""
    return [[clip_name(c) if i < left else c for i, c in enumerate(r)] for r in rows]


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int) -> str:
    """Columns padded to their widest cell, two spaces apart, a dashed rule under the head."""
    rows = _clipped(rows, left)
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int) -> str:
    """A GitHub-flavoured Markdown table, figures aligned right."""
    align = "|".join("---" if i < left else "---:" for i in range(len(headers)))
    lines = ["| " + " | ".join(headers) + " |", f"|{align}|"]
    lines += ["| " + " | ".join(r) + " |" for r in _clipped(rows, left)]
    return "\n".join(lines)
