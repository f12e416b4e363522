"""The AG2 runtime-log importer on logs real AG2 programs wrote: credentials a program
leaked into its log are scrubbed from everything the trace takes from it, and function
executions are matched to the tool calls that asked for them by call id.

The logs are the committed fixtures (tests/fixtures/otel/ag2-groupchat.*, written by
tests/fixtures/otel/programs/ag2_groupchat.py; the fuzzer's seed
tests/fixtures/importers/ag2/runtime.jsonl) and, when AG2 0.x (`autogen`) is installed,
a fresh run of tests/fixtures/otel/programs/ag2_tool_calls.py against the loopback
scripted upstream.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
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


# --- function calls matched by call id ----------------------------------------------------


@pytest.mark.parametrize("name", list(FIXTURES))
def test_a_function_call_is_matched_by_the_id_of_the_call_it_ran(name: str) -> None:
    """AG2 logs no call id with a function execution; the executing agent's
    received_message event holds the tool calls it was asked to run, with their ids."""
    (trace,) = load_traces(FIXTURES[name], format="ag2")
    solver = trace.steps[1]
    assert [(r.call_id, r.name, r.content) for r in solver.tool_results] == [
        ("call_g1", "add", "6")
    ]
    (match,) = solver.metadata["function_call_matches"]
    assert (match["matched_by"], match["call_id"]) == ("call id", "call_g1")
    assert match["call_id_from"].startswith("received_message event at 2026-11-23 20:59:")
    assert all("function_call_matches" not in s.metadata for s in trace.steps if s is not solver)


def _without_the_executors_orders(name: str, target: Path) -> Path:
    """The real log with the events showing the Executor the tool calls it was to run
    removed: the log then holds no call id for the function call."""
    source = FIXTURES[name]
    if name == "sqlite":
        shutil.copy(source, target)
        with sqlite3.connect(target) as con:
            con.execute(
                "DELETE FROM events WHERE source_name = 'Executor' AND "
                "event_name = 'received_message' AND json_state LIKE '%tool_calls%'"
            )
        con.close()
        return target
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [
        line
        for line in lines
        if '"source_name": "Executor", "event_name": "received_message"' not in line
        or "tool_calls" not in line
    ]
    assert len(kept) == len(lines) - 1
    target.write_text("".join(kept))
    return target


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("sqlite", "function name and arguments: the latest earlier unanswered call"),
        ("file", "arguments: the latest earlier unanswered call"),
    ],
)
def test_without_an_id_in_the_log_the_call_is_matched_as_before(
    tmp_path: Path, name: str, rule: str
) -> None:
    path = _without_the_executors_orders(name, tmp_path / f"log{FIXTURES[name].suffix}")
    (trace,) = load_traces(path, format="ag2")
    solver = trace.steps[1]
    assert [(r.call_id, r.content) for r in solver.tool_results] == [("call_g1", "6")]
    assert solver.metadata["function_call_matches"] == [{"matched_by": rule}]


# --- tool responses no function call record gives ----------------------------------------

KEY_IN_ERROR = "sk-proj-Ve6Nc2Hs8Kd4Pm1Tq9Lw"  # key-shaped, in the failed tool's error text


def _as_if_add_raised(name: str, target: Path, response: str) -> Path:
    """The real group chat log as AG2 writes it when the call did not return: no
    function_calls record (AG2 logs an execution only when the function returns), and
    ``response`` as the tool response in every event that holds it (the Executor's reply,
    and the message each agent received from it)."""
    source = FIXTURES[name]
    pattern = re.compile(Q + r'content\1": \1"6\1"')

    def swap(text: str) -> str:
        return pattern.sub(lambda m: _quoted(m, f'"content": "{response}"'), text)

    if name == "sqlite":
        shutil.copy(source, target)
        with sqlite3.connect(target) as con:
            assert con.execute("DELETE FROM function_calls").rowcount == 1
            rows = con.execute(
                "SELECT rowid, json_state FROM events WHERE json_state LIKE '%tool_responses%'"
            ).fetchall()
            for rowid, state in rows:
                con.execute(
                    "UPDATE events SET json_state = ? WHERE rowid = ?", (swap(state), rowid)
                )
        con.close()
        return target
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [swap(line) if "tool_responses" in line else line for line in lines]
    kept = [line for line in kept if '"input_args"' not in line]
    assert len(kept) == len(lines) - 1
    target.write_text("".join(kept))
    return target


@pytest.mark.parametrize("name", ["sqlite", "file"])
@pytest.mark.parametrize(
    ("response", "content", "status"),
    [
        (
            f"Error: quota exceeded for {KEY_IN_ERROR}",
            "Error: quota exceeded for [REDACTED]",
            "error",
        ),
        ("6", "6", "success"),
    ],
    ids=["raised", "returned-unlogged"],
)
def test_a_result_only_the_chat_events_hold_is_attached_to_its_call(
    tmp_path: Path, name: str, response: str, content: str, status: str
) -> None:
    """A call that raised has no function_calls record; its result is in the tool responses
    of the events (four copies here: the Executor's reply, then the message relayed to each
    agent). It is attached once, to its call, with status error when AG2 worded it as a
    failure, scrubbed, and the step says where it came from."""
    path = _as_if_add_raised(name, tmp_path / f"log{FIXTURES[name].suffix}", response)
    assert response.encode() in path.read_bytes()
    (trace,) = load_traces(path, format="ag2")
    solver = trace.steps[1]
    assert [(r.call_id, r.name, r.content, r.status) for r in solver.tool_results] == [
        ("call_g1", "add", content, status)
    ]
    (note,) = solver.metadata["tool_responses"]
    assert note["call_id"] == "call_g1"
    assert (
        note["taken_from"].startswith("reply_func_executed event at 2026-11-23 20:59:")
        and "the reply of 'Executor' (generate_tool_calls_reply)" in note["taken_from"]
    )
    assert ("status_from" in note) == (status == "error")
    assert "function_call_matches" not in solver.metadata
    assert all("tool_responses" not in s.metadata for s in trace.steps if s is not solver)
    assert KEY_IN_ERROR not in _imported(path, tmp_path / "out.json")


def _autogen_installed() -> bool:
    try:
        return importlib.util.find_spec("autogen.runtime_logging") is not None
    except ModuleNotFoundError:
        return False


def divisions_upstream(body: dict[str, Any]) -> Any:
    """The Solver asks for three divisions in one reply, then reports."""
    if any(m.get("role") == "tool" for m in body["messages"]):
        return "6/3 is 2.0, 1/0 is undefined, 8/2 is 4.0. TERMINATE"
    calls = [(6, 3), (1, 0), (8, 2)]
    return {
        "tool_calls": [
            {"id": f"call_d{n}", "name": "divide", "arguments": json.dumps({"a": a, "b": b})}
            for n, (a, b) in enumerate(calls, start=1)
        ]
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    ("logger", "log"), [("sqlite", "runtime.db"), ("file", "autogen_logs/runtime.log")]
)
def test_several_tool_calls_in_one_reply_are_matched_by_id(
    tmp_path: Path, logger: str, log: str
) -> None:
    """A real AG2 run: one reply asks for three divisions; the second fails (AG2 then logs
    no function call), so the third's execution is the second logged. Matched by id, each
    result is on its own call; matched by position, 8/2's result went to the 1/0 call. The
    failed call's result, which only the Executor's reply event holds, is on its call as an
    error."""
    if not _autogen_installed():
        pytest.skip("AG2 0.x (autogen) not installed: pip install -e '.[dev]'")
    from otel_programs import run_program

    question = "What are 6/3, 1/0 and 8/2?"
    run = run_program(
        ["ag2_tool_calls.py", logger, question], divisions_upstream, tmp_path, collect=False
    )
    assert "FINAL ANSWER: 6/3 is 2.0, 1/0 is undefined, 8/2 is 4.0." in run.stdout
    (trace,) = load_traces(tmp_path / log, format="ag2")
    assert trace.task == question and len(trace.steps) == run.llm_requests == 2
    asked = trace.steps[0]
    assert [c.id for c in asked.tool_calls] == ["call_d1", "call_d2", "call_d3"]
    assert [(r.call_id, r.content, r.status) for r in asked.tool_results] == [
        ("call_d1", "2.0", "success"),
        ("call_d2", "Error: division by zero", "error"),
        ("call_d3", "4.0", "success"),
    ]
    matches = asked.metadata["function_call_matches"]
    assert [(m["matched_by"], m["call_id"]) for m in matches] == [
        ("call id", "call_d1"),
        ("call id", "call_d3"),
    ]
    (note,) = asked.metadata["tool_responses"]
    assert note["call_id"] == "call_d2"
    assert "the reply of 'Executor' (generate_tool_calls_reply)" in note["taken_from"]


# --- a response whose call no step asked for ----------------------------------------------


def _without_the_asking_reply(source: Path, target: Path) -> Path:
    """``source`` (a copy of a real AG2 log) with the Solver's model call that asked for
    call_g1 removed, as in a log cut short or a tool call no logged model call wrote."""
    if target.suffix == ".db":
        if source != target:
            shutil.copy(source, target)
        with sqlite3.connect(target) as con:
            deleted = con.execute("DELETE FROM chat_completions WHERE response LIKE '%call_g1%'")
            assert deleted.rowcount == 1
        con.close()
        return target
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [
        line
        for line in lines
        if not (line.startswith('{"invocation_id"') and "call_g1" in line.split('"response"')[1])
    ]
    assert len(kept) == len(lines) - 1
    target.write_text("".join(kept))
    return target


@pytest.mark.parametrize("name", ["sqlite", "file"])
def test_a_response_to_a_call_no_step_asked_for_is_kept(tmp_path: Path, name: str) -> None:
    """The call raised (no function_calls record) and the reply that asked for it is not
    in the log: its response, which the events relay four times, is kept once, as a tool
    step of the Executor with its call id, and the step says no call matched."""
    target = tmp_path / f"log{FIXTURES[name].suffix}"
    path = _as_if_add_raised(name, target, "Error: division by zero")
    _without_the_asking_reply(path, path)
    (trace,) = load_traces(path, format="ag2")
    assert all(s.kind == "llm" or s.agent == "Executor" for s in trace.steps)
    (step,) = [s for s in trace.steps if s.kind == "tool"]
    assert [(r.call_id, r.name, r.content, r.status) for r in step.tool_results] == [
        ("call_g1", "add", "Error: division by zero", "error")
    ]
    assert [(c.id, c.name, json.loads(c.arguments)) for c in step.tool_calls] == [
        ("call_g1", "add", {"a": 2, "b": 4})
    ]
    assert (
        "no step of the log asked for tool call id 'call_g1'"
        in (step.metadata["inferred"]["attached"])
    )
    (note,) = step.metadata["tool_responses"]
    assert "the reply of 'Executor' (generate_tool_calls_reply)" in note["taken_from"]
    times = [s.started_at for s in trace.steps]
    assert times == sorted(times)  # in time order, between the model calls


@pytest.mark.parametrize("name", ["sqlite", "file"])
def test_an_execution_no_step_asked_for_keeps_its_call_id(tmp_path: Path, name: str) -> None:
    """The call returned (a function_calls record) but the reply that asked for it is not
    in the log: its tool step carries the id and function name the Executor was asked to
    run it under (the file logger does not log the name with the execution), and the
    relayed response adds no second result."""
    path = _without_the_asking_reply(FIXTURES[name], tmp_path / f"log{FIXTURES[name].suffix}")
    (trace,) = load_traces(path, format="ag2")
    (step,) = [s for s in trace.steps if s.kind == "tool"]
    assert [(r.call_id, r.name, r.content) for r in step.tool_results] == [("call_g1", "add", "6")]
    assert [(c.id, c.name) for c in step.tool_calls] == [("call_g1", "add")]
    assert step.metadata["inferred"]["call_id_from"].startswith("received_message event at")
    times = [s.started_at for s in trace.steps]
    assert times == sorted(times)


# --- long logs ----------------------------------------------------------------------------

LONG_LOG = """
import json, sys
from datetime import datetime, timedelta
from pathlib import Path
from faultfinder.traces.loader import load_traces

