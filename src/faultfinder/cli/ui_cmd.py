"""`faultfinder ui`: browse traces, attributions, CHIEF graphs, replays, DoVer results and
evaluations in a local web page (needs the `ui` extra); with `--allow-replay -- COMMAND`,
change a recorded step and replay the program from the page."""

from __future__ import annotations

import asyncio
import shlex
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from faultfinder.cli.common import (
    PORT,
    SECONDS,
    URL,
    build_llm,
    model_options,
    pass_errors,
    read_weights,
    shortlist_weights_option,
)
from faultfinder.cli.handling import InputPath
from faultfinder.cli.kinds import not_a_store, unusable
from faultfinder.cli.proxy_options import api_upstream_option, check_host
from faultfinder.cli.terminal import plural
from faultfinder.errors import ConfigError
from faultfinder.replay.httpserver import is_loopback
from faultfinder.results_store import DEFAULT_RESULTS as RESULTS_STORE

if TYPE_CHECKING:
    from faultfinder.ui.catalog import Catalog

DEFAULT_RESULTS = RESULTS_STORE
PROGRAM_KEY = "faultfinder.ui.program"


class ProgramAfterDashes(click.Command):
    """A command whose arguments after '--' are a program's argv (kept apart from PATHS)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            cut = args.index("--")
            ctx.meta[PROGRAM_KEY] = list(args[cut + 1 :])
            args = args[:cut]
        return super().parse_args(ctx, args)


def free_port(host: str) -> int:
    """A port nobody listens on right now (for --port 0, so the URL printed is right)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def host_headers(host: str) -> tuple[str, ...]:
    """Host header values the app accepts when listening on ``host`` (DNS-rebinding guard):
    the loopback names and the address itself, an IPv6 one in brackets as browsers send it;
    anything when listening beyond loopback (the user was warned)."""
    if not is_loopback(host):
        return ("*",)
    return ("127.0.0.1", "localhost", f"[{host}]" if ":" in host else host)


def judge_args(ctx: click.Context, llm_options: dict[str, Any]) -> tuple[str, ...]:
    """The model options given on this command line, as `verify-edit` takes them (its
    per-call timeout is --call-timeout)."""
    args: list[str] = []
    for param in ctx.command.params:
        name = param.name
        if name not in llm_options or not isinstance(param, click.Option):
            continue
        if ctx.get_parameter_source(name) != ParameterSource.COMMANDLINE:
            continue
        flag = "--call-timeout" if name == "call_timeout" else param.opts[0]
        value = llm_options[name]
        if param.is_flag:
            args += [flag] if value else []
        else:
            args += [flag, str(value)]
    return tuple(args)


