"""The AG2 runtime-log importer on real AG2 runs whose functions an agent runs from its
``function_map`` (tests/fixtures/otel/programs/ag2_function_map.py, run against the
loopback scripted upstream): AG2 logs no execution of such a function, so each result is
read from the chat events, for the legacy ``function_call`` style (``role: "function"``
replies) and the tools style alike.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import Trace

QUESTION = "What is the population of Atlantis, and what is 1/0?"
LOGS = {"sqlite": "runtime.db", "file": "autogen_logs/runtime.log"}
ASKED = [("lookup", {"city": "Atlantis"}), ("divide", {"a": 1, "b": 0})]


def _autogen_installed() -> bool:
    try:
        return importlib.util.find_spec("autogen.runtime_logging") is not None
    except ModuleNotFoundError:
        return False


def _completion(message: dict[str, Any], reason: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "finish_reason": reason, "message": message}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _upstream(style: str) -> Any:
    """The Assistant asks for lookup, then divide (one call per reply), then answers."""

    def reply(body: dict[str, Any]) -> Any:
        done = sum(m.get("role") in ("function", "tool") for m in body["messages"])
        if done == len(ASKED):
            return "Atlantis is unknown and 1/0 is undefined. TERMINATE"
        name, args = ASKED[done]
        call = {"name": name, "arguments": json.dumps(args)}
        if style == "functions":
            message = {"role": "assistant", "content": None, "function_call": call}
            return _completion(message, "function_call")
        tool_call = {"id": f"call_{name}", "type": "function", "function": call}
        return _completion(
            {"role": "assistant", "content": None, "tool_calls": [tool_call]}, "tool_calls"
        )

    return reply


def _run(tmp_path: Path, logger: str, style: str) -> Trace:
    if not _autogen_installed():
        pytest.skip("AG2 0.x (autogen) not installed: pip install -e '.[dev]'")
    from otel_programs import run_program

    run = run_program(
        ["ag2_function_map.py", logger, style, QUESTION],
        _upstream(style),
        tmp_path,
        collect=False,
    )
    assert "FINAL ANSWER: Atlantis is unknown and 1/0 is undefined." in run.stdout
    (trace,) = load_traces(tmp_path / LOGS[logger], format="ag2")
    assert len(trace.steps) == run.llm_requests == 3
    return trace


@pytest.mark.slow
@pytest.mark.parametrize("logger", list(LOGS))
def test_legacy_function_call_replies_are_the_results_of_their_calls(
    tmp_path: Path, logger: str
) -> None:
    """Each model reply asks for one function with a function_call (no call id); AG2's
    role "function" reply, which only the chat events hold, is that call's result, once
    (the Assistant's received copy adds none)."""
    trace = _run(tmp_path, logger, "functions")
    asked = trace.steps[:2]
    assert [[(c.id, c.name, json.loads(c.arguments)) for c in s.tool_calls] for s in asked] == [
        [(None, name, args)] for name, args in ASKED
    ]
    assert [[(r.call_id, r.name, r.content) for r in s.tool_results] for s in asked] == [
        [(None, "lookup", "Error: no population known for Atlantis")],
        [(None, "divide", "Error: division by zero")],
    ]
    for step in asked:
        (note,) = step.metadata["tool_responses"]
        assert "the reply of 'User' (generate_function_call_reply)" in note["taken_from"]
        assert "the function reply" in note["taken_from"]
    assert not trace.steps[2].tool_results
    assert [s.kind for s in trace.steps] == ["llm"] * 3


@pytest.mark.slow
@pytest.mark.parametrize("logger", list(LOGS))
def test_an_error_worded_result_of_a_function_map_function_is_not_called_a_failure(
    tmp_path: Path, logger: str
) -> None:
    """lookup returned "Error: no population known..." (AG2 counts it a success);
    divide raised and AG2 answered "Error: division by zero" (a failure). The User runs
    both from its function_map, so AG2 logs neither execution and the log cannot tell
    the two apart: neither is called a failure, and the note says why. (Without a
    function_map, such words are a failure: test_importers_ag2.py.)"""
    trace = _run(tmp_path, logger, "tools")
    asked = trace.steps[:2]
    assert [[(r.call_id, r.content, r.status) for r in s.tool_results] for s in asked] == [
        [("call_lookup", "Error: no population known for Atlantis", None)],
        [("call_divide", "Error: division by zero", None)],
    ]
    for step, name in zip(asked, ("lookup", "divide"), strict=True):
        (note,) = step.metadata["tool_responses"]
        assert "status_from" not in note
        assert f"'User' runs '{name}' from its function_map" in note["status_unknown"]


@pytest.mark.slow
def test_a_chat_in_the_legacy_form_imports_its_function_calls(tmp_path: Path) -> None:
    """The messages AG2 sent the model for its last reply (system, question, two
    function_call messages and their role "function" replies), saved as a chat file:
    the generic importer reads each function_call as the step's tool call, and each
    function reply as its result, by the agent that called it."""
    trace = _run(tmp_path / "run", "file", "functions")
    messages = trace.steps[2].input_messages
    assert messages is not None
    assert [m.get("function_call", {}).get("name") for m in messages].count(None) == 4
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps(messages))
    (imported,) = load_traces(chat, format="generic")
    calls = [(c.id, c.name, json.loads(c.arguments)) for s in imported.steps for c in s.tool_calls]
    assert calls == [(None, name, args) for name, args in ASKED]
    # each role "function" reply names its function: the result's name, the agent being
    # the one that called it
    callers = [s.agent for s in imported.steps if s.tool_calls]
    replies = [s for s in imported.steps if s.role == "function"]
    assert [(s.agent, s.kind) for s in replies] == [(agent, "tool") for agent in callers]
    assert [[r.name for r in s.tool_results] for s in replies] == [[n] for n, _ in ASKED]
    assert not {n for n, _ in ASKED} & {a.name for a in imported.agents}
    assert all("function_call" not in s.metadata for s in imported.steps)
