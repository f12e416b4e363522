"""What `faultfinder ui` shows: every artefact found under the paths it was given.

The catalog is built once at start by :func:`faultfinder.ui.scan.build_catalog` (and
extended by attributions and replays run from the page). This module holds what was found
and the look-ups the pages make; ``scan`` holds how files are found and read.
"""

from __future__ import annotations

import hashlib
import re
import stat
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from faultfinder.dover.models import DoverRow
from faultfinder.eval.rows import EvalRow
from faultfinder.judging.method import Attribution
from faultfinder.methods.chief.graph import CausalGraph
from faultfinder.replay.recorder import (
    RunMeta,
)
from faultfinder.replay.report import ReplayReport
from faultfinder.traces.importers.otlp import MAX_FILE
from faultfinder.traces.schema import Trace

TraceKind = Literal["trace", "recording", "replay"]
AttributionOrigin = Literal["attribution", "eval", "dover", "ui", "saved"]
"""Where an answer was found: an `attribute --json` file, an eval or DoVer file, a run from
the page, or the results store (``saved``)."""

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


MAX_READ = MAX_FILE
"""The largest file, in bytes on disk, the walk opens: listing a trace, an evaluation or
a file of answers keeps all of it in memory, so a bigger file is listed as too large to
show (with its size and this bound), told by its size alone, never read. The bound is the
one the importers put on a whole file (``traces.importers.otlp.MAX_FILE``): every file
the CLI can import, the UI can show."""


def unread(path: Path) -> str | None:
    """Why the walk does not open ``path`` (resolved): it is not a regular file (a named
    pipe would block the walk, a device never end), or it is over :data:`MAX_READ` bytes;
    None when it may be read. Told from the file's status alone: nothing is opened."""
    try:
        status = path.stat()
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    if not stat.S_ISREG(status.st_mode):
        return f"not read: {_kind(status.st_mode)}, not a regular file"
    if status.st_size > MAX_READ:
        return (
            f"too large to show: {status.st_size:,} bytes, over the {MAX_READ:,} bytes "
            "the UI reads of a file: not read"
        )
    return None


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "a directory" if stat.S_ISDIR(mode) else "a special file"


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
