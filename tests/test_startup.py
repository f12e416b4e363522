"""`faultfinder --help` and `faultfinder methods` start fast because of what they do not
import (issue 28). Guarded here by the modules a fresh interpreter has loaded after each,
not by a timing (timings are in bench/startup.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import click
import pytest

from faultfinder.cli import COMMANDS, main

PROBE = """
import json, sys
from faultfinder.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
except SystemExit:
    pass
print("\\nMODULES=" + json.dumps(sorted(sys.modules)))
"""

HEAVY = (
    "openai",
    "httpx",
    "anyio",
    "numpy",
    "matplotlib",
    "tqdm",
    "filelock",
    "faultfinder.replay",
    "faultfinder.llm.openai",
    "faultfinder.llm.local",
    "faultfinder.methods.chief.pipeline",
    "faultfinder.methods.chief.graph",
    "faultfinder.methods.agentic.loop",
    "faultfinder.eval",
    "faultfinder.dover",
    "faultfinder.traces.loader",
    "faultfinder.ui",
)
"""Stacks a listing command has no use for: the OpenAI SDK and its HTTP client, the replay
proxy, CHIEF's pipeline, the agentic loop, the evaluation harness, trace readers."""


def loaded_after(*args: str, cwd: Path) -> list[str]:
    """The modules a fresh interpreter holds after running `faultfinder ARGS`."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=cwd, check=True
    )
    return list(json.loads(done.stdout.rsplit("MODULES=", 1)[1]))


def under(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)]


def test_help_imports_no_command(tmp_path: Path) -> None:
    modules = loaded_after("--help", cwd=tmp_path)
    ours = [m for m in modules if m.startswith("faultfinder")]
    assert ours == ["faultfinder", "faultfinder.cli"], ours
    assert not under(modules, ("pydantic", *HEAVY))


def test_methods_imports_no_method(tmp_path: Path) -> None:
    """The listing reads the shipped cards: no method module, no pydantic."""
    modules = loaded_after("methods", cwd=tmp_path)
    assert "faultfinder.registry" in modules
    assert not under(modules, (*HEAVY, "pydantic", "faultfinder.methods", "faultfinder.judging"))


def test_methods_name_imports_that_method_without_heavy_stacks(tmp_path: Path) -> None:
    modules = loaded_after("methods", "chief", cwd=tmp_path)
    assert "faultfinder.methods.chief" in modules  # its options come from its class
    assert not under(modules, HEAVY), under(modules, HEAVY)  # ... not its pipeline


def test_the_shipped_cards_are_the_classes() -> None:
    """methods/cards.json says what the classes say, for every built-in; regenerate it
    with `python -m faultfinder.cli.methods_cmd` after adding or changing a method."""
    from faultfinder.cli.methods_cmd import card_of, read_cards
    from faultfinder.registry import BUILTIN, METHODS

    shipped = read_cards()
    built_in = {n: e for n, e in METHODS.entries().items() if e.origin == BUILTIN}
    assert set(shipped) == set(built_in)
    for name, entry in built_in.items():
        expected = {"target": entry.target, **card_of(METHODS.get(name))}
        assert shipped[name] == expected, f"{name}: run python -m faultfinder.cli.methods_cmd"


def test_a_method_without_a_card_is_listed_from_its_class() -> None:
    from click.testing import CliRunner

    from faultfinder.methods.random import RandomMethod
    from faultfinder.registry import METHODS

    class Toy(RandomMethod):
        name: ClassVar[str] = "toy"
        summary: ClassVar[str] = "a toy for this test"
        presets: ClassVar[dict[str, dict[str, Any]]] = {"small": {}}

    METHODS.add("toy", Toy)
    try:
        listed = CliRunner().invoke(main, ["methods"])
    finally:
        METHODS.remove("toy")
    assert listed.exit_code == 0, listed.output
    assert "toy              a toy for this test  [presets: small]  (in-process)" in listed.output


def test_a_command_imports_only_its_own_module(tmp_path: Path) -> None:
    modules = loaded_after("methods", "chief", cwd=tmp_path)
    others = {c.module for c in COMMANDS} - {"faultfinder.cli.methods_cmd"}
    assert not set(modules) & others, set(modules) & others


@pytest.mark.parametrize("entry", COMMANDS, ids=[c.name for c in COMMANDS])
def test_the_command_table_matches_each_command(entry: object) -> None:
    """The summary `--help` shows from the table is the one the command would show."""
    from faultfinder.cli import Command

    assert isinstance(entry, Command)
    command = main.get_command(click.Context(main), entry.name)
    assert command is not None and command.name == entry.name
    stand_in = click.Command(entry.name, help=entry.summary)
    for limit in (45, 60, 66):
        assert stand_in.get_short_help_str(limit) == command.get_short_help_str(limit)


def test_help_lists_every_command_and_a_command_still_runs() -> None:
    from click.testing import CliRunner

    shown = CliRunner().invoke(main, ["--help"])
    assert shown.exit_code == 0
    for entry in COMMANDS:
        assert f"  {entry.name} " in shown.output
    listed = CliRunner().invoke(main, ["methods"])
    assert listed.exit_code == 0 and "shortlist" in listed.output and "chief" in listed.output
    unknown = CliRunner().invoke(main, ["atribute"])
    assert unknown.exit_code == 2 and "No such command" in unknown.output
