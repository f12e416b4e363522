"""The commands that run a program pass the options they do not know on to it, so a
mistyped option before `--` used to become the program to run: `replay RUN --upstreem
URL -- python prog.py` failed with "Cannot run '--upstreem' ... Check the command after
'--'", though the command after `--` was right. Each now says the option does not exist,
with click's usage error (exit 2) and a "did you mean"."""

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
