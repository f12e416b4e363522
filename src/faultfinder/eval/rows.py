"""Result rows: one self-describing JSON line per (trace, method, config, model, run).

Files are append-only. A row for a key may appear more than once (an error row and,
after ``--resume``, its retry); readers keep the **last** row of each key.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import warnings
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from faultfinder.errors import FaultfinderError, FaultfinderWarning
from faultfinder.judging.method import Attribution
from faultfinder.traces.schema import GoldLabel

ROW_VERSION = "1"

FAILED_STATUSES = frozenset({"error", "budget-exceeded"})
"""Statuses that mean the case did not run to a verdict (retried by ``--resume``)."""


class ResultsFileError(FaultfinderError):
    """A results file cannot be read or would be overwritten."""


class EvalRow(Attribution):
    """An Attribution plus what the harness knows about the case."""

    row_version: str = ROW_VERSION
    """Version of this row format."""
    key: str
    """Identity of the case: trace, method label, config, model and run (see ``row_key``)."""
    config_id: str
    """Short hash of the method config before the harness set the run index."""
    run: int
    """Repeat index (0-based)."""
    subset: str
    """Benchmark subset of the trace."""
    gold: GoldLabel | None = None
    """The trace's gold label, copied so a row can be scored on its own."""
    n_steps: int = 0
    """Number of steps of the trace."""
    trace_tokens: int | None = None
    """Tokens of the trace's own text (task and step outputs, ``render.own_text``), counted
    with the backend's counter; None in rows written before it was recorded."""


def config_id(config: dict[str, Any]) -> str:
    """Short stable hash of a config dict. ``budget_tokens: null`` hashes as an absent key,
    so results written before per-case budgets existed keep their keys."""
    if "budget_tokens" in config and config["budget_tokens"] is None:
        config = {k: v for k, v in config.items() if k != "budget_tokens"}
    blob = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:10]


def row_key(trace_id: str, label: str, cfg_id: str, model: str, run: int) -> str:
    """Readable, unique identity of a case."""
    return f"{trace_id}|{label}|{cfg_id}|{model}|run{run}"


def read_rows(path: str | Path, *, repair: bool = False) -> list[EvalRow]:
    """Every row of a results file, in file order.

    An unterminated last line that does not parse (a run killed mid-write) is skipped;
    with ``repair`` the file is also cut back to its last complete line (or, if that line
    parses, given its missing newline) so appending can continue. A damaged line anywhere
    else is an error.
    """
    p = Path(path)
    if not p.exists():
        raise ResultsFileError(f"{p}: no such results file")
    data = p.read_bytes()
    if b"\x00" in data:
        # Result rows are JSON text; a binary file (the response cache, an image...) is not
        # one with an unfinished last line, and `repair` must never cut it.
        raise ResultsFileError(
            f"{p}: a binary file (it holds NUL bytes), not eval results (JSON lines that "
            "`faultfinder eval --out` writes)"
        )
    *complete, tail = data.split(b"\n")
    rows: list[EvalRow] = []
    for number, raw in enumerate(complete, start=1):
        if not raw.strip():
            continue
        try:
            rows.append(EvalRow.model_validate_json(raw))
        except (ValidationError, ValueError) as exc:
            raise ResultsFileError(
                f"{p}: line {number} is not a valid result row ({_first_error(exc)}). Only an "
                "unfinished last line (left by an interrupted run) is skipped; fix or remove "
                "this line."
            ) from None
    if tail.strip():
        try:
            rows.append(EvalRow.model_validate_json(tail))
            tail_ok = True
        except (ValidationError, ValueError):
            tail_ok = False
            if not tail.lstrip().startswith(b"{"):
                # A row cut short still opens as one; this is some other text (a user's
                # file given as --out by mistake), which `repair` must never cut.
                raise ResultsFileError(
                    f"{p}: line {len(complete) + 1} is not a result row, nor the start of "
                    "one cut short by an interrupted run; this is not a results file that "
                    "`faultfinder eval --out` wrote"
                ) from None
            if not repair:  # said, not silently dropped: a report would lack this case
                warnings.warn(
                    f"{p}: its last line is unfinished (a run stopped while writing it?) and "
                    "was left out; `faultfinder eval ... --resume` with the same command "
                    "cuts it and runs that case again",
                    FaultfinderWarning,
                    stacklevel=2,
                )
        if repair:
            with p.open("r+b") as handle:
                if tail_ok:
                    handle.seek(0, os.SEEK_END)
                    handle.write(b"\n")
                else:
                    handle.truncate(len(data) - len(tail))
                handle.flush()
                os.fsync(handle.fileno())
    return rows


def latest_by_key(rows: Iterable[EvalRow]) -> dict[str, EvalRow]:
    """The last row of each key."""
    out: dict[str, EvalRow] = {}
    for row in rows:
        out[row.key] = row
    return out


def read_result_files(paths: Iterable[str | Path]) -> list[EvalRow]:
    """Rows of several files, deduplicated by key (later rows and later files win)."""
    rows: list[EvalRow] = []
    for path in paths:
        rows.extend(read_rows(path))
    return list(latest_by_key(rows).values())


class RowWriter:
    """Appends rows durably: each row is written, flushed and fsynced as it comes.

    ``write`` does the work in the caller's thread; ``awrite`` hands it to a single
    background thread so an fsync (milliseconds on many disks) never stalls the event
    loop, while one worker keeps rows in completion order and never interleaves them.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle: IO[str] | None = self.path.open("a", encoding="utf-8")
        self._executor: ThreadPoolExecutor | None = None
        self.written = 0

    def write(self, row: EvalRow) -> None:
        self._write_line(row.model_dump_json() + "\n")

    async def awrite(self, row: EvalRow) -> None:
        line = row.model_dump_json() + "\n"
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rows")
        await asyncio.get_running_loop().run_in_executor(self._executor, self._write_line, line)

    def _write_line(self, line: str) -> None:
        assert self._handle is not None, "writer is closed"
        self._handle.write(line)
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self.written += 1

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def __enter__(self) -> RowWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        return f"{'.'.join(str(p) for p in first['loc']) or '(root)'}: {first['msg']}"
    return str(exc)
