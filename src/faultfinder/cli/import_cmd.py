"""`faultfinder import`: convert traces from another format into canonical trace files."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import click

from faultfinder.cli.common import URL, LazyHelpOption, pass_errors, strict_option
from faultfinder.cli.handling import InputPath
from faultfinder.cli.kinds import explained, not_a_trace_out
from faultfinder.cli.terminal import plural, safe, shown_name
from faultfinder.errors import ConfigError
from faultfinder.traces.importers import importers
from faultfinder.traces.importers.base import no_steps_reason
from faultfinder.traces.io import write_trace
from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import Trace

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_STEM = 150
"""Longest file stem written (file systems stop at 255 bytes): a longer id is cut and
told apart from others by a hash of the whole id."""


def parse_mapping(items: tuple[str, ...]) -> dict[str, str]:
    """``('agent_field=speaker', ...)`` as importer options."""
    options: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got '{item}'", param_hint="--map")
        options[key.strip()] = value
    return options


def trace_file_name(trace_id: str) -> str:
    """A flat file name for a trace id: 'Hand-Crafted/3' → 'Hand-Crafted__3.json'.

    Flat, so `faultfinder eval DIR` reads the directory back; each id component is reduced
    to safe characters, so an id can never point outside the output directory; an id too
    long for a file name is cut, with a hash of the whole id after the cut.
    """
    parts = [_UNSAFE.sub("_", p) for p in re.split(r"[/\\]", trace_id)]
    parts = [p for p in parts if p.strip("._")] or ["trace"]
    stem = "__".join(parts)
    if len(stem) > _MAX_STEM:
        digest = hashlib.sha256(trace_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        stem = f"{stem[: _MAX_STEM - 17]}-{digest}"
    return stem + ".json"


def write_jsonl(traces: list[Trace], path: Path) -> None:
    """All traces, one canonical JSON object per line (written atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for trace in traces:
            handle.write(trace.model_dump_json(exclude_none=True) + "\n")
    tmp.replace(path)


def write_many(traces: list[Trace], out_dir: Path, *, force: bool = False) -> list[Path]:
    """One file per trace directly under ``out_dir``, named after the trace id. Nothing is
    written when one of them would replace a file ``import`` may not (``not_a_trace_out``)."""
    written: dict[Path, str] = {}
    for trace in traces:
        target = out_dir / trace_file_name(trace.id)
        if target in written:
            raise ConfigError(
                f"Traces '{written[target]}' and '{trace.id}' would both be written to "
                f"{target}; write a .jsonl file with --out instead."
            )
        written[target] = trace.id
        refused = not_a_trace_out(target, force=force, option="--out-dir")
        if refused:
            raise ConfigError(refused)
    for trace, target in zip(traces, written, strict=True):
        write_trace(trace, target)
    return list(written)


def _say_next(traces: list[Trace], files: list[Path], out_dir: str | None) -> None:
    """The command that reads what was written: ``attribute`` on the first file with
    steps (a trace with none has been named in a warning), and for a folder of several,
    ``eval`` on the folder (which scores labelled traces only, unless told)."""
    import shlex

    first = next((f for t, f in zip(traces, files, strict=True) if t.steps), None)
    if first is None:
        return
    hint = f"next: faultfinder attribute {shlex.quote(str(first))} --method shortlist"
    if out_dir is not None and len(files) > 1:
        unlabelled = "" if any(t.label for t in traces) else " --include-unlabelled"
        hint += (
            f"   # one trace; all of them: faultfinder eval {shlex.quote(out_dir)} "
            f"--method shortlist --out results.jsonl{unlabelled}"
        )
    click.echo(safe(hint))


def describe(trace: Trace) -> str:
    """One summary line per imported trace."""
    label = "-"
    if trace.label is not None:
        step = "-" if trace.label.step is None else str(trace.label.step)
        label = f"{shown_name(trace.label.agent or '-')} @ step {step}"
    inputs = ", inputs" if trace.has_inputs else ""
    under = trace.metadata.get("otlp_under")
    where = f"; OTLP under {', '.join(repr(p) for p in under)}" if isinstance(under, list) else ""
    speakers = trace.agent_names()
    roster = [a.name for a in trace.agents] or speakers  # the agents, as the trace lists them
    others = [s for s in speakers if s not in roster]
    named = ", ".join(shown_name(other) for other in others)
    extra = f" (+{len(others)} other speaker(s): {named})" if others else ""
    return (
        f"{shown_name(trace.id)}: {plural(len(trace.steps), 'step')}, "
        f"{plural(len(roster), 'agent')}{extra}{inputs}; "
        f"label {label}{where}"
    )


def warn_if_empty(traces: list[Trace]) -> None:
    """A stderr warning for each trace with no step: the file converted faithfully, but
    nothing in it is a model call, an agent's turn or a tool result, so there is nothing to
    attribute (a non-agent OTLP export, say)."""
    for trace in traces:
        if not trace.steps:
            click.echo(
                f"warning: {shown_name(trace.id)} has no steps: {no_steps_reason(trace)}.", err=True
            )


def _format_help() -> str:
    """--format's help: every importer's summary. Made when the help is shown, not when
    this module is imported: it imports every importer, the plugins' too."""
    return "Input format (default: detect). " + "; ".join(
        f"{name}: {cls.summary}" for name, cls in importers().items()
    )


@click.command("import")
@click.argument("path", type=InputPath(), required=False)
@click.option("--format", "trace_format", default=None, cls=LazyHelpOption, help_text=_format_help)
@click.option(
    "-o",
    "--out",
    "out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Output file: .json for one trace, .jsonl for any number.",
)
@click.option(
    "--out-dir",
    "out_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Output directory: one .json file per trace, named after the trace id.",
)
@click.option(
    "--map",
    "mapping",
    multiple=True,
    metavar="KEY=VALUE",
    help="Importer option, e.g. --map agent_field=speaker (generic) or "
    "--map subset=Hand-Crafted (who-and-when).",
)
@click.option(
    "--from-langfuse",
    "langfuse_trace",
    default=None,
    metavar="TRACE_ID",
    help="Fetch this trace from Langfuse's v2 observations API instead of reading PATH "
    "(needs --langfuse-host and LANGFUSE_PUBLIC_KEY/LANGFUSE_SECRET_KEY).",
)
@click.option(
    "--langfuse-host",
    default=None,
    type=URL,
    help="Langfuse host for --from-langfuse, e.g. https://cloud.langfuse.com.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Overwrite an existing output file that is not a trace faultfinder wrote "
    "(never one of faultfinder's other files, such as eval results).",
)
@strict_option
@pass_errors
def import_traces(
    path: str | None,
    trace_format: str | None,
    out: str | None,
    out_dir: str | None,
    mapping: tuple[str, ...],
    langfuse_trace: str | None,
    langfuse_host: str | None,
    force: bool,
    strict: bool,
) -> None:
    """Convert PATH (a file or directory in another format) into canonical traces.

    Without --out or --out-dir, only prints what would be imported.
    """
    if out and out_dir:
        raise click.UsageError("Use either --out or --out-dir, not both.")
    refused = not_a_trace_out(out, force=force) if out else None
    if refused:
        raise ConfigError(refused)
    options: dict[str, Any] = parse_mapping(mapping)
    if langfuse_trace:
        if path or not langfuse_host:
            raise click.UsageError("--from-langfuse takes no PATH and needs --langfuse-host URL.")
        from faultfinder.traces.importers.langfuse import load_from_langfuse

        traces = load_from_langfuse(langfuse_host, langfuse_trace)
        path = f"langfuse:{langfuse_trace}"
    elif path is None:
        raise click.UsageError("Give a PATH to import (or --from-langfuse TRACE_ID).")
    else:
        with explained(path, "trace", "a trace in a format to import"):
            traces = load_traces(path, format=trace_format, strict=strict, **options)
    warn_if_empty(traces)
    if out:
        target = Path(out)
        if target.suffix == ".jsonl":
            write_jsonl(traces, target)
        elif len(traces) == 1:
            write_trace(traces[0], target)
        else:
            raise ConfigError(
                f"{path} holds {len(traces)} traces; a .json file holds one. Use "
                "--out FILE.jsonl or --out-dir DIR."
            )
        click.echo(f"wrote {len(traces)} trace(s) to {target}")
        if target.suffix != ".jsonl" or len(traces) == 1:
            _say_next(traces, [target], None)
    elif out_dir:
        files = write_many(traces, Path(out_dir), force=force)
        click.echo(f"wrote {len(files)} trace file(s) under {out_dir}")
        _say_next(traces, files, out_dir)
    else:
        for trace in traces:
            click.echo(safe(describe(trace)))
        click.echo(f"{len(traces)} trace(s); nothing written (use --out or --out-dir)")
