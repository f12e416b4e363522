"""Load traces from any supported source: canonical files, or any importer's format."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from faultfinder.errors import FaultfinderError, TraceFormatError, TraceFormatWarning
from faultfinder.traces.importers import get_importer, importers
from faultfinder.traces.io import (
    data_suffix,
    head_bytes,
    is_canonical,
    natural_key,
    read_chunks,
    read_json,
    read_jsonl,
    read_text,
    split_lines,
    strict_reading,
    trace_from_dict,
)
from faultfinder.traces.schema import Trace


def load_traces(
    path: str | Path, *, format: str | None = None, strict: bool = False, **options: Any
) -> list[Trace]:
    """Every trace at ``path``: a canonical file (.json / .jsonl), a directory of them, or
    anything an importer recognises.

    Malformed input raises one TraceFormatError (file, line, field); keys no reader knows
    are warned about (TraceFormatWarning), or with ``strict`` are errors too.
    """
    with strict_reading(strict):
        return _load(Path(path), format, options)


def _load(p: Path, format: str | None, options: dict[str, Any]) -> list[Trace]:
    if not p.exists():
        raise TraceFormatError(str(p), "(file)", "no such file or directory")
    if p.is_file() and _is_blank(p):
        raise TraceFormatError(str(p), "(file)", "empty file")
    if p.is_dir() and not any(p.iterdir()):
        raise TraceFormatError(str(p), "(file)", "empty directory")
    if format and format != "faultfinder":
        importer = get_importer(format)
        if p.is_dir() and not detects(format, importer, p):
            # A folder of files in this format (OTLP exports, Langfuse traces...).
            files = [f for f in p.iterdir() if f.is_file() and not f.name.startswith(".")]
            if not files:
                _refuse_folder_of_folders(p)  # rather than 0 traces and success
            return _each(files, format, options)
        return _read(format, importer, p, options)
    # A gzip'd file is read as what it holds (traces.io decompresses for every reader).
    suffix = data_suffix(p)
    jsonl = p.is_file() and suffix == ".jsonl" and format in (None, "faultfinder")
    if jsonl and _canonical_lines(p):
        return [trace_from_dict(value, f"{p}:{n}") for n, value in read_jsonl(p)]
    not_json: TraceFormatError | None = None
    hint = ""
    if p.is_file() and suffix == ".json":
        try:
            data = read_json(p)
        except TraceFormatError as exc:
            if format == "faultfinder":
                raise
            # Not one JSON document: perhaps several (the OTel SDK's console exporter
            # writes one object per span). A reader may still recognise it; if none
            # does, the JSON error (file, line, column) is the one to show.
            not_json, data = exc, None
        if not_json is None and is_canonical(data):
            return [trace_from_dict(data, p)]
        hint = _version_hint(data)
        if format == "faultfinder":
            raise TraceFormatError(str(p), "schema_version", "missing: not a faultfinder trace")
    if p.is_file() and suffix not in (".json", ".jsonl") and format in (None, "faultfinder"):
        # Canonical traces written under another name (`import --out run.trace`).
        found = _canonical_by_content(p)
        if found is not None:
            return found
        if format == "faultfinder":
            raise TraceFormatError(str(p), "schema_version", "missing: not a faultfinder trace")
    tried = ["faultfinder (canonical)"]
    if format is None:
        for name, cls in importers().items():
            importer = cls()
            if detects(name, importer, p):
                return _read(name, importer, p, options)
            tried.append(name)
    if not_json is not None:
        raise not_json
    if p.is_dir():
        files = _trace_files(p, format)
        if files:
            # Each file in whatever format it is in: canonical traces, OTLP, Langfuse...
            return _each(files, format, options)
        recorded = _recorded_traces(p)
        if recorded:
            # `faultfinder record -o runs` writes runs/<run-id>/trace.json: the runs are
            # the dataset (label them in place, then eval or calibrate the folder).
            return [t for f in recorded for t in _load(f, format, options)]
        # A collection of exports sorted into folders: saying "no reader recognises it"
        # would send the user to --format, which cannot help.
        _refuse_folder_of_folders(p)
    if jsonl:
        hint = _version_hint(_first_line(p))
    raise TraceFormatError(
        str(p),
        "(format)",
        f"no reader recognises it (tried: {', '.join(tried)}); {hint}name one with --format "
        f"({', '.join(importers())})",
    )


_TRACE_SUFFIXES = (".json", ".jsonl", ".gz")


def _trace_files(folder: Path, format: str | None) -> list[Path]:
    """The files of ``folder`` to read as traces: every .json, .jsonl and .gz file, and
    any other (not hidden) file whose content a reader recognises (`run.trace`, `x.otlp`).
    Another file is skipped with a warning naming it, never silently."""
    chosen: list[Path] = []
    for f in sorted(folder.iterdir(), key=lambda f: natural_key(f.name)):
        if not f.is_file() or f.name.startswith("."):
            continue
        if f.suffix in _TRACE_SUFFIXES or recognised(f, format):
            chosen.append(f)
        else:
            warnings.warn(
                TraceFormatWarning(f"{f}: skipped: no reader recognises this file"),
                stacklevel=2,
            )
    return chosen


def _recorded_traces(folder: Path) -> list[Path]:
    """The ``trace.json`` of every run directory in ``folder`` (a folder of recordings),
    in natural name order; a subfolder without one is skipped with a warning naming it.
    Empty when no subfolder is a recording (``trace.json`` beside the ``meta.json`` that
    `record` writes): a folder of exports, one of which happens to be called trace.json,
    is not a folder of runs."""
    subfolders = [f for f in folder.iterdir() if f.is_dir() and not f.name.startswith(".")]
    subfolders.sort(key=lambda f: natural_key(f.name))
    found = [f / "trace.json" for f in subfolders if (f / "trace.json").is_file()]
    if not any((f.parent / "meta.json").is_file() for f in found):
        return []
    if found:
        for f in subfolders:
            if not (f / "trace.json").is_file():
                warnings.warn(
                    TraceFormatWarning(f"{f}: skipped: a folder without a trace.json"),
                    stacklevel=2,
                )
    return found


def _refuse_folder_of_folders(folder: Path) -> None:
    """Raise, naming them, when ``folder``'s trace files are all in subfolders, which are
    not read (one dataset per folder); return when it has no visible subfolder."""
    names = [f.name for f in folder.iterdir() if f.is_dir() and not f.name.startswith(".")]
    if not names:
        return
    names.sort(key=natural_key)
    shown = ", ".join(f"{name}/" for name in names[:5])
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    raise TraceFormatError(
        str(folder),
        "(folder)",
        f"no trace file in it, only folders ({shown}{more}), which are not read; "
        f"give one of them instead (e.g. {folder / names[0]})",
    )


def recognised(p: Path, format: str | None) -> bool:
    """True when ``p`` holds canonical traces or an importer detects it."""
    if _is_blank(p):
        return False
    try:
        if _canonical_form(p) is not None:
            return True
    except (TraceFormatError, OSError):
        return False
    if format not in (None, "faultfinder"):
        return False
    return any(detects(name, cls(), p) for name, cls in importers().items())


def _each(files: list[Path], format: str | None, options: dict[str, Any]) -> list[Trace]:
    """The traces of every file, in natural name order; the first bad file stops the
    read with its own error (file, line, field)."""
    ordered = sorted(files, key=lambda f: natural_key(f.name))
    return [t for f in ordered for t in _load(f, format, options)]


def load_trace(
    path: str | Path, *, format: str | None = None, strict: bool = False, **options: Any
) -> Trace:
    """Exactly one trace from ``path``."""
    traces = load_traces(path, format=format, strict=strict, **options)
    if len(traces) != 1:
        raise TraceFormatError(str(path), "(file)", _not_one(Path(path), len(traces)))
    return traces[0]


def _not_one(p: Path, count: int) -> str:
    """Why ``p``, holding ``count`` traces, is not one trace, and the two ways on: one of
    them (a file of the folder, or one file per trace written by `import`), or 'eval'."""
    import shlex

    said = f"holds {count} traces; expected one"
    if count == 0:
        return said
    if not p.is_dir():
        return (
            f"{said}: use 'eval' for many, or write one file per trace with 'faultfinder "
            f"import {shlex.quote(str(p))} --out-dir DIR' and give one of those"
        )
    visible = [f for f in p.iterdir() if not f.name.startswith(".")]
    visible.sort(key=lambda f: natural_key(f.name))
    files = [f for f in visible if f.is_file() and f.suffix in _TRACE_SUFFIXES]
    files += [f for f in visible if f.is_dir() and (f / "trace.json").is_file()]
    if not files:
        return f"{said}: use 'eval' for many"
    return (
        f"{said}: give one of its files (e.g. {shlex.quote(str(files[0]))}), or use 'eval' for many"
    )


def detects(name: str, importer: Any, path: Path) -> bool:
    """True when the importer registered as ``name`` recognises ``path``. Detection only
    looks: a file it cannot read is simply not this importer's format. A plugin whose
    detect() fails otherwise (a bug of its own) is skipped from then on, with one warning
    naming it and its package, and detection goes on; a built-in's bug is raised."""
    from faultfinder.registry import IMPORTERS

    if IMPORTERS.skipped(name):
        return False
    try:
        return bool(importer.detect(path))
    except (TraceFormatError, OSError, ValueError, RecursionError):
        return False
    except Exception as exc:
        if IMPORTERS.skip(name, "detect()", exc):
            return False
        raise


