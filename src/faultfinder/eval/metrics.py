"""Scoring attributions against gold labels, and aggregating scores over runs.

Per row:

- **agent accuracy**: the predicted agent equals the gold agent after
  :func:`normalise_agent` (case, spaces and punctuation ignored; a trailing
  parenthetical such as ' (thought)' dropped).
- **step accuracy**: the predicted step is *integer-equal* to one of
  ``GoldLabel.acceptable_steps``. The official Who&When scripts instead test whether the
  gold step is a *substring* of the predicted text, so gold 1 counts a prediction of 12
  (or 10, 21, ...) as right. That is a bug; we never reproduce it.
- **step within ±k**: ``|predicted - s| <= k`` for some acceptable step ``s``.
- **joint**: agent and exact step both right.

A field the method did not produce (None) is wrong: rows with status 'unparsed',
'error', 'budget-exceeded' or 'no-error-found' stay in the denominator and are counted
and reported, never dropped, so a method cannot gain accuracy by failing to answer. (An
'unparsed' row may still carry the part that was read, e.g. the agent when only the step
was out of range; that part is scored.)

Aggregates: accuracy is computed per run (over that run's cases), then the mean and the
sample standard deviation are taken across runs. Each accuracy also gets a 95% Wilson
score interval over the *cases* (see :func:`wilson`): with one run it is the exact Wilson
interval of a binomial proportion; with several runs each case contributes its mean
correctness over the runs, and since a value in [0, 1] with mean p has variance at most
p(1 - p), the interval is then conservative (never too narrow).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from faultfinder.traces.schema import GoldLabel

TOLERANCES: tuple[int, ...] = (0, 1, 2, 3, 4, 5)
"""Step tolerances reported (0 = exact)."""


def normalise_agent(name: str) -> str:
    """Canonical form for comparing agent names: 'Orchestrator (thought)' -> 'orchestrator'."""
    # Tried only where a run of blanks starts (the leftmost match starts there anyway), not
    # from each blank of a long run.
    base = re.sub(r"(?<!\s)\s*+\([^()]*\)\s*$", "", name.strip())
    return re.sub(r"[^0-9a-z]+", "", base.casefold())


def agent_correct(predicted: str | None, gold: GoldLabel) -> bool:
    """True when ``predicted`` names the gold agent."""
    if predicted is None or gold.agent is None:
        return False
    return normalise_agent(predicted) == normalise_agent(gold.agent) != ""


def step_correct(predicted: int | None, gold: GoldLabel, tolerance: int = 0) -> bool:
    """True when ``predicted`` is within ``tolerance`` of an acceptable step (integers only)."""
    if predicted is None or isinstance(predicted, bool) or not isinstance(predicted, int):
        return False
    return any(abs(predicted - s) <= tolerance for s in gold.acceptable_steps)


def joint_correct(predicted_agent: str | None, predicted_step: int | None, gold: GoldLabel) -> bool:
    """Agent and exact step both right."""
    return agent_correct(predicted_agent, gold) and step_correct(predicted_step, gold)


@dataclass(frozen=True)
class RowScore:
    """Correctness of one attribution."""

    agent: bool
    """Agent right."""
    step: bool
    """Step exactly right."""
    within: tuple[bool, ...]
    """Step within ±k for each k in TOLERANCES."""
    joint: bool
    """Agent and exact step right."""


def score(agent: str | None, step: int | None, gold: GoldLabel) -> RowScore:
    """Every per-row metric for one prediction."""
    return RowScore(
        agent=agent_correct(agent, gold),
        step=step_correct(step, gold),
        within=tuple(step_correct(step, gold, k) for k in TOLERANCES),
        joint=joint_correct(agent, step, gold),
    )


@dataclass(frozen=True)
class MeanStd:
    """Mean and sample standard deviation across runs (std is None with one run)."""

    mean: float
    std: float | None
    n: int
    ci: tuple[float, float] | None = None
    """95% Wilson interval over the cases (fractions), when computed."""

    def format(self, percent: bool = True, digits: int = 1) -> str:
        scale = 100.0 if percent else 1.0
        if math.isnan(self.mean):
            return "-"
        text = f"{self.mean * scale:.{digits}f}"
        if self.std is not None:
            text += f" ± {self.std * scale:.{digits}f}"
        return text


def wilson(successes: float, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval (default 95%) for ``successes`` out of ``n`` trials.

    ``successes`` may be fractional (a sum of per-case mean correctness over runs).
    Unlike the normal approximation it stays inside [0, 1] and is not degenerate at 0 or
    n successes, which matters on subsets of 58 cases.
    """
    if n <= 0:
        return (float("nan"), float("nan"))
    p = min(max(successes / n, 0.0), 1.0)
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return (max(0.0, centre - half), min(1.0, centre + half))


