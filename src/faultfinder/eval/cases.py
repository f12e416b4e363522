"""One evaluation case: what it is and how it runs.

A :class:`MethodPlan` is one method configuration; :func:`plan_cases` crosses plans with
traces and repeats into :class:`Case` s, each with its result key; :func:`run_case` runs
one case into its :class:`~faultfinder.eval.rows.EvalRow` (a method that raises gives an
'error' row). This is all an executor needs to run a case, in this process or on a Ray
worker; writing the rows to a results file is :mod:`faultfinder.eval.runner`'s job.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from faultfinder.errors import ConfigError, EndpointSetupError
from faultfinder.eval.datasets import subset_of
from faultfinder.eval.rows import EvalRow, config_id, row_key
from faultfinder.judging.method import Attribution, Method, MethodConfig, Observability, run_method
from faultfinder.judging.reference import ground_truth_status
from faultfinder.judging.render import own_text
from faultfinder.llm.client import LLM
from faultfinder.llm.doubles import NoModelBackend
from faultfinder.llm.scopes import CallRecord, run_index, track_usage
from faultfinder.registry import create_method, with_shortlist_weights
from faultfinder.shortlist.sets import DEFAULT_LEVEL
from faultfinder.traces.schema import Trace
from faultfinder.usage import Usage


@dataclass(frozen=True)
class MethodPlan:
    """One method configuration to evaluate; builds a fresh instance per repeat."""

    label: str
    """Name shown in results and reports (the spec as given, e.g. 'echo:I1')."""
    cls: type[Any]
    """The method class."""
    config: MethodConfig
    """The configuration before the harness sets the repeat index."""

    @property
    def config_id(self) -> str:
        return config_id(self.config.model_dump(mode="json"))

    def run_config(self, run: int) -> MethodConfig:
        """The config of repeat ``run``.

        A config with a ``run`` field gets the repeat index there; otherwise one with a
        ``seed`` field gets ``seed + run`` (unchanged for run 0), so repeats differ.
        """
        data = self.config.model_dump()
        fields = type(self.config).model_fields
        if "run" in fields:
            data["run"] = run
        elif "seed" in fields and run:
            data["seed"] = (data.get("seed") or 0) + run
        return type(self.config)(**data)

    def build(self, run: int) -> Method:
        """The method for repeat ``run``, with :meth:`run_config`."""
        method: Method = self.cls(self.run_config(run))
        return method


def plan_methods(
    specs: Sequence[str],
    overrides: dict[str, Any] | None = None,
    observabilities: Sequence[Observability | None] = (None,),
    shortlist_weights: str | None = None,
) -> list[MethodPlan]:
    """A plan per (method spec, observability); duplicates are dropped. A method that
    ranks with shortlist weights gets ``shortlist_weights`` unless ``overrides`` name
    its own (``registry.with_shortlist_weights``)."""
    plans: dict[tuple[str, str], MethodPlan] = {}
    for spec in specs:
        for observability in observabilities or (None,):
            extra = with_shortlist_weights(spec, dict(overrides or {}), shortlist_weights)
            if observability is not None:
                extra["observability"] = observability
            method = create_method(spec, **extra)
            plan = MethodPlan(label=spec, cls=type(method), config=method.config)
            plans.setdefault((plan.label, plan.config_id), plan)
    if not plans:
        raise ConfigError("No method to evaluate: pass --method NAME[,NAME...].")
    return list(plans.values())


def repeat_warnings(plans: Sequence[MethodPlan], runs: int) -> list[str]:
    """Why some repeats would not be independent runs: at temperature 0 a model decodes
    greedily, so each repeat gives the same answer (repeats then measure only the backend's
    nondeterminism), whatever seed each repeat gets."""
    if runs < 2:
        return []
    # A method that calls no model (a floor, shortlist) decodes nothing greedily.
    greedy = [
        p.label for p in plans if p.config.temperature == 0 and getattr(p.cls, "needs_model", True)
    ]
    if not greedy:
        return []
    return [
        f"--runs {runs} at temperature 0: the repeats of {', '.join(greedy)} are not "
        "independent runs (greedy decoding repeats the same answer). Sample with "
        "--temperature T (each repeat gets its own seed), or run once."
    ]


@dataclass(frozen=True, repr=False)
class Case:
    """One (trace, method plan, repeat) to run."""

    trace: Trace
    plan: MethodPlan
    run: int
    key: str
    step_set: float | None = DEFAULT_LEVEL
    """Coverage level of the row's step set (None: none); not part of the key."""
    step_set_weights: str | None = None
    """Shortlist weights file of the step set (None: the shipped one)."""

    def __repr__(self) -> str:
        return f"Case({self.key!r})"


