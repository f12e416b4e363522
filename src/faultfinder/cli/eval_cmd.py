"""`faultfinder eval` (run methods over a dataset) and `faultfinder report` (tables, plot)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, get_args

import click
from click.core import ParameterSource

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
    TRACE,
    Kind,
    described,
    explained,
    kind_of,
    state,
    wrong_kind,
)
from faultfinder.cli.terminal import safe, shown_name
from faultfinder.errors import ConfigError
from faultfinder.eval import prompt_cost, reliability, step_sets
from faultfinder.eval.cases import plan_methods, repeat_warnings
from faultfinder.eval.datasets import DatasetOptions, load_dataset, subsets
from faultfinder.eval.floors import floor_rows, step_set_settings
from faultfinder.eval.plotting import pyplot
from faultfinder.eval.report import FORMATS, caveats, plot_tolerance, render, summarise
from faultfinder.eval.rows import EvalRow, read_result_files
from faultfinder.eval.runner import EvalOptions, run_eval
from faultfinder.exitcodes import CaseCounts
from faultfinder.judging.method import Observability
from faultfinder.traces.loader import recognised

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
    llm_options["needs_model"] = any(p.cls.needs_model for p in plans)
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
            outcome = asyncio.run(run_eval(traces, plans, llm, out, options))
    except KeyboardInterrupt:
        raise click.ClickException(
            f"Interrupted. Finished cases are saved in {out}; rerun with --resume to continue."
        ) from None
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


def floors_for(rows: list[EvalRow], dataset: str, weights: str | None = None) -> list[EvalRow]:
    """Floor rows on the traces of ``dataset`` that the results cover (floors the results
    already hold are not recomputed), with step sets at the level the results have, from
    the shortlist weights file ``weights`` (None: the shipped ones); what does not match
    the results' sets is said on stderr."""
    wanted = {row.trace_id for row in rows}
    traces = [
        t for t in load_dataset(dataset, DatasetOptions(labelled_only=False)) if t.id in wanted
    ]
    if not traces:
        raise click.ClickException(
            f"--floors {dataset}: none of its traces is in the results (trace ids differ)."
        )
    missing = len(wanted) - len(traces)
    if missing:
        click.echo(f"note: {missing} traces of the results are not in {dataset}", err=True)
    present = {row.method for row in rows}
    level, notes = step_set_settings(rows, weights)
    for note in notes:
        click.echo(safe(f"note: --floors: {note}"), err=True)
    return floor_rows(traces, skip=present, step_set=level, step_set_weights=weights)