def mean_std(values: Sequence[float]) -> MeanStd:
    """Mean and sample std (n-1) of per-run values."""
    if not values:
        return MeanStd(float("nan"), None, 0)
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else None
    return MeanStd(mean, std, len(values))


@dataclass
class ScoredRow:
    """What aggregation needs of one result row."""

    case: str
    """Trace id."""
    run: int
    """Repeat index."""
    status: str
    """Verdict status."""
    score: RowScore | None
    """Correctness; None when the trace has no gold label (then it is not scored)."""
    total_tokens: int = 0
    """Prompt + completion tokens."""
    calls: int = 0
    """Model calls, cache hits included."""
    wall_time_s: float = 0.0
    """Wall time of the case."""
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    """Prompt tokens the endpoint served from its prefix cache."""
    cache_reported: bool = False
    """Whether some call of the row said how many prompt tokens came from the cache."""
    trace_tokens: int | None = None
    """Tokens of the trace's own text (None: not recorded)."""
    budget_stop: str | None = None
    """With status 'budget-exceeded', the budget that stopped the case ('case': its own
    ``budget_tokens``; 'run': the run's)."""
    no_steps: bool = False
    """An 'error' row of a trace with no steps: nothing to attribute, and a retry would
    fail the same way."""


RATIO_TARGET = 2.0
"""The ratio :class:`TraceRatio` counts cases up to (issue 16's target for ECHO and CHIEF)."""


@dataclass(frozen=True)
class TraceRatio:
    """Uncached prompt tokens over the trace's own tokens, for rows that know both."""

    rows: int
    totals: float
    """Sum of uncached prompt tokens over the sum of trace tokens."""
    mean: float
    """Mean over rows of each row's ratio."""
    within: int
    """Rows whose ratio is at most :data:`RATIO_TARGET`."""


def ratio_to_trace(pairs: Iterable[tuple[int, int | None]]) -> TraceRatio | None:
    """The ratios of (uncached prompt tokens, trace tokens) pairs; pairs without trace
    tokens are left out, and None is returned when none has them."""
    known = [(u, t) for u, t in pairs if t]
    if not known:
        return None
    ratios = [u / t for u, t in known]
    return TraceRatio(
        rows=len(known),
        totals=sum(u for u, _ in known) / sum(t for _, t in known),
        mean=sum(ratios) / len(ratios),
        within=sum(r <= RATIO_TARGET for r in ratios),
    )


@dataclass
class GroupMetrics:
    """Aggregated metrics of one (subset, method, model, GT, observability) group."""

    cases: int
    """Distinct traces, unlabelled ones included (cost figures are over all of them)."""
    runs: int
    """Distinct repeat indices."""
    rows: int
    """Result rows."""
    scored_rows: int
    """Rows with a gold label."""
    agent: MeanStd
    step: MeanStd
    joint: MeanStd
    within: dict[int, MeanStd]
    """Step accuracy within ±k, per k in TOLERANCES (k=0 equals ``step``)."""
    tokens_per_case: float
    calls_per_case: float
    wall_time_per_case: float
    unparsed: int
    """Rows whose answer could not be read (counted wrong)."""
    errors: int
    """Rows with status 'error' or 'budget-exceeded' (counted wrong)."""
    no_error_found: int
    """Rows where the method found no error (counted wrong)."""
    status_counts: dict[str, int] = field(default_factory=dict)
    prompt_tokens_per_case: float = 0.0
    cached_prompt_tokens_per_case: float = 0.0
    """Prompt tokens per row the endpoint served from its prefix cache (0 also when no
    call said: :attr:`cache_reported`)."""
    cache_reported: bool = False
    """Whether some call of the group said how many prompt tokens its cache served; if
    none did, :attr:`cached_prompt_tokens_per_case` was never measured."""
    trace_ratio: TraceRatio | None = None
    """Uncached prompt tokens over the trace's own tokens (None: not recorded)."""
    scored_cases: int = 0
    """Distinct traces with a gold label: the cases the accuracies and their intervals are
    over (``cases`` minus :attr:`unlabelled_cases`)."""
    case_budget_stops: int = 0
    """Rows of ``errors`` stopped by their own per-case budget (``budget_stop: case``):
    ``--resume`` keeps them, as they would stop again."""
    empty_traces: int = 0
    """Rows of ``errors`` whose trace has no steps: ``--resume`` fails them again until
    the trace is imported with its steps."""
    run_cases: dict[int, int] = field(default_factory=dict)
    """Labelled cases each run has a row for. Runs with fewer than :attr:`scored_cases`
    (an unfinished repeat, files of different cases merged) have their accuracy over
    other cases than the rest: the report says so in a note."""

    @property
    def short_runs(self) -> dict[int, int]:
        """Runs that lack some of the group's labelled cases: run -> cases it has."""
        return {r: n for r, n in self.run_cases.items() if n < self.scored_cases}

    @property
    def unlabelled_cases(self) -> int:
        """Distinct traces without a gold label (run, not scored)."""
        return self.cases - self.scored_cases