def _read(name: str, importer: Any, path: Path, options: dict[str, Any]) -> list[Trace]:
    """The traces the importer registered as ``name`` reads from ``path``. Bad input is
    its TraceFormatError; a plugin's load() that fails otherwise (a bug of its own), or
    returns anything but a list of traces, is one ConfigError naming it, its package and
    the error; a built-in's bug is raised."""
    from faultfinder.registry import IMPORTERS

    try:
        result = importer.load(path, **options)
        # A list, tuple or generator of traces; never iterate a dict's keys or a
        # pydantic model's fields as if they were traces.
        items = list(result) if isinstance(result, list | tuple | Iterator) else None
    except FaultfinderError:
        raise
    except Exception as exc:
        error = IMPORTERS.failure(name, f"its load() of {path}", exc)
        if error is None:
            raise
        raise error from None
    wrong = _not_traces(result, items)
    if wrong is None:
        return cast("list[Trace]", items)
    problem = f"returned {wrong} from its load() of {path}, not a list of traces "
    problem += "(faultfinder.traces.schema.Trace)"
    refused = IMPORTERS.refused(name, f"{problem}. Fix or remove that package.")
    if refused is None:
        raise TypeError(f"The trace format '{name}' {problem}")
    raise refused


def _not_traces(result: Any, items: list[Any] | None) -> str | None:
    """What an importer's load() returned, when it is not only traces: 'a dict', 'a list
    holding a str' (None: a list, tuple or generator of traces)."""
    if items is None:
        return f"a {type(result).__name__}"
    strays = [item for item in items if not isinstance(item, Trace)]
    if not strays:
        return None
    return f"a {type(result).__name__} holding a {type(strays[0]).__name__}"