turns, path = int(sys.argv[1]), Path(sys.argv[2])
start = datetime(2026, 11, 23, 20, 0, 0)
lines = ["Started new session with Session ID: s"]
for n in range(turns):
    asked = (start + timedelta(seconds=2 * n)).isoformat(sep=" ")
    answered = (start + timedelta(seconds=2 * n + 1)).isoformat(sep=" ")
    response = {"id": f"c{n}", "object": "chat.completion", "model": "m", "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "go"}}]}
    lines.append(json.dumps({
        "invocation_id": f"inv-{n}", "client_id": 1, "wrapper_id": 2, "session_id": "s",
        "request": {"messages": [{"role": "user", "content": "Add."}], "model": "m"},
        "response": response, "is_cached": 0, "cost": 0, "start_time": asked,
        "end_time": asked, "thread_id": 1, "source_name": "Planner"}))
    reply = {"role": "tool", "content": "x", "tool_responses": [
        {"tool_call_id": f"call_{n}", "role": "tool", "content": "Error: boom"}]}
    state = {"reply_func_name": "generate_tool_calls_reply", "final": True, "reply": reply}
    for agent in ("Executor", "Relay"):  # the reply, then a relayed copy
        lines.append(json.dumps({
            "source_id": 7, "source_name": agent, "event_name": "reply_func_executed",
            "agent_module": "m", "agent_class": "C", "json_state": json.dumps(state),
            "timestamp": answered, "thread_id": 1}))
path.write_text("\\n".join(lines) + "\\n")
(trace,) = load_traces(path, format="ag2")
print(json.dumps([[s.kind, s.agent, [r.call_id for r in s.tool_results]] for s in trace.steps]))
"""


@pytest.mark.slow
def test_a_long_log_of_responses_no_step_asked_for_imports_in_linear_time(tmp_path: Path) -> None:
    """8,000 model turns, each followed by a tool response (and a relayed copy of it) to a
    call no logged turn asked for. Each response looked back over a copy of every earlier
    step, and each kept one scanned every step's results and walked the steps to find its
    place: minutes for this log. Now each is found by its call id, and the steps are kept
    in time order as they come. The child process runs with a generous limit."""
    turns = 8000
    done = subprocess.run(
        [sys.executable, "-c", LONG_LOG, str(turns), str(tmp_path / "long.log")],
        capture_output=True, text=True, timeout=60, check=True,
        env={**os.environ, "PYTHONPATH": str(HERE.parent / "src")},
    )  # fmt: skip
    steps = json.loads(done.stdout)
    assert len(steps) == 2 * turns  # one tool step per response, not per relayed copy
    assert steps[:4] == [
        ["llm", "Planner", []],
        ["tool", "Executor", ["call_0"]],
        ["llm", "Planner", []],
        ["tool", "Executor", ["call_1"]],
    ]
    assert steps[-1] == ["tool", "Executor", [f"call_{turns - 1}"]]


DISTRIBUTE = """
import sys
from datetime import datetime, timedelta
from pathlib import Path
from faultfinder.traces.importers._ag2_logs import Session, _distribute

many = int(sys.argv[1])
start = datetime(2026, 11, 23)
def at(seconds):
    return (start + timedelta(seconds=seconds)).isoformat(sep=" ")
sessions = {f"s{n}": Session(completions=[{"start_time": at(10 * n)}]) for n in range(many)}
records = [{"timestamp": at(10 * n + 5)} for n in range(many)]
records.append({"timestamp": at(-5)})  # before every session: the first one's
records.append({"timestamp": None})  # no time: the first one's
paired = _distribute(sessions, records, Path("log.db"), "events.timestamp")
assert [sid for sid, _ in paired] == [f"s{n}" for n in range(many)] + ["s0", "s0"]
print("ok")
"""


def test_records_of_a_log_of_many_sessions_are_placed_in_linear_time() -> None:
    """The SQLite logger appends every run's session to the same database, and its events
    and function calls name no session: each is given the session that started last before
    it. Each record was compared with every session, so 60,000 sessions and as many
    records took minutes; now each finds its session by bisection (under a second). The
    child runs with a generous limit."""
    done = subprocess.run(
        [sys.executable, "-c", DISTRIBUTE, "60000"],
        capture_output=True, text=True, timeout=30, check=True,
        env={**os.environ, "PYTHONPATH": str(HERE.parent / "src")},
    )  # fmt: skip
    assert done.stdout.strip() == "ok"
