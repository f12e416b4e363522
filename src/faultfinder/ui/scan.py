"""How `faultfinder ui` finds and reads artefacts under the paths it was given.

Files are read only through the project's public loaders (traces, eval rows, DoVer rows,
replay run directories, CHIEF graph files); nothing is written. A file that cannot be read
becomes a *problem* entry with a one-line reason instead of stopping the server. Only
regular files whose resolved location lies under one of the given paths are read: a
symbolic link pointing elsewhere is skipped, and so is a name that is not UTF-8 (listed).
A named pipe, socket or device (which would block the walk or never end) and a file over
``catalog.MAX_READ`` bytes are never opened: they are listed, saying why (``unread``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from faultfinder.dover.edit_repeats import DOVER_DIR
from faultfinder.dover.models import DoverRow
from faultfinder.dover.report import read_rows as read_dover_rows
from faultfinder.errors import FaultfinderError, TraceFormatError
from faultfinder.eval.rows import latest_by_key, read_rows
from faultfinder.judging.method import Attribution
from faultfinder.llm import json_text
from faultfinder.methods.chief.graph import CausalGraph
from faultfinder.replay.recorder import (
    BRANCHES_DIR,
    META_FILE,
    REPORT_FILE,
    STEPS_FILE,
    TRACE_FILE,
    read_meta,
)
from faultfinder.replay.report import ReplayReport
from faultfinder.traces.importers import importers
from faultfinder.traces.importers.otlp import MAX_FILE
from faultfinder.traces.io import read_json, read_jsonl, split_lines
from faultfinder.traces.loader import detects, load_traces, recognised
from faultfinder.traces.schema import Trace
from faultfinder.ui.catalog import (
    AttributionEntry,
    AttributionOrigin,
    Catalog,
    DoverEntry,
    EvalEntry,
    GraphEntry,
    Problem,
    ReplayEntry,
    Roots,
    TraceKind,
    is_utf8,
    make_key,
    unread,
)

MAX_FILES = 20_000
"""Stop walking after this many files (a guard against pointing the UI at '/')."""
MAX_SNIFFED = 20_000
"""Look into at most this many files without a trace suffix (asking the readers whether
they recognise them); after that the walk takes files by their suffix only."""
MAX_FIRST_LINE = MAX_FILE
"""Bytes of a JSON-lines file's first line read to tell what the file holds: the bound the
span and log readers (OTLP, Phoenix, Langfuse, LangSmith, MLflow, AG2) put on a whole
file (``traces.importers.otlp.MAX_FILE``). A longer line (a multi-gigabyte file on one
line) is listed as unreadable, saying so, instead of being read whole into memory."""
VERDICT_STATUSES = frozenset({"ok", "unparsed", "no-error-found", "error", "budget-exceeded"})
SKIPPED_DIRS = frozenset({".git", "__pycache__", "node_modules", ".venv", ".faultfinder"})


READ_ERRORS = (
    FaultfinderError,
    ValidationError,
    ValueError,
    OSError,
    KeyError,
    TypeError,
    RecursionError,
)
"""What reading a damaged or foreign file may raise; each becomes a listed problem."""


def build_catalog(paths: Iterable[str | Path], results_file: Path | None = None) -> Catalog:
    """Walk ``paths`` and read every artefact found, file by file: a file that cannot be
    read is listed as a problem and hides nothing else. A directory an importer reads
    whole where it is (a TraceElephant run) is read whole too (:func:`_read_whole`).
    ``results_file`` (the results store `attribute` and the page append to) is read too
    when it exists."""
    catalog = Catalog(Roots(paths))
    own = results_file.resolve() if results_file is not None else None
    for root in catalog.roots.paths:
        if not is_utf8(str(root)):
            catalog.problems.append(Problem(root, "skipped: its path is not valid UTF-8"))
            continue
        wholes: list[tuple[Path, str]] = []
        for path in _walk(root, catalog, wholes):
            if own is None or path.resolve() != own:  # read once, below
                _read_any(path, catalog)
        alone: dict[Path, list[Problem]] = {}
        for problem in catalog.problems:
            if problem.unrecognised:
                alone.setdefault(problem.path.parent, []).append(problem)
        parts: set[int] = set()
        for directory, importer in wholes:
            parts |= _read_whole(directory, importer, alone.get(directory, []), catalog)
        catalog.problems = [p for p in catalog.problems if id(p) not in parts]
    if results_file is not None:
        catalog.results_file = results_file
        if not is_utf8(str(results_file)):
            catalog.problems.append(Problem(results_file, "skipped: its path is not valid UTF-8"))
        elif (reason := unread(results_file)) is not None:
            if results_file.exists():
                catalog.problems.append(Problem(results_file, reason))
        else:
            try:
                _read_jsonl(results_file, catalog, origin="saved")
            except READ_ERRORS as exc:
                catalog.problems.append(Problem(results_file, _one_line(exc)))
    catalog.answer_positions("")  # index the answers by trace id now, not at the first page
    return catalog


TRACE_SUFFIXES = (".json", ".jsonl", ".gz", ".pb", ".binpb", ".db", ".sqlite", ".parquet")
"""Files the walk reads whatever their content (one it cannot read is listed as a problem):
JSON and JSON lines (traces, results, evaluations, graphs), gzip and protobuf OTLP exports,
AG2 logging databases, Phoenix parquet exports. It also reads every other file a reader
recognises, as the CLI does in a folder (canonical traces under another name, a plugin's
format: ``traces.loader``)."""


def _walk(root: Path, catalog: Catalog, wholes: list[tuple[Path, str]]) -> Iterator[Path]:
    """Files and recordings under ``root``, in sorted order, links checked; every directory
    is walked. Appended to ``wholes``: each directory an importer reads whole where it is
    (see :func:`_whole_format`), with that importer's name."""
    if not root.is_dir():
        reason = unread(root)
        if reason is not None:
            catalog.problems.append(Problem(root, reason))
            return
        yield root
        return
    seen = 0
    sniffed = 0
    stack = [root]
    while stack:
        directory = stack.pop()
        if (directory / STEPS_FILE).is_file():
            yield directory  # a recording (or a branch): read as a whole
            continue
        try:
            children = sorted(directory.iterdir(), reverse=True)
        except OSError as exc:
            catalog.problems.append(Problem(directory, f"cannot list: {exc}"))
            continue
        subdirectories: list[Path] = []
        for child in children:
            if child.name in SKIPPED_DIRS or child.name.startswith("."):
                continue
            if not is_utf8(child.name):
                catalog.problems.append(Problem(child, "skipped: its name is not valid UTF-8"))
                continue
            real = catalog.roots.contains(child)
            if real is None:
                catalog.problems.append(Problem(child, "skipped: resolves outside the given paths"))
                continue
            if real.is_dir():
                stack.append(child)
                subdirectories.append(child)
                continue
            reason = unread(real)
            if reason is not None:  # a FIFO, a device, a file too large: never opened
                catalog.problems.append(Problem(child, reason))
                continue
            if child.suffix not in TRACE_SUFFIXES:
                sniffed += 1
                if sniffed == MAX_SNIFFED + 1:
                    catalog.problems.append(
                        Problem(
                            root,
                            f"looked into {MAX_SNIFFED} files without a trace suffix; "
                            "further ones were not read",
                        )
                    )
                if sniffed > MAX_SNIFFED or not _recognised_file(child, catalog):
                    continue
            seen += 1
            if seen > MAX_FILES:
                catalog.problems.append(Problem(root, f"stopped after {MAX_FILES} files"))
                return
            yield child
        importer = _whole_format(directory, subdirectories)
        if importer is not None:
            wholes.append((directory, importer))


