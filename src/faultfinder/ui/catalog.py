"""What `faultfinder ui` shows: every artefact found under the paths it was given.

The catalog is built once at start (and extended by attributions run from the page). It
reads files only through the project's public loaders (traces, eval rows, DoVer rows,
replay run directories, CHIEF graph files) and never writes anything. A file that cannot
be read becomes a *problem* entry with a one-line reason instead of stopping the server.
Only regular files whose resolved location lies under one of the given paths are read: a
symbolic link pointing elsewhere is skipped, and so is a name that is not UTF-8 (listed).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from faultfinder.dover.models import DoverRow
from faultfinder.dover.report import read_rows as read_dover_rows
from faultfinder.errors import FaultfinderError, TraceFormatError
from faultfinder.eval.rows import EvalRow, latest_by_key, read_rows
from faultfinder.judging.method import Attribution
from faultfinder.methods.chief.graph import CausalGraph
from faultfinder.replay.recorder import (
    BRANCHES_DIR,
    REPORT_FILE,
    STEPS_FILE,
    TRACE_FILE,
    RunMeta,
    read_meta,
)
from faultfinder.replay.report import ReplayReport
from faultfinder.traces.importers import importers
from faultfinder.traces.io import read_json, read_jsonl, split_lines
from faultfinder.traces.loader import detects, load_traces, recognised
from faultfinder.traces.schema import Trace

TraceKind = Literal["trace", "recording", "replay"]
AttributionOrigin = Literal["attribution", "eval", "dover", "ui", "saved"]
"""Where an answer was found: an `attribute --json` file, an eval or DoVer file, a run from
the page, or the results store (``saved``)."""

MAX_FILES = 20_000
"""Stop walking after this many files (a guard against pointing the UI at '/')."""
MAX_SNIFFED = 20_000
"""Look into at most this many files without a trace suffix (asking the readers whether
they recognise them); after that the walk takes files by their suffix only."""
VERDICT_STATUSES = frozenset({"ok", "unparsed", "no-error-found", "error", "budget-exceeded"})
SKIPPED_DIRS = frozenset({".git", "__pycache__", "node_modules", ".venv", ".faultfinder"})


_ABSOLUTE = re.compile(r"(^|[\s'\"(=:])/(?:[^\s'\"/:,)]+/)+([^\s'\"/:,)]*)")
"""An absolute POSIX path of two or more parts in a message (kept: what precedes it and
its last part)."""


def printable(text: str) -> str:
    """``text`` as it can be put on a page: bytes of a file name that are not UTF-8 (which
    Python keeps as lone surrogates) shown as ``\\xNN``, any other lone surrogate as
    ``\\udNNN``."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def is_utf8(text: str) -> bool:
    """Whether ``text`` (a file name, a path) can be written as UTF-8: a name whose bytes
    are not UTF-8 comes back from the file system holding lone surrogates."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class Roots:
    """The paths given on the command line; every file read must resolve inside one."""

    def __init__(self, paths: Iterable[str | Path]) -> None:
        self.paths = [Path(p).resolve(strict=True) for p in paths]

    def shown(self, path: str | Path) -> str:
        """``path`` as the user would name it: relative to the given path it lies under,
        prefixed with that path's own name (no absolute path of the machine on the page)."""
        p = Path(path)
        for root in self.paths:
            if p == root:
                return printable(root.name)
            if p.is_relative_to(root):
                return printable(str(Path(root.name) / p.relative_to(root)))
        return printable(p.name)

    def scrub(self, text: str) -> str:
        """``text`` (a problem's reason, an error message) without absolute paths of this
        machine: a path under a given path as :meth:`shown` names it, any other absolute
        path by its last part."""
        for root in sorted(self.paths, key=lambda r: len(str(r)), reverse=True):
            if not root.name:  # "/" itself: left to the generic rule below
                continue
            pattern = re.escape(str(root)) + r"(?=$|[/\s'\":,)])"
            text = re.sub(pattern, root.name.replace("\\", "\\\\"), text)
        return printable(_ABSOLUTE.sub(lambda m: m.group(1) + ".../" + m.group(2), text))

    def contains(self, path: Path) -> Path | None:
        """The resolved path when it is an existing regular file or directory under a root
        (symbolic links resolved first, so a link out of the roots is refused)."""
        try:
            real = path.resolve(strict=True)
        except (OSError, RuntimeError, ValueError):  # ValueError: an embedded NUL byte
            return None
        if any(real == root or real.is_relative_to(root) for root in self.paths):
            return real
        return None


def make_key(*parts: str) -> str:
    """Short, URL-safe, stable identity of an entry."""
    joined = "\x00".join(parts).encode("utf-8", "surrogatepass")
    return hashlib.sha256(joined).hexdigest()[:12]


@dataclass
class TraceEntry:
    key: str
    trace: Trace
    path: Path
    kind: TraceKind = "trace"
    run_dir: Path | None = None
    """For recordings and replays: the run (or branch) directory."""

    @property
    def outcome(self) -> str:
        value = self.trace.metadata.get("outcome")
        if isinstance(value, str):
            return value
        return "failure" if self.trace.label is not None else "unknown"


@dataclass
class AttributionEntry:
    """One method's answer on one trace, wherever it was found."""

    attribution: Attribution
    origin: AttributionOrigin
    path: Path
    row: EvalRow | None = None


@dataclass
class ReplayEntry:
    """A replay branch of a recording."""

    key: str
    branch_dir: Path
    run_dir: Path
    meta: RunMeta
    report: ReplayReport | None
    trace_key: str | None
    """The branch's own trace."""
    original_key: str | None
    """The recording's trace."""


@dataclass
class GraphEntry:
    key: str
    path: Path
    graph: CausalGraph


