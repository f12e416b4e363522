"""Run methods × traces × repeats, writing one durable result row per case.

An executor runs the cases (:mod:`faultfinder.eval.cases`) and hands back each finished
row: :class:`LocalExecutor` runs them as tasks in this process under a semaphore (the LLM
layer separately limits concurrent model calls); ``faultfinder.scale.ray_eval.RayExecutor``
runs them on a Ray cluster. Either way this process alone writes the results file: each
finished case is appended, flushed and fsynced at once, so a killed run loses only the
cases in flight, and ``resume`` runs only the missing ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from filelock import FileLock, Timeout
from pydantic import BaseModel, Field
from tqdm import tqdm

try:
    import fcntl
except ImportError:  # Windows: no flock (ResultsLock falls back to filelock)
    fcntl = None  # type: ignore[assignment]

from faultfinder.errors import ConfigError, EndpointSetupError
from faultfinder.eval.cases import Case, MethodPlan, plan_cases, run_case
from faultfinder.eval.rows import (
    FAILED_STATUSES,
    EvalRow,
    ResultsFileError,
    RowWriter,
    latest_by_key,
    read_rows,
)
from faultfinder.judging.why import why
from faultfinder.llm.client import LLM
from faultfinder.shortlist.sets import DEFAULT_LEVEL
from faultfinder.traces.schema import Trace

LOCK_POLL_S = 0.2
"""How often an eval waiting for another one's lock on the results file tries again."""


class EvalOptions(BaseModel):
    """How an evaluation runs."""

    runs: int = Field(default=1, ge=1)
    """Repeats per (trace, method); each is a distinct cache entry and random draw."""
    concurrency: int = Field(default=8, ge=1)
    """Cases in progress at once."""
    resume: bool = False
    """Continue an existing results file: skip cases whose row is already there."""
    force: bool = False
    """Overwrite an existing non-empty results file."""
    retry_errors: bool = True
    """With ``resume``, run again cases whose row has status 'error' or was stopped by the
    run's budget (a case over its own ``budget_tokens`` is kept: :func:`final_row`)."""
    progress: bool = True
    """Show a progress bar on stderr."""
    step_set: float | None = DEFAULT_LEVEL
    """Coverage level of every row's step set (0.8, 0.9, 0.95; None: no sets). Not part
    of a row's key: ``resume`` keeps rows written at another level (the report shows each
    level apart)."""
    step_set_weights: str | None = None
    """Shortlist weights file the step sets come from (None: the shipped one;
    ``--shortlist-weights``, e.g. a file ``faultfinder calibrate`` wrote)."""


@dataclass(repr=False)
class EvalOutcome:
    """What an evaluation did."""

    planned: int
    """Cases in the plan."""
    skipped: int
    """Cases already in the results file (resume)."""
    ran: int = 0
    """Cases run and written now."""
    rows: list[EvalRow] = field(default_factory=list)
    """The latest row of every planned case present in the file afterwards."""
    stopped: str | None = None
    """Why the run stopped early (budget exhausted), or None when it finished."""

    @property
    def missing(self) -> int:
        return self.planned - len(self.rows)

    def __repr__(self) -> str:
        # Short on purpose: asyncio.run formats the finished task's result when it
        # restores the SIGINT handler, and the rows' full repr costs tens of milliseconds.
        return (
            f"EvalOutcome(planned={self.planned}, skipped={self.skipped}, ran={self.ran}, "
            f"rows={len(self.rows)}, stopped={self.stopped!r})"
        )


def prepare_output(path: Path, options: EvalOptions) -> dict[str, EvalRow]:
    """Check the results file may be written; return its existing rows by key."""
    if options.resume and options.force:
        raise ConfigError("Pass either --resume (continue the file) or --force (overwrite it).")
    if not path.exists() or path.stat().st_size == 0:
        return {}
    if options.force:
        path.write_bytes(b"")
        return {}
    if not options.resume:
        raise ResultsFileError(
            f"{path} already holds results. Pass --resume to continue it (only missing cases "
            "run) or --force to overwrite it, or choose another --out."
        )
    return latest_by_key(read_rows(path, repair=True))


def stops_run(row: EvalRow) -> bool:
    """Whether this row ends the run: the run-wide budget is spent, so no further case may
    start. A case stopped by its own ``budget_tokens`` does not end the run."""
    return row.status == "budget-exceeded" and row.budget_stop != "case"


def final_row(row: EvalRow) -> bool:
    """Whether a row is a final answer for its case (not rerun by ``--resume``): every
    row but an error or a run-wide budget stop. A case over its own ``budget_tokens``
    would be over it again; raising the budget is a new configuration (a new key)."""
    return row.status not in FAILED_STATUSES or (
        row.status == "budget-exceeded" and row.budget_stop == "case"
    )


