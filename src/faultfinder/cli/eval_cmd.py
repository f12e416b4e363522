"""`faultfinder eval`: run methods over a dataset, one result row per case, resumable;
what it may write its rows into. `faultfinder report` reads the rows (``report_cmd.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import click

from faultfinder.cli.common import (
    budget_tokens_option,
    build_llm,
    executor_options,
    exit_for,
    llm_spec,
    method_overrides,
    model_options,
    pass_errors,
    pop_sampling,
    read_weights,
    sampling_options,
    shortlist_weights_option,
    step_set_option,
    strict_option,
)
from faultfinder.cli.handling import InputPath
from faultfinder.cli.kinds import (
    LOCK,
    LOCK_SUFFIX,
    described,
    explained,
    importable_or,
    kind_of,
    state,
)
from faultfinder.cli.terminal import safe, shown_name
from faultfinder.errors import ConfigError
from faultfinder.eval.cases import plan_methods, repeat_warnings
from faultfinder.eval.datasets import DatasetOptions, load_dataset, subsets
from faultfinder.eval.report import render, summarise
from faultfinder.eval.runner import EvalOptions, run_eval
from faultfinder.exitcodes import CaseCounts
from faultfinder.judging.method import Observability

OBSERVABILITIES: tuple[str, ...] = get_args(Observability)


def split_list(values: tuple[str, ...] | str | None) -> list[str]:
    """'a,b' and repeated options alike → ['a', 'b'] (order kept, duplicates dropped)."""
    if values is None:
        return []
    items = [values] if isinstance(values, str) else list(values)
    out: dict[str, None] = {}
    for item in items:
        for part in item.split(","):
            if part.strip():
                out.setdefault(part.strip(), None)
    return list(out)


def parse_observabilities(value: str | None) -> list[Any]:
    if not value:
        return [None]
    chosen = split_list(value)
    bad = [v for v in chosen if v not in OBSERVABILITIES]
    if bad:
        raise click.BadParameter(
            f"{', '.join(bad)}: choose from {', '.join(OBSERVABILITIES)} (comma-separated to "
            "sweep)",
            param_hint="--observability",
        )
    return chosen


@click.command("eval")
@click.argument("dataset", type=InputPath())
@click.option(
    "--method",
    "method_specs",
    default="all-at-once",
    show_default=True,
    help="Methods to evaluate, comma-separated; each a name or name:preset.",
)
@click.option(
    "--runs",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Repeats per trace and method (distinct cache entries and seeds).",
)
@click.option(
    "-o",
    "--out",
    required=True,
    type=click.Path(dir_okay=False),
    help="Results file (JSONL, one row per case, appended as cases finish).",
)
@click.option("--resume", is_flag=True, help="Continue --out: run only cases without a row there.")
@click.option("--force", is_flag=True, help="Overwrite a non-empty --out.")
@click.option(
    "--retry-errors/--no-retry-errors",
    default=True,
    show_default=True,
    help="With --resume, rerun cases whose row is an error or a stop on the run's budget "
    "(a case over its own --budget-tokens is kept: it would stop again).",
)
@click.option(
    "--subset",
    "subset_names",
    multiple=True,
    help="Only these subsets (comma-separated or repeated), e.g. Hand-Crafted.",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help="Only the first N traces of each subset.",
)
@click.option(
    "--include-unlabelled",
    is_flag=True,
    help="Also run traces without a gold label (reported, not scored).",
)
@click.option("--format", "trace_format", default=None, help="Input format (default: detect).")
@click.option(
    "--parallel-cases",
    type=click.IntRange(min=1),
    default=None,
    help="Cases in progress at once (default: the --concurrency value).",
)
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@executor_options
@click.option(
    "--ray-workers",
    type=click.IntRange(min=1),
    default=None,
    help="With --executor ray: worker actors (default: the cluster's CPUs, at most "
    "--parallel-cases).",
)
@click.option("--with-ground-truth", is_flag=True, help="Show the reference answer.")
@click.option(
    "--observability",
    "observability",
    default=None,
    help="What of the trace methods may see: "
    f"{', '.join(OBSERVABILITIES)}; comma-separated values sweep "
    "(default: outputs, for every method).",
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Method option for every method (JSON values allowed).",
)
@step_set_option
@shortlist_weights_option
@sampling_options
@budget_tokens_option
@strict_option
@model_options
@pass_errors
def eval_command(
    dataset: str,
    method_specs: str,
    runs: int,
    out: str,
    resume: bool,
    force: bool,
    retry_errors: bool,
    subset_names: tuple[str, ...],
    limit: int | None,
    include_unlabelled: bool,
    trace_format: str | None,
    parallel_cases: int | None,
    no_progress: bool,
    executor: str,
    ray_address: str | None,
    ray_workers: int | None,
    with_ground_truth: bool,
    observability: str | None,
    settings: tuple[str, ...],
    step_set: float | None,
    shortlist_weights: str | None,
    strict: bool,
    **llm_options: Any,
) -> None:
    """Run methods over a dataset, write one result row per case, print a summary.

    \b
    Example:
      faultfinder eval ../shared/data/who-and-when --method all-at-once,binary-search \\
          --model local --runs 3 --out results.jsonl
    """
    if message := not_an_out(out):
        raise ConfigError(message)
    read_weights(shortlist_weights)  # now, not in each case after its model calls were paid
    overrides = method_overrides(with_ground_truth, None, settings)
    overrides.update(pop_sampling(llm_options))
    plans = plan_methods(
        split_list(method_specs),
        overrides,
        parse_observabilities(observability),
        shortlist_weights,
    )
    for warning in repeat_warnings(plans, runs):
        click.echo(safe(f"warning: {warning}"), err=True)
    with explained(dataset, "trace", "a trace or a folder of traces"):
        traces = load_dataset(
            dataset,
            DatasetOptions(
                subsets=split_list(subset_names),
                limit=limit,
                labelled_only=not include_unlabelled,
                format=trace_format,
                strict=strict,
            ),
        )
    if not traces:
        raise click.ClickException(_why_none(dataset, include_unlabelled, trace_format, strict))
    if executor == "local" and (ray_address or ray_workers):
        raise click.UsageError("--ray-address and --ray-workers go with --executor ray.")
    needing = [p.label for p in plans if p.cls.needs_model]
    llm_options["needs_model"] = bool(needing)
    llm_options["needed_by"] = f"method '{needing[0]}'" if needing else None
    llm = build_llm(**llm_options)
    options = EvalOptions(
        runs=runs,
        concurrency=parallel_cases or llm_options["concurrency"],
        resume=resume,
        force=force,
        retry_errors=retry_errors,
        progress=not no_progress,
        step_set=step_set,
        step_set_weights=shortlist_weights,
    )
    per_subset = ", ".join(f"{shown_name(name)} {n}" for name, n in subsets(traces).items())
    click.echo(
        f"{len(traces)} traces ({per_subset}) × {len(plans)} method config(s) × {runs} run(s) "
        f"with model {llm.name}",
        err=True,
    )
    try:
        if executor == "ray":
            outcome = run_on_ray(
                traces, plans, llm, out, options, llm_options, ray_address, ray_workers
            )
        else:
            with sigterm_ends_the_run():
                outcome = asyncio.run(run_eval(traces, plans, llm, out, options))
    except KeyboardInterrupt:
        raise click.ClickException(
            f"Interrupted. Finished cases are saved in {out}; rerun with --resume to continue."
        ) from None
    except SystemExit as exc:
        if exc.code != TERMINATED:  # not SIGTERM's (ours, or scale.cluster's on Ray)
            raise
        click.echo(
            f"Terminated (SIGTERM). Finished cases are saved in {out}; rerun with --resume "
            "to continue.",
            err=True,
        )
        raise
    click.echo(
        f"ran {outcome.ran} case(s), {outcome.skipped} already in {out}; "
        f"{len(outcome.rows)}/{outcome.planned} cases have a row",
        err=True,
    )
    if outcome.rows:
        click.echo(safe(render(summarise(outcome.rows), "text", tolerances=False)))
    if outcome.stopped:
        click.echo(safe(outcome.stopped), err=True)
    exit_for(CaseCounts.of(row.status for row in outcome.rows))


TERMINATED = 128 + signal.SIGTERM
"""eval's exit code when SIGTERM stops it: 143, as a shell reports a process SIGTERM
ended (docs/exit-codes.md), with or without Ray."""


@contextlib.contextmanager
def sigterm_ends_the_run() -> Iterator[None]:
    """SIGTERM, for the duration, ends the local run as Ctrl-C does: it raises
    ``SystemExit(143)``, which asyncio lets through every task (``except Exception`` in a
    case does not catch it) and which cancels the cases in flight, so the lock on --out is
    released and finished rows stay. Not used on Ray: ``scale.cluster.ray_session`` has
    its own handler doing the same once ``ray.init`` is done (a handler raising inside
    ``ray.init`` would leave its processes running). Off the main thread, or where SIGTERM
    is ignored, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_IGN or previous is None:
        yield
        return

    def terminated(signum: int, frame: Any) -> None:
        raise SystemExit(TERMINATED)

    signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_on_ray(
    traces: Any,
    plans: Any,
    llm: Any,
    out: str,
    options: EvalOptions,
    llm_options: dict[str, Any],
    address: str | None,
    workers: int | None,
) -> Any:
    """``run_eval`` with the cases on a Ray cluster; this process still writes ``out``."""
    from faultfinder.scale.cluster import ray_session

    with ray_session(address):
        from faultfinder.scale.ray_eval import RayExecutor

        executor = RayExecutor(
            llm_spec(**llm_options), llm.name, concurrency=options.concurrency, workers=workers
        )
        try:
            return asyncio.run(run_eval(traces, plans, None, out, options, executor=executor))
        finally:
            executor.close()