def aggregate(rows: Iterable[ScoredRow]) -> GroupMetrics:
    """Per-run accuracies, then mean ± std across runs; cost figures are means per row."""
    items = list(rows)
    by_run: dict[int, list[RowScore]] = {}
    for row in items:
        if row.score is not None:
            by_run.setdefault(row.run, []).append(row.score)
    runs = sorted(by_run)
    run_cases: dict[int, set[str]] = {}
    for row in items:
        if row.score is not None:
            run_cases.setdefault(row.run, set()).add(row.case)
    by_case: dict[str, list[RowScore]] = {}
    for row in items:
        if row.score is not None:
            by_case.setdefault(row.case, []).append(row.score)

    def hit(s: RowScore, pick: str, k: int | None) -> bool:
        return bool(getattr(s, pick)) if k is None else s.within[TOLERANCES.index(k)]

    def across_runs(pick: str, k: int | None = None) -> MeanStd:
        per_run = [sum(hit(s, pick, k) for s in by_run[r]) / len(by_run[r]) for r in runs]
        per_case = [sum(hit(s, pick, k) for s in ss) / len(ss) for ss in by_case.values()]
        value = mean_std(per_run)
        if not per_case:
            return value
        return replace(value, ci=wilson(sum(per_case), len(per_case)))

    statuses: dict[str, int] = {}
    for row in items:
        statuses[row.status] = statuses.get(row.status, 0) + 1
    n = len(items)
    return GroupMetrics(
        cases=len({row.case for row in items}),
        runs=len({row.run for row in items}),
        rows=n,
        scored_rows=sum(row.score is not None for row in items),
        agent=across_runs("agent"),
        step=across_runs("step"),
        joint=across_runs("joint"),
        within={k: across_runs("within", k) for k in TOLERANCES},
        tokens_per_case=sum(r.total_tokens for r in items) / n if n else 0.0,
        calls_per_case=sum(r.calls for r in items) / n if n else 0.0,
        wall_time_per_case=sum(r.wall_time_s for r in items) / n if n else 0.0,
        unparsed=statuses.get("unparsed", 0),
        errors=statuses.get("error", 0) + statuses.get("budget-exceeded", 0),
        no_error_found=statuses.get("no-error-found", 0),
        status_counts=dict(sorted(statuses.items())),
        prompt_tokens_per_case=sum(r.prompt_tokens for r in items) / n if n else 0.0,
        cached_prompt_tokens_per_case=sum(r.cached_prompt_tokens for r in items) / n if n else 0.0,
        cache_reported=any(r.cache_reported for r in items),
        trace_ratio=ratio_to_trace(
            (r.prompt_tokens - r.cached_prompt_tokens, r.trace_tokens) for r in items
        ),
        scored_cases=len(by_case),
        case_budget_stops=sum(
            r.status == "budget-exceeded" and r.budget_stop == "case" for r in items
        ),
        run_cases={r: len(run_cases[r]) for r in runs},
        empty_traces=sum(r.no_steps for r in items),
    )
