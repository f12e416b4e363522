"""`faultfinder replay`: re-run a program against its recording, with an edit at a step
(see docs/replay.md)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from faultfinder import exitcodes
from faultfinder.cli.common import COUNT, SECONDS, STEP, TEMPERATURE, pass_errors
from faultfinder.cli.handling import InputPath, program_argv
from faultfinder.cli.proxy_options import (
    choose_upstream,
    note_live_errors,
    proxy_options,
    require_command,
    session_options,
    trust_options,
)
from faultfinder.cli.terminal import safe, shown_name
from faultfinder.errors import FaultfinderError
from faultfinder.replay.edits import Edit, dropped_tool_calls, read_edit_file
from faultfinder.replay.matching import DEFAULT_NORMALISERS, NORMALISERS
from faultfinder.replay.outcome import answers_match
from faultfinder.replay.recorder import load_calls
from faultfinder.replay.replayer import ReplayOptions, recorded_steps
from faultfinder.replay.report import ReplayReport
from faultfinder.replay.session import ReplayOutcome, replay_run, run_sync
from faultfinder.traces.schema import Trace

DIVERGED_EXIT = 3
"""Exit status of a replay that diverged from its recording (policy 'fail')."""


def replay_options(
    at: int | None,
    edit: str | None,
    edit_file: str | None,
    edit_input: str | None,
    edit_input_mode: str,
    on_divergence: str,
    masks: Sequence[str] = (),
    window: int | None = None,
    live_temperature: float | None = None,
    no_normalise: Sequence[str] = (),
) -> ReplayOptions:
    """ReplayOptions from the command-line flags (usage errors for bad combinations)."""
    change: Edit | None = None
    if edit_file:
        if edit is not None or edit_input is not None:
            raise click.UsageError("give one of --edit, --edit-input, --edit-file")
        if edit_file.endswith(".json"):
            change = read_edit_file(edit_file)
        else:
            edit = Path(edit_file).read_text(encoding="utf-8")
    if edit is not None and edit_input is not None:
        raise click.UsageError(
            "give --edit (the step's output) or --edit-input (its instruction), not both"
        )
    if (edit is not None or edit_input is not None or change is not None) and at is None:
        raise click.UsageError("an edit needs --at STEP")
    if change is not None:
        pass
    elif edit is not None:
        change = Edit(output=edit)
    elif edit_input is not None:
        change = Edit(input=edit_input, input_mode=edit_input_mode)  # type: ignore[arg-type]
    overrides: dict[str, Any] = {}
    if live_temperature is not None:
        overrides["temperature"] = live_temperature
    return ReplayOptions(
        at=at,
        edit=change,
        on_divergence=on_divergence,  # type: ignore[arg-type]
        masks=list(masks),
        normalisers=[n for n in DEFAULT_NORMALISERS if n not in set(no_normalise)],
        stop_after_live=window,
        live_overrides=overrides,
    )


def warn_dropped_calls(run_dir: str | Path, at: int | None, edit: Edit | None) -> None:
    """One stderr line when ``edit`` replaces step ``at``'s reply with text alone and the
    recorded reply makes tool calls (a handoff, a delegation): they are dropped. A
    recording that cannot be read is left to the replay's own error."""
    if at is None or edit is None or edit.kind != "output" or edit.tool_calls:
        return
    try:
        steps = recorded_steps(load_calls(run_dir))
    except (FaultfinderError, OSError, ValueError):
        return
    names = dropped_tool_calls(steps[at], edit) if 0 <= at < len(steps) else []
    if names:
        click.echo(
            f"warning: step {at}'s recorded reply makes tool call(s) {', '.join(names)}; "
            "this edit serves its text alone, so they are dropped (a handoff is not made); "
            "to keep them, use an --edit-file of kind 'reply' (the text and the calls) "
            "or 'tool_call'",
            err=True,
        )


def format_report(outcome: ReplayOutcome) -> str:
    """The human-readable summary `replay` prints."""
    lines = report_lines(outcome.report, outcome.branch_dir, outcome.trace)
    report = outcome.report
    state = ""
    if report.program_failed:
        state = " (the program FAILED" + (": timed out)" if report.program_timed_out else ")")
    elif report.program_stopped:
        state = " (stopped: live window used up)"
    lines.append(f"exit status: {outcome.child.exit_code}{state}")
    return "\n".join(lines)