def _holds_unread(directory: Path) -> bool:
    """Whether ``directory`` holds a file the walk does not open (``unread``), which an
    importer reading the directory whole would open: such a directory is never read whole
    (its files are listed one by one, that one saying why)."""
    try:
        children = list(directory.iterdir())
    except OSError:
        return False
    return any(
        not child.name.startswith(".")
        and child.exists()
        and not child.is_dir()
        and unread(child) is not None
        for child in children
    )


def _recognised_file(path: Path, catalog: Catalog) -> bool:
    """Whether a file without a trace suffix holds traces a reader recognises, asked as the
    CLI asks in a folder (``traces.loader``); a file that cannot be read is a problem."""
    try:
        return recognised(path, None)
    except READ_ERRORS as exc:
        catalog.problems.append(Problem(path, _one_line(exc)))
        return False


def _importer_of(directory: Path) -> str | None:
    """The first importer that recognises ``directory`` as its input, asked as the CLI asks
    (``traces.loader``): a plugin whose detect() fails is skipped, with one warning naming
    it and its package."""
    for name, cls in importers().items():
        if detects(name, cls(), directory):
            return name
    return None


def _whole_format(directory: Path, subdirectories: list[Path]) -> str | None:
    """The importer that reads ``directory`` whole *where it is*: it recognises the
    directory and no importer recognises one of its subdirectories. The TraceElephant
    importer recognises the folders above a run too (it searches below), and the Who&When
    one the dataset's root above its subset folders: those are walked on, down to the
    run or subset folder itself."""
    if _holds_unread(directory) or any(_holds_unread(sub) for sub in subdirectories):
        return None  # an importer would open what the walk would not (a FIFO, a huge file)
    importer = _importer_of(directory)
    if importer is None or any(_importer_of(sub) is not None for sub in subdirectories):
        return None
    return importer