def model_of(plan: MethodPlan, model: str) -> str:
    """The model name a plan's keys and rows carry: ``model``, or ``none`` (the name of
    :class:`~faultfinder.llm.doubles.NoModelBackend`, which a command builds when every
    method to run calls no model) for a method that calls no model."""
    return model if plan.cls.needs_model else NoModelBackend.name


def no_model() -> LLM:
    """The LLM a method that calls no model runs with: any call fails loudly."""
    return LLM(NoModelBackend())


def plan_cases(
    traces: Sequence[Trace],
    plans: Sequence[MethodPlan],
    runs: int,
    model: str,
    step_set: float | None = DEFAULT_LEVEL,
    step_set_weights: str | None = None,
) -> list[Case]:
    """Every case, repeat-major, so an interrupted run leaves whole repeats behind it.

    ``model`` names the model of the plans that need one; a plan whose method calls no
    model (a floor, ``shortlist``) is keyed with ``none``, as when it runs alone.
    """
    return [
        Case(
            trace,
            plan,
            run,
            row_key(trace.id, plan.label, plan.config_id, model_of(plan, model), run),
            step_set,
            step_set_weights,
        )
        for run in range(runs)
        for trace in traces
        for plan in plans
    ]


async def run_case(case: Case, llm: LLM) -> EvalRow:
    """Run one case; a method's unexpected exception becomes an 'error' row. An
    :class:`~faultfinder.errors.EndpointSetupError` (the endpoint refused the key or the
    model name) is raised instead: every case would fail the same way.

    A method that calls no model runs with :func:`no_model` whatever ``llm`` is, so its
    row says ``model: none`` (as its key does) when it runs beside model methods.
    """
    started = time.perf_counter()
    if not case.plan.cls.needs_model:
        llm = no_model()
    with run_index(case.run), track_usage() as scope:
        try:
            method = case.plan.build(case.run)
            attribution = await run_method(
                method,
                case.trace,
                llm,
                label=case.plan.label,
                step_set=case.step_set,
                step_set_weights=case.step_set_weights,
                stop_on_setup=True,
            )
        except EndpointSetupError:
            raise
        except Exception as exc:
            # A bug in one method must not sink the whole batch: keep it as a visible row.
            return failed_row(
                case,
                llm.name,
                f"{type(exc).__name__}: {exc}",
                usage=scope.usage,
                calls=scope.calls,
                wall_time_s=time.perf_counter() - started,
            )
    return case_row(case, attribution, trace_tokens=_trace_tokens(case.trace, llm))


def _trace_tokens(trace: Trace, llm: LLM) -> int | None:
    """The trace's own tokens by the backend's counter (None if it cannot count)."""
    try:
        return llm.count_tokens(own_text(trace))
    except Exception:  # a counter is a convenience; the row must still be written
        return None


def failed_row(
    case: Case,
    model: str,
    error: str,
    *,
    usage: Usage | None = None,
    calls: list[CallRecord] | None = None,
    wall_time_s: float = 0.0,
) -> EvalRow:
    """The 'error' row of a case that produced no attribution (a bug, a lost worker).

    Its config is the one the case ran with (the repeat index applied, as in an ok row of
    the same repeat), and its model ``none`` for a method that calls none.
    """
    config = case.plan.run_config(case.run)
    attribution = Attribution(
        status="error",
        error=error,
        trace_id=case.trace.id,
        method=case.plan.label,
        config=config.model_dump(mode="json"),
        model=model_of(case.plan, model),
        prompt_version=config.prompt_version(),
        with_ground_truth=config.with_ground_truth,
        ground_truth=ground_truth_status(case.trace, config.with_ground_truth),
        observability=config.observability,
        usage=usage or Usage(),
        calls=calls or [],
        wall_time_s=round(wall_time_s, 4),
    )
    return case_row(case, attribution)


def case_row(case: Case, attribution: Attribution, *, trace_tokens: int | None = None) -> EvalRow:
    """The result row of ``case``: its attribution plus the harness's bookkeeping."""
    trace = case.trace
    return EvalRow(
        **attribution.model_dump(),
        key=case.key,
        config_id=case.plan.config_id,
        run=case.run,
        subset=subset_of(trace),
        gold=trace.label,
        n_steps=len(trace.steps),
        trace_tokens=trace_tokens,
    )