def report_lines(report: ReplayReport, branch_dir: Path, trace: Trace) -> list[str]:
    """The summary of a replay branch (what was replayed, the edit, divergences, every
    request that reached the upstream or was kept from it, the answer): printed by
    `replay` and by `proxy --replay` when it stops."""
    lines = [f"branch:      {branch_dir}"]
    if report.at is None:
        lines.append(
            f"replayed:    {report.reproduced}/{report.recorded_steps} recorded steps reproduced "
            f"(fidelity {report.fidelity:.0%})"
        )
    else:
        lines.append(
            f"replayed:    {report.reproduced}/{report.prefix_steps} steps before step {report.at} "
            "reproduced from the recording"
        )
        if report.edit:
            lines.append(f"edit:        {report.edit_state()} at step {report.at}")
    if report.served_failures:
        lines.append(
            f"errors:      {len(report.served_failures)} recorded failed call(s) answered "
            f"again with their recorded error, not sent upstream (calls {report.served_failures})"
        )
    for position, divergence in enumerate(report.divergences):
        near = "" if divergence.step is None else f" (nearest recorded step {divergence.step})"
        lines.append(
            f"DIVERGED:    call {divergence.agent_call} of {shown_name(divergence.agent)}{near}: "
            f"{divergence.difference} -> {divergence.action}"
        )
        if position == 0 and divergence.diff:
            lines.extend("    " + line for line in divergence.diff.split("\n"))
    if report.missing_steps:
        lines.append(f"missing:     recorded steps never asked for: {report.missing_steps}")
    polls = report.background_requests
    lines.append(
        f"live calls:  {report.live_calls} sent to the upstream ({report.model_calls_live} "
        f"model call(s), {report.extra_calls} matching no recorded request; "
        + (f"{polls} poll(s) or cancel(s) of background calls; " if polls else "")
        + f"{report.passthrough_calls} other request(s))"
    )
    for live in report.live:
        what = live.described()
        step = "" if live.step is None else f", step {live.step}"
        answer = "no answer (upstream unreachable)" if live.status is None else live.status
        lines.append(f"    {live.method} {live.path} ({what}{step}) -> {answer}")
    if report.blocked:
        blocked = ", ".join(f"{b.method} {b.path}" for b in report.blocked)
        lines.append(
            f"not sent:    {len(report.blocked)} request(s) that are not model calls "
            f"(no --upstream named): {blocked}"
        )
    if report.apis:
        lines.append("apis:        " + ", ".join(f"{k} {v}" for k, v in report.apis.items()))
    if report.window_reached:
        lines.append("window:      live window used up; the program was stopped")
    if report.normalised_fields:
        fields = ", ".join(f"{k} ({'/'.join(v)})" for k, v in report.normalised_fields.items())
        lines.append(f"normalised:  {fields}")
    lines.append(f"steps:       {len(trace.steps)} in the branch trace")
    verdict = ""
    if trace.ground_truth is not None and trace.final_answer is not None:
        verdict = (
            " (matches the reference)"
            if answers_match(trace.final_answer, trace.ground_truth)
            else " (does not match the reference)"
        )
    failure = trace.metadata.get("program_failure")
    if failure:
        verdict += f" (not a success: {failure})"
    lines.append(f"answer:      {trace.final_answer!r}{verdict}")
    return lines


