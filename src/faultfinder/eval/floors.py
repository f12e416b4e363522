"""Floors: the scores a method must beat, computed by methods that call no model.

``random`` (uniform agent and step) and the ``baseline`` rules (first speaker, majority
agent, a fixed step position) run through the same harness as every other method, so
their rows are ordinary result rows. A plugin adds a floor as the built-ins are one: a
method class with ``floor = True`` (and ``needs_model = False``). :func:`floor_rows`
computes every floor registered for the traces of a results file when that file has none
(``faultfinder report --floors DATASET``), with step sets at the level the results' rows
record (:func:`step_set_settings`).
"""

from __future__ import annotations

import asyncio
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from faultfinder.errors import FaultfinderError, FaultfinderWarning
from faultfinder.eval.cases import plan_cases, plan_methods, run_case
from faultfinder.eval.rows import EvalRow
from faultfinder.llm.client import LLM
from faultfinder.llm.doubles import NoModelBackend
from faultfinder.registry import METHODS, create_method, methods
from faultfinder.shortlist.sets import DEFAULT_LEVEL
from faultfinder.shortlist.weights import source_parts
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
    class with ``floor = True``). Imports that method alone: a report names a few methods,
    and a plugin it does not name is never loaded."""
    cls = METHODS.find(label.partition(":")[0])
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
    traces: Sequence[Trace],
    skip: Iterable[str] = (),
    random_runs: int = RANDOM_RUNS,
    step_set: float | None = DEFAULT_LEVEL,
    step_set_weights: str | None = None,
) -> list[EvalRow]:
    """Rows of every floor of :func:`floor_labels` (except the labels in ``skip``) on
    ``traces``, with step sets at ``step_set`` (None: none) from the shortlist weights file
    ``step_set_weights`` (None: the shipped one).

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
        runs = random_runs if random else 1
        cases.extend(plan_cases(traces, plans, runs, llm.name, step_set, step_set_weights))

    async def run_all() -> list[EvalRow]:
        return [await run_case(case, llm) for case in cases]

    return asyncio.run(run_all())


def step_set_settings(
    rows: Iterable[EvalRow], weights: str | None = None
) -> tuple[float | None, list[str]]:
    """The level the floors' step sets are computed at for ``rows``, and notes saying
    what the floors' sets could not match.

    The level is the one the rows' step sets have (None when no row has a set: the floors
    get none either); when rows have several, the one most rows have, said in a note. A
    note also says when the rows' sets come from other shortlist weights than ``weights``
    (a file; None: the shipped ones): rows record the file's name, not where it is.
    """
    items = [r for r in rows if r.step_set_level is not None]
    levels = Counter(r.step_set_level for r in items if r.step_set_level is not None)
    if not levels:
        return None, []
    level = max(levels, key=lambda v: (levels[v], v == DEFAULT_LEVEL, v))
    notes: list[str] = []
    if len(levels) > 1:
        shown = ", ".join(f"{100 * v:g}% ({n} rows)" for v, n in sorted(levels.items()))
        most = sum(n == levels[level] for n in levels.values()) == 1
        notes.append(
            f"the results' step sets are at several levels, {shown}; the floors' are at "
            f"{100 * level:g}%, {'the' if most else 'one of the'} level{'' if most else 's'} "
            "most rows have"
        )
    used = Path(weights).name if weights else "shipped"
    names = sorted({source_parts(r.step_set_source)[0] for r in items if r.step_set_source})
    if names and names != [used]:
        named = ", ".join(f"'{n}'" for n in names)
        how = "" if weights else ": pass that file as --shortlist-weights for the same"
        notes.append(
            f"the results' step sets come from the shortlist weights {named}; the floors' "
            f"come from '{used}'{how}"
        )
    return level, notes


def _config(spec: str) -> dict[str, Any]:
    config: dict[str, Any] = create_method(spec).config.model_dump(mode="json")
    return config


def _warn(message: str) -> None:
    warnings.warn(message, FaultfinderWarning, stacklevel=3)
