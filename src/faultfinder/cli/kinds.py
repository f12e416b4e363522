"""What kind of faultfinder file a path is, so a command given the wrong kind says so.

``attribute`` given eval results, ``report`` given a trace, ``import`` given a recording:
each would otherwise fail with its own reader's complaint ("no reader recognises it",
"fix or remove this line"). :func:`wrong_kind` names what the path is and the command
that reads it. Only the start of a file is read (the first line of a JSONL file, at most
:data:`SNIFF_BYTES` of a JSON file).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faultfinder.errors import ConfigError, FaultfinderError

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
    """The command that reads it ({path} is the path)."""


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


def kind_of(path: str | Path) -> Kind | None:
    """The kind of faultfinder file ``path`` is, or None when it is none of them (which
    may still be a format an importer reads)."""
    p = Path(path)
    if p.is_dir():
        if (p / "meta.json").is_file() and (p / "steps.jsonl").is_file():
            return RECORDING
        return None
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
    if "steps" in keys and isinstance(obj.get("steps"), list):
        return TRACE
    if "history" in keys and ("mistake_agent" in keys or "question" in keys):
        return WHO_AND_WHEN
    return None


def wrong_kind(path: str | Path, expected: str, wanted: str) -> str | None:
    """A one-line message when ``path`` is a known kind other than ``expected`` (a kind
    name: 'trace', 'results'...), saying what it is and what reads it; None otherwise.
    ``wanted`` says what the command needed, e.g. 'a trace'."""
    kind = kind_of(path)
    if kind is None or kind.name == expected:
        return None
    parent = str(Path(path).parent)
    hint = kind.hint.format(path=path, parent=parent)
    return f"{path} is {kind.what}, not {wanted}. Try: {hint}"


@contextmanager
def explained(
    paths: str | Path | Iterable[str | Path], expected: str, wanted: str
) -> Iterator[None]:
    """Run the block that reads ``paths``; when it fails with a faultfinder error and one
    of the paths is a known kind other than ``expected``, fail with :func:`wrong_kind`'s
    message instead (the reader's own message otherwise)."""
    try:
        yield
    except FaultfinderError as exc:
        many = [paths] if isinstance(paths, str | Path) else list(paths)
        for path in many:
            message = wrong_kind(path, expected, wanted)
            if message:
                raise ConfigError(message) from exc
        raise


UI_KINDS = (
    "traces (a file or a folder), recordings (runs/), eval results, DoVer rows, CHIEF "
    "graphs and `attribute --json` outputs"
)


def unusable(paths: Iterable[str | Path], problems: Iterable[tuple[Path, str]]) -> list[str]:
    """One line for each file given on the command line that could not be read as any kind
    the UI shows (``problems``: the catalog's (path, reason) pairs)."""
    given = {Path(p).resolve(): str(p) for p in paths if Path(p).is_file()}
    lines = []
    for path, reason in problems:
        shown = given.get(Path(path).resolve())
        if shown is not None:
            lines.append(f"{shown} is none of what the UI shows ({UI_KINDS}): {reason}")
    return lines
