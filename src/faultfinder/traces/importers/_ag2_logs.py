"""AG2 / AutoGen runtime logs as written (helper of ``ag2.py``): the SQLite database and the
file logger's JSON lines, read into one :class:`Session` per logging session. Nothing in a
database is executed; it is opened read-only."""

from __future__ import annotations

import sqlite3
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from faultfinder.errors import TraceFormatError
from faultfinder.traces.importers._common import fail
from faultfinder.traces.importers._spans import check_keys, parse_time
from faultfinder.traces.importers.otlp import decode_text, read_bytes
from faultfinder.traces.io import parse_json, split_lines


@dataclass
class Session:
    """The records of one logging session."""

    completions: list[dict[str, Any]] = field(default_factory=list)
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[dict[str, Any]] = field(default_factory=list)
    events: int = 0
    others: list[dict[str, Any]] = field(default_factory=list)
    """Agent and event records as written (kept in the trace's metadata)."""
    chat_events: list[dict[str, Any]] = field(default_factory=list)
    """The ``received_message`` and ``reply_func_executed`` events, in log order: where
    the chat's last message and its end are read (:func:`chat_result`)."""
    config: list[dict[str, Any]] = field(default_factory=list)
    """The SQLite logger's ``oai_clients`` and ``oai_wrappers`` rows (model client
    configuration): not kept in the trace, read only for the secrets they reveal, which are
    scrubbed wherever else they appear (the file logger's are among ``others``)."""


_CHAT_EVENTS = frozenset({"received_message", "reply_func_executed"})


def _rows(con: sqlite3.Connection, table: str) -> Iterator[dict[str, Any]]:
    cur = con.execute(f"SELECT * FROM {table}")  # table names are constants below
    names = [d[0] for d in cur.description]
    for row in cur:
        yield dict(zip(names, row, strict=True))


