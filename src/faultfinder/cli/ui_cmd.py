"""`faultfinder ui`: browse traces, attributions, CHIEF graphs, replays, DoVer results and
evaluations in a local web page (needs the `ui` extra)."""

from __future__ import annotations

import ipaddress
import socket
import sys
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from faultfinder.cli.common import PORT, build_llm, model_options, pass_errors

DEFAULT_RESULTS = Path(".faultfinder") / "ui-results.jsonl"
LOOPBACK_NAMES = ("localhost",)


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


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command("ui")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
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
@click.option(
    "--results",
    "results_path",
    default=str(DEFAULT_RESULTS),
    show_default=True,
    help="JSONL file that receives attributions run from the page (also read at start).",
)
@model_options
@pass_errors
def ui(
    paths: tuple[str, ...],
    host: str,
    port: int,
    allow_run: bool,
    method_spec: str | None,
    results_path: str,
    **llm_options: Any,
) -> None:
    """Serve a local web UI over the traces and results found under PATHS.

    PATHS may be trace files or directories, recordings (runs/), eval result files,
    DoVer result files, CHIEF graph files and `attribute --json` outputs. Browsing never
    modifies anything; only --allow-run adds an endpoint that runs a method.
    """
    try:
        import uvicorn

        from faultfinder.ui.app import UIConfig, create_app
        from faultfinder.ui.catalog import build_catalog
        from faultfinder.ui.jobs import JobRunner
    except ImportError as exc:
        raise click.ClickException(
            f"the UI needs the 'ui' extra: pip install 'faultfinder[ui]' ({exc.name} missing)"
        ) from None
    ctx = click.get_current_context()
    model_given = ctx.get_parameter_source("model") == ParameterSource.COMMANDLINE
    if allow_run and (method_spec is None or not model_given):
        raise click.UsageError("--allow-run needs both --method and --model")
    if not allow_run and method_spec is not None:
        raise click.UsageError("--method only makes sense with --allow-run")
    if not is_loopback(host):
        click.echo(
            f"warning: listening on {host}, not loopback: anyone who can reach this address "
            "can read every trace under the given paths",
            err=True,
        )
    results = Path(results_path)
    catalog = build_catalog(paths, results_file=results if allow_run else None)
    runner = None
    if allow_run:
        assert method_spec is not None
        runner = JobRunner(catalog, method_spec, lambda: build_llm(**llm_options), results)
    if port == 0:
        port = free_port(host)
    app = create_app(catalog, runner=runner, config=UIConfig(allowed_hosts=host_headers(host)))
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        timeout_keep_alive=5,
        limit_concurrency=64,
        h11_max_incomplete_event_size=16 * 1024,
        timeout_graceful_shutdown=3,
    )
    server = uvicorn.Server(config)
    click.echo(
        f"{len(catalog.traces)} traces, {len(catalog.attributions)} attributions, "
        f"{len(catalog.evals)} evaluations, {len(catalog.dovers)} DoVer files, "
        f"{len(catalog.replays)} replays, {len(catalog.graphs)} graphs"
        + (
            f"; {len(catalog.problems)} files not shown (listed on the page)"
            if catalog.problems
            else ""
        )
    )
    if runner is not None:
        click.echo(f"runs enabled: {method_spec} with {llm_options['model']}; results -> {results}")
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"serving http://{shown}:{port}/  (Ctrl-C to stop)")
    sys.stdout.flush()
    server.run()