class CaseExecutor(Protocol):
    """Runs cases and yields each one's row as it finishes, in any order.

    An executor sets ``stop`` as soon as a row :func:`stops_run`, before it starts
    another case, and starts no case once ``stop`` is set. A case refused by the
    endpoint's setup (:class:`~faultfinder.errors.EndpointSetupError`: the key, the model
    name) has no row: the executor raises that error and starts no other case.
    """

    @property
    def model_name(self) -> str:
        """The model's name, as result keys and rows carry it."""
        ...

    def run(self, cases: Sequence[Case], stop: asyncio.Event) -> AsyncIterator[EvalRow]:
        """Rows of ``cases``; once ``stop`` is set, cases not yet started are dropped."""
        ...


class LocalExecutor:
    """Cases as tasks of this process's event loop, ``concurrency`` at a time."""

    def __init__(self, llm: LLM, concurrency: int = 8) -> None:
        if concurrency < 1:
            raise ConfigError("concurrency must be at least 1")
        self.llm = llm
        self.concurrency = concurrency

    @property
    def model_name(self) -> str:
        return self.llm.name

    async def run(self, cases: Sequence[Case], stop: asyncio.Event) -> AsyncIterator[EvalRow]:
        semaphore = asyncio.Semaphore(self.concurrency)

        async def one(case: Case) -> EvalRow | None:
            async with semaphore:
                if stop.is_set():
                    return None
                try:
                    row = await run_case(case, self.llm)
                except EndpointSetupError:
                    stop.set()
                    raise
                if stops_run(row):
                    stop.set()
                return row

        tasks = [asyncio.ensure_future(one(case)) for case in cases]
        try:
            for finished in asyncio.as_completed(tasks):
                row = await finished
                if row is not None:
                    yield row
        finally:
            for task in tasks:
                task.cancel()


async def run_eval(
    traces: Sequence[Trace],
    plans: Sequence[MethodPlan],
    llm: LLM | None,
    out: str | Path,
    options: EvalOptions | None = None,
    *,
    executor: CaseExecutor | None = None,
) -> EvalOutcome:
    """Run every case not yet in ``out`` and append its row.

    Cases run on ``executor`` (default: a :class:`LocalExecutor` over ``llm``). A method
    that raises (a bug) gives an 'error' row and the batch goes on. When the token or
    call budget runs out, no new case starts, the cases in flight finish, and
    ``EvalOutcome.stopped`` says so; rows written so far stay. When the endpoint refuses
    the run's setup (a wrong key, no access, an unknown model: every case would fail the
    same way), the batch stops at once with a :class:`ConfigError` saying what to fix;
    the rows written so far stay, for ``resume``. Evals appending to the same
    file are serialised by a lock file next to it (``<out>.lock``): a second one waits,
    then continues from the rows the first wrote (with ``resume``).
    """
    opts = options or EvalOptions()
    if executor is None:
        if llm is None:
            raise ConfigError("run_eval needs an LLM or an executor.")
        executor = LocalExecutor(llm, opts.concurrency)
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = ResultsLock(lock_path(path))
    if not lock.try_acquire():
        # Another eval appends to this file: wait for it, then resume from what it wrote,
        # instead of both running (and writing) the same cases.
        print(f"waiting for another eval writing to {path} to finish...", file=sys.stderr)
        # Polled, not a blocking wait in a thread: Ctrl-C (a cancelled task) must end the
        # wait at once, and a thread left blocked on the lock would hang the exit until
        # the other eval ends, then take the lock and never let it go.
        while not lock.try_acquire():
            await asyncio.sleep(LOCK_POLL_S)
    try:
        return await _run_locked(traces, plans, executor, path, opts)
    finally:
        lock.release()


def lock_path(results: Path) -> str:
    """The lock file that serialises evals appending to ``results``."""
    return str(results.with_name(results.name + ".lock"))


def lock_held(path: str | Path) -> bool | None:
    """Whether an eval holds the lock file ``path`` now (True), or nobody does (False:
    one killed outright left it behind); None where that cannot be told (no ``flock``, or
    the file cannot be opened). The probe takes a shared lock for an instant: an eval
    starting in that instant waits for it, as it would for another eval."""
    if fcntl is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)  # closing releases the probe's lock
    return False


