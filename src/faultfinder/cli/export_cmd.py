"""`faultfinder export`: write an attribution back to Phoenix, Langfuse or an OTLP endpoint."""

from __future__ import annotations

import json
from pathlib import Path

import click
from pydantic import ValidationError

from faultfinder.cli.common import URL, pass_errors
from faultfinder.cli.handling import EndpointError, InputPath
from faultfinder.errors import ConfigError
from faultfinder.judging.method import Attribution
from faultfinder.traces.loader import load_trace
from faultfinder.writeback import TARGETS, payload_for
from faultfinder.writeback_http import ExportUnavailableError, receipt, send


def read_attribution(path: Path) -> Attribution:
    try:
        return Attribution.model_validate_json(path.read_text(encoding="utf-8"))
    except (ValidationError, ValueError) as exc:
        raise ConfigError(
            f"{path}: not an attribution (write one with `faultfinder attribute --json`): "
            f"{str(exc).splitlines()[0]}"
        ) from None


@click.command("export")
@click.argument("attribution_file", type=InputPath(dir_okay=False))
@click.argument("trace_path", type=InputPath())
@click.option("--to", "target", type=click.Choice(TARGETS), required=True, help="Where to write.")
@click.option(
    "--url",
    default=None,
    type=URL,
    help="Base URL of the Phoenix server, the Langfuse host, or the OTLP/HTTP endpoint. "
    "Nothing is sent without it.",
)
@click.option(
    "-o",
    "--out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the request body to this file instead of (or as well as) sending it.",
)
@click.option("--format", "trace_format", default=None, help="Trace format (default: detect).")
@pass_errors
def export(
    attribution_file: str,
    trace_path: str,
    target: str,
    url: str | None,
    out: str | None,
    trace_format: str | None,
) -> None:
    """Write ATTRIBUTION_FILE (from `attribute --json`) back onto the spans of TRACE_PATH:
    a Phoenix span annotation, a Langfuse score, or an OTLP span event, on the span of the
    decisive step. Keys come from PHOENIX_API_KEY, LANGFUSE_PUBLIC_KEY/LANGFUSE_SECRET_KEY, or
    (OTLP headers) OTEL_EXPORTER_OTLP_TRACES_HEADERS / OTEL_EXPORTER_OTLP_HEADERS."""
    if url is None and out is None:
        raise click.UsageError("Give --url to send the verdict, or --out to write it to a file.")
    attribution = read_attribution(Path(attribution_file))
    trace = load_trace(trace_path, format=trace_format)
    payload = payload_for(target, attribution, trace)
    if out:
        try:
            Path(out).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--out {out}: cannot write it: {exc.strerror or exc}") from None
        click.echo(f"wrote {target} payload to {out}")
    if url:
        try:
            response = send(target, url, payload)
        except ExportUnavailableError as exc:
            raise EndpointError(str(exc)) from None  # 4: worth trying again later
        click.echo(
            f"{target}: wrote the verdict on step {attribution.step}: "
            f"{receipt(target, payload, response)} ({response.status_code})"
        )
        if target == "phoenix":
            click.echo(
                "phoenix: an earlier verdict of this method on another span of the trace, "
                "if there is one, stays there (Phoenix cannot move an annotation, and export "
                "deletes nothing): this one's metadata says it supersedes it."
            )
