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

from faultfinder.errors import ConfigError, FaultfinderWarning
from faultfinder.llm.base import ChatRequest, Completion

LOCK_WAIT_S = 30.0
"""How long opening the cache waits for another process's lock on it before giving up."""

_CORRUPT_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
_LOCKED_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})

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


class _IntegrityError(sqlite3.DatabaseError):
    """``PRAGMA quick_check`` found damage: the file is a corrupt cache."""


def _is_corrupt(exc: sqlite3.DatabaseError) -> bool:
    """Whether ``exc`` says the file is damaged, as opposed to busy, locked, read-only or
    unopenable (which a healthy cache can be too)."""
    if isinstance(exc, _IntegrityError):
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _CORRUPT_CODES


class ResponseCache:
    """A thread-safe SQLite store of completions."""

    def __init__(self, path: str | Path, *, lock_wait: float = LOCK_WAIT_S) -> None:
        """Open (or create) the cache at ``path``.

        A cache another process has locked is waited on for ``lock_wait`` seconds. Only a
        file SQLite reports as damaged ("file is not a database", "database disk image is
        malformed", a failed integrity check) is moved aside, with a warning, and replaced
        by an empty cache. Anything else (a directory, a folder that cannot be created, a
        lock that outlasts the wait, a read-only file) raises ``ConfigError`` and leaves
        the path as it was.
        """
        self.path = Path(path)
        self.lock_wait = lock_wait
        self._lock = threading.Lock()
        if self.path.is_dir():
            raise ConfigError(
                f"response cache {self.path} is a directory; the cache is one SQLite file: "
                f"pass a file path (e.g. {self.path / 'cache.sqlite'}), or --cache none."
            )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise ConfigError(
                f"response cache {self.path}: its folder {self.path.parent} cannot be created, "
                "a file is in the way. Pass another --cache path, or --cache none."
            ) from None
        except OSError as exc:
            raise ConfigError(
                f"response cache {self.path}: cannot create its folder {self.path.parent} "
                f"({exc.strerror or exc}). Pass another --cache path, or --cache none."
            ) from None
        try:
            self._db = self._open()
        except sqlite3.DatabaseError as exc:
            if not _is_corrupt(exc):
                raise self._unusable(exc) from None
            # A damaged cache only costs time: keep it for inspection, start a new one.
            try:
                aside = self._set_aside()
            except OSError as move_exc:
                raise ConfigError(
                    f"response cache {self.path} is damaged ({exc}) and could not be moved "
                    f"aside ({move_exc.strerror or move_exc}). Remove it, or pass another "
                    "--cache path."
                ) from None
            warnings.warn(
                FaultfinderWarning(
                    f"response cache {self.path} is unreadable ({exc}); moved it to "
                    f"{aside.name} and started an empty cache"
                ),
                stacklevel=2,
            )
            try:
                self._db = self._open()
            except sqlite3.DatabaseError as again:
                raise self._unusable(again) from None

    def _unusable(self, exc: sqlite3.DatabaseError) -> ConfigError:
        """The one-line error for a cache that is fine but cannot be used now."""
        code = getattr(exc, "sqlite_errorcode", None)
        if code is not None and code & 0xFF in _LOCKED_CODES:
            return ConfigError(
                f"response cache {self.path} is locked by another process (waited "
                f"{self.lock_wait:g} s). Let that run finish, or pass another --cache path "
                "(or --cache none)."
            )
        return ConfigError(
            f"response cache {self.path} cannot be used ({exc}). Pass another --cache path, "
            "or --cache none."
        )

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(str(self.path), timeout=self.lock_wait, check_same_thread=False)
        try:
            if db.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise _IntegrityError("integrity check failed")
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
