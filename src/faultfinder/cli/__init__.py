"""The `faultfinder` command. Each subcommand lives in its own module, listed here and
imported only when it runs (or its own --help is asked for), so `faultfinder --help` and a
command's start-up pay only for what that command uses (tests/test_startup.py)."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, NamedTuple

import click

from faultfinder import __version__


class Command(NamedTuple):
    """One subcommand, not yet imported."""

    name: str
    """What users type."""
    module: str
    """The module that defines it."""
    attr: str
    """The click command in that module."""
    summary: str
    """The first line of its help, for `faultfinder --help` (kept equal to the command's
    own by tests/test_startup.py)."""


# Add a line to add a command.
COMMANDS: list[Command] = [
    Command(
        "attribute",
        "faultfinder.cli.attribute",
        "attribute",
        "Find the responsible agent and decisive step of a failed trace.",
    ),
    Command(
        "methods",
        "faultfinder.cli.methods_cmd",
        "list_methods",
        "List attribution methods and their presets; with NAME, that method's options.",
    ),
    Command(
        "graph",
        "faultfinder.cli.graph_cmd",
        "graph",
        "Build CHIEF's hierarchical causal graph of a trace.",
    ),
    Command(
        "record",
        "faultfinder.cli.record_cmd",
        "record",
        "Run COMMAND with its model calls recorded through a proxy into OUT/<run-id>/.",
    ),
    Command(
        "proxy",
        "faultfinder.cli.proxy_cmd",
        "proxy",
        "Run the recording proxy until interrupted; point OPENAI_BASE_URL at it.",
    ),
    Command(
        "replay",
        "faultfinder.cli.replay_cmd",
        "replay",
        "Re-run a program against a recording, answering from the recording up to --at, "
        "applying the edit there, and going live after; the result is a branch of the run.",
    ),
    Command(
        "serve-local",
        "faultfinder.cli.proxy_cmd",
        "serve_local",
        "Serve a faultfinder model (default: the embedded one) as an OpenAI-compatible "
        "endpoint, so unmodified agent programs run offline.",
    ),
    Command(
        "debug",
        "faultfinder.cli.debug_cmd",
        "debug",
        "DoVer: segment the recorded run into trials, hypothesise a failure per trial, generate "
        "an intervention, replay it (--repeats times) and give each hypothesis a verdict: "
        "validated, partially validated, refuted, inconclusive, not_applied or unverifiable "
        "(docs/methods/dover.md states the rules).",
    ),
    Command(
        "debug-report",
        "faultfinder.cli.debug_cmd",
        "debug_report",
        "Aggregate DoVer result rows: trial success rate, progress made, verdicts.",
    ),
    Command(
        "verify-edit",
        "faultfinder.cli.verify_edit_cmd",
        "verify_edit",
        "Replay a recording with one edit, --repeats times, and give it DoVer's verdict.",
    ),
    Command(
        "check",
        "faultfinder.cli.check_cmd",
        "check",
        "TraceElephant's dynamic agentic check: replay each candidate step with a correction, "
        "watch the next --window steps, and re-rank the candidates.",
    ),
    Command(
        "label",
        "faultfinder.cli.label_cmd",
        "label",
        "Write the decisive step of a failed run into its trace (for `calibrate` and `eval`).",
    ),
    Command(
        "calibrate",
        "faultfinder.cli.calibrate_cmd",
        "calibrate",
        "Calibrate the shortlist's step sets on labelled failures of your own framework.",
    ),
    Command(
        "import",
        "faultfinder.cli.import_cmd",
        "import_traces",
        "Convert PATH (a file or directory in another format) into canonical traces.",
    ),
    Command(
        "collect",
        "faultfinder.cli.collect_cmd",
        "collect",
        "Receive OpenTelemetry spans over OTLP/HTTP (/v1/traces, protobuf or JSON) and write "
        "one canonical trace per finished trace.",
    ),
    Command(
        "export",
        "faultfinder.cli.export_cmd",
        "export",
        "Write ATTRIBUTION_FILE (from `attribute --json`) back onto the spans of TRACE_PATH: a "
        "Phoenix span annotation, a Langfuse score, or an OTLP span event, on the span of the "
        "decisive step.",
    ),
    Command(
        "demo",
        "faultfinder.cli.demo",
        "demo",
        "Attribute a bundled failed trace beside the floors, then replay a failing team with "
        "the fix and watch it flip — offline, no key, no model to install.",
    ),
    Command(
        "eval",
        "faultfinder.cli.eval_cmd",
        "eval_command",
        "Run methods over a dataset, write one result row per case, print a summary.",
    ),
    Command(
        "report",
        "faultfinder.cli.report_cmd",
        "report_command",
        "Accuracy tables (per subset, mean ± std over runs, 95% intervals, floors) from eval "
        "result files; then step sets, calibration and prompt tokens with the prefix cache.",
    ),
    Command(
        "ui",
        "faultfinder.cli.ui_cmd",
        "ui",
        "Serve a local web UI over the traces and results found under PATHS.",
    ),
]


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use, from :data:`COMMANDS`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = {c.name: c for c in COMMANDS}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.lazy, *self.commands})

    def invoke(self, ctx: click.Context) -> Any:
        """The command, with output piped into a reader that stopped (``| head``) ending
        quietly with 141 (128 + SIGPIPE), as a shell reports any program stopped that way,
        rather than click's 1, which here means "could not run"."""
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            from faultfinder.exitcodes import PIPE_CLOSED

            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # nothing more to flush at exit
            raise click.exceptions.Exit(PIPE_CLOSED) from None

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            entry = self.lazy[cmd_name]
            command = getattr(importlib.import_module(entry.module), entry.attr)
            self.add_command(command, cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from the table, without importing a command."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            if name in self.lazy and name not in self.commands:
                stand_in = click.Command(name, help=self.lazy[name].summary)
                text = stand_in.get_short_help_str(limit)
            else:
                command = self.commands[name]
                if command.hidden:
                    continue
                text = command.get_short_help_str(limit)
            rows.append((name, text))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup)
@click.version_option(__version__, prog_name="faultfinder")
def main() -> None:
    """faultfinder: which agent, at which step, caused this multi-agent run to fail?"""
