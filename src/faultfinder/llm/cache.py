"""On-disk response cache (SQLite), keyed by the request without credentials."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from faultfinder.errors import FaultfinderWarning
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
        "request": request.model_dump(mode="json"),
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
        try:
            self._db = self._open()
        except sqlite3.DatabaseError as exc:
            # A damaged cache only costs time: keep it for inspection, start a new one.
            aside = self._set_aside()
            warnings.warn(
                FaultfinderWarning(
                    f"response cache {self.path} is unreadable ({exc}); moved it to "
                    f"{aside.name} and started an empty cache"
                ),
                stacklevel=2,
            )
            self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(str(self.path), check_same_thread=False)
        try:
            if db.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise sqlite3.DatabaseError("integrity check failed")
            self._db = db
            self._migrate()
            db.execute("SELECT COUNT(*) FROM responses").fetchone()
        except sqlite3.DatabaseError:
            db.close()
            raise
        return db

    def _set_aside(self) -> Path:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        n = 1
        while aside.exists():
            n += 1
            aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{n}")
        for suffix in ("-wal", "-shm", "-journal"):
            sidecar = self.path.with_name(self.path.name + suffix)
            if sidecar.exists():
                sidecar.replace(aside.with_name(aside.name + suffix))
        self.path.replace(aside)
        return aside

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
        if not row:
            return None
        try:
            return Completion.model_validate_json(row[0])
        except ValueError:
            return None  # an entry that does not read back is a miss, not a crash

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
