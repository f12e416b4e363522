"""The results store: every attribution `faultfinder attribute` (and the UI's run button)
finished, one ``Attribution`` JSON object per line, appended. `faultfinder ui` reads it by
default, so the trace page shows every saved attribution.
"""

from __future__ import annotations

import os
from pathlib import Path

from faultfinder.judging.method import Attribution

DEFAULT_RESULTS = Path(".faultfinder") / "results.jsonl"
"""Where results go unless ``--results`` says otherwise (relative to the working directory)."""


def append_result(result: Attribution, path: Path = DEFAULT_RESULTS) -> Path:
    """Append ``result`` as one line to the store at ``path`` (created with its directory).
    The line is written with one ``write`` on a file opened for appending, so results of
    concurrent runs do not interleave."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (result.model_dump_json() + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    return path
