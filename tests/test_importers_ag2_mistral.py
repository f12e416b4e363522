"""The AG2 runtime-log importer on a real AG2 run whose model writes its tool calls with no
id, as Mistral's API does (tests/fixtures/otel/programs/ag2_tool_calls.py against the
loopback scripted upstream): AG2 then writes its tool responses with no ``tool_call_id``
(``generate_tool_calls_reply``: "compatible with Mistral API"), in the order of the calls,
and each is read as the result of the call at its place.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import Trace

QUESTION = "What are 6/3, 1/0 and 8/2?"
DIVISIONS = [(6, 3), (1, 0), (8, 2)]
LOGS = {"sqlite": "runtime.db", "file": "autogen_logs/runtime.log"}


def _completion(message: dict[str, Any], reason: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": "mistral-small-latest",
        "choices": [{"index": 0, "finish_reason": reason, "message": message}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _upstream(body: dict[str, Any]) -> Any:
    """The Solver asks for three divisions in one reply, each call with no id, then
    reports."""
    if any(m.get("role") == "tool" for m in body["messages"]):
        assert all("tool_call_id" not in m for m in body["messages"])  # AG2 sent none
        return "6/3 is 2.0, 1/0 is undefined, 8/2 is 4.0. TERMINATE"
    calls = [
        {
            "id": None,
            "type": "function",
            "function": {"name": "divide", "arguments": json.dumps({"a": a, "b": b})},
        }
        for a, b in DIVISIONS
    ]
    message = {"role": "assistant", "content": None, "tool_calls": calls}
    return _completion(message, "tool_calls")


def _run(tmp_path: Path, logger: str) -> Path:
    if importlib.util.find_spec("autogen") is None:
        pytest.skip("AG2 0.x (autogen) not installed: pip install -e '.[dev]'")
    from otel_programs import run_program

    run = run_program(["ag2_tool_calls.py", logger, QUESTION], _upstream, tmp_path, collect=False)
    assert "FINAL ANSWER: 6/3 is 2.0, 1/0 is undefined, 8/2 is 4.0." in run.stdout
    assert run.llm_requests == 2
    return tmp_path / LOGS[logger]


def _load(path: Path) -> Trace:
    (trace,) = load_traces(path, format="ag2")
    return trace


@pytest.mark.slow
@pytest.mark.parametrize("logger", list(LOGS))
def test_responses_with_no_call_id_answer_the_calls_at_their_places(
    tmp_path: Path, logger: str
) -> None:
    """AG2 logs the executions of 6/3 and 8/2 (none for 1/0, which raised); the Executor's
    reply holds all three responses, with no tool_call_id. Each execution goes to the call
    with its arguments and 1/0's "Error: division by zero", which only the reply holds, to
    the second call: the trace keeps all three results, in the order of their calls."""
    trace = _load(_run(tmp_path, logger))
    asked = trace.steps[0]
    assert [(c.id, c.name, json.loads(c.arguments)) for c in asked.tool_calls] == [
        (None, "divide", {"a": a, "b": b}) for a, b in DIVISIONS
    ]
    assert [(r.call_id, r.name, r.content, r.status) for r in asked.tool_results] == [
        (None, "divide", "2.0", "success"),
        (None, "divide", "Error: division by zero", "error"),
        (None, "divide", "4.0", "success"),
    ]
    (note,) = asked.metadata["tool_responses"]
    assert note["matched_by"].startswith("place: a response with no tool_call_id")
    assert "tool_responses[1]" in note["taken_from"]
    assert "the reply of 'Executor' (generate_tool_calls_reply)" in note["taken_from"]
    assert not trace.steps[1].tool_results
    assert [s.kind for s in trace.steps] == ["llm", "llm"]


def _without_the_asking_reply(path: Path) -> None:
    """The Solver's model call that asked for the divisions removed from the log, as in a
    log cut short."""
    if path.suffix == ".db":
        with sqlite3.connect(path) as con:
            deleted = con.execute("DELETE FROM chat_completions WHERE response LIKE '%divide%'")
            assert deleted.rowcount == 1
        con.close()
        return
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [
        line
        for line in lines
        if not (line.startswith('{"invocation_id"') and "divide" in line.split('"response"')[1])
    ]
    assert len(kept) == len(lines) - 1
    path.write_text("".join(kept))


@pytest.mark.slow
@pytest.mark.parametrize("logger", list(LOGS))
def test_a_response_with_no_call_id_no_step_asked_for_is_kept_once(
    tmp_path: Path, logger: str
) -> None:
    """With the reply that asked not in the log, the failed call's response (the
    Executor's reply holds it, and the Solver's received message relays it) is kept once,
    as a tool step of the Executor, with the call the Executor was asked to run at its
    place: divide(1, 0); each logged execution is a tool step named after its function."""
    log = _run(tmp_path / "run", logger)
    path = tmp_path / log.name
    shutil.copy(log, path)
    _without_the_asking_reply(path)
    trace = _load(path)
    failed = [s for s in trace.steps if any(r.status == "error" for r in s.tool_results)]
    (step,) = failed
    assert (step.agent, step.kind) == ("Executor", "tool")
    assert [(c.id, c.name, json.loads(c.arguments)) for c in step.tool_calls] == [
        (None, "divide", {"a": 1, "b": 0})
    ]
    assert [r.content for r in step.tool_results] == ["Error: division by zero"]
    assert "3 tool calls with no id" in step.metadata["inferred"]["attached"]
    results = [r.content for s in trace.steps for r in s.tool_results]
    assert sorted(results) == ["2.0", "4.0", "Error: division by zero"]  # each once
    # the two logged executions: tool steps too, named after the function the Executor
    # was asked to run (the file logger does not log the name with the execution)
    ran = [s for s in trace.steps if s.kind == "tool" and s is not step]
    assert [[(c.id, c.name, json.loads(c.arguments)) for c in s.tool_calls] for s in ran] == [
        [(None, "divide", {"a": 6, "b": 3})],
        [(None, "divide", {"a": 8, "b": 2})],
    ]
    assert [[(r.name, r.content) for r in s.tool_results] for s in ran] == [
        [("divide", "2.0")],
        [("divide", "4.0")],
    ]
    times = [s.started_at for s in trace.steps]
    assert times == sorted(times)