@click.command("report")
@click.argument("results", nargs=-1, required=True, type=InputPath(dir_okay=False))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="Table format.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write a step-accuracy-vs-tolerance plot (PNG).",
)
@click.option(
    "--tolerances/--no-tolerances",
    default=True,
    show_default=True,
    help="Add the ±1..±5 step accuracy table (text and markdown).",
)
@click.option(
    "--floors",
    "floors_from",
    type=InputPath(),
    default=None,
    help="Dataset the results were run on: compute the floors (random, baseline:*) on the "
    "same traces and list them under each subset (needs no model).",
)
@click.option(
    "--shortlist-weights",
    "shortlist_weights",
    type=InputPath(dir_okay=False),
    default=None,
    envvar="FAULTFINDER_SHORTLIST_WEIGHTS",
    metavar="FILE",
    help="With --floors: the shortlist weights the results' step sets came from (eval's "
    "--shortlist-weights), for the floors' step sets; default: the shipped ones.",
)
@click.option(
    "--reliability-plot",
    "reliability_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write a reliability diagram (PNG) of the methods that state a confidence.",
)
@pass_errors
def report_command(
    results: tuple[str, ...],
    fmt: str,
    plot_path: str | None,
    tolerances: bool,
    floors_from: str | None = None,
    reliability_path: str | None = None,
    shortlist_weights: str | None = None,
) -> None:
    """Accuracy tables (per subset, mean ± std over runs, 95% intervals, floors) from eval
    result files; then step sets, calibration and prompt tokens with the prefix cache."""
    given = click.get_current_context().get_parameter_source("shortlist_weights")
    if given == ParameterSource.COMMANDLINE and not floors_from:
        # The results' own step sets are already computed: the file only serves the floors.
        raise click.UsageError("--shortlist-weights only applies with --floors DATASET")
    for path in results:
        # Before reading: a one-line trace would otherwise read as an unfinished last row.
        if message := not_results(path):
            raise ConfigError(message)
    rows = read_result_files(results)
    empty = [path for path in results if Path(path).stat().st_size == 0]
    if not rows:
        if empty == list(results):
            raise ConfigError(
                f"{', '.join(empty)} {'is' if len(empty) == 1 else 'are'} empty: no eval "
                "result rows yet. `faultfinder eval DATASET --method M --out FILE` writes "
                "one row per case as each finishes (an eval still running may not have "
                "finished one)."
            )
        raise click.ClickException("No result rows in " + ", ".join(results))
    for path in empty:
        click.echo(f"warning: {path} is empty: no eval result row in it yet", err=True)
    if floors_from:
        read_weights(shortlist_weights)  # a bad file is said once, not in every floor row
        rows.extend(floors_for(rows, floors_from, shortlist_weights))
    if plot_path or reliability_path:
        pyplot()  # a missing plot extra is said before any table, not after
    summaries = summarise(rows)
    # Text, markdown and csv hold the rows' labels as they are; json escapes them itself.
    click.echo(safe(render(summaries, fmt, tolerances=tolerances)))  # type: ignore[arg-type]
    if fmt in ("csv", "json"):
        # The data stays parseable on stdout; what qualifies it goes beside it, as --floors's.
        for note in caveats(summaries):
            click.echo(safe(f"note: {note}"), err=True)
    if plot_path:
        written = plot_tolerance(summaries, plot_path)
        click.echo(f"plot written to {written}", err=True)
    if fmt in ("text", "markdown") and (section := step_sets.render_rows(rows, fmt)):
        click.echo("\n" + safe(section))
    if fmt in ("text", "markdown") and (section := reliability.render_rows(rows, fmt)):
        click.echo("\n" + safe(section))
    if fmt in ("text", "markdown") and (section := prompt_cost.render(summaries, fmt)):
        click.echo("\n" + safe(section))
    if reliability_path:
        drawn = reliability.plot_rows(rows, reliability_path)
        click.echo(
            f"reliability diagram written to {drawn}" if drawn else "no row states a confidence",
            err=True,
        )


def not_results(path: str) -> str | None:
    """What ``path`` is and what reads it, when it is a known kind of file other than eval
    results (a trace, in any format an importer reads: attribute it, or eval methods on it
    and report that; attributions: the UI shows them); else None."""
    message = wrong_kind(path, "results", "eval results")
    found = kind_of(path)
    kind = _export_or(path, found)
    if kind is TRACE and found is not TRACE:
        # An export of a tracing tool (OTLP, Langfuse, AG2's SQLite log...): not a line of
        # it is a row.
        message = (
            f"{path} is a trace (a format faultfinder imports), not eval results. Try: "
            f"faultfinder attribute {path} --method shortlist"
        )
    if message and kind is not None and kind.name == "trace":
        message += (
            f"; or evaluate methods on it: faultfinder eval {path} --out results.jsonl, "
            "then faultfinder report results.jsonl"
        )
    elif message and kind is not None and kind.name == "attribution":
        message += (
            ". `report` reads the rows `faultfinder eval DATASET --method M --out FILE` "
            "writes, which score methods on labelled traces"
        )
    return message


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
    kind = _export_or(out, kind_of(path))
    if kind is None or kind.name == "results":
        return None
    return (
        f"--out {out} is {described(out, kind)}, not eval results: eval would write its rows "
        "into it. Choose another --out."
    )


def _export_or(path: str, kind: Kind | None) -> Kind | None:
    """TRACE for a file of no known kind, or a binary one, that an importer reads (an
    export of a tracing tool); else ``kind``."""
    if (kind is None or kind.name == "binary") and recognised(Path(path), None):
        return TRACE
    return kind


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
