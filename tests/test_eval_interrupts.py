"""Long batch runs stopped by the user: Ctrl-C at any moment ends `eval` promptly, with
exit 1, and leaves nothing held that the next run (`--resume`) would wait on."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faultfinder.eval.cases import plan_methods
from faultfinder.eval.datasets import load_dataset
from faultfinder.eval.runner import EvalOptions, ResultsLock, lock_path, run_eval

EVAL_SET = Path(__file__).parent / "fixtures" / "eval" / "traces.jsonl"


def test_a_cancelled_wait_for_the_results_lock_leaves_the_lock_free(tmp_path: Path) -> None:
    """An eval waiting for another one's lock, then cancelled (Ctrl-C), must not take the
    lock later, when the other eval ends, and hold it for good."""
    out = tmp_path / "r.jsonl"
    holder = ResultsLock(lock_path(out))
    assert holder.try_acquire()

    async def main() -> None:
        job = asyncio.ensure_future(
            run_eval(
                load_dataset(EVAL_SET),
                plan_methods(["random"]),
                None,
                out,
                EvalOptions(progress=False, resume=True),
                executor=_NoCases(),
            )
        )
        await asyncio.sleep(0.3)  # waiting for the holder
        assert not job.done()
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job
        holder.release()  # the other eval ends
        await asyncio.sleep(0.5)  # a waiter left behind would take the lock now
        newcomer = ResultsLock(lock_path(out))
        assert newcomer.try_acquire(), "the cancelled eval took the lock after all"
        newcomer.release()

    asyncio.run(main())


class _NoCases:
    """An executor that is never asked to run anything in the test above."""

    model_name = "none"

    async def run(self, cases: object, stop: object) -> object:  # pragma: no cover
        raise AssertionError("the cancelled eval ran cases")
        yield


@pytest.mark.skipif(os.name != "posix", reason="SIGINT to a child process")
def test_ctrl_c_while_waiting_for_another_eval_exits_at_once(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    holder = ResultsLock(lock_path(out))  # another eval appending to the same file
    assert holder.try_acquire()
    command = [
        sys.executable, "-m", "faultfinder", "eval", str(EVAL_SET), "--method", "random",
        "--out", str(out), "--resume", "--no-progress",
    ]  # fmt: skip
    child = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stderr is not None
        lines = []
        while not any("waiting for another eval" in line for line in lines):
            line = child.stderr.readline()
            assert line, f"the eval ended before waiting: {''.join(lines)}"
            lines.append(line)
        child.send_signal(signal.SIGINT)
        try:
            _, rest = child.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail("Ctrl-C did not end an eval waiting for another one's lock")
        assert child.returncode == 1, "".join(lines) + rest
        assert "Interrupted" in rest
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        holder.release()
    assert not out.exists() or out.read_text() == ""


def slow_local_eval(out: Path, *extra: str) -> subprocess.Popen[str]:
    """`eval` of 30 cases (5 traces x 2 methods x 3 runs) with a slow function model on
    the local executor, in a process of its own."""
    tests = Path(__file__).parent
    env = dict(os.environ, FF_TEST_MODEL_DELAY="0.3")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tests), env.get("PYTHONPATH")) if p)
    command = [
        sys.executable, "-m", "faultfinder", "eval", str(EVAL_SET),
        "--method", "all-at-once,random", "--model", "function:ray_doubles:first_speaker_model",
        "--cache", "none", "--out", str(out), "--runs", "3", "--no-progress", *extra,
    ]  # fmt: skip
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.skipif(os.name != "posix", reason="SIGTERM to a child process")
def test_sigterm_ends_eval_like_ctrl_c_with_143_and_rows_kept(tmp_path: Path) -> None:
    """SIGTERM (a scheduler's stop, `timeout`) ended `eval` with 143 and no word, where
    Ctrl-C says the rows are kept and how to go on; now it says so too, still with 143
    (docs/exit-codes.md), and releases the lock on --out."""
    from faultfinder.eval.rows import read_rows

    out = tmp_path / "r.jsonl"
    child = slow_local_eval(out, "--parallel-cases", "2")
    try:
        for _ in range(600):
            if child.poll() is not None or (out.exists() and out.read_text().count("\n") >= 3):
                break
            time.sleep(0.1)
        assert child.poll() is None, child.communicate()
        child.send_signal(signal.SIGTERM)
        _, stderr = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 143, stderr
    assert f"Terminated (SIGTERM). Finished cases are saved in {out}; rerun with --resume" in (
        stderr
    )
    assert "Traceback" not in stderr
    assert not Path(lock_path(out)).exists()  # released, not left by a killed process
    kept = read_rows(out, repair=True)
    assert 3 <= len(kept) < 30

    resumed = slow_local_eval(out, "--resume", "--parallel-cases", "8")
    _, stderr = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, stderr
    assert len({r.key for r in read_rows(out)}) == 30