def _read_any(path: Path, catalog: Catalog) -> None:
    try:
        if not path.is_dir():
            _refuse_unread(path)  # checked by the walk; a recording's dover/ rows were not
        if path.is_dir():
            _read_run(path, catalog)
        elif path.suffix == ".jsonl":
            _read_jsonl(path, catalog, origin="attribution")
        elif path.suffix == ".json":
            _read_json(path, catalog)
        else:
            for trace in load_traces(path):
                catalog.add_trace(trace, path, "trace", None)
    except READ_ERRORS as exc:
        unrecognised = isinstance(exc, TraceFormatError) and exc.field == "(format)"
        catalog.problems.append(Problem(path, _one_line(exc), unrecognised))


def _refuse_unread(path: Path) -> None:
    """A TraceFormatError naming ``path`` when the walk does not open it (``unread``)."""
    reason = unread(path)
    if reason is not None:
        raise TraceFormatError(str(path), "(file)", reason)


def _read_whole(directory: Path, importer: str, alone: list[Problem], catalog: Catalog) -> set[int]:
    """Read a directory an importer reads whole where it is (a TraceElephant run, a
    Who&When subset folder), after its files were read one by one; ``alone``: the
    problems of its files that no reader recognised on their own. A trace a file gave on
    its own is not repeated (a Who&When case stays the entry of its own file). When the
    directory gives traces no file gave, those files are taken as its parts (a run's
    ``trace_metadata.json``); when it cannot be read whole while such files are there,
    the directory is listed with why instead of them. Returns the ids of the problems
    that leave the list. The read's warnings (an unknown key...) are passed on only when
    it gave new traces: the files' own reads warned about the rest already."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            traces = load_traces(directory, format=importer)
        except READ_ERRORS as exc:
            if not alone:
                return set()  # its files were read one by one, which is all there is to it
            catalog.problems.append(Problem(directory, _one_line(exc)))
            return {id(p) for p in alone}
    added = False
    for trace in traces:
        if any(e.path.parent == directory for e in catalog.traces_with_id(trace.id)):
            continue  # this case's own file was read on its own
        catalog.add_trace(trace, _own_file(trace, directory), "trace", None)
        added = True
    if not added:
        return set()
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    return {id(p) for p in alone}


def _own_file(trace: Trace, directory: Path) -> Path:
    """The file of ``directory`` the importer says ``trace`` came from, when it names one
    (the page links it); else the directory (a TraceElephant run: two files, no link)."""
    source = Path(trace.source.path or directory)
    return source if source.parent == directory and source.is_file() else directory


def _read_json(path: Path, catalog: Catalog) -> None:
    # The reader of trace files: text that cannot be written back as UTF-8 (a lone
    # surrogate), NaN, duplicate keys and the like are refused here as in a trace.
    data = read_json(path)
    if isinstance(data, dict) and data.get("format") == "faultfinder-chief-graph":
        graph = CausalGraph.model_validate(data)
        key = make_key("graph", str(path))
        catalog.graphs[key] = GraphEntry(key, path, graph)
        return
    if isinstance(data, dict) and _looks_like_attribution(data):
        catalog.attributions.append(
            AttributionEntry(Attribution.model_validate(data), "attribution", path)
        )
        return
    for trace in load_traces(path):
        catalog.add_trace(trace, path, "trace", None)


def _looks_like_attribution(data: dict[str, Any]) -> bool:
    return {"trace_id", "method", "prompt_version", "status"} <= data.keys()


def _read_jsonl(path: Path, catalog: Catalog, *, origin: AttributionOrigin) -> None:
    first = _first_object(path)
    if first is None:
        return
    if first.get("kind") == "dover":
        read_jsonl(path)  # refuses what a trace file may not hold (a lone surrogate...)
        rows = read_dover_rows([path])
        key = make_key("dover", str(path))
        catalog.dovers[key] = DoverEntry(key, path, rows)
        for dover_row in rows:
            catalog.attributions.append(
                AttributionEntry(_dover_attribution(dover_row), "dover", path)
            )
        return
    if {"key", "config_id", "run"} <= first.keys():
        eval_rows = list(latest_by_key(read_rows(path)).values())
        key = make_key("eval", str(path))
        catalog.evals[key] = EvalEntry(key, path, eval_rows)
        for row in eval_rows:
            catalog.attributions.append(AttributionEntry(row, "eval", path, row))
        return
    if _looks_like_attribution(first):
        text = path.read_text(encoding="utf-8")
        for number, line in enumerate(split_lines(text), start=1):
            if not line.strip():
                continue
            try:
                result = Attribution.model_validate_json(line)
            except ValidationError as exc:
                catalog.problems.append(Problem(path, f"line {number}: {_one_line(exc)}"))
                continue
            catalog.attributions.append(AttributionEntry(result, origin, path))
        return
    for trace in load_traces(path):
        catalog.add_trace(trace, path, "trace", None)


def _first_object(path: Path) -> dict[str, Any] | None:
    """The first value of a JSON-lines file, which says what the file holds ({} when it
    is not an object; None when the file has no line). A line that does not read, or
    that goes on past :data:`MAX_FIRST_LINE` bytes, is a TraceFormatError naming the file
    and line (the file is listed with it), read as the trace reader reads lines: split on
    '\n' only, UTF-8, a byte-order mark dropped."""
    with path.open("rb") as handle:
        number = 0
        while raw := handle.readline(MAX_FIRST_LINE + 1):
            number += 1
            where = f"{path}:{number}"
            if len(raw) > MAX_FIRST_LINE and not raw.endswith(b"\n"):
                reason = f"a line longer than {MAX_FIRST_LINE:,} bytes: not read"
                raise TraceFormatError(where, "(file)", reason)
            try:
                line = raw.rstrip(b"\r\n").decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                reason = f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at column {exc.start + 1}"
                raise TraceFormatError(where, "(file)", reason) from None
            if not line.strip():
                continue
            try:
                data = json_text.loads(line)
            except json_text.JSONTextError as exc:
                raise TraceFormatError(where, "(json)", str(exc)) from None
            return data if isinstance(data, dict) else {}
    return None


def _dover_attribution(row: DoverRow) -> Attribution:
    """A DoVer trial's hypothesis, shown on the trace like any other method's answer."""
    h = row.hypothesis
    return Attribution(
        agent=h.agent,
        step=h.step,
        reason=h.reason,
        status=h.status if h.status in VERDICT_STATUSES else "error",  # type: ignore[arg-type]
        details={
            "dover": {
                "trial": row.trial.index,
                "verdict": row.verdict,
                "verdict_reason": row.verdict_reason,
            }
        },
        trace_id=row.trace_id,
        method=f"dover:{h.method} (trial {row.trial.index})",
        config=row.config,
        model=row.model,
        prompt_version=row.prompt_version,
        with_ground_truth=False,
        observability="full",
        created_at=row.created_at,
    )


def _read_run(run_dir: Path, catalog: Catalog) -> None:
    """A recording: its trace, each replay branch with its own trace and report (and the
    branches replayed from a branch, under it), and the DoVer rows `debug` and the UI write
    into its ``dover/`` directory."""
    original_key = _run_trace(run_dir, catalog, "recording")
    _read_branches(run_dir, original_key, catalog)
    dover = run_dir / DOVER_DIR
    if dover.is_dir() and catalog.roots.contains(dover) is not None:
        for rows in sorted(dover.glob("*.jsonl")):
            if catalog.roots.contains(rows) is not None:
                _read_any(rows, catalog)


MAX_BRANCH_DEPTH = 32


def _read_branches(
    run_dir: Path, original_key: str | None, catalog: Catalog, depth: int = 0
) -> None:
    branches = run_dir / BRANCHES_DIR
    if not branches.is_dir():
        return
    for branch in sorted(branches.iterdir()):
        if catalog.roots.contains(branch) is None or not branch.is_dir():
            continue
        try:
            report_path = branch / REPORT_FILE
            for part in (branch / META_FILE, report_path, branch / TRACE_FILE):
                if part.exists():
                    _refuse_unread(part)
            meta = read_meta(branch)
            report = (
                ReplayReport.model_validate_json(report_path.read_text(encoding="utf-8"))
                if report_path.is_file()
                else None
            )
            trace_key = _run_trace(branch, catalog, "replay")
        except (FaultfinderError, ValidationError, ValueError, OSError) as exc:
            catalog.problems.append(Problem(branch, _one_line(exc)))
            continue
        key = make_key("replay", str(branch))
        catalog.replays[key] = ReplayEntry(
            key, branch, run_dir, meta, report, trace_key, original_key
        )
        if depth < MAX_BRANCH_DEPTH:
            _read_branches(branch, trace_key, catalog, depth + 1)


def _run_trace(directory: Path, catalog: Catalog, kind: TraceKind) -> str | None:
    path = directory / TRACE_FILE
    if catalog.roots.contains(path) is None:
        catalog.problems.append(Problem(directory, f"no {TRACE_FILE} (run not finished?)"))
        return None
    _refuse_unread(path)
    traces = load_traces(path, format="faultfinder")
    return catalog.add_trace(traces[0], path, kind, directory)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
