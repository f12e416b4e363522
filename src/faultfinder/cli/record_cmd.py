"""`faultfinder record`: run a program with its model calls recorded (see docs/replay.md)."""

from __future__ import annotations

import sys

import click

from faultfinder.cli.common import SECONDS, URL, pass_errors
from faultfinder.cli.handling import InputPath, program_argv
from faultfinder.cli.proxy_options import (
    PASSTHROUGH,
    proxy_options,
    read_lines,
    session_options,
)
from faultfinder.cli.terminal import plural
from faultfinder.replay.proxy_notes import recording_notes
from faultfinder.replay.session import record_run, run_sync

TIMED_OUT = 124
"""`record`'s exit status for a program stopped by ``--timeout`` (GNU ``timeout``'s)."""


@click.command(context_settings=PASSTHROUGH)
@click.option(
    "--upstream",
    required=True,
    type=URL,
    help="Model endpoint to forward to, e.g. http://127.0.0.1:8080/v1.",
)
@click.option(
    "-o", "--out", default="runs", show_default=True, help="Directory that receives runs/<run-id>/."
)
@click.option(
    "--run-id",
    default=None,
    help="Name of the run directory inside --out (default: timestamp); no path separators.",
)
@click.option("--task", default=None, help="The task, if the first user message is not it.")
@click.option("--ground-truth", default=None, help="Reference answer (enables success checks).")
@click.option(
    "--reference-steps",
    type=InputPath(dir_okay=False),
    default=None,
    help="Text file with a reference solution, one step per line (DoVer milestones).",
)
@click.option("--system", "system_name", default=None, help="Name of the multi-agent system.")
@click.option(
    "--timeout", type=SECONDS, default=None, help="Stop the program after this many seconds."
)
@click.option("--quiet", is_flag=True, help="Do not echo the program's output.")
@proxy_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED, callback=program_argv, required=True)
@pass_errors
def record(
    upstream: str,
    out: str,
    run_id: str | None,
    task: str | None,
    ground_truth: str | None,
    reference_steps: str | None,
    system_name: str | None,
    timeout: float | None,
    quiet: bool,
    api_key_env: str | None,
    api_upstream: dict[str, str],
    host: str,
    port: int,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND with its model calls recorded through a proxy into OUT/<run-id>/.

    \b
    faultfinder record --upstream http://127.0.0.1:8080/v1 -- python my_team.py "task"

    The program gets OPENAI_BASE_URL (and OPENAI_API_BASE) and ANTHROPIC_BASE_URL
    pointing at the proxy, and the variables each installed model-API plugin names;
    Chat Completions, Responses and Messages calls are recorded, and those of every
    plugin's API (docs/plugins.md).
    The run's trace.json is written even when the program fails; the exit status is the
    program's (128+N when signal N killed it, 124 when --timeout stopped it). Model
    calls that failed and requests that are not model calls are reported; a run with no
    step says why.
    """
    outcome = run_sync(
        record_run(
            list(command),
            upstream,
            out,
            run_id=run_id,
            task=task,
            ground_truth=ground_truth,
            reference_steps=read_lines(reference_steps),
            system=system_name,
            options=session_options(
                api_key_env, host, port, quiet, timeout, upstreams=api_upstream
            ),
        )
    )
    trace = outcome.trace
    apis = trace.metadata.get("apis") or []
    over = f" over {', '.join(apis)}" if apis else ""
    status = outcome.child.exit_code
    ended = (
        f"program killed by signal {-status}"
        if status is not None and status < 0
        else f"program exit status {status}"
    )
    if outcome.child.timed_out:
        ended = f"program timed out after {timeout or 0:g} s, stopped: {ended}"
    click.echo(
        f"recorded {plural(len(trace.steps), 'step')} from {plural(len(trace.agents), 'agent')}"
        f"{over} ({ended}) -> {outcome.run_dir}",
        err=True,
    )
    for line in recording_notes(outcome.meta, outcome.run_dir, len(trace.steps)):
        click.echo(line, err=True)
    if trace.metadata.get("outcome"):
        reason = trace.metadata.get("outcome_reason")
        why = f" ({reason})" if reason else ""
        click.echo(
            f"final answer {trace.final_answer!r}: {trace.metadata['outcome']}{why}", err=True
        )
    code = exit_status(outcome.child.exit_code, timed_out=outcome.child.timed_out)
    if code:
        sys.exit(code)


def exit_status(code: int | None, *, timed_out: bool = False) -> int:
    """The status `record` exits with: 124 for a program stopped by ``--timeout``
    (as GNU ``timeout`` reports it), whatever it exited with once stopped (one that
    catches SIGTERM and exits 0 did not finish); else the program's own, or for a program
    killed by signal N (``code`` -N) 128 + N as a shell reports it (137 for SIGKILL, 143
    for SIGTERM), so a signal death is never taken for 1, "could not run"."""
    if timed_out:
        return TIMED_OUT
    if code is None:
        return 0
    return 128 - code if code < 0 else code
