"""The TraceElephant importer and the safe ChatCompletion repr reader."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from openai.types.chat import ChatCompletion

from faultfinder.errors import TraceFormatError, TraceFormatWarning
from faultfinder.traces.importers._openai import read_completion
from faultfinder.traces.importers._pyrepr import Call, Name, ReprSyntaxError, parse_repr
from faultfinder.traces.importers.traceelephant import TraceElephantImporter
from faultfinder.traces.io import UnknownKeys
from faultfinder.traces.loader import load_trace, load_traces

FIXTURES = Path(__file__).parent / "fixtures" / "importers" / "traceelephant"
CAPTAIN = FIXTURES / "captain-runs-gaia" / "task_7"
SWE = FIXTURES / "swe-agent-runs-verified" / "example__repo-1"
OLD = FIXTURES / "magentic-runs-old" / "task_3"


def copy_trace(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / "runs" / source.name
    shutil.copytree(source, target)
    return target


def edit_json(path: Path, edit: Any) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(json.dumps(data), encoding="utf-8")


def test_directory_of_runs_loads_every_trace_in_order() -> None:
    traces = TraceElephantImporter().load(FIXTURES)
    assert [t.id for t in traces] == [
        "captain-runs-gaia/task_7",
        "magentic-runs-old/task_3",
        "swe-agent-runs-verified/example__repo-1",
    ]
    assert load_traces(FIXTURES) == traces  # the loader detects the format


def test_steps_are_zero_based_with_source_ids_kept() -> None:
    trace = load_trace(CAPTAIN)
    assert [s.index for s in trace.steps] == [0, 1, 2]
    assert [s.source_id for s in trace.steps] == ["1", "2", "3"]
    assert trace.label is not None
    assert (trace.label.agent, trace.label.step) == ("Searcher", 1)
    assert trace.steps[1].agent == "Searcher"


def test_inputs_requests_and_credentials() -> None:
    trace = load_trace(CAPTAIN)
    first = trace.steps[0]
    assert first.input_messages == [
        {"role": "system", "content": "You plan the work."},
        {
            "role": "user",
            "content": "Find the population of the fictional city Examplopolis in 2020.",
        },
    ]
    assert first.request == {
        "model": "gpt-4o",
        "temperature": 0.3,
        "max_tokens": 1024,
        "extra_headers": {"X-Trace": "fx"},
    }
    assert trace.has_inputs
    assert "sk-fixture-secret" not in trace.model_dump_json()


def test_chat_completion_repr_is_parsed() -> None:
    trace = load_trace(CAPTAIN)
    first, second, third = trace.steps
    assert first.content == 'Plan: ask Searcher for the "2020" census figure.\nDon\'t guess.'
    assert first.model == "gpt-4o-2024-08-06"
    assert first.usage is not None
    assert (first.usage.prompt_tokens, first.usage.completion_tokens) == (52, 14)
    assert first.metadata["finish_reason"] == "stop"
    assert first.metadata["response_id"] == "chatcmpl-fx1"
    assert first.metadata["agent_id"] == 0
    # A tool call in the repr and the same call in tool_logs make one call and one result.
    assert second.content == ""
    assert [(c.id, c.name, c.arguments) for c in second.tool_calls] == [
        ("call_abc", "web_search", '{"query": "Examplopolis population"}')
    ]
    assert [(r.call_id, r.name, r.content, r.status) for r in second.tool_results] == [
        ("call_abc", "web_search", "Examplopolis had 11,000 inhabitants in 2010.", "success")
    ]
    assert second.metadata["tool_logs_unmapped"] == [{"entry": 0, "latency_ms": 310}]
    assert second.request is not None and "tools" in second.request
    # A JSON-object output reads the same way.
    assert third.content == "FINAL ANSWER: 11000"
    assert third.usage is not None and third.usage.total_tokens == 95


def test_trace_metadata_mapping() -> None:
    trace = load_trace(CAPTAIN)
    assert trace.task == "Find the population of the fictional city Examplopolis in 2020."
    assert trace.ground_truth == "12345"
    assert trace.system == "captain-agent"
    assert trace.architecture == "A planner delegates searches to a searcher and writes the answer."
    assert trace.source.subset == "captain-agent/GAIA"
    assert trace.source.format == "traceelephant"
    assert trace.metadata == {"task_id": "task_7", "benchmark_name": "GAIA", "run_id": "run-3"}
    planner, searcher = trace.agents
    assert (planner.name, planner.system_prompt, planner.model) == (
        "Planner",
        "You plan the work.",
        "gpt-4o",
    )
    assert planner.config == {"llm_config": {"model": "gpt-4o"}}
    assert (searcher.description, searcher.system_prompt) == (
        "Web search agent",
        "You search the web.",
    )


def test_swe_agent_trace_without_step_and_with_tests_status() -> None:
    trace = load_trace(SWE)
    assert trace.label is not None
    assert trace.label.agent == "SWE-agent"
    assert trace.label.step is None and trace.label.acceptable_steps == []
    assert trace.ground_truth is None
    assert trace.metadata["tests_status"]["FAIL_TO_PASS"]["failure"] == [
        "tests/test_pages.py::test_last_page"
    ]
    first, second = trace.steps
    assert first.input_messages == [
        {"role": "user", "content": "Fix the off-by-one error in paginate()."}
    ]
    assert second.input_messages == [{"role": "user", "content": "Continue."}]
    assert first.content == "Action: open pages.py"
    assert [(c.name, c.arguments) for c in first.tool_calls] == [("open", "pages.py")]
    assert [(r.content, r.status) for r in first.tool_results] == [
        ("def paginate(items, size): ...", "ok")
    ]
    assert [a.name for a in trace.agents] == ["SWE-agent"]


def test_old_layout() -> None:
    trace = load_trace(OLD)
    assert trace.id == "magentic-runs-old/task_3"
    assert trace.task == "Which fictional river flows through Examplopolis?"
    assert [s.content for s in trace.steps] == ["Ask FileSurfer.", "No files mention a river."]
    assert trace.steps[1].input_messages == [{"role": "user", "content": "Look in the files."}]
    assert trace.label is not None and trace.label.step == 0


def test_single_trace_from_its_step_records_file() -> None:
    traces = TraceElephantImporter().load(CAPTAIN / "step_records.json")
    assert [t.id for t in traces] == ["captain-runs-gaia/task_7"]


def test_detect() -> None:
    importer = TraceElephantImporter()
    assert importer.detect(FIXTURES) and importer.detect(CAPTAIN) and importer.detect(OLD)
    assert not importer.detect(CAPTAIN / "step_records.json")
    assert not importer.detect(FIXTURES.parent / "whoandwhen")


def test_unparseable_repr_names_file_field_and_position(tmp_path: Path) -> None:
    trace_dir = copy_trace(CAPTAIN, tmp_path)
    bad = (
        "ChatCompletion(id='x', choices=[Choice(message=ChatCompletionMessage("
        "content='hi' role='a'))])"
    )

    def corrupt(records: list[dict[str, Any]]) -> None:
        records[2]["output"] = bad

    edit_json(trace_dir / "step_records.json", corrupt)
    with pytest.raises(TraceFormatError) as err:
        load_trace(trace_dir)
    position = bad.index("role='a'")
    assert str(err.value).startswith(
        f"{trace_dir / 'step_records.json'}: field '[2].output': "
        f"unparseable ChatCompletion repr at char {position}"
    )


def test_label_outside_the_trace(tmp_path: Path) -> None:
    trace_dir = copy_trace(CAPTAIN, tmp_path)
    edit_json(trace_dir / "trace_metadata.json", lambda m: m.update(mistake_step=4))
    with pytest.raises(TraceFormatError) as err:
        load_trace(trace_dir)
    assert err.value.path == str(trace_dir / "trace_metadata.json")
    assert err.value.field == "mistake_step"
    assert "step 4 (1-based) is outside the trace (valid steps: 1..3)" in err.value.reason


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda r: r[1].pop("agent_name") and r[1].pop("agent_id"), "[1].agent_name"),
        (lambda r: r[0]["input"]["messages"].append("not a message"), "[0].input.messages[2]"),
        (lambda r: r[0].update(input=7), "[0].input"),
        (
            lambda r: r[2]["output"]["choices"][0]["message"].update(
                tool_calls=[{"function": {"arguments": "{}"}}]
            ),
            "[2].output.choices[0].message.tool_calls[0]",
        ),
        (lambda r: r[2].update(output={"choices": [{"index": 0}]}), "[2].output.choices[0]"),
    ],
)
def test_malformed_step_records(tmp_path: Path, edit: Any, field: str) -> None:
    trace_dir = copy_trace(CAPTAIN, tmp_path)
    edit_json(trace_dir / "step_records.json", edit)
    with pytest.raises(TraceFormatError) as err:
        load_trace(trace_dir)
    assert err.value.path == str(trace_dir / "step_records.json")
    assert err.value.field == field


def test_step_records_must_be_a_list(tmp_path: Path) -> None:
    trace_dir = copy_trace(CAPTAIN, tmp_path)
    (trace_dir / "step_records.json").write_text('{"steps": []}', encoding="utf-8")
    with pytest.raises(TraceFormatError) as err:
        load_trace(trace_dir)
    assert (err.value.field, err.value.reason) == ("(root)", "expected a list of step records")


def test_directory_without_traces(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="no trace directory here"):
        TraceElephantImporter().load(tmp_path)


# --- the repr reader -------------------------------------------------------------------


def test_parse_repr_grammar() -> None:
    value = parse_repr(
        "Outer(1, -2.5e3, x=[None, True, False], d={'k': (1, 2), 3: 'v'}, "
        "e=Role.ASSISTANT, s='a' \"b\", n=datetime.datetime(2024, 1, 2),)"
    )
    assert isinstance(value, Call)
    assert value.name == "Outer"
    assert value.args == [1, -2500.0]
    assert value.kwargs["x"] == [None, True, False]
    assert value.kwargs["d"] == {"k": [1, 2], 3: "v"}
    assert value.kwargs["e"] == Name("Role.ASSISTANT")
    assert value.kwargs["s"] == "ab"
    assert value.kwargs["n"] == Call("datetime.datetime", [2024, 1, 2], {})


@pytest.mark.parametrize(
    "text",
    [
        "It's",
        'say "hi"',
        "both ' and \"",
        "back\\slash",
        "tab\tnew\nline\rcarriage",
        "nul\x00 bell\x07 del\x7f",
        "é ü 漢字 🐘 \u200b \u2028",
        "\\'not an escape\\'",
        "",
    ],
)
def test_strings_read_back_exactly(text: str) -> None:
    assert parse_repr(repr(text)) == text
    assert parse_repr(repr([text, {text: text}])) == [text, {text: text}]


def test_random_strings_read_back_exactly() -> None:
    rng = random.Random(7)
    alphabet = "ab'\"\\\n\t\x00é🐘{}[]()=,:-.09 "
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 16)))
        assert parse_repr(repr(text)) == text


@pytest.mark.parametrize(
    ("text", "position"),
    [
        ("Foo(a='unterminated)", 6),
        ("Foo(a=1 b=2)", 8),
        ("Foo(a=1))", 8),
        ("Foo(a=@)", 6),
        ("Foo(a='x'.upper())", 9),
        ("[" * 300, 201),
    ],
)
def test_parse_errors_carry_positions(text: str, position: int) -> None:
    with pytest.raises(ReprSyntaxError) as err:
        parse_repr(text)
    assert err.value.position == position


def test_code_in_a_repr_is_never_run() -> None:
    with pytest.raises(TraceFormatError, match="unparseable ChatCompletion repr"):
        read_completion(
            "ChatCompletion(id=__import__('os').getcwd())", path="f.json", where="[0].output"
        )
    # A call-shaped value is only data: as message content it is the wrong type, an error.
    with pytest.raises(TraceFormatError, match=r"message\.content'"):
        read_completion(
            "ChatCompletion(choices=[Choice(message=ChatCompletionMessage(content=exec('1')))])",
            path="f.json",
            where="[0].output",
        )


def test_real_openai_repr_round_trips() -> None:
    content = 'Line 1\nIt\'s "quoted" — 🐘'
    completion = ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4o-mini",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": content,
                        "tool_calls": [
                            {
                                "id": "call_9",
                                "type": "function",
                                "function": {"name": "lookup", "arguments": '{"q": "x\'y"}'},
                            }
                        ],
                    },
                }
            ],
            "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
        }
    )
    parts = read_completion(repr(completion), path="f.json", where="[0].output")
    assert parts.content == content
    assert [(c.id, c.name, c.arguments) for c in parts.tool_calls] == [
        ("call_9", "lookup", '{"q": "x\'y"}')
    ]
    assert parts.model == "gpt-4o-mini"
    assert parts.usage is not None and parts.usage.total_tokens == 14


def test_plain_text_and_non_completion_outputs() -> None:
    assert read_completion("just text", path="f", where="w").content == "just text"
    assert read_completion(None, path="f", where="w").content == ""
    assert read_completion({"content": "hi"}, path="f", where="w").content == "hi"
    assert read_completion({"other": 1}, path="f", where="w").content == '{"other": 1}'


def test_unknown_keys_of_a_json_output_are_noted_and_kept(tmp_path: Path) -> None:
    """A JSON ``output`` with a key the reader does not use (a misspelt ``usage_typo``, an
    extra ``function.description`` inside a ``tool_calls`` entry): the warning said "kept in
    metadata" but ``output`` was never kept, so the key and its value were gone. The output
    is now kept whole in the step's metadata, its parts are still read, an output with
    nothing unread is not duplicated, and ``--strict`` refuses it."""
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "web_search", "arguments": "{}", "description": "search"},
    }
    typo = {
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
        "usage_typo": {"prompt_tokens": 3, "completion_tokens": 1},
    }
    in_call = {"role": "assistant", "content": None, "tool_calls": [call]}
    clean = {"role": "assistant", "content": "done"}
    trace_dir = copy_trace(CAPTAIN, tmp_path)

    def set_outputs(records: list[dict[str, Any]]) -> None:
        for record, output in zip(records, (typo, in_call, clean), strict=True):
            record["output"] = output

    edit_json(trace_dir / "step_records.json", set_outputs)
    with pytest.warns(TraceFormatWarning) as caught:
        trace = load_trace(trace_dir)
    said = " ".join(str(w.message) for w in caught)
    assert "'[0].output.usage_typo'" in said
    assert "'[1].output.tool_calls[0].function.description'" in said
    first, second, third = trace.steps
    assert first.metadata["output"] == typo
    assert first.content == "hi" and first.model == "gpt-4o"
    assert second.metadata["output"] == in_call
    assert (second.tool_calls[0].id, second.tool_calls[0].name) == ("call_1", "web_search")
    assert "output" not in third.metadata  # nothing unread: read into fields only
    assert third.content == "done"
    with pytest.raises(TraceFormatError, match="usage_typo"):
        load_traces(trace_dir, strict=True)


def test_an_unknown_key_of_a_legacy_function_call_is_noted() -> None:
    """A JSON reply's legacy ``function_call`` with a misspelt key was read without a word:
    the key was lost silently. It is now reported, and the reply marked to be kept whole."""
    unknown = UnknownKeys("f")
    message = {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "f", "argmuents": "{}"},
    }
    parts = read_completion(message, path="f", where="w", unknown=unknown)
    assert parts.unread and [c.name for c in parts.tool_calls] == ["f"]
    with pytest.warns(TraceFormatWarning, match=r"'w\.function_call\.argmuents'.*'arguments'"):
        unknown.report()
    assert not read_completion({"content": "x"}, path="f", where="w", unknown=unknown).unread
