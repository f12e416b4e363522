"""Prompt tokens and the prefix cache: what each method's prompts cost, per case.

For every (subset, method, model, observability) whose rows made model calls: prompt
tokens per case, the share a prefix-caching server served from its cache (the endpoint's
``cached_tokens``), the uncached rest per case, and that rest over the trace's own tokens
(its task and step outputs, ``render.own_text``), both over the totals of all cases (what
a batch costs per token of log) and as the mean of each case's ratio (which weighs a short
log as much as a long one). ``faultfinder report`` prints this section;
``bench/cost_probe.py`` computes its ratios with the same functions.

The trace's tokens are counted when the row is written, with the backend's own counter:
the model's tokenizer for the embedded model, about four characters a token for an
OpenAI-compatible endpoint (whose prompt tokens are the server's exact count).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from faultfinder.eval.floors import is_floor
from faultfinder.eval.rows import EvalRow

TARGET = 2.0
"""The ratio ``within`` counts cases up to (issue 16's target for ECHO and CHIEF)."""


@dataclass(frozen=True)
class TraceRatio:
    """Uncached prompt tokens over the trace's own tokens, for rows that know both."""

    rows: int
    totals: float
    """Sum of uncached prompt tokens over the sum of trace tokens."""
    mean: float
    """Mean over rows of each row's ratio."""
    within: int
    """Rows whose ratio is at most :data:`TARGET`."""


def trace_ratio(
    rows: Iterable[EvalRow], tokens_of: Callable[[EvalRow], int | None] | None = None
) -> TraceRatio | None:
    """The ratios of ``rows`` (None when no row knows its trace's tokens).
    ``tokens_of`` gives a row's trace tokens (default: ``row.trace_tokens``)."""
    count = tokens_of or (lambda r: r.trace_tokens)
    pairs = [(r.usage.uncached_prompt_tokens, count(r)) for r in rows]
    known = [(u, t) for u, t in pairs if t]
    if not known:
        return None
    ratios = [u / t for u, t in known]
    return TraceRatio(
        rows=len(known),
        totals=sum(u for u, _ in known) / sum(t for _, t in known),
        mean=sum(ratios) / len(ratios),
        within=sum(r <= TARGET for r in ratios),
    )


@dataclass(frozen=True)
class PromptCost:
    """Prompt figures of one (subset, method, model, observability)."""

    subset: str
    method: str
    model: str
    observability: str
    rows: int
    prompt: float
    """Prompt tokens per row."""
    cached: float
    """Cached prompt tokens per row."""
    ratio: TraceRatio | None

    @property
    def uncached(self) -> float:
        return self.prompt - self.cached

    @property
    def cached_share(self) -> float:
        return self.cached / self.prompt if self.prompt else 0.0


def prompt_costs(rows: Iterable[EvalRow]) -> list[PromptCost]:
    """Figures per group of rows that sent prompts (floors and model-free rows left out)."""
    groups: dict[tuple[str, str, str, str], list[EvalRow]] = {}
    for row in rows:
        if row.usage.prompt_tokens <= 0 or is_floor(row.method):
            continue
        key = (row.subset, row.method, row.model, row.observability)
        groups.setdefault(key, []).append(row)
    out: list[PromptCost] = []
    for (subset, method, model, observability), items in sorted(groups.items()):
        out.append(
            PromptCost(
                subset=subset,
                method=method,
                model=model,
                observability=observability,
                rows=len(items),
                prompt=sum(r.usage.prompt_tokens for r in items) / len(items),
                cached=sum(r.usage.cached_prompt_tokens for r in items) / len(items),
                ratio=trace_ratio(items),
            )
        )
    return out


HEADERS = [
    "subset",
    "method",
    "model",
    "observability",
    "rows",
    "prompt tok/case",
    "cached",
    "uncached tok/case",
    "uncached × trace (all cases)",
    "(mean of cases)",
    f"cases ≤ {TARGET:g}×",
]
_LEFT = 4
"""Leading columns that are names (left-aligned)."""


def cells(c: PromptCost) -> list[str]:
    r = c.ratio
    return [
        c.subset,
        c.method,
        c.model,
        c.observability,
        str(c.rows),
        f"{c.prompt:,.0f}",
        f"{100 * c.cached_share:.0f}%",
        f"{c.uncached:,.0f}",
        f"{r.totals:.2f}" if r else "–",
        f"{r.mean:.2f}" if r else "–",
        f"{r.within}/{r.rows}" if r else "–",
    ]


def markdown(figures: Sequence[PromptCost]) -> str:
    align = "|".join("---" if i < _LEFT else "---:" for i in range(len(HEADERS)))
    lines = ["| " + " | ".join(HEADERS) + " |", f"|{align}|"]
    lines += ["| " + " | ".join(cells(c)) + " |" for c in figures]
    return "\n".join(lines)


def text(figures: Sequence[PromptCost]) -> str:
    rows = [HEADERS, *(cells(c) for c in figures)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADERS))]

    def line(r: list[str]) -> str:
        return "  ".join(
            v.ljust(w) if i < _LEFT else v.rjust(w)
            for i, (v, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()

    return "\n".join([line(HEADERS), line(["-" * w for w in widths]), *(line(r) for r in rows[1:])])


def render_rows(rows: Iterable[EvalRow], fmt: str = "text") -> str:
    """The ``report`` section ('' when no row sent a prompt)."""
    figures = prompt_costs(rows)
    if not figures:
        return ""
    title = "Prompt tokens and the prefix cache"
    body = markdown(figures) if fmt == "markdown" else text(figures)
    notes = (
        "Per case: prompt tokens; the share the server reported as served from its prefix "
        "cache; the rest (uncached); and that rest over the trace's own tokens (task and "
        "step outputs), over all cases' totals and as the mean of each case's ratio. Trace "
        "tokens are counted with the backend's counter (about 4 characters a token for an "
        "endpoint); '–': rows written before faultfinder counted them (docs/eval.md)."
    )
    heading = f"### {title}\n" if fmt == "markdown" else f"{title}:"
    return f"{heading}\n{body}\n\n{notes}"
