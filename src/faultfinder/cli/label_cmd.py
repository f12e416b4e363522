"""`faultfinder label`: write the decisive step of a failed run into its trace."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from faultfinder.cli.common import pass_errors, strict_option
from faultfinder.cli.handling import InputPath
from faultfinder.cli.kinds import explained
from faultfinder.cli.terminal import safe, shown_name

if TYPE_CHECKING:
    from faultfinder.traces.schema import Trace


@click.command()
@click.argument("trace_path", type=InputPath())
@click.option("--step", required=True, type=click.IntRange(min=0), help="The decisive step.")
@click.option("--agent", default=None, help="The responsible agent (default: the step's speaker).")
@click.option("--reason", default=None, help="Why that step caused the failure.")
@click.option(
    "--also",
    "also",
    multiple=True,
    type=click.IntRange(min=0),
    help="Another step that also counts as correct (repeatable).",
)
@click.option(
    "-o",
    "--out",
    "out_path",
    default=None,
    type=click.Path(dir_okay=False),
    help="Canonical trace to write (default: TRACE_PATH itself, when it is one).",
)
@click.option("--format", "trace_format", default=None, help="Input format (default: detect).")
@click.option(
    "--force",
    is_flag=True,
    help="Replace a label the trace already has, overwrite an existing --out file, or label "
    "a run whose final answer matches its reference answer.",
)
@strict_option
@pass_errors
def label(
    trace_path: str,
    step: int,
    agent: str | None,
    reason: str | None,
    also: tuple[int, ...],
    out_path: str | None,
    trace_format: str | None,
    force: bool,
    strict: bool,
) -> None:
    """Write the decisive step of a failed run into its trace (for `calibrate` and `eval`).

    \b
    faultfinder label runs/RUN --step 3 --reason "read the 2021 column"
    faultfinder label otel-export.json --step 5 --out labelled/run-17.json
    """
    from faultfinder.traces.io import is_gzip, write_trace
    from faultfinder.traces.loader import load_trace
    from faultfinder.traces.schema import GoldLabel

    run_trace = Path(trace_path) / "trace.json"
    if Path(trace_path).is_dir() and run_trace.is_file():
        # A recording (`record -o runs` writes runs/RUN/): its trace is the run's to label.
        trace_path = str(run_trace)
    with explained(trace_path, "trace", "a trace"):
        trace = load_trace(trace_path, format=trace_format, strict=strict)
    n = len(trace.steps)
    if n == 0:
        # The file, not the command line, is what cannot be labelled: exit 1, as
        # `attribute` does for the same trace (docs/exit-codes.md).
        raise click.ClickException(
            f"{shown_name(trace.id)} in {trace_path} has no steps: there is no step to label "
            "(docs/import.md says what becomes a step)"
        )
    for s in (step, *also):
        if s >= n:
            raise click.BadParameter(
                f"step {s} is outside the trace (steps 0-{n - 1})",
                param_hint="'--step'" if s == step else "'--also'",
            )
    if not force:
        _refuse_a_success(trace, trace_path)
    speaker = trace.steps[step].agent
    if agent is None:
        agent = speaker
    elif agent not in trace.agent_names():
        known = ", ".join(shown_name(known) for known in sorted(set(trace.agent_names())))
        raise click.BadParameter(
            f"{shown_name(repr(agent))} is not an agent of the trace ({known})",
            param_hint="'--agent'",
        )
    if trace.label is not None and trace.label.step is not None and not force:
        raise click.ClickException(
            f"the trace is already labelled (step {trace.label.step}, agent "
            f"{shown_name(trace.label.agent)}); pass --force to replace the label"
        )
    if out_path is None:
        if Path(trace_path).is_dir() or not _one_canonical_trace(trace_path):
            raise click.UsageError(
                f"{trace_path} is not a canonical faultfinder trace file; write the labelled "
                "canonical trace elsewhere with --out FILE"
            )
        if is_gzip(trace_path):
            # Read through gzip, but written back as plain JSON: never over the .gz.
            raise click.UsageError(
                f"{trace_path} is gzip-compressed and label writes plain JSON; write the "
                "labelled canonical trace elsewhere with --out FILE"
            )
        out_path = trace_path
    elif Path(out_path).exists() and not force and not _same_file(out_path, trace_path):
        # Another run's labelled trace (or any file) would be replaced without a trace of
        # it: refuse, as `calibrate --out` and `eval --out` do.
        raise click.ClickException(
            f"{out_path} exists; pass --force to overwrite it, or choose another --out"
        )
    labelled = trace.model_copy(
        update={
            "label": GoldLabel(agent=agent, step=step, acceptable_steps=list(also), reason=reason)
        }
    )
    write_trace(labelled, out_path)
    note = "" if agent == speaker else f" (step {step} is spoken by {shown_name(speaker)})"
    click.echo(safe(f"labelled {out_path}: step {step}, agent {shown_name(agent)}{note}"))


def _refuse_a_success(trace: Trace, trace_path: str) -> None:
    """Refuse (exit 1, as for a trace with no steps) a run that succeeded by the rule
    `debug` and `verify-edit` use: its program did not fail and its final answer matches
    its reference answer. Nothing failed, so a decisive step would be invented, and
    `calibrate` and `eval` would take the run for a failure. A run with no reference
    answer cannot be told and is labelled."""
    from faultfinder.dover.checker import ExactChecker, check_recorded

    if check_recorded(ExactChecker(), trace).passed:
        raise click.ClickException(
            f"{shown_name(trace.id)} in {trace_path} succeeded: its final answer matches its "
            "reference answer, so no step caused a failure and there is nothing to label. "
            "Label the failed run instead, or pass --force to label this one anyway (a "
            "reference answer that is wrong, a failure the answer does not show)."
        )


def _same_file(a: str, b: str) -> bool:
    """True when paths ``a`` and ``b`` name one file (labelling in place via --out)."""
    try:
        return Path(a).samefile(b)
    except OSError:
        return False


def _one_canonical_trace(path: str) -> bool:
    """True when ``path`` is a file holding one canonical trace as JSON: the only kind
    `label` rewrites in place (an export, JSON lines or a gzip file needs --out)."""
    from faultfinder.errors import TraceFormatError
    from faultfinder.traces.io import is_canonical, read_json

    try:
        return is_canonical(read_json(path))
    except TraceFormatError:
        return False
