"""`faultfinder calibrate`: step sets calibrated on labelled traces of your own framework."""

from __future__ import annotations

from pathlib import Path

import click

from faultfinder.cli.common import pass_errors, read_weights, strict_option
from faultfinder.cli.handling import InputPath
from faultfinder.cli.kinds import explained
from faultfinder.cli.terminal import safe, shown_name


@click.command()
@click.argument("traces_path", type=InputPath())
@click.option(
    "--source",
    default=None,
    help="Name of the traces' source, e.g. my-team (default: the source the traces all "
    "name, if they do).",
)
@click.option(
    "-o",
    "--out",
    "out_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="Weights file to write (pass it to attribute and eval with --shortlist-weights).",
)
@click.option(
    "--weights",
    "base_path",
    default=None,
    type=click.Path(exists=True, dir_okay=False),
    help="Weights file to calibrate (default: the shipped one).",
)
@click.option(
    "--train",
    is_flag=True,
    help="Also train the ranker on these traces alone (at least 20; the shortlist extra), "
    "for a framework the shipped ranker reads poorly. The shipped ranker is not used.",
)
@click.option("--format", "trace_format", default=None, help="Input format (default: detect).")
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
@strict_option
@pass_errors
def calibrate(
    traces_path: str,
    source: str | None,
    out_path: str,
    base_path: str | None,
    train: bool,
    trace_format: str | None,
    force: bool,
    strict: bool,
) -> None:
    """Calibrate the shortlist's step sets on labelled failures of your own framework.

    Each trace needs its decisive step in its label. The ranker is not retrained: every
    trace is scored by the model that never saw it, and the 80/90/95% thresholds of the
    new file come from those scores (split conformal). A trace that names no source is
    then taken to be of this one, and a trace unlike the calibration traces still has
    its level withdrawn. With --train the ranker itself is trained on these traces
    (held-out fold models, each calibrated on a fold it did not train on).

    \b
    faultfinder calibrate my-labelled-runs/ --source my-team --out my-team.weights.json
    faultfinder attribute run.json --method shortlist --shortlist-weights my-team.weights.json
    """
    from faultfinder.eval.datasets import DatasetOptions, load_dataset
    from faultfinder.shortlist.calibrate import calibrate as calibrate_weights
    from faultfinder.shortlist.calibrate import named_elsewhere, skip_summary, train_on
    from faultfinder.shortlist.weights import load_weights

    out = Path(out_path)
    if out.exists() and not force:
        raise click.ClickException(f"{out} exists; pass --force to overwrite it")
    with explained(traces_path, "trace", "a labelled trace or a folder of them"):
        # Unlabelled traces are loaded too, so the report counts them among the skipped
        # instead of their vanishing from the total.
        traces = load_dataset(
            traces_path, DatasetOptions(labelled_only=False, format=trace_format, strict=strict)
        )
    if source is None:
        named = {t.source.subset for t in traces}
        if len(named) != 1 or None in named:
            raise click.UsageError(
                "name the traces' source with --source NAME (they do not all name one)"
            )
        source = str(next(iter(named)))
    read_weights(base_path)
    base = load_weights(base_path)
    if train:
        weights, report = train_on(traces, source, base.groups)
    else:
        weights, report = calibrate_weights(base, traces, source)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(weights.dumps(), encoding="utf-8")
    what = "trained and calibrated" if train else "calibrated"
    click.echo(f"{what} on {len(report.used)} labelled trace(s) of {shown_name(source)}")
    if report.skipped:
        click.echo(safe(skip_summary(report.skipped)))
    levels = ", ".join(f"{100 * a:g}%: {tau:.3f}" for a, tau in report.thresholds.items())
    click.echo(f"thresholds (deploy model, softmax mass): {levels}")
    click.echo(f"wrote {out}; use it with --shortlist-weights {out}")
    elsewhere = named_elsewhere(traces, source, weights)
    if elsewhere:
        click.echo(safe(f"warning: {elsewhere}"), err=True)