def tables_of(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def read_sqlite(path: Path) -> dict[str, Session]:
    try:
        con = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        fail(path, "(sqlite)", f"cannot open: {exc}")
    sessions: dict[str, Session] = {}
    try:
        tables = tables_of(con)
        if "chat_completions" not in tables:
            fail(path, "chat_completions", "no such table: not an AG2 runtime log")
        for row in _rows(con, "chat_completions"):
            sessions.setdefault(str(row.get("session_id")), Session()).completions.append(row)
        if "agents" in tables:
            for row in _rows(con, "agents"):
                s = sessions.setdefault(str(row.get("session_id")), Session())
                s.agents[str(row.get("name"))] = {
                    "class": row.get("class"),
                    "init_args": row.get("init_args"),
                }
        for table in ("oai_clients", "oai_wrappers"):
            if table in tables:
                for row in _rows(con, table):
                    owner = sessions.get(str(row.get("session_id")))
                    if owner is not None:
                        owner.config.append(row)
        # function_calls and events carry no session id: they belong to the only session,
        # or are matched by time to the session whose completions span them.
        calls = list(_rows(con, "function_calls")) if "function_calls" in tables else []
        events = (
            con.execute("SELECT COUNT(*) FROM events").fetchone()[0] if "events" in tables else 0
        )
        chat_events = (
            [e for e in _rows(con, "events") if e.get("event_name") in _CHAT_EVENTS]
            if "events" in tables
            else []
        )
    except sqlite3.Error as exc:
        fail(path, "(sqlite)", f"query failed: {exc}")
    finally:
        con.close()
    sessions = {k: v for k, v in sessions.items() if v.completions}
    if not sessions:
        fail(path, "chat_completions", "no rows: nothing to import")
    for sid, call in _distribute(sessions, calls, path, "function_calls.timestamp"):
        sessions[sid].calls.append(call)
    for sid, event in _distribute(sessions, chat_events, path, "events.timestamp"):
        sessions[sid].chat_events.append(event)
    if len(sessions) == 1:
        next(iter(sessions.values())).events = int(events)
    return sessions


def _distribute(
    sessions: dict[str, Session], records: list[dict[str, Any]], path: Path, where: str
) -> list[tuple[str, dict[str, Any]]]:
    """Each record with no session id paired with its session: the one whose completions
    started last before it (the first session when none did)."""
    if not sessions:
        return []
    spans = []
    for sid, s in sessions.items():
        times = [
            parse_time(c.get("start_time"), path=path, where="start_time") for c in s.completions
        ]
        known = [t for t in times if t]
        spans.append((min(known) if known else None, sid))
    spans.sort(key=lambda x: (x[0] is None, x[0] or datetime.min))
    starts = [start for start, _ in spans if start is not None]
    paired = []
    for record in records:
        moment = parse_time(record.get("timestamp"), path=path, where=where)
        started = bisect_right(starts, moment) if moment is not None else 0
        paired.append((spans[started - 1 if started else 0][1], record))
    return paired


# The file logger's record kinds: (a key only that kind has, every key it writes).
_RECORDS: list[tuple[str, str, frozenset[str]]] = [
    (
        "completion",
        "invocation_id",
        frozenset(
            [
                "invocation_id",
                "client_id",
                "wrapper_id",
                "request",
                "response",
                "is_cached",
                "cost",
                "start_time",
                "end_time",
                "thread_id",
                "source_name",
                "session_id",
            ]
        ),
    ),
    (
        "agent",
        "agent_name",
        frozenset(
            [
                "id",
                "agent_name",
                "wrapper_id",
                "session_id",
                "current_time",
                "agent_type",
                "args",
                "thread_id",
            ]
        ),
    ),
    (
        "call",
        "input_args",
        frozenset(
            [
                "source_id",
                "source_name",
                "agent_module",
                "agent_class",
                "timestamp",
                "thread_id",
                "input_args",
                "returns",
            ]
        ),
    ),
    (
        "event",
        "event_name",
        frozenset(
            [
                "source_id",
                "source_name",
                "event_name",
                "agent_module",
                "agent_class",
                "json_state",
                "timestamp",
                "thread_id",
            ]
        ),
    ),
    (
        "client",
        "client_id",
        frozenset(
            [
                "client_id",
                "wrapper_id",
                "session_id",
                "class",
                "json_state",
                "timestamp",
                "thread_id",
            ]
        ),
    ),
    (
        "wrapper",
        "wrapper_id",
        frozenset(["wrapper_id", "session_id", "json_state", "timestamp", "thread_id"]),
    ),
]
_TEXT = ("invocation_id", "source_name", "start_time", "end_time", "timestamp", "agent_name",
         "agent_type", "event_name", "agent_module", "agent_class", "json_state", "session_id",
         "current_time", "input_args", "returns")  # fmt: skip


def _kind(record: dict[str, Any], where: str, path: Path) -> str:
    """The record's kind; its keys and text fields checked (unknown keys warned about)."""
    for kind, marker, known in _RECORDS:
        if marker in record:
            check_keys(record, known, path=path, where=where)
            for key in _TEXT:
                if (
                    key in known
                    and record.get(key) is not None
                    and not isinstance(record[key], str)
                ):
                    fail(
                        path,
                        f"{where}.{key}",
                        f"expected a string, got {type(record[key]).__name__}",
                    )
            return kind
    fail(
        path,
        where,
        "not a record the AG2 file logger writes (no invocation_id, agent_name, "
        "input_args, event_name, client_id or wrapper_id)",
    )


def read_file_log(path: Path) -> dict[str, Session]:
    text = decode_text(read_bytes(path), path)
    sessions: dict[str, Session] = {}
    current = "session"
    for number, line in enumerate(split_lines(text), start=1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("Started new session with Session ID:"):
            current = line.rsplit(":", 1)[1].strip()
            continue
        if not line.startswith("{"):
            continue  # the logger also writes its own error lines as plain text
        record = parse_json(line, path, line=number)
        if not isinstance(record, dict):
            fail(f"{path}:{number}", "(line)", "expected a JSON object")
        kind = _kind(record, f"line {number}", path)
        sid = record.get("session_id") if isinstance(record.get("session_id"), str) else current
        s = sessions.setdefault(sid or current, Session())
        if kind == "completion":
            s.completions.append(record)
        elif kind == "agent":
            s.agents[str(record["agent_name"])] = {
                "class": record.get("agent_type"),
                "init_args": record.get("args"),
            }
            s.others.append(record)
        elif kind == "call":
            s.calls.append(record)
        elif kind == "event":
            s.events += 1
            s.others.append(record)
            if record.get("event_name") in _CHAT_EVENTS:
                s.chat_events.append(record)
        else:
            s.others.append(record)
    found = {k: v for k, v in sessions.items() if v.completions or v.calls}
    if not found:
        fail(path, "(file)", "no chat completion or function call records: nothing to import")
    first = next(iter(found.values()))
    for sid, session in sessions.items():
        if sid not in found:  # records of a session with no call: kept with the first one
            first.others.extend(session.others)
    return found


def event_time(event: dict[str, Any], path: Path) -> datetime | None:
    """When a chat event happened; None when its timestamp does not parse."""
    try:
        return parse_time(event.get("timestamp"), path=path, where="events.timestamp")
    except TraceFormatError:
        return None
