"""`faultfinder collect`: a local OTLP/HTTP collector writing one canonical trace per trace."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

import click

from faultfinder import exitcodes
from faultfinder.cli.common import COUNT, PORT, SECONDS, pass_errors
from faultfinder.cli.proxy_options import check_host
from faultfinder.collect.collector import Collector, CollectorConfig
from faultfinder.replay.httpserver import LOOPBACK


async def run_collector(config: CollectorConfig, *, max_traces: int | None) -> Collector:
    """Serve until interrupted (or until ``max_traces`` finished traces are written)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    async with Collector(config) as collector:
        click.echo(
            f"collecting OTLP/HTTP on {collector.url}/v1/traces into {config.out_dir} "
            f"(set OTEL_EXPORTER_OTLP_ENDPOINT={collector.url}); Ctrl-C to stop",
            err=True,
        )
        shown = (0, 0, 0, 0)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.2)
            shown = _report(collector, shown)
            if max_traces is not None and len(collector.runs) >= max_traces:
                break
    _report(collector, shown)
    return collector


def _report(collector: Collector, shown: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """Print the files written (stdout), the traces with no step, the problems and the
    refused requests (stderr) since the last call (``shown``: how many of each were
    printed before)."""
    seen, warned, errors, refused = shown
    for path in collector.written[seen:]:
        click.echo(f"wrote {path}")
    for line in collector.warnings[warned:]:
        click.echo(f"warning: {line}.", err=True)
    for line in collector.errors[errors:]:
        click.echo(f"error: {line}", err=True)
    for line in collector.refusals[refused:]:
        click.echo(f"refused: {line}", err=True)
    return (
        len(collector.written),
        len(collector.warnings),
        len(collector.errors),
        len(collector.refusals),
    )


@click.command("collect")
@click.option(
    "-o",
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    required=True,
    help="Directory for the canonical trace files (one <trace id>.json per trace).",
)
@click.option("--host", default=LOOPBACK, show_default=True, help="Interface to listen on.")
@click.option(
    "--port", type=PORT, default=4318, show_default=True, help="TCP port (0 picks a free one)."
)
@click.option(
    "--quiet-seconds",
    type=SECONDS,
    default=2.0,
    show_default=True,
    help="A trace is written once its root span arrived and no span came for this long.",
)
@click.option(
    "--forget-seconds",
    type=SECONDS,
    default=60.0,
    show_default=True,
    help="A written trace leaves memory after this long without a new span; later spans "
    "of it go to OUT/<trace id>.late-<n>.json.",
)
@click.option(
    "--read-timeout",
    type=SECONDS,
    default=30.0,
    show_default=True,
    help="Seconds a client may wait before its next request, then take to send its head, "
    "then its body, before it is disconnected (408 for a request begun).",
)
@click.option(
    "--raw",
    "raw_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also append every export request to this file as OTLP/JSON lines.",
)
@click.option(
    "--max-traces",
    type=COUNT,
    default=None,
    help="Stop after this many traces are written (default: run until interrupted).",
)
@pass_errors
def collect(
    out_dir: str,
    host: str,
    port: int,
    quiet_seconds: float,
    forget_seconds: float,
    read_timeout: float,
    raw_file: str | None,
    max_traces: int | None,
) -> None:
    """Receive OpenTelemetry spans over OTLP/HTTP (/v1/traces, protobuf or JSON) and write one
    canonical trace per finished trace. Traces still open are written on shutdown. Exits 1
    when something received could not be written (a trace file, the --raw copy)."""
    check_host(host)
    if host not in (LOOPBACK, "localhost", "::1"):
        click.echo(
            f"warning: listening on {host}, not loopback: anyone who can reach it can send spans",
            err=True,
        )
    config = CollectorConfig(
        out_dir=Path(out_dir),
        host=host,
        port=port,
        quiet_seconds=quiet_seconds,
        forget_seconds=forget_seconds,
        read_timeout=read_timeout,
        raw_file=Path(raw_file) if raw_file else None,
    )
    collector = asyncio.run(run_collector(config, max_traces=max_traces))
    if collector.errors:
        click.echo(
            f"exit {exitcodes.FAILURE}: {len(collector.errors)} thing(s) received could not be "
            "written (see the errors above); the exporters were answered 200 and will not "
            "send them again",
            err=True,
        )
        click.get_current_context().exit(exitcodes.FAILURE)