class ResultsLock:
    """An exclusive lock on ``<out>.lock`` that removes the file when released, so an eval
    leaves nothing behind.

    Removing a lock file is safe only if every holder checks, after locking, that the path
    still names the file it locked: a waiter blocked on the old file gets the lock once
    the holder removes and releases it, finds the path gone (or a new file there), and
    tries again on the current one. So two evals can never both hold the lock on two
    different files of the same name. Where ``flock`` is missing (Windows), a ``filelock``
    lock is used instead, and its file is left in place.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        self._fallback: FileLock | None = None if fcntl is not None else FileLock(path)

    def try_acquire(self) -> bool:
        """Take the lock if it is free; False if another eval holds it."""
        return self._acquire(blocking=False)

    def acquire(self) -> None:
        """Wait for the lock (in any thread; it is not tied to the thread that takes it)."""
        self._acquire(blocking=True)

    def _acquire(self, blocking: bool) -> bool:
        if self._fallback is not None:
            try:
                self._fallback.acquire(timeout=-1 if blocking else 0)
            except Timeout:
                return False
            return True
        assert fcntl is not None
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(fd)
                return False
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                self._fd = fd
                return True
            os.close(fd)  # the holder removed this file as it released it: take the new one

    def release(self) -> None:
        """Remove the lock file, then release the lock."""
        if self._fallback is not None:
            self._fallback.release()
            return
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(fd)


async def _run_locked(
    traces: Sequence[Trace],
    plans: Sequence[MethodPlan],
    executor: CaseExecutor,
    path: Path,
    opts: EvalOptions,
) -> EvalOutcome:
    existing = prepare_output(path, opts)
    cases = plan_cases(
        traces, plans, opts.runs, executor.model_name, opts.step_set, opts.step_set_weights
    )
    if len({c.key for c in cases}) != len(cases):
        raise ConfigError("Two cases share a key: trace ids must be unique.")

    def done(key: str) -> bool:
        row = existing.get(key)
        return row is not None and (not opts.retry_errors or final_row(row))

    todo = [c for c in cases if not done(c.key)]
    kept_levels = {existing[c.key].step_set_level for c in cases if done(c.key)}
    if kept_levels - {opts.step_set}:
        print(
            f"note: {path} holds rows with step sets at another level "
            f"({', '.join(str(v) for v in sorted(kept_levels - {opts.step_set}, key=str))}); "
            "they are kept as they are (the level is not part of a row's key)",
            file=sys.stderr,
        )
    outcome = EvalOutcome(planned=len(cases), skipped=len(cases) - len(todo))
    latest = {c.key: existing[c.key] for c in cases if c.key in existing}
    stop = asyncio.Event()
    counts = {"error": 0, "unparsed": 0}
    bar = tqdm(
        total=len(todo), file=sys.stderr, unit="case", disable=not opts.progress, leave=False
    )
    try:
        with RowWriter(path) as writer, _setup_stops(path, cases, latest):
            async for row in executor.run(todo, stop):
                await writer.awrite(row)
                latest[row.key] = row
                outcome.ran += 1
                if stops_run(row) and outcome.stopped is None:
                    stop.set()
                    outcome.stopped = row.error or "budget exhausted"
                if row.status in counts:
                    counts[row.status] += 1
                elif row.status in FAILED_STATUSES:
                    counts["error"] += 1
                if reason := why(row):
                    # Say why as it happens, not only in the rows (docs/exit-codes.md), with
                    # the bar or without it (--no-progress: scripts and CI).
                    bar.write(f"{row.trace_id} · {row.method}: {row.status}: {reason}", sys.stderr)
                bar.update(1)
                bar.set_postfix(counts, refresh=False)
    finally:
        bar.close()
    outcome.rows = [latest[c.key] for c in cases if c.key in latest]
    if outcome.stopped:
        outcome.stopped = (
            f"Stopped early: {outcome.stopped} {outcome.missing} of {outcome.planned} cases "
            f"have no row yet; rows so far are in {path}. Raise the budget and rerun with "
            "--resume to finish."
        )
    return outcome


@contextlib.contextmanager
def _setup_stops(path: Path, cases: Sequence[Case], latest: dict[str, EvalRow]) -> Iterator[None]:
    """Within it, an :class:`EndpointSetupError` stops the run as a :class:`ConfigError`
    (exit 1: retrying cannot help) that says what to fix and where the rows so far are."""
    try:
        yield
    except EndpointSetupError as exc:
        have = sum(c.key in latest for c in cases)
        raise ConfigError(
            f"{str(exc).rstrip('.')}. Stopped at the first refusal: every other case would "
            f"be refused the same way. {have} of {len(cases)} cases have a row in {path}; "
            "fix this, then rerun with --resume to finish."
        ) from None
