"""On-disk stage cache: the graph (M1) and the oracles + candidates (M2) of a trace.

One JSON file per entry, named by a SHA-256 key over: the trace's content (label and
source path excluded), the model's identity, the prompt version, the repeat index, and
every option that changes the stage's result. An ablation sweep (M1, M1+M2, M1+M3,
full) therefore builds each graph once, and `faultfinder graph` output is reused by
`--method chief`. Only entries whose model stages all parsed are stored. The default
directory gives way to ``$FAULTFINDER_CHIEF_STAGES`` when that is set (the test suite
keeps its entries out of the working tree with it); a directory the config names is
used as named.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from faultfinder.llm import json_text
from faultfinder.llm.client import LLM
from faultfinder.llm.scopes import current_run
from faultfinder.methods.chief.config import DEFAULT_STAGE_CACHE
from faultfinder.traces.schema import Trace

DIRECTORY_ENV = "FAULTFINDER_CHIEF_STAGES"


def cache_directory(configured: str | None) -> str | None:
    """The directory of the stage cache ``stage_cache`` names, or None when it is off
    (None or 'none'). Only the default directory gives way to ``$FAULTFINDER_CHIEF_STAGES``:
    the config (and so an eval's config id) stays the same wherever the entries go."""
    if not configured or configured.lower() == "none":
        return None
    if configured == DEFAULT_STAGE_CACHE:
        return os.environ.get(DIRECTORY_ENV) or configured
    return configured


def trace_hash(trace: Trace) -> str:
    """Content hash of what CHIEF reads from a trace (not the gold label, not the path)."""
    data = trace.model_dump(mode="json", exclude={"label", "source"})
    blob = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def model_identity(llm: LLM) -> dict[str, Any]:
    # The run index makes repeated runs distinct draws, as in the response cache; reading
    # the LLM layer's context variable keeps both caches in step.
    return {
        "name": llm.name,
        "identity": llm.backend.identity(),
        "run": current_run(),
    }


def stage_key(**parts: Any) -> str:
    blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class StageCache:
    """A directory of cached stage outputs."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def _path(self, stage: str, key: str) -> Path:
        return self.directory / f"{stage}-{key[:40]}.json"

    def get(self, stage: str, key: str) -> dict[str, Any] | None:
        path = self._path(stage, key)
        try:
            data = json_text.loads(path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json_text.JSONTextError, UnicodeDecodeError):
            return None  # a damaged entry is a miss: the stage runs again
        if not isinstance(data, dict) or data.get("key") != key:
            return None
        payload = data.get("payload")
        return payload if isinstance(payload, dict) else None

    def put(self, stage: str, key: str, payload: dict[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(stage, key)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(
            json.dumps({"key": key, "stage": stage, "payload": payload}, ensure_ascii=False),
            encoding="utf-8",
        )
        tmp.replace(path)
