"""`faultfinder report`: accuracy tables from eval result files (with the floors computed
on the same traces when asked), then step sets, calibration and prompt tokens with the
prefix cache; plots on request. `faultfinder eval` writes the files (``eval_cmd.py``)."""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from faultfinder.cli.common import pass_errors, read_weights
from faultfinder.cli.handling import InputPath
from faultfinder.cli.kinds import TRACE, importable_or, kind_of, wrong_kind
from faultfinder.cli.terminal import safe
from faultfinder.errors import ConfigError
from faultfinder.eval import prompt_cost, reliability, step_sets
from faultfinder.eval.datasets import DatasetOptions, load_dataset
from faultfinder.eval.floors import floor_rows, step_set_settings
from faultfinder.eval.plotting import pyplot
from faultfinder.eval.report import FORMATS, caveats, plot_tolerance, render, summarise
from faultfinder.eval.rows import EvalRow, read_result_files


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
    kind = importable_or(path, found)
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
