"""Long batch runs stopped by the user: Ctrl-C at any moment ends `eval` promptly, with
exit 1, and leaves nothing held that the next run (`--resume`) would wait on."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
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
