"""Command-line details of the commands that run a program.

They pass the options they do not know on to it, so a mistyped option before `--` used
to become the program to run: `replay RUN --upstreem URL -- python prog.py` failed with
"Cannot run '--upstreem' ... Check the command after '--'", though the command after
`--` was right. Each now says the option does not exist, with click's usage error (exit
2) and a "did you mean". And `verify-edit --help` says it judges only with a model."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from faultfinder.cli import main

COMMANDS = [
    ["record", "--upstreem", "http://127.0.0.1:9/v1", "--out", "{tmp}/runs"],
    ["replay", "{tmp}/runs/r", "--upstreem", "http://127.0.0.1:9/v1"],
    ["debug", "{tmp}/runs/r", "--upstreem", "http://127.0.0.1:9/v1"],
    ["check", "{tmp}/runs/r", "--upstreem", "http://127.0.0.1:9/v1"],
    ["verify-edit", "{tmp}/runs/r", "--upstreem", "http://127.0.0.1:9/v1"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
def test_a_mistyped_option_is_not_taken_for_the_program(args: list[str], tmp_path: Path) -> None:
    (tmp_path / "runs" / "r").mkdir(parents=True)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    result = CliRunner().invoke(main, [*argv, "--", "python", "-c", "pass"])
    assert result.exit_code == 2, result.output
    assert "No such option '--upstreem'" in result.output, result.output
    assert "--upstream" in result.output  # the "did you mean"
    assert "Cannot run" not in result.output


def test_verify_edit_help_says_it_judges_only_with_a_model() -> None:
    # It showed `[default: local]`, though verify-edit uses a judge only when --model is
    # given on the command line; the other commands keep showing the default they use.
    shown = CliRunner().invoke(main, ["verify-edit", "--help"], terminal_width=200).output
    assert "[default: (no judge)]" in shown and "[default: local]" not in shown
    attribute = CliRunner().invoke(main, ["attribute", "--help"], terminal_width=200).output
    assert "[default: local]" in attribute
