"""The AG2 runtime-log importer on logs real AG2 programs wrote: credentials a program
leaked into its log are scrubbed from everything the trace takes from it.

The logs are the committed fixtures (tests/fixtures/otel/ag2-groupchat.*, written by
tests/fixtures/otel/programs/ag2_groupchat.py; the fuzzer's seed
tests/fixtures/importers/ag2/runtime.jsonl).
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.traces.loader import load_traces

HERE = Path(__file__).parent
OTEL = HERE / "fixtures" / "otel"
FIXTURES = {
    "sqlite": OTEL / "ag2-groupchat.db",
    "file": OTEL / "ag2-groupchat.runtime.log",
    "fuzz-seed": HERE / "fixtures" / "importers" / "ag2" / "runtime.jsonl",
}

# --- secrets ------------------------------------------------------------------------------

KEY_IN_MESSAGE = "sk-proj-Qm3Zt8Lw2Vn6Rb4Xc7Jd"  # key-shaped, in the user's question
KEY_IN_ARGUMENT = "sk-proj-Hy5Tp1Ks9Gf3Wa8Ue2Ni"  # key-shaped, in the add tool's arguments
GATEWAY = "gw-7Qm2Lp9Xv4Rt"  # not key-shaped: only the client's config shows it is a secret
SECRETS = (KEY_IN_MESSAGE, KEY_IN_ARGUMENT, GATEWAY)

# Each plant: a pattern, what a match of it becomes given a secret, and the secret. (\\*) is the
# run of backslashes in front of a quote, so one pattern finds the text at any depth of
# JSON held in strings (the file logger's json_state, the SQLite logger's columns).
Q = r'(\\*)"'
PLANTS = [
    # a message: the user's question (every request's history, the events, the task)
    (re.escape("What is 2 + 3?"), lambda m, s: f"What is 2 + 3? My key is {s}", KEY_IN_MESSAGE),
    # a tool argument: the model's call, the histories, the events, the function call
    (Q + r'b\1": 4', lambda m, s: _quoted(m, f'"b": 4, "note": "{s}"'), KEY_IN_ARGUMENT),
    # the Planner's reply quotes the gateway token its client sends
    (
        re.escape("numbers of the question."),
        lambda m, s: f"numbers of the question. (gateway {s})",
        GATEWAY,
    ),
    # the final answer (the Solver's last reply) repeats the user's key
    (
        re.escape("The answer is 6. TERMINATE"),
        lambda m, s: f"The answer is 6, sent with {s}. TERMINATE",
        KEY_IN_MESSAGE,
    ),
    # the client's configuration: a gateway token header (the file logger's client records;
    # AG2 masks `api_key`, not this)
    (
        Q + r'api_key\1": \1"\*\*\*REDACTED\*\*\*\1"',
        lambda m, s: _quoted(
            m, f'"api_key": "***REDACTED***", "default_headers": {{"X-Gateway-Token": "{s}"}}'
        ),
        GATEWAY,
    ),
    # the same, in the SQLite logger's oai_wrappers config list
    (
        re.escape('"default_headers": null'),
        lambda m, s: f'"default_headers": {{"X-Gateway-Token": "{s}"}}',
        GATEWAY,
    ),
]


def _quoted(match: re.Match[str], text: str) -> str:
    """``text`` with the match's run of backslashes in front of each quote."""
    return text.replace('"', match.group(1) + '"')


def _plant(text: str, placeholder: str | None = None) -> str:
    """``text`` with each secret planted (or ``placeholder`` written in its place)."""
    for pattern, put, secret in PLANTS:
        value = placeholder if placeholder is not None else secret
        text = re.sub(pattern, lambda m, put=put, value=value: put(m, value), text)
    return text


def _planted_copy(source: Path, target: Path, placeholder: str | None = None) -> Path:
    """A copy of an AG2 log with the secrets planted in every text it holds."""
    if source.suffix != ".db":
        target.write_text(_plant(source.read_text(encoding="utf-8"), placeholder))
        return target
    shutil.copy(source, target)
    with sqlite3.connect(target) as con:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            cur = con.execute(f"SELECT rowid, * FROM {table}")
            names = [d[0] for d in cur.description][1:]
            for rowid, *values in cur.fetchall():
                for name, value in zip(names, values, strict=True):
                    if isinstance(value, str) and _plant(value, placeholder) != value:
                        con.execute(
                            f"UPDATE {table} SET {name} = ? WHERE rowid = ?",
                            (_plant(value, placeholder), rowid),
                        )
    con.close()
    return target


def _parsed(value: Any) -> Any:
    """``value`` with JSON held in strings parsed: a source record's JSON text is written
    again, compactly, when a secret is scrubbed from it (the SQLite logger indents its own)."""
    if isinstance(value, str) and value.lstrip().startswith(("{", "[")):
        try:
            return _parsed(json.loads(value))
        except ValueError:
            return value
    if isinstance(value, dict):
        return {k: _parsed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_parsed(v) for v in value]
    return value


def _imported(path: Path, out: Path) -> str:
    """What `faultfinder import` writes for ``path``."""
    result = CliRunner().invoke(main, ["import", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", ["sqlite", "file"])
def test_secrets_a_program_leaked_into_its_log_are_never_written(tmp_path: Path, name: str) -> None:
    """A key in a message, a key in a tool argument, and a token in the client's config
    that a reply quotes: none is written (nor any part of the trace that holds one: content,
    input messages, request, tool calls and results, task, final answer, roster, metadata),
    and the trace is the one imported from the log with [REDACTED] written in their place
    (nothing else changes)."""
    source = FIXTURES[name]
    planted = _planted_copy(source, tmp_path / f"planted{source.suffix}")
    placeholders = _planted_copy(source, tmp_path / f"placeholders{source.suffix}", "[REDACTED]")
    raw = planted.read_bytes()
    for secret in SECRETS:  # the secrets are really in the log
        assert secret.encode() in raw
    written = _imported(planted, tmp_path / "planted.json")
    for secret in SECRETS:
        assert secret not in written
    expected = _imported(placeholders, tmp_path / "placeholders.json")
    got, want = _parsed(json.loads(written)), _parsed(json.loads(expected))
    for trace in (got, want):
        trace["source"]["path"] = "log"
        trace["id"] = trace["id"].split("/", 1)[1]
    assert got == want
    (trace,) = load_traces(planted)
    assert trace.task == "What is 2 + 3? My key is [REDACTED]"
    assert "[REDACTED]" in trace.steps[1].input_messages[-1]["content"]
    assert "[REDACTED]" in trace.steps[1].tool_calls[0].arguments
    assert trace.final_answer == "The answer is 6, sent with [REDACTED]."
