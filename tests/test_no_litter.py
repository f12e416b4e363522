"""Leave no litter (issue 28): an eval removes its lock file when it ends, without giving
up the mutual exclusion the lock is for."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.eval.runner import ResultsLock, lock_path

EVAL_SET = str(Path(__file__).parent / "fixtures" / "eval" / "traces.jsonl")


def test_eval_leaves_only_its_results(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    args = ["eval", EVAL_SET, "--method", "random", "--out", str(out), "--no-progress"]
    assert CliRunner().invoke(main, args).exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.jsonl"]
    again = CliRunner().invoke(main, [*args, "--resume"])  # a resumed eval too
    assert again.exit_code == 0, again.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.jsonl"]


def test_the_lock_excludes_and_its_file_goes_with_the_last_holder(tmp_path: Path) -> None:
    path = lock_path(tmp_path / "r.jsonl")
    first, second = ResultsLock(path), ResultsLock(path)
    assert first.try_acquire()
    assert Path(path).exists()
    assert not second.try_acquire()
    first.release()
    assert not Path(path).exists()
    assert second.try_acquire()
    second.release()
    assert not Path(path).exists()


def test_a_waiter_on_a_removed_lock_file_takes_the_current_one(tmp_path: Path) -> None:
    """The race that makes removing lock files unsafe elsewhere: a waiter blocked on the
    old file gets it when the holder releases; it must not then hold a lock that a newcomer
    can also take on a new file of the same name."""
    path = lock_path(tmp_path / "r.jsonl")
    holder, waiter, newcomer = ResultsLock(path), ResultsLock(path), ResultsLock(path)
    assert holder.try_acquire()
    got = threading.Event()

    def wait() -> None:
        waiter.acquire()
        got.set()

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.2)  # the waiter has opened the holder's file and blocks on it
    assert not got.is_set()
    holder.release()
    thread.join(timeout=10)
    assert got.is_set()
    assert not newcomer.try_acquire()  # the waiter holds the lock on the current file
    waiter.release()
    assert newcomer.try_acquire()
    newcomer.release()
    assert not Path(path).exists()