def not_an_out(out: str) -> str | None:
    """Why eval may not write its rows into ``out``, or None: a name ending in .lock (an
    eval's lock file, removed with everything in it when that eval ends), or a file that
    is something else than eval results (a trace, the response cache, any binary file...),
    which --resume would cut at its "unfinished last line" and --force would empty."""
    path = Path(out)
    if path.name.endswith(LOCK_SUFFIX):
        results = out[: -len(LOCK_SUFFIX)]
        if kind_of(path) is LOCK:
            what = f"{out} is {described(out, LOCK)}{state(out, LOCK)}"
        else:
            what = f"--out {out} ends in {LOCK_SUFFIX}, the name of an eval's lock file"
        return (
            f"{what}; an eval writing to {results or 'FILE'} removes that file when it ends, "
            f"rows and all, so it cannot hold results. Choose another --out, e.g. "
            f"{results or 'results.jsonl'}"
        )
    if not path.is_file() or path.stat().st_size == 0:
        return None
    kind = importable_or(out, kind_of(path))
    if kind is None or kind.name == "results":
        return None
    return (
        f"--out {out} is {described(out, kind)}, not eval results: eval would write its rows "
        "into it. Choose another --out."
    )


def _why_none(
    dataset: str, include_unlabelled: bool, trace_format: str | None, strict: bool
) -> str:
    """Why no trace of ``dataset`` is left to evaluate, and what to do about it."""
    every = load_dataset(
        dataset, DatasetOptions(labelled_only=False, format=trace_format, strict=strict)
    )
    if every and not include_unlabelled and all(t.label is None for t in every):
        return (
            f"No traces to evaluate in {dataset}: none of its {len(every)} trace(s) has a "
            "gold label. Label some with `faultfinder label`, or pass --include-unlabelled "
            "to run the methods without scoring them."
        )
    return f"No traces to evaluate in {dataset} with these filters."
