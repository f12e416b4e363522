"""What kind of faultfinder file a path is, so a command given the wrong kind says so.

``attribute`` given eval results, ``report`` given a trace, ``import`` given a recording:
each would otherwise fail with its own reader's complaint ("no reader recognises it",
"fix or remove this line"). :func:`wrong_kind` names what the path is and the command
that reads it. Only the start of a file is read (the first line of a JSONL file, at most
:data:`SNIFF_BYTES` of a JSON file).
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faultfinder.errors import ConfigError, FaultfinderError
from faultfinder.traces.io import GZIP_MAGIC, MAX_DECOMPRESSED, SQLITE_MAGIC

SNIFF_BYTES = 4 * 1024 * 1024
"""A JSON file larger than this is not parsed to find its kind."""


@dataclass(frozen=True)
class Kind:
    """One kind of file faultfinder writes or reads."""

    name: str
    """'trace', 'results', 'recording', ..."""
    what: str
    """How to call it in a sentence."""
    hint: str
    """The command that reads it ({path} is the path, {parent} its folder, {run} the run
directory of a file in its edits/ folder, {results} the file a lock file guards); empty:
nothing reads it."""


TRACE = Kind("trace", "a trace", "faultfinder attribute {path} --method shortlist")
WHO_AND_WHEN = Kind("trace", "a Who&When trace", "faultfinder attribute {path} --method shortlist")
RESULTS = Kind("results", "an eval results file (one row per case)", "faultfinder report {path}")
RECORDING = Kind(
    "recording",
    "a recording (a run directory)",
    "faultfinder attribute {path}/trace.json, or faultfinder replay {path} -- COMMAND",
)
RECORDING_FILE = Kind(
    "recording",
    "a recording's call log (steps.jsonl)",
    "faultfinder attribute {parent}/trace.json",
)
RECORDING_META = Kind(
    "recording",
    "a recording's meta.json",
    "faultfinder attribute {parent}/trace.json",
)
ATTRIBUTION = Kind(
    "attribution",
    "an attribution (the output of `attribute --json`)",
    "faultfinder ui TRACES {path} to see it on its trace, or faultfinder export {path} TRACE "
    "--to ... to write it back to the trace's spans",
)
RESULTS_STORE = Kind(
    "attribution",
    "a file of attributions, one per line: the results store `attribute` appends to (by "
    "default .faultfinder/results.jsonl)",
    "faultfinder ui TRACES --results {path} to see each on its trace",
)
REPLAY_REPORT = Kind(
    "replay",
    "a replay's report.json (what `faultfinder replay` did)",
    "faultfinder ui RUNS to see the replay beside its recording, or faultfinder attribute "
    "{parent}/trace.json",
)
WEIGHTS = Kind(
    "weights",
    "shortlist weights (from `faultfinder calibrate`)",
    "faultfinder eval DATASET --method M --shortlist-weights {path} --out results.jsonl",
)
DOVER = Kind("dover", "DoVer result rows", "faultfinder debug-report {path}")
GRAPH = Kind("graph", "a CHIEF graph", "faultfinder ui {path}")
EDIT = Kind(
    "edit",
    "a replay edit file (the web UI saves the edit each replay from the page served as "
    "RUN/edits/<session>.json)",
    "faultfinder replay {run} --at K --edit-file {path} -- COMMAND to replay it at step K, "
    "or faultfinder verify-edit {run} --at K --edit-file {path} ... to judge it",
)
LOCK = Kind(
    "lock",
    "the lock file an eval holds beside its --out {results} (it holds no data)",
    "faultfinder report {results} for the rows written so far",
)
RESPONSE_CACHE = Kind(
    "binary",
    "faultfinder's LLM response cache (a SQLite database, by default .faultfinder/cache.sqlite)",
    "a command that calls a model reads it: faultfinder attribute TRACE --method M --model "
    "KIND:NAME --cache {path}",
)
SQLITE = Kind("binary", "a SQLite database (binary, not text)", "")
BINARY = Kind("binary", "a binary file (it holds NUL bytes, so it is not text)", "")
GZIP_TEXT = Kind("binary", "a gzip-compressed file", "")
"""Text under gzip: the trace readers that take gzip say what they make of it, so
:func:`wrong_kind` leaves the message to them; never written over all the same."""
GZIP_BINARY = Kind(
    "binary",
    "a gzip-compressed binary file (what it decompresses to holds NUL bytes, so it is not text)",
    "",
)
GZIP_CHECKED = MAX_DECOMPRESSED
"""How much of a gzip file's content is decompressed to find it whole (the readers'
limit); past it the file counts as whole."""

LOCK_SUFFIX = ".lock"
"""An eval's lock file is its --out's name plus this (``eval/runner.py: lock_path``)."""
BINARY_SNIFF = 8192
"""How much of a file is looked at to tell binary from text."""


def _first_object(path: Path) -> tuple[dict[str, Any] | None, bool]:
    """The object on the file's first line (JSONL; True), or the JSON object the whole file
    holds (False); None if neither."""
    try:
        with path.open("rb") as handle:
            head = handle.read(SNIFF_BYTES + 1)
    except OSError:
        return None, False
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    candidates = [(text.split("\n", 1)[0], True)]
    if len(head) <= SNIFF_BYTES:
        candidates.append((text, False))
    for candidate, first_line in candidates:
        try:
            value = json.loads(candidate)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            return value, first_line
        if isinstance(value, list) and value and isinstance(value[0], dict):
            return None, False  # a list of objects: an importer's business
    return None, False


def _binary_kind(path: Path) -> Kind | None:
    """An eval's lock file (empty, named ``<out>.lock``), a SQLite database (faultfinder's
    response cache told apart) or another binary file; None for text (or unreadable)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            head = handle.read(BINARY_SNIFF)
    except OSError:
        return None
    if size == 0:
        return LOCK if path.name.endswith(LOCK_SUFFIX) and path.name != LOCK_SUFFIX else None
    if head.startswith(SQLITE_MAGIC):
        return RESPONSE_CACHE if _is_response_cache(path) else SQLITE
    if head.startswith(GZIP_MAGIC):
        return _gzip_kind(path)
    return BINARY if b"\x00" in head else None


