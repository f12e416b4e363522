"""Floors: the scores a method must beat, computed by methods that call no model.

``random`` (uniform agent and step) and the ``baseline`` rules (first speaker, majority
agent, a fixed step position) run through the same harness as every other method, so
their rows are ordinary result rows. A plugin adds a floor as the built-ins are one: a
method class with ``floor = True`` (and ``needs_model = False``). :func:`floor_rows`
computes every floor registered for the traces of a results file when that file has none
(``faultfinder report --floors DATASET``).
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

from faultfinder.errors import FaultfinderError, FaultfinderWarning
from faultfinder.eval.cases import plan_cases, plan_methods, run_case
from faultfinder.eval.rows import EvalRow
from faultfinder.llm.client import LLM
from faultfinder.llm.doubles import NoModelBackend
from faultfinder.registry import create_method, methods
from faultfinder.traces.schema import Trace

FLOORS: tuple[str, ...] = (
    "random",
    "baseline:first-speaker",
    "baseline:majority-agent",
    "baseline:position",
)
"""The built-in floors, in display order: what :func:`floor_labels` gives when no plugin
adds one."""

RANDOM_RUNS = 10
"""Repeats of a floor that draws at random when the report computes it: one with a ``run``
option, the repeat index the harness sets (``random``). The others run once."""


def is_floor(label: str) -> bool:
    """Whether a method label ('random', 'baseline:position', ...) names a floor (a method
    class with ``floor = True``)."""
    cls = methods().get(label.partition(":")[0])
    return cls is not None and cls.floor


def floor_labels() -> list[str]:
    """The floors `report --floors` computes, in display order: every registered method
    with ``floor = True`` (the built-ins, then the plugins by name), as each of its presets
    (``baseline:position``) and as its plain name unless a preset has the same configuration
    (``baseline`` is ``baseline:first-speaker``). A floor that calls a model is left out
    with a warning: floors are computed without one."""
    labels: list[str] = []
    for name, cls in methods().items():
        if not cls.floor:
            continue
        if cls.needs_model:
            _warn(f"floor '{name}' calls a model, so `report --floors` does not compute it")
            continue
        specs = [name, *(f"{name}:{preset}" for preset in cls.presets)]
        try:
            configs = {spec: _config(spec) for spec in specs}
        except FaultfinderError as exc:
            _warn(f"floor '{name}' is not computed: {exc}")
            continue
        plain = configs.pop(name)
        if plain not in configs.values():
            labels.append(name)
        labels.extend(configs)
    return labels


def floor_rows(
    traces: Sequence[Trace], skip: Iterable[str] = (), random_runs: int = RANDOM_RUNS
) -> list[EvalRow]:
    """Rows of every floor of :func:`floor_labels` (except the labels in ``skip``) on
    ``traces``.

    A floor that draws at random (``random``) runs ``random_runs`` times, the deterministic
    ones once. No model is built: a floor that asked one would fail loudly.
    """
    skipped = set(skip)
    llm = LLM(NoModelBackend())
    cases = []
    for label in floor_labels():
        if label in skipped:
            continue
        plans = plan_methods([label])
        random = any("run" in type(plan.config).model_fields for plan in plans)
        cases.extend(plan_cases(traces, plans, random_runs if random else 1, llm.name))

    async def run_all() -> list[EvalRow]:
        return [await run_case(case, llm) for case in cases]

    return asyncio.run(run_all())


def _config(spec: str) -> dict[str, Any]:
    config: dict[str, Any] = create_method(spec).config.model_dump(mode="json")
    return config


def _warn(message: str) -> None:
    warnings.warn(message, FaultfinderWarning, stacklevel=3)
