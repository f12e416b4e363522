"""`faultfinder check`: TraceElephant's dynamic agentic check, replaying candidate steps
of a static attribution with a correction and re-ranking them (methods/agentic/dynamic.py;
docs/methods/agentic.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from faultfinder import exitcodes
from faultfinder.cli.common import (
    CONTEXT_BUDGET,
    COUNT,
    SECONDS,
    TEMPERATURE,
    budget_tokens_option,
    build_llm,
    model_options,
    parse_settings,
    pass_errors,
    set_option,
)
from faultfinder.cli.handling import InputPath, program_argv
from faultfinder.cli.progress import with_progress
from faultfinder.cli.proxy_options import (
    api_upstream_option,
    branch_report,
    exit_if_replays_failed,
    live_upstreams,
    require_command,
    trust_options,
)
from faultfinder.cli.terminal import safe, shown_name
from faultfinder.replay.report import ReplayReport
from faultfinder.replay.session import SessionOptions, run_sync


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("run_dir", type=InputPath(file_okay=False))
@click.option(
    "--method",
    "method_spec",
    default="agentic:paper",
    show_default=True,
    help="Static method whose attribution seeds the candidates (TraceElephant: Static "
    "Agentic on the whole trace, inputs and metadata included).",
)
@click.option(
    "--candidates",
    "n_candidates",
    type=COUNT,
    default=3,
    show_default=True,
    help="Candidates to check.",
)
@click.option(
    "--window",
    type=COUNT,
    default=5,
    show_default=True,
    help="Steps observed after the correction (k).",
)
@click.option(
    "--live-temperature",
    type=TEMPERATURE,
    default=0.3,
    show_default=True,
    help="Temperature of the replayed steps.",
)
@click.option("--no-ground-truth", is_flag=True, help="Hide the reference answer from the prompts.")
@click.option("--context-budget", type=CONTEXT_BUDGET, default=None, help="Max prompt tokens.")
@click.option(
    "--check-below",
    type=click.FloatRange(0, 1),
    default=None,
    metavar="CONFIDENCE",
    help="Replay only when the method's confidence is below this (a method that states "
    "none is always replayed); default: always replay.",
)
@click.option(
    "--replay-timeout",
    type=SECONDS,
    default=None,
    help="Stop each candidate's replay after this many seconds (a replay stopped so is a "
    "program that failed: not judged, exit 4). --timeout bounds one model call.",
)
@budget_tokens_option
@set_option
@trust_options
@api_upstream_option
@click.option(
    "-o", "--out", "out_path", default=None, help="Append the result row to this JSONL file."
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@model_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED, callback=program_argv)
@pass_errors
def check(
    run_dir: str,
    method_spec: str,
    n_candidates: int,
    window: int,
    live_temperature: float,
    no_ground_truth: bool,
    context_budget: int | None,
    check_below: float | None,
    replay_timeout: float | None,
    budget_tokens: int | None,
    settings: tuple[str, ...],
    upstream: str | None,
    trust_run: bool,
    api_upstream: dict[str, str],
    out_path: str | None,
    as_json: bool,
    command: tuple[str, ...],
    **llm_options: Any,
) -> None:
    """TraceElephant's dynamic agentic check: replay each candidate step with a correction,
    watch the next --window steps, and re-rank the candidates. With --check-below, only
    when the method is unsure; with a method that shortlists (compose), its shortlisted
    steps are the candidates.

    \b
    faultfinder check runs/RUN --model openai:gpt-4o --upstream URL -- python my_team.py "task"
    faultfinder check runs/RUN --method compose --check-below 0.6 -- python my_team.py "task"
    """
    from faultfinder.methods.agentic.dynamic import dynamic_check
    from faultfinder.registry import create_method

    program = require_command(run_dir, command)
    # Without --check-below every candidate is replayed from its step, live.
    live, upstreams = live_upstreams(
        run_dir, upstream, trust_run, api_upstream, required=check_below is None
    )

    overrides: dict[str, Any] = {"with_ground_truth": not no_ground_truth}
    if context_budget is not None:
        overrides["context_budget"] = context_budget
    if budget_tokens is not None:
        overrides["budget_tokens"] = budget_tokens
    method = create_method(method_spec, **overrides | parse_settings(settings))
    llm = with_progress(build_llm(**llm_options), None)  # a line per call on a terminal
    result = run_sync(
        dynamic_check(
            run_dir,
            llm,
            method,
            method_label=method_spec,
            command=program,
            upstream=live,
            candidates=n_candidates,
            window=window,
            live_temperature=live_temperature,
            with_ground_truth=not no_ground_truth,
            budget=context_budget,
            check_below=check_below,
            budget_tokens=budget_tokens,
            options=SessionOptions(echo=False, upstreams=upstreams, timeout=replay_timeout),
        )
    )
    branches = [item.branch for item in result.candidates if item.branch]
    reports = {branch: branch_report(branch) for branch in branches}
    if result.replayed and not branches:
        # Nothing was replayed (no candidate, or none could run): say so in the row too.
        result.replayed = False
        result.why += (
            "; nothing was replayed: no candidates were proposed"
            if not result.candidates
            else "; nothing was replayed: no candidate's replay could run"
        )
    if out_path:
        with Path(out_path).open("a", encoding="utf-8") as handle:
            handle.write(result.model_dump_json() + "\n")
    if as_json:
        click.echo(result.model_dump_json(indent=2))
        _check_exit(result, reports, upstreams)
        return
    static = result.static
    stated = "" if result.confidence is None else f" (confidence {result.confidence:.2f})"
    click.echo(
        f"static ({shown_name(result.method)}): {shown_name(static.get('agent'))} "
        f"@ step {static.get('step')}{stated}"
    )
    click.echo(safe(result.why))

    def yes(flag: bool) -> str:
        return "yes" if flag else "no"

    for position, item in enumerate(result.candidates):
        seen = item.observation
        state = (
            item.error
            if seen is None
            else f"expected={yes(seen.satisfies_expected)} recurs={yes(seen.failure_recurs)} "
            f"deviates={yes(seen.deviates)}"
        )
        head = f"{position + 1}. {shown_name(item.agent)} @ step {item.step}"
        replayed = reports.get(item.branch or "")
        if replayed is not None:
            state += f"; {replayed.live_calls} live call(s)"
            if replayed.program_timed_out:
                state += f"; the program FAILED (stopped by --replay-timeout {replay_timeout} s)"
            elif replayed.program_failed:
                state += f"; the program FAILED (exit status {replayed.program_exit_code})"
        click.echo(safe(f"{head} (was #{item.rank + 1}, score {item.score}): {state}"))
    click.echo(f"verdict: {shown_name(result.agent)} @ step {result.step}")
    _check_exit(result, reports, upstreams)


def check_status(result: Any) -> str:
    """The check's one case as in docs/exit-codes.md: 'ok' when it has a readable verdict
    (a candidate judged after its replay, or the static method's readable attribution),
    else the static method's own status ('unparsed', 'error'...), 'unparsed' when it
    named no step at all."""
    if any(item.observation is not None for item in result.candidates):
        return "ok"
    status = str(result.static.get("status") or "ok")
    if status == "no-error-found":
        return "ok"
    if result.step is None or status in exitcodes.UNPARSED_STATUSES:
        return "unparsed" if status == "ok" else status
    return status


def _check_exit(
    result: Any, reports: dict[str, ReplayReport | None], upstreams: dict[str, str]
) -> None:
    """Exit 5 when the check's token budget stopped it, else 4 when a candidate's replayed
    program failed on its own (being stopped after the window is not a failure) or the
    static method errored, else 1 when a candidate's replay could not run at all, else 3
    when the check has no readable verdict (the static method's answer unparsed and no
    candidate judged); live calls that failed are named either way (docs/exit-codes.md)."""
    if result.stopped:
        click.echo(f"exit 5: the check stopped early: {result.stopped}", err=True)
        click.get_current_context().exit(exitcodes.BUDGET_EXCEEDED)
    failed = [r.program_exit_code for r in reports.values() if r is not None and r.program_failed]
    exit_if_replays_failed(len(reports), failed, list(reports), upstreams)
    counts = exitcodes.CaseCounts.of([check_status(result)])
    not_run = [item.error or "no reason given" for item in result.candidates if not item.ran]
    if not_run and not counts.errored:  # no program ran (a bad command...), as `debug`'s 1
        click.echo(
            f"exit {exitcodes.FAILURE}: of {len(result.candidates)} candidates, {len(not_run)} "
            f"could not be replayed ({safe(not_run[0])})",
            err=True,
        )
        click.get_current_context().exit(exitcodes.FAILURE)
    if counts.exit_code:
        static = result.static
        click.echo(
            f"{counts.message('check')} (the static method {shown_name(result.method)} answered "
            f"{static.get('status')!r}; {len(result.candidates)} candidate(s), none judged)",
            err=True,
        )
        click.get_current_context().exit(counts.exit_code)