def _first_line(p: Path) -> Any:
    """The first non-blank line of ``p`` as JSON (None when it is not JSON)."""
    first = next((ln for ln in split_lines(read_text(p)) if ln.strip()), "")
    return _try_json(first) if first else None


def _canonical_lines(p: Path) -> bool:
    """True when the first non-blank line of ``p`` is a canonical trace (JSON lines)."""
    return is_canonical(_first_line(p))


def _version_hint(data: Any) -> str:
    """What to add when ``data`` has a trace's steps but no ``schema_version`` (a trace
    written by hand), to go before the list of formats in the error; else ''."""
    if isinstance(data, dict) and isinstance(data.get("steps"), list):
        return (
            'it has "steps" like a faultfinder trace but no "schema_version": add '
            '"schema_version": "1" if it follows docs/traces.md; otherwise '
        )
    return ""


def _canonical_form(p: Path) -> str | None:
    """'lines' or 'json' when ``p``'s content is canonical traces (JSON lines, or one
    JSON object) whatever its name; None for anything else, which the importers then try.
    Looks only: builds no trace."""
    head = head_bytes(p, 1024).lstrip()
    if not head.startswith(b"{"):
        return None
    if _canonical_lines(p):
        return "lines"
    try:
        return "json" if is_canonical(read_json(p)) else None
    except TraceFormatError:
        return None


def _canonical_by_content(p: Path) -> list[Trace] | None:
    """The traces of a file whose content is canonical whatever its name, else None."""
    form = _canonical_form(p)
    if form == "lines":
        return [trace_from_dict(value, f"{p}:{n}") for n, value in read_jsonl(p)]
    return [trace_from_dict(read_json(p), p)] if form == "json" else None


def _try_json(line: str) -> Any:
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


def _is_blank(path: Path) -> bool:
    """True for an empty file or one holding only whitespace, gzip'd or not (read no
    further than needed; a file that cannot be read is left to the readers to name)."""
    try:
        return not any(chunk.strip() for chunk in read_chunks(path))
    except TraceFormatError:
        return False
