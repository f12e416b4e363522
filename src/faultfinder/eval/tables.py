"""Plain-text and Markdown tables for the report's sections: the first ``left`` columns
are names (left-aligned), the rest figures (right-aligned)."""

from __future__ import annotations

from collections.abc import Sequence


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int) -> str:
    """Columns padded to their widest cell, two spaces apart, a dashed rule under the head."""
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
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
