"""Prompt tokens and the prefix cache: what each method's prompts cost, per case.

For every group of the report (subset, method, model, ground truth, observability) that
sent prompts: prompt tokens per case, the share a prefix-caching server served from its
cache (the endpoint's ``cached_tokens``), the uncached rest per case, and that rest over
the trace's own tokens (its task and step outputs, ``render.own_text``), both over the
totals of all cases (what a batch costs per token of log) and as the mean of each case's
ratio (which weighs a short log as much as a long one). ``faultfinder report`` prints this
section (the figures are aggregated with the others in ``metrics.aggregate``);
``bench/cost_probe.py`` computes its ratios with :func:`trace_ratio`.

The trace's tokens are counted when the row is written, with the backend's own counter:
the model's tokenizer for the embedded model, about four characters a token for an
OpenAI-compatible endpoint (whose prompt tokens are the server's exact count).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from faultfinder.eval.metrics import RATIO_TARGET, TraceRatio, ratio_to_trace
from faultfinder.eval.report import IDENT_HEADERS, GroupSummary, ident_cells
from faultfinder.eval.rows import EvalRow
from faultfinder.eval.tables import markdown_table, text_table
from faultfinder.registry import METHODS


def trace_ratio(
    rows: Iterable[EvalRow], tokens_of: Callable[[EvalRow], int | None] | None = None
) -> TraceRatio | None:
    """The ratios of ``rows`` (None when no row knows its trace's tokens).
    ``tokens_of`` gives a row's trace tokens (default: ``row.trace_tokens``)."""
    count = tokens_of or (lambda r: r.trace_tokens)
    return ratio_to_trace((r.usage.uncached_prompt_tokens, count(r)) for r in rows)


def costly(summaries: Iterable[GroupSummary]) -> list[GroupSummary]:
    """The report groups that sent prompts (floors and model-free methods left out)."""
    return [g for g in summaries if g.metrics.prompt_tokens_per_case > 0 and not g.floor]


HEADERS = [
    "subset",
    *IDENT_HEADERS,
    "cases",
    "prompt tok/case",
    "cached",
    "uncached tok/case",
    "uncached × trace (all cases)",
    "(mean of cases)",
    f"cases ≤ {RATIO_TARGET:g}×",
]
_LEFT = 1 + len(IDENT_HEADERS)
"""Leading columns that are names (left-aligned)."""


def cells(g: GroupSummary) -> list[str]:
    m = g.metrics
    r = m.trace_ratio
    prompt, cached = m.prompt_tokens_per_case, m.cached_prompt_tokens_per_case
    return [
        g.key.subset,
        *ident_cells(g),
        str(m.cases),
        f"{prompt:,.0f}",
        f"{100 * cached / prompt:.0f}%" if prompt and m.cache_reported else "–",
        f"{prompt - cached:,.0f}",
        f"{r.totals:.2f}" if r else "–",
        f"{r.mean:.2f}" if r else "–",
        f"{r.within}/{r.rows}" if r else "–",
    ]


def without_cache_hints(groups: Iterable[GroupSummary]) -> list[str]:
    """For each method that got no cached token although it ran with options laid out for a
    prefix cache: the ``--set`` options that read fewer prompt tokens without one (the
    method config's ``WITHOUT_PREFIX_CACHE``)."""
    hints: dict[str, str] = {}
    for g in groups:
        name = g.key.method.partition(":")[0]
        cls = METHODS.find(name)  # the methods the report names, no other plugin
        better = getattr(getattr(cls, "Config", None), "WITHOUT_PREFIX_CACHE", {})
        changes = {k: v for k, v in better.items() if g.config.get(k, v) != v}
        if not changes or g.metrics.cached_prompt_tokens_per_case > 0:
            continue
        options = " ".join(f"--set {k}={v}" for k, v in changes.items())
        hints[g.label] = f"{g.label}: `{options}` (docs/methods/{name}.md)"
    return [hints[label] for label in sorted(hints)]


def render(summaries: Iterable[GroupSummary], fmt: str = "text") -> str:
    """The ``report`` section ('' when no group sent a prompt)."""
    groups = costly(summaries)
    if not groups:
        return ""
    title = "Prompt tokens and the prefix cache"
    table = markdown_table if fmt == "markdown" else text_table
    body = table(HEADERS, [cells(g) for g in groups], _LEFT)
    notes = (
        "Per case: prompt tokens; the share the server reported as served from its prefix "
        "cache; the rest (uncached); and that rest over the trace's own tokens (task and "
        "step outputs), over all cases' totals and as the mean of each case's ratio. Trace "
        "tokens are counted with the backend's counter (about 4 characters a token for an "
        "endpoint); '–': rows written before faultfinder counted them (docs/eval.md). "
        "'–' in cached: no call of the line said how many prompt tokens came from a cache "
        "(many endpoints do not), so the share is unknown and the uncached figures count "
        "every prompt token."
    )
    hints = without_cache_hints(groups)
    if hints:
        notes += (
            " No prompt token was reported as served from a prefix cache for these runs, "
            "whose layout is built for one; without a cache these options read fewer prompt "
            "tokens: " + "; ".join(hints) + "."
        )
    heading = f"### {title}\n" if fmt == "markdown" else f"{title}:"
    return f"{heading}\n{body}\n\n{notes}"