def _gzip_kind(path: Path) -> Kind:
    """A gzip file cut off or damaged (a download or copy that stopped part way), one
    holding binary data, or one holding text (:data:`GZIP_TEXT`). Decompressed in chunks,
    nothing kept but the first :data:`BINARY_SNIFF` bytes."""
    import gzip
    import zlib

    head = b""
    seen = 0
    try:
        with gzip.open(path, "rb") as handle:
            while seen <= GZIP_CHECKED and (chunk := handle.read(1 << 20)):
                if len(head) < BINARY_SNIFF:
                    head += chunk[: BINARY_SNIFF - len(head)]
                seen += len(chunk)
    except (EOFError, OSError, zlib.error) as exc:
        why = str(exc).replace("{", "{{").replace("}", "}}") or type(exc).__name__
        return Kind(
            "binary",
            f"a gzip file that is cut off or damaged (decompressing it fails: {why}; a "
            "download or copy that stopped part way leaves such a file: export or copy it "
            "again)",
            "",
        )
    return GZIP_BINARY if b"\x00" in head else GZIP_TEXT


def _is_response_cache(path: Path) -> bool:
    """Whether the SQLite file holds the response cache's table (``llm/cache.py``); opened
    read-only, changing nothing."""
    import sqlite3

    try:
        con = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True)
    except sqlite3.Error:
        return False
    try:
        columns = {row[1] for row in con.execute("PRAGMA table_info(responses)")}
    except sqlite3.Error:
        return False
    finally:
        con.close()
    return {"key", "request", "completion"} <= columns


def _is_edit(obj: dict[str, Any]) -> bool:
    """Whether ``obj`` is an edit file (``replay/edits.py: EditFile``), as the UI saves it
    and ``replay --edit-file`` reads it."""
    from faultfinder.replay.edits import EDIT_KINDS, parse_edit_file

    if obj.get("kind") not in EDIT_KINDS:
        return False
    try:
        parse_edit_file(obj)
    except ConfigError:
        return False
    return True


