"""The generic chat-message importer and its field mapping."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from faultfinder.errors import ConfigError, TraceFormatError, TraceFormatWarning
from faultfinder.traces.importers.generic import _OPTIONS, GenericImporter, GenericMapping
from faultfinder.traces.loader import load_trace, load_traces

FIXTURES = Path(__file__).parent / "fixtures" / "importers" / "generic"
CHAT = FIXTURES / "chat.jsonl"
WRAPPED = FIXTURES / "wrapped.json"
WRAPPED_MAPPING = {
    "messages_key": "turns",
    "agent_field": "speaker",
    "role_field": "speaker",
    "content_field": "text",
    "step_base": "1",
}


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_openai_style_jsonl_with_default_mapping() -> None:
    trace = load_trace(CHAT)  # detected as generic
    assert trace.source.format == "generic"
    assert trace.id == "chat"
    assert trace.task == "Plan a picnic for four people on Saturday."
    assert [(s.agent, s.role, s.kind) for s in trace.steps] == [
        ("user", "user", "human"),
        ("Planner", "assistant", "llm"),
        ("Weather", "assistant", "llm"),
        ("forecast", "tool", "tool"),
        ("Weather", "assistant", "llm"),
        ("Planner", "assistant", "llm"),
    ]
    assert [(c.id, c.name, c.arguments) for c in trace.steps[2].tool_calls] == [
        ("call_w1", "forecast", '{"day": "Saturday"}')
    ]
    assert trace.steps[2].content == ""
    assert trace.steps[3].metadata == {"tool_call_id": "call_w1"}
    assert trace.steps[5].content == "Picnic is on.\nBring sandwiches."
    assert [a.name for a in trace.agents] == ["Planner", "Weather"]
    assert trace.label is None


def test_wrapper_with_custom_mapping_and_one_based_label() -> None:
    trace = GenericImporter().load(WRAPPED, **WRAPPED_MAPPING)[0]
    assert trace.id == "picnic-7"
    assert trace.task == "Plan a picnic for four people on Saturday."
    assert trace.ground_truth == "Move the picnic indoors."
    assert [(s.agent, s.kind) for s in trace.steps] == [
        ("user", "human"),
        ("Planner", "llm"),
        ("Weather", "llm"),
        ("Weather", "llm"),
    ]
    assert trace.label is not None
    assert (trace.label.agent, trace.label.step) == ("Weather", 3)
    assert trace.metadata == {"source_run": "demo-run"}


def test_task_and_id_options_override(tmp_path: Path) -> None:
    path = write_json(
        tmp_path / "conv.json",
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
    )
    default = GenericImporter().load(path)[0]
    assert (default.id, default.task) == ("conv", "hi")
    assert [s.agent for s in default.steps] == ["user", "assistant"]
    custom = GenericImporter().load(path, task="Greet the user", id="run-1")[0]
    assert (custom.id, custom.task) == ("run-1", "Greet the user")


def test_dotted_fields_reach_nested_values(tmp_path: Path) -> None:
    path = write_json(
        tmp_path / "nested.json",
        [{"meta": {"who": "Solver"}, "role": "assistant", "body": {"text": "42"}}],
    )
    trace = GenericImporter().load(path, agent_field="meta.who", content_field="body.text")[0]
    assert (trace.steps[0].agent, trace.steps[0].content) == ("Solver", "42")


def test_jsonl_of_wrappers_gives_one_trace_per_line(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    lines = [
        {"messages": [{"role": "user", "content": "a"}]},
        {"id": "named", "messages": [{"role": "user", "content": "b"}]},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    traces = GenericImporter().load(path)
    assert [t.id for t in traces] == ["runs/0", "named"]


def test_detect() -> None:
    importer = GenericImporter()
    assert importer.detect(CHAT)
    assert not importer.detect(WRAPPED)  # its messages sit under 'turns': needs a mapping
    assert not importer.detect(FIXTURES.parent / "whoandwhen" / "Hand-Crafted" / "1.json")
    assert not importer.detect(FIXTURES.parent / "traceelephant")


def test_missing_speaker_names_field(tmp_path: Path) -> None:
    path = write_json(tmp_path / "bad.json", [{"role": "user", "content": "x"}, {"content": "y"}])
    with pytest.raises(TraceFormatError) as err:
        GenericImporter().load(path)
    assert err.value.path == str(path)
    assert err.value.field == "[1].name"
    assert "set agent_field / role_field" in err.value.reason


def test_jsonl_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"role": "user", "content": "x"}\n{"role": 3, "content": "y"}\n', "utf-8")
    with pytest.raises(TraceFormatError) as err:
        GenericImporter().load(path)
    assert (err.value.path, err.value.field) == (f"{path}:2", "role")
    path.write_text('{"role": "user", "content": "x"}\n{oops\n', "utf-8")
    with pytest.raises(TraceFormatError) as err:
        GenericImporter().load(path)
    assert (err.value.path, err.value.field) == (f"{path}:2", "(json)")


def test_label_outside_trace(tmp_path: Path) -> None:
    path = write_json(
        tmp_path / "w.json",
        {"messages": [{"role": "user", "content": "x"}], "mistake_agent": "a", "mistake_step": 1},
    )
    with pytest.raises(TraceFormatError) as err:
        GenericImporter().load(path)
    assert err.value.field == "mistake_step"


def test_bad_options() -> None:
    with pytest.raises(ConfigError, match="has no option 'speaker'"):
        GenericImporter().load(CHAT, speaker="x")
    with pytest.raises(TraceFormatError) as err:
        GenericImporter().load(CHAT, step_base="2")
    assert err.value.field == "(options)"


def test_empty_file(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="no messages"):
        GenericImporter().load(write_json(tmp_path / "e.json", []))


def test_every_option_is_documented_in_errors() -> None:
    assert set(_OPTIONS) == set(GenericMapping.model_fields)


def test_a_function_result_is_named_after_its_function_and_its_caller(tmp_path: Path) -> None:
    """A legacy ``role: "function"`` message names its function, not a speaker: the step
    gets a result of that name and the agent that called it (``tool`` when no earlier step
    did)."""
    call = {"name": "forecast", "arguments": '{"day": "Saturday"}'}
    path = write_json(
        tmp_path / "legacy.json",
        [
            {"role": "user", "content": "Picnic on Saturday?"},
            {"role": "assistant", "name": "Weather", "content": None, "function_call": call},
            {"role": "function", "name": "forecast", "content": "sunny"},
            {"role": "function", "name": "forecast", "content": "sunny again"},
            {"role": "assistant", "name": "Planner", "content": "Picnic is on."},
        ],
    )
    (trace,) = load_traces(path, format="generic")
    assert [(s.agent, s.role, s.kind) for s in trace.steps] == [
        ("user", "user", "human"),
        ("Weather", "assistant", "llm"),
        ("Weather", "function", "tool"),
        ("tool", "function", "tool"),  # the one call is answered already
        ("Planner", "assistant", "llm"),
    ]
    results = [[(r.name, r.content) for r in s.tool_results] for s in trace.steps[2:4]]
    assert results == [[("forecast", "sunny")], [("forecast", "sunny again")]]
    assert trace.steps[2].metadata["inferred"]["agent"].startswith("the caller: step 1")
    assert trace.steps[3].metadata["inferred"]["agent"] == "no earlier step called 'forecast'"
    assert [a.name for a in trace.agents] == ["Weather", "Planner"]


def test_function_results_are_given_their_callers_in_one_pass(tmp_path: Path) -> None:
    """A long log of function results, most with no caller in the file (its model turns
    cut), and nested calls answered latest first: each result looked back over every
    earlier step, a copy of them each time, so 20,000 results took minutes to import."""
    many = 20_000
    nested = [
        {"role": "assistant", "name": "Outer", "content": None, "function_call": {"name": "f"}},
        {"role": "assistant", "name": "Inner", "content": None, "function_call": {"name": "f"}},
        {"role": "function", "name": "f", "content": "inner's"},
        {"role": "function", "name": "f", "content": "outer's"},
    ]
    orphans = [{"role": "function", "name": f"f{i}", "content": "r"} for i in range(many)]
    path = write_json(tmp_path / "long.json", [*nested, *orphans])
    started = time.monotonic()
    (trace,) = load_traces(path, format="generic")
    assert time.monotonic() - started < 20
    assert [s.agent for s in trace.steps[:4]] == ["Outer", "Inner", "Inner", "Outer"]
    assert {s.agent for s in trace.steps[4:]} == {"tool"}
    assert len(trace.steps) == 4 + many


def test_a_misspelt_key_of_a_function_call_is_noted_and_kept(tmp_path: Path) -> None:
    """A legacy ``function_call`` whose ``arguments`` key has a typo: the arguments were
    dropped without a word (the fuzzer found it); the call is kept whole in the step's
    metadata with a warning, and ``--strict`` refuses it, as for ``tool_calls``."""
    call = {"name": "forecast", "argmuents": '{"day": "Saturday"}'}
    message = {"role": "assistant", "name": "Weather", "content": None, "function_call": call}
    path = write_json(tmp_path / "legacy.json", [message])
    with pytest.warns(TraceFormatWarning, match=r"'\[0\]\.function_call\.argmuents'.*'arguments'"):
        (trace,) = load_traces(path, format="generic")
    assert trace.steps[0].metadata["function_call"] == call
    assert [c.name for c in trace.steps[0].tool_calls] == ["forecast"]
    with pytest.raises(TraceFormatError, match="argmuents"):
        load_traces(path, format="generic", strict=True)


def test_an_unknown_key_of_a_tool_call_is_noted_and_kept(tmp_path: Path) -> None:
    """A ``tool_calls`` entry with a key the reader does not use (a misspelt ``argumnets``
    beside the function, an extra ``function.description``): the warning said "kept in
    metadata" but the key was in no field of the trace. The list is now kept whole in the
    step's metadata, the calls are still read, and ``--strict`` refuses it."""
    calls = [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "forecast", "arguments": "{}", "description": "weather"},
        },
        {"id": "call_2", "type": "function", "function": {"name": "tides"}, "argumnets": "{}"},
    ]
    message = {"role": "assistant", "name": "Weather", "content": None, "tool_calls": calls}
    plain_call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    clean = {"role": "assistant", "name": "Weather", "content": None, "tool_calls": [plain_call]}
    path = write_json(tmp_path / "calls.json", [message, clean])
    with pytest.warns(TraceFormatWarning) as caught:
        (trace,) = load_traces(path, format="generic")
    said = " ".join(str(w.message) for w in caught)
    assert "'[0].tool_calls[0].function.description'" in said
    assert "'[0].tool_calls[1].argumnets'" in said
    assert trace.steps[0].metadata["tool_calls"] == calls
    assert [c.name for c in trace.steps[0].tool_calls] == ["forecast", "tides"]
    # a list with nothing unread is read into ToolCalls only, as before
    assert "tool_calls" not in trace.steps[1].metadata
    assert [c.name for c in trace.steps[1].tool_calls] == ["f"]
    with pytest.raises(TraceFormatError, match="description"):
        load_traces(path, format="generic", strict=True)
