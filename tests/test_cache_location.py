"""Where the response cache goes: `.faultfinder/cache.sqlite` in the working directory
unless `--cache` names another file (or `none`); `$FAULTFINDER_CACHE` replaces only the
default, and the test suite sets it, so its runs leave no cache in the working tree."""

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


def test_the_suite_keeps_its_cache_out_of_the_working_tree() -> None:
    cache = Path(os.environ["FAULTFINDER_CACHE"]).resolve()
    assert not cache.is_relative_to(Path(__file__).resolve().parents[1])
