"""Where the response cache goes: `.faultfinder/cache.sqlite` in the working directory
unless `--cache` names another file (or `none`); `$FAULTFINDER_CACHE` replaces only the
default, and the test suite sets it (with the results store's and CHIEF's stage cache's
variables, for module-scoped fixtures too), so its runs leave nothing in the work tree."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.llm import ChatRequest

TINY = Path(__file__).parent / "fixtures" / "core" / "tiny_trace.json"
MODEL = f"function:{Path(__file__).stem}:answer"


def answer(request: ChatRequest) -> str:
    return "Agent Name: Calculator\nStep Number: 2\nReason for Mistake: it added wrong"


def attribute(*extra: str) -> None:
    args = ["attribute", str(TINY), "--method", "all-at-once", "--model", MODEL, "--no-save"]
    result = CliRunner().invoke(main, [*args, *extra])
    assert result.exit_code == 0, result.output


def cached_requests(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        count: int = db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        return count
    finally:
        db.close()


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def test_a_user_without_the_variable_gets_the_working_directory_default(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FAULTFINDER_CACHE")
    attribute()
    assert cached_requests(work / ".faultfinder" / "cache.sqlite") > 0


def test_the_variable_moves_the_default_and_the_flag_still_wins(
    work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    moved, named = tmp_path / "elsewhere" / "c.sqlite", tmp_path / "named.sqlite"
    monkeypatch.setenv("FAULTFINDER_CACHE", str(moved))
    attribute()
    assert cached_requests(moved) > 0
    attribute("--cache", str(named))
    assert cached_requests(named) > 0
    monkeypatch.setenv("FAULTFINDER_CACHE", "none")
    attribute()
    assert list(work.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "named.sqlite", "work"]


SUITE_FILES = ("FAULTFINDER_CACHE", "FAULTFINDER_RESULTS", "FAULTFINDER_CHIEF_STAGES")
"""What moves the files commands write under the working directory by default."""


@pytest.fixture(scope="module")
def module_environment() -> dict[str, str | None]:
    """The variables as a module-scoped fixture sees them: it is set up before any
    test's own fixtures (the shared artefacts of the UI tests run `attribute` there)."""
    return {name: os.environ.get(name) for name in SUITE_FILES}


def test_the_suite_keeps_its_files_out_of_the_working_tree(
    module_environment: dict[str, str | None],
) -> None:
    repository = Path(__file__).resolve().parents[1]
    for seen in (module_environment, {name: os.environ.get(name) for name in SUITE_FILES}):
        for name, value in seen.items():
            assert value, f"{name} is not set"
            assert not Path(value).resolve().is_relative_to(repository), (name, value)