def replay_exit(report: ReplayReport, on_divergence: str) -> int:
    """1 when the edit could not be applied at its step (it did not fit the recorded
    step), else 3 when the program diverged (policy 'fail'), else 4 when the replayed
    program failed (non-zero exit or timeout), else 1 when an edit was asked for and never
    applied (a replay that tested nothing is not a pass), else 0 (docs/exit-codes.md)."""
    if report.edit_error:
        return exitcodes.FAILURE
    if report.divergences and on_divergence == "fail":
        return DIVERGED_EXIT
    if report.program_failed:
        return exitcodes.ERRORED
    if report.edit is not None and not report.edit_applied:
        return exitcodes.FAILURE
    return exitcodes.OK


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("run_dir", type=InputPath(file_okay=False))
@click.option(
    "--at", type=STEP, default=None, help="Step (0-based, as in trace.json) from which to go live."
)
@click.option(
    "--edit",
    default=None,
    help="Replacement text for step --at's output, served alone: the step's recorded tool "
    "calls (a handoff) are dropped; an edit file of kind 'reply' keeps them.",
)
@click.option(
    "--edit-file",
    type=InputPath(dir_okay=False),
    default=None,
    help="The edit from a file: a .json file is an edit object (any kind of step: message, "
    "reply, tool_call, tool_result, input; see docs/replay.md), any other file is --edit's text.",
)
@click.option(
    "--edit-input", default=None, help="Replacement instruction in step --at's request (sent live)."
)
@click.option(
    "--edit-input-mode",
    type=click.Choice(["replace-last-user", "append-user"]),
    default="replace-last-user",
    show_default=True,
    help="How --edit-input changes the request.",
)
@click.option(
    "--on-divergence",
    type=click.Choice(["fail", "live"]),
    default="fail",
    show_default=True,
    help="A call matching no recorded call: refuse it and stop (exit 3), or go live.",
)
@click.option(
    "--mask",
    "masks",
    multiple=True,
    metavar="REGEX",
    help="Ignore matches of REGEX when matching calls and naming agents.",
)
@click.option(
    "--no-normalise",
    "no_normalise",
    multiple=True,
    type=click.Choice(list(NORMALISERS)),
    help="Switch off a built-in normaliser of volatile text (all are on by default).",
)
@click.option(
    "--window", type=COUNT, default=None, help="Stop the program after this many steps from --at."
)
@click.option(
    "--live-temperature",
    type=TEMPERATURE,
    default=None,
    help="Force this temperature on live calls.",
)
@trust_options
@click.option("--branch-id", default=None, help="Name of the branch directory.")
@click.option(
    "--cwd",
    type=InputPath(file_okay=False),
    default=None,
    help="Directory to run the program in (default: the current one; never the recorded one).",
)
@click.option(
    "--timeout", type=SECONDS, default=None, help="Stop the program after this many seconds."
)
@click.option("--quiet", is_flag=True, help="Do not echo the program's output.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the replay report as JSON (alone on stdout: the program's output is not "
    "echoed, it is in the branch's stdout.txt and stderr.txt).",
)
@proxy_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED, callback=program_argv)
@pass_errors
def replay(
    run_dir: str,
    at: int | None,
    edit: str | None,
    edit_file: str | None,
    edit_input: str | None,
    edit_input_mode: str,
    on_divergence: str,
    masks: tuple[str, ...],
    no_normalise: tuple[str, ...],
    window: int | None,
    live_temperature: float | None,
    upstream: str | None,
    trust_run: bool,
    branch_id: str | None,
    cwd: str | None,
    timeout: float | None,
    quiet: bool,
    as_json: bool,
    api_key_env: str | None,
    api_upstream: dict[str, str],
    host: str,
    port: int,
    command: tuple[str, ...],
) -> None:
    """Re-run a program against a recording, answering from the recording up to --at,
    applying the edit there, and going live after; the result is a branch of the run.

    \b
    faultfinder replay runs/RUN --at 7 --edit "new message" -- python my_team.py "task"

    The program is the one given after '--'; the command stored in the run directory is
    shown for reference and never run. Without --at every recorded call is replayed (a
    fidelity check); a call matching no recorded one is refused and the exit status is 3;
    a replayed program that fails (non-zero exit, timeout) makes the exit status 4.
    Every request that reaches the upstream is counted and listed.
    """
    program = require_command(run_dir, command)
    options = replay_options(
        at,
        edit,
        edit_file,
        edit_input,
        edit_input_mode,
        on_divergence,
        masks,
        window,
        live_temperature,
        no_normalise,
    )
    warn_dropped_calls(run_dir, at, options.edit)
    needs_live = at is not None or on_divergence == "live"
    trusted = trust_run
    if needs_live:
        upstream, trusted = choose_upstream(run_dir, upstream, trust_run)
    outcome = run_sync(
        replay_run(
            run_dir,
            program,
            options,
            upstream=upstream,
            trust_run=trusted,
            branch_id=branch_id,
            options=session_options(
                api_key_env, host, port, quiet or as_json, timeout, cwd, upstreams=api_upstream
            ),
        )
    )
    if as_json:
        click.echo(outcome.report.model_dump_json(indent=2))
    else:
        click.echo(safe(format_report(outcome)))
    code = replay_exit(outcome.report, on_divergence)
    note_live_errors([outcome.branch_dir], outcome.meta.upstreams)
    if outcome.report.edit_error:
        click.echo(
            f"exit {code}: the edit could not be applied at step {at}: {outcome.report.edit_error}",
            err=True,
        )
    elif code == DIVERGED_EXIT:
        click.echo(f"exit 3: the program diverged from the recording ({run_dir})", err=True)
    elif code == exitcodes.FAILURE:
        click.echo(
            f"exit {code}: the edit was {outcome.report.edit_state()}, so this replay tested "
            "nothing (for a tool_result edit, check its tool_call_id or index)",
            err=True,
        )
    elif code:
        click.echo(
            f"exit {code}: the replayed program failed (exit status "
            f"{outcome.report.program_exit_code})",
            err=True,
        )
    if code:
        sys.exit(code)
