"""`faultfinder attribute`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click

from faultfinder.cli.common import (
    budget_tokens_option,
    build_llm,
    exit_for,
    method_options,
    method_overrides,
    model_options,
    pass_errors,
    pop_sampling,
    read_weights,
    shortlist_weights_option,
    step_set_option,
    strict_option,
)
from faultfinder.cli.handling import InputPath
from faultfinder.cli.kinds import explained
from faultfinder.cli.progress import with_progress
from faultfinder.cli.terminal import plural, safe, shown_name
from faultfinder.exitcodes import CaseCounts
from faultfinder.judging.method import Attribution, run_method
from faultfinder.judging.why import why
from faultfinder.registry import create_method, with_shortlist_weights
from faultfinder.results_store import DEFAULT_RESULTS, append_result
from faultfinder.shortlist.sets import UNSEEN_NOTE
from faultfinder.shortlist.sets import describe as describe_step_set
from faultfinder.traces.importers.base import no_steps_reason
from faultfinder.traces.loader import load_trace
from faultfinder.traces.schema import Trace

CALIBRATE_HINT = (
    "hint: the step set's thresholds are those for a framework the shortlist never saw, so "
    "a set tends to hold most of the trace; `faultfinder calibrate` on a few dozen labelled "
    "runs of yours fits them to your framework (docs/step-sets.md)."
)

NO_REFERENCE_HINT = (
    "hint: this weights file holds no shift reference (a one-model file, or one written by "
    "an older faultfinder), so no trace can be checked against its calibration data and "
    "no coverage is claimed; `faultfinder calibrate` writes weights that hold one "
    "(docs/step-sets.md)."
)


def unlike_calibration(result: Attribution) -> bool:
    """True when the step set's level is withdrawn because of the trace's shift score
    (a row written before limits were recorded has a shift and no limit)."""
    shift, limit = result.step_set_shift, result.step_set_shift_limit
    return (
        result.step_set_calibrated is False
        and shift is not None
        and (limit is None or shift > limit)
    )


def shift_hint(result: Attribution) -> str:
    """What the shift score on the step set line means and what to do about it."""
    limit = result.step_set_shift_limit
    level = f"{100 * (result.step_set_level or 0):g}%"
    past = "" if limit is None else f" (the level is claimed up to {limit:.2f})"
    return (
        f"hint: no {level} coverage is claimed for this step set: its shift score is "
        f"{result.step_set_shift:.2f}{past}. The score is how far this trace's shape "
        "(steps, characters per step, agents, speaker changes, tool steps, failure signals) "
        "is from the traces the sets were calibrated on, in standard deviations; the set "
        "still lists the ranker's likeliest steps. `faultfinder calibrate` on a few dozen "
        "labelled runs of your framework makes the level hold for traces like them "
        '(docs/step-sets.md, "When a trace is unlike the calibration data").'
    )


def format_attribution(result: Attribution, n_steps: int | None = None) -> str:
    """The human-readable summary `attribute` prints (``n_steps``: the trace's length, to
    say how much of it the step set covers)."""
    step = "-" if result.step is None else str(result.step)
    reason = why(result)
    # An error the one-line reason shortened is printed whole on a line of its own.
    whole = result.error if result.error and reason != result.error else None
    lines = [
        f"method:     {shown_name(result.method)}  (model {shown_name(result.model)}, "
        f"prompts {shown_name(result.prompt_version)})",
        f"status:     {result.status}" + (f"  ({reason})" if reason and not whole else ""),
        *([f"error:      {whole}"] if whole else []),
        f"agent:      {shown_name(result.agent or '-')}",
        f"step:       {step}  (0-based)",
        f"reason:     {result.reason or '-'}",
    ]
    if result.confidence is not None:
        lines.append(f"confidence: {result.confidence:.2f}")
    if result.step_set is not None and result.step_set_level is not None:
        lines.append(f"step set:   {format_step_set(result, n_steps)}")
    u = result.usage
    lines.append(
        f"cost:       {plural(u.calls, 'call')} ({u.cached_calls} cached), "
        f"{u.prompt_tokens} prompt + "
        f"{u.completion_tokens} completion tokens"
        + (" (estimated)" if u.estimated else "")
        + (
            f"; {u.cached_prompt_tokens} prompt tokens served from the server's cache"
            if u.cached_prompt_tokens
            else ""
        )
        + (f"; {u.cache_write_prompt_tokens} written to it" if u.cache_write_prompt_tokens else "")
    )
    return "\n".join(lines)


def gold_lines(trace: Trace, result: Attribution) -> list[str]:
    """The trace's gold label beside the answer (a labelled trace: Who&When, the demo)."""
    gold = trace.label
    if gold is None:
        return []

    def mark(ok: bool) -> str:
        return "match" if ok else "no match"

    step = "-" if gold.step is None else str(gold.step)
    in_set = ""
    if result.step_set is not None and gold.step is not None:
        inside = gold.step in result.step_set
        in_set = f"; {'in' if inside else 'not in'} the step set"
    return [
        f"gold agent: {shown_name(gold.agent or '-')}    ({mark(result.agent == gold.agent)})",
        f"gold step:  {step}    ({mark(result.step in gold.acceptable_steps)}{in_set})",
        f"gold why:   {gold.reason or '-'}",
    ]