@dataclass
class EvalEntry:
    key: str
    path: Path
    rows: list[EvalRow]


@dataclass
class DoverEntry:
    key: str
    path: Path
    rows: list[DoverRow]


@dataclass
class Problem:
    path: Path
    reason: str
    unrecognised: bool = False
    """No reader recognises the file on its own (it may be a part of a directory an
    importer reads whole, such as a TraceElephant run's ``trace_metadata.json``)."""


@dataclass
class Catalog:
    """Everything found, with look-ups by key and by trace id.

    Pages are built in worker threads while jobs (on the server's event loop) add traces,
    replays and answers: the look-ups by trace id use indexes kept under a lock, and what
    iterates a table takes a snapshot of it first (``list(table.values())``, one step for
    the interpreter, so never "changed size during iteration"). ``attributions`` only
    grows: its index takes in what was appended since the last look-up."""

    roots: Roots
    traces: dict[str, TraceEntry] = field(default_factory=dict)
    replays: dict[str, ReplayEntry] = field(default_factory=dict)
    graphs: dict[str, GraphEntry] = field(default_factory=dict)
    evals: dict[str, EvalEntry] = field(default_factory=dict)
    dovers: dict[str, DoverEntry] = field(default_factory=dict)
    attributions: list[AttributionEntry] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    results_file: Path | None = None
    """Where attributions run from the page are appended (None: running is off)."""
    _files: tuple[int, set[Path]] | None = field(default=None, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _answers_by_trace: dict[str, list[int]] = field(default_factory=dict, repr=False, compare=False)
    """Trace id -> positions of its answers in ``attributions`` (in the order found)."""
    _answers_indexed: int = field(default=0, repr=False, compare=False)
    _keys_by_trace: dict[str, list[str]] = field(default_factory=dict, repr=False, compare=False)
    """Trace id -> keys of its entries in ``traces``."""
    _traces_indexed: int = field(default=0, repr=False, compare=False)

    def artefact_files(self) -> set[Path]:
        """The resolved files the catalog read artefacts from (traces, answers, graphs,
        evaluations, DoVer rows): all `/raw` may serve. Cached until the catalog grows."""
        paths = [
            *(t.path for t in list(self.traces.values())),
            *(a.path for a in self.attributions),
            *(g.path for g in list(self.graphs.values())),
            *(e.path for e in list(self.evals.values())),
            *(d.path for d in list(self.dovers.values())),
        ]
        if self._files is None or self._files[0] != len(paths):
            files = set()
            for path in set(paths):
                real = self.roots.contains(path)
                if real is not None and real.is_file():
                    files.add(real)
            self._files = (len(paths), files)
        return self._files[1]

    def traces_with_id(self, trace_id: str) -> list[TraceEntry]:
        """The entries of trace ``trace_id`` (one look-up in an index, not a scan)."""
        with self._lock:
            if self._traces_indexed != len(self.traces):  # an entry added behind add_trace
                items = list(self.traces.items())
                self._keys_by_trace = {}
                for key, entry in items:
                    self._keys_by_trace.setdefault(entry.trace.id, []).append(key)
                self._traces_indexed = len(items)
            keys = list(self._keys_by_trace.get(trace_id, ()))
        return [found for key in keys if (found := self.traces.get(key)) is not None]

    def answer_positions(self, trace_id: str) -> list[int]:
        """Where the answers on trace ``trace_id`` are in ``attributions``, in the order
        they were found: one look-up in the index by trace id, which first takes in the
        answers appended since the last look-up (a run from the page appends one)."""
        with self._lock:
            end = len(self.attributions)
            if end < self._answers_indexed:  # the list was replaced: index it again
                self._answers_by_trace, self._answers_indexed = {}, 0
            for position in range(self._answers_indexed, end):
                found = self.attributions[position].attribution.trace_id
                self._answers_by_trace.setdefault(found, []).append(position)
            self._answers_indexed = end
            return list(self._answers_by_trace.get(trace_id, ()))

    def attributions_for(self, trace_id: str) -> list[AttributionEntry]:
        """Every answer on trace ``trace_id`` (see :meth:`answer_positions`)."""
        return [self.attributions[i] for i in self.answer_positions(trace_id)]

    def graphs_for(self, trace_id: str) -> list[GraphEntry]:
        return [g for g in list(self.graphs.values()) if g.graph.trace_id == trace_id]

    def replays_of(self, trace_key: str) -> list[ReplayEntry]:
        return [r for r in list(self.replays.values()) if r.original_key == trace_key]

    def add_trace(self, trace: Trace, path: Path, kind: TraceKind, run_dir: Path | None) -> str:
        key = make_key("trace", str(path), trace.id)
        with self._lock:
            indexed = self._traces_indexed == len(self.traces)
            if key not in self.traces:
                self._keys_by_trace.setdefault(trace.id, []).append(key)
            self.traces[key] = TraceEntry(key, trace, path, kind, run_dir)
            if indexed:
                self._traces_indexed = len(self.traces)
        return key


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
        elif results_file.is_file():
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
    if root.is_file():
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
            if child.suffix not in TRACE_SUFFIXES:
                if not real.is_file():  # a FIFO or a device is never opened
                    continue
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
    importer = _importer_of(directory)
    if importer is None or any(_importer_of(sub) is not None for sub in subdirectories):
        return None
    return importer


def _read_any(path: Path, catalog: Catalog) -> None:
    try:
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
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                data = json.loads(line)
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


DOVER_DIR = "dover"
"""Where `faultfinder debug` (and the UI's "Run N times") write DoVer rows in a run."""
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
            meta = read_meta(branch)
            report_path = branch / REPORT_FILE
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
    traces = load_traces(path, format="faultfinder")
    return catalog.add_trace(traces[0], path, kind, directory)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