def kind_of(path: str | Path) -> Kind | None:
    """The kind of faultfinder file ``path`` is, or None when it is none of them (which
    may still be a format an importer reads)."""
    p = Path(path)
    if p.is_dir():
        if (p / "meta.json").is_file() and (p / "steps.jsonl").is_file():
            return RECORDING
        return None
    binary = _binary_kind(p)
    if binary is not None:
        return binary
    obj, first_line = _first_object(p)
    if obj is None:
        return None
    keys = set(obj)
    if {"key", "config_id", "run", "method", "trace_id"} <= keys:
        return RESULTS
    if obj.get("kind") == "dover" or {"trial", "hypothesis"} <= keys:
        return DOVER
    if {"method", "trace_id", "status", "config", "model"} <= keys:
        # `attribute --json` prints one indented object; the store holds one per line.
        return RESULTS_STORE if first_line else ATTRIBUTION
    if {"recorded_steps", "prefix_steps", "edit_applied"} <= keys:
        return REPLAY_REPORT
    if str(obj.get("format", "")).startswith("faultfinder-shortlist/"):
        return WEIGHTS
    if {"request", "response", "agent_call"} <= keys or {"request_hash", "agent_call"} <= keys:
        return RECORDING_FILE
    if {"run_id", "command", "started_at"} <= keys:
        return RECORDING_META
    if {"nodes", "edges"} <= keys and "steps" not in keys:
        return GRAPH
    if _is_edit(obj):
        return EDIT
    if "steps" in keys and isinstance(obj.get("steps"), list):
        return TRACE
    if "history" in keys and ("mistake_agent" in keys or "question" in keys):
        return WHO_AND_WHEN
    return None


def importable_or(path: str | Path, kind: Kind | None) -> Kind | None:
    """TRACE for a file of no known kind, or a binary one, that an importer reads (an
    export of a tracing tool); else ``kind``. Asks every importer, so it may read more
    than the start of the file."""
    from faultfinder.traces.loader import recognised

    if (kind is None or kind.name == "binary") and recognised(Path(path), None):
        return TRACE
    return kind


def wrong_kind(path: str | Path, expected: str, wanted: str) -> str | None:
    """A one-line message when ``path`` is a known kind other than ``expected`` (a kind
    name: 'trace', 'results'...), saying what it is and what reads it; None otherwise.
    ``wanted`` says what the command needed, e.g. 'a trace'."""
    kind = kind_of(path)
    if kind is None or kind is GZIP_TEXT or kind.name == expected:
        return None
    return f"{path} is {described(path, kind)}, not {wanted}{state(path, kind)}.{tried(path, kind)}"


def _fields(path: str | Path) -> dict[str, str]:
    p = Path(path)
    run = str(p.parent.parent) if p.parent.name == "edits" else "RUN"
    results = str(p)[: -len(LOCK_SUFFIX)] if str(p).endswith(LOCK_SUFFIX) else str(p)
    return {"path": str(path), "parent": str(p.parent), "run": run, "results": results}


def described(path: str | Path, kind: Kind) -> str:
    """What ``path`` is, in a sentence's words."""
    return kind.what.format(**_fields(path))


def state(path: str | Path, kind: Kind) -> str:
    """For a lock file, whether an eval holds it now, and so what to do about it
    (': an eval is writing to r.jsonl now'); '' for any other kind."""
    if kind is not LOCK:
        return ""
    from faultfinder.eval.runner import lock_held

    results = _fields(path)["results"]
    held = lock_held(path)
    if held is True:
        return f": an eval is writing to {results} now"
    if held is False:
        return (
            ": no eval holds it, so an eval killed outright left it behind (harmless: delete "
            "it, or the next eval on that file takes it over)"
        )
    return (
        f": an eval may be writing to {results} now, or one killed outright left it behind "
        "(harmless)"
    )


def tried(path: str | Path, kind: Kind) -> str:
    """' Try: <the command that reads it>', or '' when nothing reads it."""
    return f" Try: {kind.hint.format(**_fields(path))}" if kind.hint else ""


@contextmanager
def explained(
    paths: str | Path | Iterable[str | Path], expected: str, wanted: str
) -> Iterator[None]:
    """Run the block that reads ``paths``; when it fails with a faultfinder error and one
    of the paths is a known kind other than ``expected``, fail with :func:`wrong_kind`'s
    message instead (the reader's own message otherwise).

    Warnings the block gives are held until it ends: shown when it succeeds or fails with
    the reader's own message, dropped with that message, since they came from reading the
    path as what it is not (a run directory's stdout.txt "skipped" as a trace file)."""
    caught: list[warnings.WarningMessage] = []
    shown = True
    try:
        with warnings.catch_warnings(record=True) as caught:
            try:
                yield
            except FaultfinderError as exc:
                many = [paths] if isinstance(paths, str | Path) else list(paths)
                for path in many:
                    message = wrong_kind(path, expected, wanted)
                    if message:
                        shown = False
                        raise ConfigError(message) from exc
                raise
    finally:
        # Outside catch_warnings, which would record them again.
        if shown:
            _show(caught)


