"""`faultfinder verify-edit`: replay one given edit N times and judge it with DoVer's
verdict rules (the command behind the UI's "Run N times"; docs/ui.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from faultfinder.cli.common import COUNT, SECONDS, STEP, TEMPERATURE, build_llm, model_options
from faultfinder.cli.handling import InputPath, pass_errors, program_argv
from faultfinder.cli.proxy_options import (
    api_upstream_option,
    exit_if_replays_failed,
    require_command,
    trust_options,
)
from faultfinder.cli.terminal import safe
from faultfinder.replay.recorder import BRANCHES_DIR, new_run_id, read_meta, safe_child
from faultfinder.replay.session import run_sync
from faultfinder.replay.trust import replay_upstreams


@click.command("verify-edit", context_settings={"ignore_unknown_options": True})
@click.argument("run_dir", type=InputPath(file_okay=False))
@click.option("--at", type=STEP, required=True, help="The step the edit changes (0-based).")
@click.option(
    "--edit-file",
    required=True,
    type=InputPath(dir_okay=False),
    help="The edit: a JSON edit file, as `replay --edit-file` reads (docs/replay.md); a "
    "'message' edit drops the step's tool calls, a 'reply' edit keeps them.",
)
@click.option("--repeats", type=COUNT, default=3, show_default=True, help="Replays of the edit.")
@click.option(
    "--session",
    default=None,
    help="Name of this verification: branches SESSION-r0, SESSION-r1, ... and the row file "
    "RUN_DIR/dover/SESSION.jsonl (default: a new name).",
)
@click.option(
    "--live-temperature",
    type=TEMPERATURE,
    default=0.7,
    show_default=True,
    help="Temperature forced on live calls, so the repeats are samples.",
)
@click.option(
    "--check",
    "check_command",
    default=None,
    metavar="COMMAND",
    help="Success checker, as `debug --check` (default: exact match after normalisation).",
)
@trust_options
@api_upstream_option
@click.option(
    "--upstream-key-env",
    default=None,
    metavar="VAR",
    help="Environment variable with the upstream's key (default: the program's own).",
)
@click.option(
    "--replay-timeout", type=SECONDS, default=None, help="Stop each replay after this many seconds."
)
@click.option(
    "--cwd",
    type=InputPath(file_okay=False),
    default=None,
    help="Directory to run the program in (default: the current one).",
)
@model_options(timeout_flag="--call-timeout", default_shown="no judge")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, callback=program_argv)
@pass_errors
def verify_edit(
    run_dir: str,
    at: int,
    edit_file: str,
    repeats: int,
    session: str | None,
    live_temperature: float,
    check_command: str | None,
    upstream: str | None,
    trust_run: bool,
    api_upstream: dict[str, str],
    upstream_key_env: str | None,
    replay_timeout: float | None,
    cwd: str | None,
    command: tuple[str, ...],
    **llm_options: Any,
) -> None:
    """Replay a recording with one edit, --repeats times, and give it DoVer's verdict.

    \b
    faultfinder verify-edit runs/RUN --at 1 --edit-file fix.json --upstream URL \\
        [--model JUDGE] -- python my_team.py "task"

    Each replay is `faultfinder replay RUN --at K --edit-file FILE` into the branch
    SESSION-r<i>; the row (flip rate, its 95% interval, the verdict: validated, refuted,
    not_applied, unverifiable, inconclusive) is appended to RUN_DIR/dover/SESSION.jsonl,
    which `debug-report` reads. With --model, DoVer's judge says whether each replay
    carried the edit out (without one, a failed edit is inconclusive, never refuted).
    """
    from faultfinder.cli.replay_cmd import warn_dropped_calls
    from faultfinder.dover.checker import check_recorded, make_checker
    from faultfinder.dover.edit_repeats import (
        Attempt,
        Program,
        given_intervention,
        judge_repeats,
        run_attempt,
        verify_config,
        why_not_replayed,
        write_row,
    )
    from faultfinder.dover.replays import unread_text
    from faultfinder.dover.report import aggregate, format_summary
    from faultfinder.errors import ConfigError
    from faultfinder.replay.edits import parse_edit_file, read_edit_file
    from faultfinder.traces.loader import load_traces

    program = require_command(run_dir, command)
    base = Path(run_dir)
    edit = read_edit_file(edit_file)
    spec = parse_edit_file(
        json.loads(Path(edit_file).read_text(encoding="utf-8")), edit_file
    ).model_dump(mode="json", exclude_none=True)
    original = load_traces(base / "trace.json", format="faultfinder")[0]
    if not 0 <= at < len(original.steps):
        raise ConfigError(
            f"{run_dir}: step {at} is not in the recording (0..{len(original.steps) - 1})"
        )
    warn_dropped_calls(base, at, edit)
    name = session or new_run_id("verify-")
    try:
        for number in range(repeats):
            safe_child(base / BRANCHES_DIR, f"{name}-r{number}")
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--session") from None
    meta = read_meta(run_dir)  # a run directory, or a clear error
    ctx = click.get_current_context()
    judged = ctx.get_parameter_source("model") == ParameterSource.COMMANDLINE
    judge = build_llm(**llm_options) if judged else None
    checker = make_checker(check_command)
    upstreams = replay_upstreams(meta, api_upstream, trust_run)
    runs = Program(
        tuple(program), upstream, trust_run, upstream_key_env, replay_timeout, cwd, upstreams
    )

    check = check_recorded(checker, original, str(base))  # once: --check may be slow
    skip = why_not_replayed(check, original.steps[at], spec)
    if skip is not None:
        click.echo(safe(f"not replayed: {skip}"))

    intervention = given_intervention(original, at, spec)

    async def verify() -> Any:
        attempts = []
        for number in range(0 if skip else repeats):
            attempt = Attempt(
                number, f"{name}-r{number}", base / BRANCHES_DIR / f"{name}-r{number}"
            )
            outcome = await run_attempt(
                attempt, base, at, edit, runs, checker, temperature=live_temperature
            )
            if outcome is None:  # could not run at all (no upstream, a bad command...)
                raise ConfigError(attempt.error or "the replay did not run")
            unread = (
                unread_text(intervention, attempt.trace)
                if attempt.edit_applied and attempt.trace is not None
                else None
            )
            state = attempt.error or (
                f"answer {attempt.answer!r}; {unread}: not judged"
                if unread
                else f"answer {attempt.answer!r}, success {attempt.success}"
                if attempt.edit_applied
                else f"answer {attempt.answer!r}; the edit was {attempt.edit_state}: not judged"
            )
            click.echo(safe(f"replay {number + 1}/{repeats} ({attempt.branch_id}): {state}"))
            attempts.append(attempt)
        config = verify_config("faultfinder verify-edit", at, spec, repeats, live_temperature)
        return await judge_repeats(
            original,
            at,
            spec,
            attempts,
            run_dir=base,
            checker=checker,
            judge=judge,
            config=config,
            check=check,
        )

    verdict = run_sync(verify())
    path = write_row(base, name, verdict.row)
    row = verdict.row
    rate = "-" if verdict.flip_rate is None else f"{verdict.flip_rate:.0%}"
    interval = (
        f" (95% CI {verdict.interval[0]:.0%}-{verdict.interval[1]:.0%})" if verdict.interval else ""
    )
    if row.status == "already-succeeded":
        click.echo(safe(f"verdict: none, the run already succeeded ({row.verdict_reason})"))
    else:
        click.echo(
            safe(f"verdict: {row.verdict} ({row.verdict_reason}); flip rate {rate}{interval}")
        )
    click.echo(format_summary(aggregate([row])))
    click.echo(f"rows: {path}")
    exit_if_replays_failed(
        len(row.repeats),
        [r.exit_code for r in row.repeats if r.program_failed],
        [r.branch for r in row.repeats],
        upstreams,
    )
