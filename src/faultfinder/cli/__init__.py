"""The `faultfinder` command. Each subcommand lives in its own module, listed here."""

from __future__ import annotations

import importlib

import click

from faultfinder import __version__

# (module, attribute) of each subcommand; add a line to add a command.
COMMANDS: list[tuple[str, str]] = [
    ("faultfinder.cli.attribute", "attribute"),
    ("faultfinder.cli.attribute", "list_methods"),
    ("faultfinder.cli.graph_cmd", "graph"),
    ("faultfinder.cli.replay_cmd", "record"),
    ("faultfinder.cli.replay_cmd", "proxy"),
    ("faultfinder.cli.replay_cmd", "replay"),
    ("faultfinder.cli.replay_cmd", "serve_local"),
    ("faultfinder.cli.replay_cmd", "debug"),
    ("faultfinder.cli.replay_cmd", "debug_report"),
    ("faultfinder.cli.replay_cmd", "check"),
    ("faultfinder.cli.import_cmd", "import_traces"),
    ("faultfinder.cli.collect_cmd", "collect"),
    ("faultfinder.cli.export_cmd", "export"),
    ("faultfinder.cli.demo", "demo"),
    ("faultfinder.cli.eval_cmd", "eval_command"),
    ("faultfinder.cli.eval_cmd", "report_command"),
    ("faultfinder.cli.ui_cmd", "ui"),
]


@click.group()
@click.version_option(__version__, prog_name="faultfinder")
def main() -> None:
    """faultfinder: which agent, at which step, caused this multi-agent run to fail?"""


for _module, _attr in COMMANDS:
    main.add_command(getattr(importlib.import_module(_module), _attr))
