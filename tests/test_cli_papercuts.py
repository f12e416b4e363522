"""What a new user's walkthrough tripped on: a folder given where one trace is read, an
unknown preset of a method that has none, and which methods --model none serves."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, ClassVar

from click.testing import CliRunner

from faultfinder.cli import main

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TINY = FIXTURES / "core" / "tiny_trace.json"


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def test_attribute_on_a_folder_of_traces_says_to_give_one_file_or_use_eval(
    tmp_path: Path,
) -> None:
    # It said only "(use 'eval' for many)": not that one file of the folder would do.
    folder = tmp_path / "traces"
    folder.mkdir()
    for name in ("10.json", "2.json"):
        shutil.copy(TINY, folder / name)
    result = invoke("attribute", str(folder), "--method", "random", "--no-save")
    assert result.exit_code == 1
    assert "holds 2 traces; expected one" in result.stderr
    assert f"give one of its files (e.g. {folder / '2.json'})" in result.stderr
    assert "or use 'eval' for many" in result.stderr


def test_attribute_on_a_file_of_several_traces_says_how_to_split_it(tmp_path: Path) -> None:
    lines = tmp_path / "runs.jsonl"
    text = TINY.read_text("utf-8").replace("\n", " ")
    lines.write_text(f"{text}\n{text}\n", "utf-8")
    result = invoke("attribute", str(lines), "--method", "random", "--no-save")
    assert result.exit_code == 1
    assert "holds 2 traces; expected one: use 'eval' for many" in result.stderr
    assert f"faultfinder import {lines} --out-dir DIR" in result.stderr


def test_a_preset_of_a_method_without_presets_says_how_to_set_it() -> None:
    # It said "Unknown method preset 'shortlist:fast'. Available: (none)."
    result = invoke("attribute", str(TINY), "--method", "shortlist:fast", "--no-save")
    assert result.exit_code == 1
    assert "Available: (none)" not in result.stderr
    assert "Method 'shortlist' has no presets" in result.stderr
    assert "--set key=value" in result.stderr and "faultfinder methods shortlist" in result.stderr
    # A method with presets still lists them.
    result = invoke("attribute", str(TINY), "--method", "baseline:fast", "--no-save")
    assert result.exit_code == 1 and "Available: baseline:first-speaker" in result.stderr


def no_model_methods() -> list[str]:
    from faultfinder.registry import methods

    return sorted(name for name, cls in methods().items() if not cls.needs_model)


def test_model_help_lists_every_method_that_calls_no_model() -> None:
    # It said "(random, baseline:*)", written by hand, and left out shortlist.
    expected = no_model_methods()
    assert "shortlist" in expected and "random" in expected and "echo" not in expected
    shown = " ".join(invoke("attribute", "--help").output.split())
    assert f"none: no model, for the methods that call none ({', '.join(expected)};" in shown


def test_a_method_that_calls_no_model_added_later_is_listed_too() -> None:
    from faultfinder.methods.random import RandomMethod
    from faultfinder.registry import METHODS

    class Quiet(RandomMethod):
        name: ClassVar[str] = "quiet"

    METHODS.add("quiet", Quiet)
    try:
        shown = " ".join(invoke("attribute", "--help").output.split())
        refused = invoke("attribute", str(TINY), "--method", "echo", "--model", "none")
    finally:
        METHODS.remove("quiet")
    assert f"({', '.join(sorted([*no_model_methods(), 'quiet']))};" in shown
    assert refused.exit_code == 1
    assert "needs no model: baseline, quiet, random, shortlist." in refused.stderr