def format_step_set(result: Attribution, n_steps: int | None = None) -> str:
    """'{2-4, 7} at 90%: 4 of 12 steps (33% of the trace); ranked by shipped:deploy'."""
    return describe_step_set(
        result.step_set or [],
        result.step_set_level or 0.0,
        n_steps,
        result.step_set_source,
        result.step_set_calibrated,
        result.step_set_shift,
        result.step_set_shift_limit,
    )


@click.command()
@click.argument("trace_path", type=InputPath())
@click.option(
    "--method",
    "method_spec",
    default="all-at-once",
    show_default=True,
    help="Method name or name:preset (see `faultfinder methods`).",
)
@click.option("--format", "trace_format", default=None, help="Input format (default: detect).")
@click.option("--json", "as_json", is_flag=True, help="Print the full result object as JSON.")
@click.option(
    "--results",
    "results_path",
    default=str(DEFAULT_RESULTS),
    show_default=True,
    envvar="FAULTFINDER_RESULTS",
    type=click.Path(dir_okay=False),
    help="Results store the answer is appended to (`faultfinder ui` reads it).",
)
@click.option("--save/--no-save", default=True, help="Append the answer to the results store.")
@step_set_option
@shortlist_weights_option
@strict_option
@method_options
@budget_tokens_option
@model_options
@pass_errors
def attribute(
    trace_path: str,
    method_spec: str,
    trace_format: str | None,
    as_json: bool,
    results_path: str,
    save: bool,
    step_set: float | None,
    shortlist_weights: str | None,
    strict: bool,
    with_ground_truth: bool,
    observability: str | None,
    settings: tuple[str, ...],
    **llm_options: Any,
) -> None:
    """Find the responsible agent and decisive step of a failed trace."""
    with explained(trace_path, "trace", "a trace"):
        trace = load_trace(trace_path, format=trace_format, strict=strict)
    if not trace.steps:
        # A verdict ("no error found") would tell a script the run was checked.
        raise click.ClickException(
            f"{shown_name(trace.id)} in {trace_path} has no steps: {no_steps_reason(trace)}"
        )
    overrides = method_overrides(with_ground_truth, observability, settings)
    overrides.update(pop_sampling(llm_options))
    read_weights(shortlist_weights)
    overrides = with_shortlist_weights(method_spec, overrides, shortlist_weights)
    method = create_method(method_spec, **overrides)
    progress = llm_options.pop("progress")
    llm = with_progress(
        build_llm(
            **llm_options,
            needs_model=method.needs_model,
            needed_by=f"method '{method_spec}'",
        ),
        progress,
    )
    result = asyncio.run(
        run_method(
            method,
            trace,
            llm,
            label=method_spec,
            step_set=step_set,
            step_set_weights=shortlist_weights,
        )
    )
    shown = "\n".join([format_attribution(result, len(trace.steps)), *gold_lines(trace, result)])
    click.echo(result.model_dump_json(indent=2) if as_json else safe(shown))
    if not as_json and unlike_calibration(result):
        click.echo(shift_hint(result), err=True)
    elif not as_json and result.step_set_calibrated is False and result.step_set_shift is None:
        click.echo(NO_REFERENCE_HINT, err=True)
    elif not as_json and (result.step_set_source or "").endswith(UNSEEN_NOTE):
        click.echo(CALIBRATE_HINT, err=True)
    if save:
        saved = append_result(result, Path(results_path))
        if not as_json:  # stdout stays one JSON document with --json
            click.echo(f"saved to {saved}", err=True)
    exit_for(CaseCounts.of([result.status]))
