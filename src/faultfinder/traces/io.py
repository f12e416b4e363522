"""Reading and writing canonical trace files, with errors that name file and field."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from faultfinder.errors import TraceFormatError
from faultfinder.traces.schema import Trace


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders '2' before '10' (numbers compare as numbers)."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part.lower())
        for part in re.split(r"(\d+)", text)
        if part
    )


def field_path(loc: tuple[int | str, ...]) -> str:
    """Render a pydantic error location as ``steps[3].agent``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(root)"


def trace_error_from_validation(path: str | Path, exc: ValidationError) -> TraceFormatError:
    """The first validation problem as a TraceFormatError (the rest are summarised)."""
    errors = exc.errors()
    first = errors[0]
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return TraceFormatError(str(path), field_path(tuple(first["loc"])), first["msg"] + more)


def read_json(path: str | Path) -> Any:
    """Parse a JSON file, turning syntax errors into TraceFormatError."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TraceFormatError(str(p), "(file)", "no such file") from None
    except UnicodeDecodeError as exc:
        raise TraceFormatError(str(p), "(file)", f"not UTF-8 text: {exc}") from None
    if not text.strip():
        raise TraceFormatError(str(p), "(file)", "empty file")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(
            str(p), "(json)", f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None


def trace_from_dict(data: Any, path: str | Path = "<memory>") -> Trace:
    """Validate a canonical trace dict."""
    if not isinstance(data, dict):
        raise TraceFormatError(str(path), "(root)", "expected a JSON object")
    try:
        return Trace.model_validate(data)
    except ValidationError as exc:
        raise trace_error_from_validation(path, exc) from None


def is_canonical(data: Any) -> bool:
    """True when ``data`` looks like a canonical faultfinder trace."""
    return isinstance(data, dict) and "schema_version" in data and "steps" in data


def write_trace(trace: Trace, path: str | Path) -> None:
    """Write a trace as indented JSON (atomically, so a crash never leaves half a file)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(trace.model_dump_json(indent=2, exclude_none=True), encoding="utf-8")
    tmp.replace(p)