def _show(caught: list[warnings.WarningMessage]) -> None:
    """Show warnings recorded by ``catch_warnings(record=True)``, as they would have been
    shown (the filters already let them through when they were recorded)."""
    for w in caught:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)


UI_KINDS = (
    "traces (a file or a folder), recordings (runs/), eval results, DoVer rows, CHIEF "
    "graphs and `attribute --json` outputs"
)


UI_SHOWN = frozenset({"trace", "results", "recording", "attribution", "replay", "dover", "graph"})
"""Kind names the UI shows when given as a PATH."""


_WRITTEN_TRACE = re.compile(rb'\A\s*\{\s*"schema_version"\s*:')
"""How a trace faultfinder wrote begins (``write_trace``, one per line in ``import``'s
JSONL): seen in the head of a file too large to parse whole."""


def _written_trace(path: Path) -> bool:
    """Whether ``path`` holds a canonical trace (or canonical traces, one per line)."""
    from faultfinder.traces.io import is_canonical

    obj, _ = _first_object(path)
    if obj is not None:
        return is_canonical(obj)
    try:
        with path.open("rb") as handle:
            head = handle.read(BINARY_SNIFF)
    except OSError:
        return False
    return _WRITTEN_TRACE.match(head.lstrip(b"\xef\xbb\xbf")) is not None


def not_a_trace_out(out: str | Path, *, force: bool = False, option: str = "--out") -> str | None:
    """Why ``import`` may not write a trace to the file ``out``, or None. A missing or
    empty file, or a canonical trace (what ``import`` writes), may be replaced. A file of
    a known kind other than a trace (eval results, the results store, a recording's files,
    the response cache, any binary file...) never is; any other file (a user's notes, a
    CSV, the very file being imported) only with ``force``. ``option`` is the option that
    chose the file: ``--out``, or ``--out-dir`` for a file written in that folder."""
    p = Path(out)
    if not p.is_file() or p.stat().st_size == 0:
        return None
    named = f"--out {out}" if option == "--out" else f"{out} (in {option})"
    kind = kind_of(p)
    if kind is not None and kind.name != "trace":
        return (
            f"{named} is {described(out, kind)}, not a trace: import would write over it. "
            f"Choose another {option}."
        )
    if force or _written_trace(p):
        return None
    what = f"{described(out, kind)} in another format" if kind is not None else "a file"
    return (
        f"{named} exists and is not a trace faultfinder wrote ({what}): import would "
        f"replace it. Choose another {option}, or pass --force to overwrite it."
    )


def not_a_store(path: str | Path) -> str | None:
    """Why ``ui --results`` may not name ``path``, or None. The page reads the results
    store and, with --allow-run, appends an attribution to it per run: a file of another
    kind (eval results, a trace, the response cache, an eval's lock file...) would be read
    wrong and then written into."""
    p = Path(path)
    store = (
        "not the results store (attributions, one per line, which `attribute` and the "
        "page's runs append to; by default .faultfinder/results.jsonl)"
    )
    kind = kind_of(p) if p.is_file() else None
    if kind is None and p.name.endswith(LOCK_SUFFIX):
        results = str(p)[: -len(LOCK_SUFFIX)] or "FILE"
        return (
            f"--results {path} ends in {LOCK_SUFFIX}, the name of an eval's lock file, which "
            f"an eval writing to {results} removes when it ends: {store}. Choose another "
            "--results"
        )
    if kind is None or kind is RESULTS_STORE:
        return None
    if kind.name in UI_SHOWN:
        hint = f" Try: faultfinder ui PATHS {path} to see it (and --results for the store)"
    else:
        hint = tried(path, kind)
    return f"--results {path} is {described(path, kind)}, {store}{state(path, kind)}.{hint}"


def unusable(paths: Iterable[str | Path], problems: Iterable[tuple[Path, str]]) -> list[str]:
    """One line for each file given on the command line that could not be read as any kind
    the UI shows (``problems``: the catalog's (path, reason) pairs)."""
    given = {Path(p).resolve(): str(p) for p in paths if Path(p).is_file()}
    lines = []
    for path, reason in problems:
        shown = given.get(Path(path).resolve())
        if shown is None:
            continue
        kind = kind_of(path)
        if kind is not None and kind.name not in UI_SHOWN:
            what = f"{described(shown, kind)}, none of what the UI shows ({UI_KINDS})"
            lines.append(f"{shown} is {what}{state(shown, kind)}.{tried(shown, kind)}")
        else:
            lines.append(f"{shown} is none of what the UI shows ({UI_KINDS}): {reason}")
    return lines
