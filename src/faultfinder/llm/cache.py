"""On-disk response cache (SQLite), keyed by the request without credentials."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

from faultfinder.llm.base import ChatRequest, Completion

# Append-only: each entry upgrades the database by one version. Never edit old entries.
MIGRATIONS: list[str] = [
    "CREATE TABLE IF NOT EXISTS responses ("
    " key TEXT PRIMARY KEY, request TEXT NOT NULL, completion TEXT NOT NULL,"
    " created_at TEXT DEFAULT CURRENT_TIMESTAMP)",
]


def cache_key(identity: dict[str, Any], request: ChatRequest, run: int = 0) -> str:
    """Stable hash of backend identity, request and run index."""
    payload = {
        "backend": identity,
        # top_p joined the request later: left out when unset, so older keys stay valid.
        "request": request.model_dump(
            mode="json", exclude={"top_p"} if request.top_p is None else None
        ),
        "run": run,
    }
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """A thread-safe SQLite store of completions."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False)
        self._migrate()

    def _migrate(self) -> None:
        with self._lock:
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            for number, statement in enumerate(MIGRATIONS[version:], start=version + 1):
                self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version = {number}")
            self._db.commit()

    def get(self, key: str) -> Completion | None:
        with self._lock:
            row = self._db.execute(
                "SELECT completion FROM responses WHERE key = ?", (key,)
            ).fetchone()
        return Completion.model_validate_json(row[0]) if row else None

    def put(self, key: str, request: ChatRequest, completion: Completion) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO responses (key, request, completion) VALUES (?, ?, ?)",
                (key, request.model_dump_json(), completion.model_dump_json()),
            )
            self._db.commit()

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
