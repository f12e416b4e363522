"""Floors: the scores a method must beat, computed by methods that call no model.

``random`` (uniform agent and step) and the ``baseline`` rules (first speaker, majority
agent, a fixed step position) run through the same harness as every other method, so
their rows are ordinary result rows. :func:`floor_rows` computes them for the traces of
a results file when that file has none (``faultfinder report --floors DATASET``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from faultfinder.eval.cases import plan_cases, plan_methods, run_case
from faultfinder.eval.rows import EvalRow
from faultfinder.llm.client import LLM
from faultfinder.llm.doubles import NoModelBackend
from faultfinder.registry import methods
from faultfinder.traces.schema import Trace

FLOORS: tuple[str, ...] = (
    "random",
    "baseline:first-speaker",
    "baseline:majority-agent",
    "baseline:position",
)
"""The floors `report --floors` computes, in display order."""

RANDOM_RUNS = 10
"""Repeats of ``random`` when the report computes it (the baselines are deterministic)."""


def is_floor(label: str) -> bool:
    """Whether a method label ('random', 'baseline:position', ...) names a floor (a method
    class with ``floor = True``)."""
    cls = methods().get(label.partition(":")[0])
    return cls is not None and cls.floor


def floor_rows(
    traces: Sequence[Trace], skip: Iterable[str] = (), random_runs: int = RANDOM_RUNS
) -> list[EvalRow]:
    """Rows of every floor in :data:`FLOORS` (except the labels in ``skip``) on ``traces``.

    ``random`` runs ``random_runs`` times, the deterministic baselines once. No model is
    built: a floor that asked one would fail loudly.
    """
    skipped = set(skip)
    llm = LLM(NoModelBackend())
    cases = []
    for label in FLOORS:
        if label in skipped:
            continue
        plans = plan_methods([label])
        runs = random_runs if label == "random" else 1
        cases.extend(plan_cases(traces, plans, runs, llm.name))

    async def run_all() -> list[EvalRow]:
        return [await run_case(case, llm) for case in cases]

    return asyncio.run(run_all())
