"""`faultfinder debug` and `debug-report`: DoVer's loop over a recording, verifying failure
hypotheses by replaying interventions, and the summary of its rows. See
docs/methods/dover.md; `check` (TraceElephant's dynamic check) is in check_cmd.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from faultfinder import exitcodes
from faultfinder.cli.common import (
    CONTEXT_BUDGET,
    COUNT,
    SECONDS,
    SEED,
    budget_tokens_option,
    build_llm,
    executor_options,
    model_options,
    parse_settings,
    pass_errors,
    set_option,
)
from faultfinder.cli.handling import InputPath, program_argv
from faultfinder.cli.progress import with_progress
from faultfinder.cli.proxy_options import (
    api_upstream_option,
    exit_if_replays_failed,
    live_upstreams,
    require_command,
    trust_options,
)
from faultfinder.cli.terminal import safe, shown_name
from faultfinder.replay.recorder import new_run_id
from faultfinder.replay.session import SessionOptions, run_sync


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("run_dir", type=InputPath(file_okay=False))
@click.option(
    "--method",
    "method_spec",
    default="all-at-once:refined",
    show_default=True,
    help="Attribution method proposing one hypothesis per trial (name or name:preset).",
)
@click.option(
    "--segment",
    default="llm",
    show_default=True,
    help="Trial segmentation: llm, magentic-one, pattern:REGEX (planning steps' output), none.",
)
@click.option(
    "--repeats", type=COUNT, default=3, show_default=True, help="Replays per intervention."
)
@click.option(
    "--orchestrator",
    default=None,
    help="Agent whose messages are rewritten (default: each trial's planner).",
)
@click.option(
    "--scope",
    type=click.Choice(["orchestrator", "hypothesis"]),
    default="orchestrator",
    show_default=True,
    help="Rewrite the orchestrator's message at/before the failure step, or that step itself.",
)
@click.option(
    "--max-trials", type=COUNT, default=None, help="Intervene on at most this many trials."
)
@click.option(
    "--no-ground-truth", is_flag=True, help="Hide the reference answer from DoVer's prompts."
)
@click.option("--no-milestones", is_flag=True, help="Skip milestone progress.")
@click.option(
    "--context-budget",
    type=CONTEXT_BUDGET,
    default=None,
    help="Max prompt tokens of DoVer's prompts.",
)
@click.option(
    "--live-temperature",
    default="0.7",
    show_default=True,
    help="Temperature forced on live replay calls, so repeats are independent samples; "
    "'program' keeps the program's own.",
)
@click.option(
    "--seed",
    type=SEED,
    default=0,
    show_default=True,
    help="Repeat r sends seed+r with its live calls (distinct seeds, recorded in the rows).",
)
@click.option(
    "--check",
    "check_command",
    default=None,
    metavar="COMMAND",
    help="Success checker: COMMAND gets {final_answer, reference, task, run_dir} as JSON on "
    "stdin and answers pass/fail on stdout or by exit status 0/1 (default: exact match "
    "after normalisation; see docs/methods/dover.md).",
)
@trust_options
@api_upstream_option
@click.option(
    "-o",
    "--out",
    "out_path",
    default=None,
    help="JSONL file for result rows (default: RUN_DIR/dover/<session>.jsonl).",
)
@click.option(
    "--timeout", type=SECONDS, default=None, help="Stop each replay after this many seconds."
)
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON lines.")
@budget_tokens_option
@set_option
@executor_options
@model_options(timeout_flag="--call-timeout")  # --timeout here bounds each replay
@click.argument("command", nargs=-1, type=click.UNPROCESSED, callback=program_argv)
@pass_errors
def debug(
    run_dir: str,
    method_spec: str,
    segment: str,
    repeats: int,
    orchestrator: str | None,
    scope: str,
    max_trials: int | None,
    no_ground_truth: bool,
    no_milestones: bool,
    context_budget: int | None,
    live_temperature: str,
    seed: int,
    check_command: str | None,
    upstream: str | None,
    trust_run: bool,
    api_upstream: dict[str, str],
    out_path: str | None,
    timeout: float | None,
    as_json: bool,
    budget_tokens: int | None,
    settings: tuple[str, ...],
    executor: str,
    ray_address: str | None,
    command: tuple[str, ...],
    **llm_options: Any,
) -> None:
    """DoVer: segment the recorded run into trials, hypothesise a failure per trial,
    generate an intervention, replay it (--repeats times) and give each hypothesis a
    verdict: validated, partially validated, refuted, inconclusive, not_applied or
    unverifiable (docs/methods/dover.md states the rules).

    \b
    faultfinder debug runs/RUN --model openai:gpt-4o --upstream URL -- python my_team.py "task"
    """
    from faultfinder.dover.checker import make_checker
    from faultfinder.dover.models import DoverConfig
    from faultfinder.dover.pipeline import run_dover
    from faultfinder.dover.replays import ReplayExecutor
    from faultfinder.dover.report import aggregate, format_rate, format_summary
    from faultfinder.registry import create_method

    temperature: float | None = None
    if live_temperature != "program":
        try:
            temperature = float(live_temperature)
        except ValueError:
            raise click.BadParameter(
                f"{live_temperature!r} is neither a number nor 'program'",
                param_hint="--live-temperature",
            ) from None
    # The checker is a command the user typed here, so running it is what they asked for.
    checker = make_checker(check_command)

    program = require_command(run_dir, command)
    live, upstreams = live_upstreams(run_dir, upstream, trust_run, api_upstream, required=True)

    config = DoverConfig(
        method=method_spec,
        segment=segment,
        repeats=repeats,
        orchestrator=orchestrator,
        scope=scope,  # type: ignore[arg-type]
        with_ground_truth=not no_ground_truth,
        max_trials=max_trials,
        milestones=not no_milestones,
        context_budget=context_budget,
        live_temperature=temperature,
        seed=seed,
        budget_tokens=budget_tokens,
    )
    overrides: dict[str, Any] = {"with_ground_truth": config.with_ground_truth}
    if context_budget is not None:
        overrides["context_budget"] = context_budget
    if budget_tokens is not None:
        overrides["budget_tokens"] = budget_tokens
    method = create_method(method_spec, **overrides | parse_settings(settings))
    llm = with_progress(build_llm(**llm_options), None)  # a line per call on a terminal
    session = new_run_id("dover-")
    out = Path(out_path) if out_path else Path(run_dir) / "dover" / f"{session}.jsonl"
    replays = ReplayExecutor(
        run_dir,
        program,
        upstream=live,
        options=SessionOptions(echo=False, timeout=timeout, upstreams=upstreams),
    )
    if executor == "ray":
        from faultfinder.scale.cluster import ray_session

        with ray_session(ray_address):
            from faultfinder.scale.ray_debug import RayReplayExecutor

            on_ray = RayReplayExecutor(replays)
            rows = run_sync(
                run_dover(
                    run_dir, llm, method, on_ray, config, out=out, session=session, checker=checker
                )
            )
    else:
        if ray_address:
            raise click.UsageError("--ray-address goes with --executor ray.")
        rows = run_sync(
            run_dover(
                run_dir, llm, method, replays, config, out=out, session=session, checker=checker
            )
        )
    if as_json:
        for row in rows:
            click.echo(row.model_dump_json())
        _debug_exit(rows, upstreams)
        return
    for row in rows:
        trial = row.trial
        head = f"trial {trial.index} (steps {trial.start}-{trial.end})"
        hyp = row.hypothesis
        if row.intervention is None:
            click.echo(safe(f"{head}: {row.status} - {row.verdict_reason or row.error}"))
            continue
        rate = format_rate(row.repeats)
        flips = f"; {rate}" if rate else ""
        iv = row.intervention
        click.echo(
            safe(
                f"{head}: hypothesis {shown_name(hyp.agent)} @ step {hyp.step}; {iv.category} "
                f"at step {iv.step} -> {row.verdict} ({row.verdict_reason}){flips}"
            )
        )
        click.echo(f"    replacement: {iv.replacement[:160]!r}")
        if iv.tool_calls:
            calls = ", ".join(shown_name(c.name) for c in iv.tool_calls)
            redirected = f" (call {iv.redirect.call} redirected)" if iv.redirect else ""
            click.echo(f"    with the step's tool calls: {calls}{redirected}")
    click.echo(format_summary(aggregate(rows)))
    click.echo(f"rows: {out}")
    _debug_exit(rows, upstreams)


def trial_status(row: Any) -> str:
    """A DoVer row's trial as a case of docs/exit-codes.md: 'budget-exceeded', 'error'
    (the trial or its method errored), 'unparsed' (the method's hypothesis or the
    intervention was unreadable), else 'ok' (a verdict, or a readable 'no failure')."""
    if row.status in ("budget-exceeded", "error"):
        return str(row.status)
    if row.status == "no-hypothesis":
        method_status = row.hypothesis.status
        if method_status in ("error", "budget-exceeded"):
            return str(method_status)
        return "unparsed" if method_status in exitcodes.UNPARSED_STATUSES else "ok"
    if row.status == "no-intervention":
        return "unparsed"
    return "ok"


def _debug_exit(rows: list[Any], upstreams: dict[str, str]) -> None:
    """Exit 5 when some trial ran out of its --budget-tokens, else 4 when a trial errored
    or a replayed program failed (non-zero exit or timeout), else 1 when a replay could
    not run at all, else 3 when a trial's hypothesis or intervention stayed unparsed
    (docs/exit-codes.md); live calls that failed are named either way."""
    counts = exitcodes.CaseCounts.of(trial_status(row) for row in rows)
    if counts.budget_exceeded or counts.errored:
        click.echo(counts.message("trial"), err=True)
        click.get_current_context().exit(counts.exit_code)
    replays = [r for row in rows for r in row.repeats]
    exit_if_replays_failed(
        len(replays),
        [r.exit_code for r in replays if r.program_failed],
        [r.branch for r in replays],
        upstreams,
    )
    not_run = [r.error or "no reason given" for r in replays if not r.ran]
    if not_run:  # no program ran (a command that does not exist...), as verify-edit's 1
        click.echo(
            f"exit {exitcodes.FAILURE}: of {len(replays)} replays, {len(not_run)} could not "
            f"run ({not_run[0]})",
            err=True,
        )
        click.get_current_context().exit(exitcodes.FAILURE)
    if counts.unparsed:
        click.echo(counts.message("trial"), err=True)
        click.get_current_context().exit(counts.exit_code)


@click.command("debug-report")
@click.argument("paths", nargs=-1, required=True, type=InputPath(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@pass_errors
def debug_report(paths: tuple[str, ...], as_json: bool) -> None:
    """Aggregate DoVer result rows: trial success rate, progress made, verdicts."""
    from faultfinder.cli.kinds import explained
    from faultfinder.dover.report import aggregate, format_summary, read_rows

    with explained(paths, "dover", "DoVer result rows (from faultfinder debug or verify-edit)"):
        rows = read_rows(paths)
    summary = aggregate(rows)
    click.echo(summary.model_dump_json(indent=2) if as_json else format_summary(summary))