@click.command("ui", cls=ProgramAfterDashes)
@click.argument("paths", nargs=-1, required=True, type=InputPath())
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=PORT, default=8765, show_default=True, help="Port (0: any free port).")
@click.option(
    "--allow-run",
    is_flag=True,
    help="Add a button (and the one POST endpoint) that runs --method with --model on a trace.",
)
@click.option(
    "--method",
    "method_spec",
    default=None,
    help="Method the page may run (with --allow-run), e.g. all-at-once or echo:I2.",
)
@shortlist_weights_option
@click.option(
    "--results",
    "results_path",
    default=str(DEFAULT_RESULTS),
    show_default=True,
    envvar="FAULTFINDER_RESULTS",
    help="Results store: attributions saved by `attribute` and run from the page (read at "
    "start; the page appends to it).",
)
@click.option(
    "--allow-replay",
    is_flag=True,
    help="Let the page change a recorded step and replay the program given after '--' "
    "(writes branches and DoVer rows into the run directories).",
)
@click.option(
    "--upstream",
    default=None,
    type=URL,
    help="Endpoint for the live calls of replays (with --allow-replay).",
)
@click.option(
    "--trust-run",
    is_flag=True,
    help="Send replays' live calls (and your key) to the upstream each recording names.",
)
@api_upstream_option
@click.option(
    "--upstream-key-env",
    default=None,
    metavar="VAR",
    help="Environment variable with the upstream's key for replays (default: forward the "
    "program's own key).",
)
@click.option(
    "--replay-timeout", type=SECONDS, default=None, help="Stop each replay after this many seconds."
)
@click.option(
    "--cwd",
    type=InputPath(file_okay=False),
    default=None,
    help="Directory replays run the program in (default: the current one).",
)
@click.option(
    "--check",
    "check_command",
    default=None,
    metavar="COMMAND",
    help="Success checker for replays, as `debug --check` (default: exact match).",
)
@model_options
@pass_errors
def ui(
    paths: tuple[str, ...],
    host: str,
    port: int,
    allow_run: bool,
    method_spec: str | None,
    shortlist_weights: str | None,
    results_path: str,
    allow_replay: bool,
    upstream: str | None,
    trust_run: bool,
    api_upstream: dict[str, str],
    upstream_key_env: str | None,
    replay_timeout: float | None,
    cwd: str | None,
    check_command: str | None,
    **llm_options: Any,
) -> None:
    """Serve a local web UI over the traces and results found under PATHS.

    PATHS may be trace files or directories, recordings (runs/), eval result files,
    DoVer result files, CHIEF graph files and `attribute --json` outputs. Browsing never
    modifies anything; only --allow-run adds an endpoint that runs a method, and only
    --allow-replay one that replays the program given after '--' with a changed step:

    \b
    faultfinder ui runs/ --allow-replay --upstream URL -- python my_team.py "task"

    The program, the upstream (--upstream, or each recording's own with --trust-run), the
    key (an environment variable) and the judge (--model, for "Run N times") come from
    this command line only; the page chooses the recording, the step, the edit and N.
    """
    try:
        from faultfinder.dover.edit_repeats import Program
        from faultfinder.ui.app import UIConfig, create_app
        from faultfinder.ui.jobs import JobRunner
        from faultfinder.ui.replay_jobs import ReplayRunner
        from faultfinder.ui.replay_requests import ReplaySettings
        from faultfinder.ui.scan import build_catalog
        from faultfinder.ui.serve import serve
    except ImportError as exc:
        raise click.ClickException(
            f"the UI needs the 'ui' extra: pip install 'faultfinder[ui]' ({exc.name} missing)"
        ) from None
    check_host(host)
    ctx = click.get_current_context()
    model_given = ctx.get_parameter_source("model") == ParameterSource.COMMANDLINE
    if allow_run and (method_spec is None or not model_given):
        raise click.UsageError("--allow-run needs both --method and --model")
    if not allow_run and method_spec is not None:
        raise click.UsageError("--method only makes sense with --allow-run")
    program: list[str] = ctx.meta.get(PROGRAM_KEY) or []
    dashes = PROGRAM_KEY in ctx.meta
    if allow_replay and not program:
        raise click.UsageError(
            "--allow-replay needs the program to replay after '--', e.g. "
            "faultfinder ui runs/ --allow-replay --upstream URL -- python my_team.py"
        )
    if dashes and not allow_replay:
        raise click.UsageError("a program after '--' is only run with --allow-replay")
    replay_only = {
        "--upstream": upstream is not None,
        "--trust-run": trust_run,
        "--api-upstream": bool(api_upstream),
        "--upstream-key-env": upstream_key_env is not None,
        "--replay-timeout": replay_timeout is not None,
        "--cwd": cwd is not None,
        "--check": check_command is not None,
    }
    if allow_replay and not is_loopback(host):
        raise click.UsageError(
            f"--allow-replay serves on loopback only (not {host}): whoever reaches the page "
            "can run the program"
        )
    if allow_run and not is_loopback(host):
        raise click.UsageError(
            f"--allow-run serves on loopback only (not {host}): whoever reaches the page "
            "can start runs that spend the model's key"
        )
    stray_flags = [flag for flag, given in replay_only.items() if given]
    if stray_flags and not allow_replay:
        raise click.UsageError(f"{', '.join(stray_flags)} only make(s) sense with --allow-replay")
    if not is_loopback(host):
        click.echo(
            f"warning: listening on {host}, not loopback: anyone who can reach this address "
            "can read every trace under the given paths",
            err=True,
        )
    if message := not_a_store(results_path):
        raise ConfigError(message)
    results = Path(results_path)
    catalog = build_catalog(paths, results_file=results)
    found = [(problem.path, problem.reason) for problem in catalog.problems]
    for line in unusable(paths, found):
        click.echo(f"warning: {line}", err=True)
    runner = None
    if allow_run:
        assert method_spec is not None
        read_weights(shortlist_weights)
        runner = JobRunner(
            catalog, method_spec, lambda: build_llm(**llm_options), results, shortlist_weights
        )
    replays = None
    if allow_replay:
        settings = ReplaySettings(
            Program(
                tuple(program),
                upstream,
                trust_run,
                upstream_key_env,
                replay_timeout,
                cwd,
                upstreams=api_upstream,
            ),
            check=check_command,
            judge=(lambda: build_llm(**llm_options)) if model_given else None,
            judge_args=judge_args(ctx, llm_options) if model_given else (),
        )
        replays = ReplayRunner(catalog, settings)
    if port == 0:
        port = free_port(host)
    app = create_app(
        catalog, runner=runner, replays=replays, config=UIConfig(allowed_hosts=host_headers(host))
    )
    click.echo(catalog_summary(catalog))
    if runner is not None:
        click.echo(f"runs enabled: {method_spec} with {llm_options['model']}; results -> {results}")
    if replays is not None:
        live = upstream or ("each recording's own upstream (--trust-run)" if trust_run else None)
        judge = llm_options["model"] if model_given else "none (no 'refuted' verdicts)"
        click.echo(f"replays enabled: {shlex.join(program)}")
        click.echo(
            f"  live calls -> {live}; judge: {judge}"
            if live
            else "  no --upstream: only replays without live calls (no edit) can run"
        )
    shown = f"[{host}]" if ":" in host else host

    def started(_server: object) -> None:
        click.echo(f"serving http://{shown}:{port}/  (Ctrl-C to stop)")
        sys.stdout.flush()

    try:
        asyncio.run(serve(app, host, port, started))
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None
    except KeyboardInterrupt:
        pass


def catalog_summary(catalog: Catalog) -> str:
    """The first line ``ui`` prints: what it found, by kind."""
    found = (
        f"{plural(len(catalog.traces), 'trace')}, "
        f"{plural(len(catalog.attributions), 'attribution')}, "
        f"{plural(len(catalog.evals), 'evaluation')}, "
        f"{plural(len(catalog.dovers), 'DoVer file')}, "
        f"{plural(len(catalog.replays), 'replay')}, {plural(len(catalog.graphs), 'graph')}"
    )
    if catalog.problems:
        found += f"; {plural(len(catalog.problems), 'file')} not shown (listed on the page)"
    return found
