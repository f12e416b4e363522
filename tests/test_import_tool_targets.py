"""Tool spans attached to the step that asked: what the index of the steps answers is what
a plain scan of each step's calls and results says, and one step collecting thousands of
tool results is read in work linear in their number (counted, not timed)."""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from faultfinder.traces.importers import _call_spans, _tool_targets
from faultfinder.traces.importers._tool_targets import ToolTargets
from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import Step, ToolCall, ToolResult
from otel_helpers import export, span


def lines_run(files: set[str], work: Callable[[], Any]) -> tuple[Any, int]:
    """``work()`` and how many lines of ``files`` it ran (a loop's lines once a turn)."""
    count = 0

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return local

    def call(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename in files else None

    previous = sys.gettrace()
    sys.settrace(call)
    try:
        result = work()
    finally:
        sys.settrace(previous)
    return result, count


MAPPING = {str(Path(m.__file__ or "")) for m in (_call_spans, _tool_targets)}


def one_step_asking(n: int, *, ids: bool) -> list[dict[str, Any]]:
    """A model call asking for ``n`` lookups, then ``n`` tool spans answering them (with
    the call id, or only the tool's name and a result of their own), then a model call
    whose input answers every call by id."""
    parts = [
        {"type": "tool_call", "id": f"c{i}", "name": "lookup", "arguments": {}} for i in range(n)
    ]
    asked = json.dumps([{"role": "assistant", "parts": parts}])
    answers = [
        {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": f"c{i}", "response": f"r{i}"}],
        }
        for i in range(n)
    ]
    call = {"gen_ai.operation.name": "chat", "gen_ai.output.messages": asked}
    spans = [span("a" * 16, None, "run", 0, {}), span("b" * 16, "a" * 16, "chat", 1, call)]
    for i in range(n):
        attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}
        attrs["gen_ai.tool.call.result"] = f"r{i}"
        if ids:
            attrs["gen_ai.tool.call.id"] = f"c{i}"
        spans.append(span(f"{i + 1:016x}", "a" * 16, "lookup", 2 + i // 50, attrs))
    reply = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(answers)}
    spans.append(span("c" * 16, "a" * 16, "chat", 10**6, reply))
    return spans


def test_one_step_collecting_many_results_is_read_in_linear_work(tmp_path: Path) -> None:
    """Each tool span's result counted the step's calls and results of its name again, and
    each result with no call id compared its text with every other: a step collecting
    5,000 results took tens of seconds. Four times the results now take about four times
    the work, by call id and by tool name alike, and every result still gets its call's
    id."""
    for ids in (True, False):
        work = []
        for n in (100, 400):
            path = tmp_path / f"wide-{ids}-{n}.otlp.json"
            path.write_text(json.dumps(export(one_step_asking(n, ids=ids))), "utf-8")
            (trace,), lines = lines_run(MAPPING, lambda p=path: load_traces(p, format="otlp"))
            step = trace.steps[0]
            assert [(r.call_id, r.content) for r in step.tool_results] == [
                (f"c{i}", f"r{i}") for i in range(n)
            ]
            assert [c.id for c in step.tool_calls] == [f"c{i}" for i in range(n)]
            work.append(lines)
        assert work[1] < 6 * work[0], (ids, work)  # the square would be 16 times


def test_results_sharing_a_text_get_no_call_id_by_it(tmp_path: Path) -> None:
    """By name, a result's call id is taken from the later answer with its text only when
    no other result of that name has the same text."""
    spans = one_step_asking(4, ids=False)
    for tool in spans[2:6]:
        for attr in tool["attributes"]:
            if attr["key"] == "gen_ai.tool.call.result" and attr["value"]["stringValue"] != "r0":
                attr["value"]["stringValue"] = "same"
    path = tmp_path / "twins.otlp.json"
    path.write_text(json.dumps(export(spans)), "utf-8")
    (trace,) = load_traces(path, format="otlp")
    assert [r.call_id for r in trace.steps[0].tool_results] == ["c0", None, None, None]
    entries = trace.steps[0].metadata["tool_spans"]
    assert [("call_id_from" in e) for e in entries] == [True, False, False, False]


def plain_counts(step: Step, name: Any) -> tuple[int, int]:
    calls = [c for c in step.tool_calls if c.name == name]
    results = [r for r in step.tool_results if r.name == name]
    return len(calls), len(results)


def plain_unanswered(step: Step, name: Any, answered: set[str]) -> bool:
    return any(c.name == name and c.id not in answered for c in step.tool_calls)


def test_the_index_answers_what_a_plain_scan_does() -> None:
    """Calls and results put on steps at random (ids shared, repeated, blank or none, the
    same id answered on another step): after each, the counts by name, whether a step asks
    for an id and whether it has an unanswered call of a name are those of a plain scan."""
    rng = random.Random(7)
    names, ids = ["a", "b", "c"], [None, "", "x", "y", "z", "w"]
    for _ in range(40):
        steps = [Step(index=i, agent=rng.choice(["P", "Q"]), content="") for i in range(3)]
        targets = ToolTargets(steps)
        answered: set[str] = set()
        for _ in range(30):
            step = rng.choice(targets.steps)
            if rng.random() < 0.2:
                step = Step(index=len(targets.steps), agent="P", content="")
                targets.add(step)
            if rng.random() < 0.5:
                step.tool_calls.append(ToolCall(id=rng.choice(ids), name=rng.choice(names)))
            else:
                call_id = rng.choice(ids)
                step.tool_results.append(ToolResult(call_id=call_id, name=rng.choice(names)))
                if call_id:
                    answered.add(call_id)
            targets.note(step)
            assert targets.answered == answered
            for each in targets.steps:
                for name in [*names, None]:
                    assert targets.counts(each, name) == plain_counts(each, name)
                    assert targets.unanswered(each, name) == plain_unanswered(each, name, answered)
                for call_id in ids:
                    expected = bool(call_id) and any(c.id == call_id for c in each.tool_calls)
                    assert targets.asks(each, call_id) == expected
