"""OTLP files: encodings (JSON, JSON lines, gzip, protobuf; hex/base64 ids; camel/snake keys;
AnyValue and dict attributes) and the GenAI / OpenInference conventions."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from faultfinder.errors import TraceFormatError
from faultfinder.traces.importers.otlp import OtlpImporter
from faultfinder.traces.io import read_json, trace_from_dict
from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import Trace
from otel_helpers import (
    TRACE,
    export,
    genai_current,
    span,
    to_base64_ids,
    to_dict_attributes,
)

# FAULTFINDER_TRACE_SAMPLES: the samples elsewhere (a worktree outside the checkout's
# parent, whose ../shared is not there).
_DEFAULT_SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "data" / "trace-samples"
SAMPLES = Path(os.environ.get("FAULTFINDER_TRACE_SAMPLES", str(_DEFAULT_SAMPLES)))


def write(tmp_path: Path, name: str, doc: object) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def check_genai(trace: Trace) -> None:
    assert trace.id == f"export/{TRACE}"
    assert [s.agent for s in trace.steps] == ["Planner", "Coder"]
    first, second = trace.steps
    assert first.kind == "llm" and first.model == "gpt-4o"
    assert first.input_messages == [
        {"role": "system", "content": "You plan."},
        {"role": "user", "content": "Sum 2 and 3."},
    ]
    assert [(c.id, c.name, json.loads(c.arguments)) for c in first.tool_calls] == [
        ("call_1", "add", {"a": 2, "b": 3})
    ]
    assert [(r.call_id, r.name, r.content, r.status) for r in first.tool_results] == [
        ("call_1", "add", "5", "success")
    ]
    assert first.usage is not None and (
        first.usage.prompt_tokens,
        first.usage.completion_tokens,
    ) == (12, 7)
    assert first.request == {"temperature": 0.0}
    assert first.metadata["inferred"]["agent"] == "agent attribute on the span" or "Planner" in str(
        first.metadata["inferred"]["agent"]
    )
    assert first.metadata["span_id"] == "b000000000000002"
    assert second.content == "The sum is 6." and second.model == "gpt-4o-2024"
    assert trace.task == "Sum 2 and 3."
    assert [a.name for a in trace.agents] == ["Planner", "Coder"]
    assert first.started_at is not None and first.started_at < second.started_at  # type: ignore[operator]


def test_genai_current_conventions(tmp_path: Path) -> None:
    path = write(tmp_path, "export.json", genai_current())
    assert OtlpImporter().detect(path)
    (trace,) = load_traces(path)
    assert trace.source.format == "otlp"
    check_genai(trace)
    assert trace_from_dict(json.loads(trace.model_dump_json())) == trace


@pytest.mark.parametrize("variant", ["base64-snake", "dict-attributes", "jsonl", "gzip", "list"])
def test_encoding_quirks_give_the_same_trace(tmp_path: Path, variant: str) -> None:
    doc = genai_current()
    if variant == "base64-snake":
        path = write(tmp_path, "export.json", to_base64_ids(doc))
    elif variant == "dict-attributes":
        path = write(tmp_path, "export.json", to_dict_attributes(doc))
    elif variant == "list":
        path = write(tmp_path, "export.json", [doc])
    elif variant == "jsonl":
        # one span per line, as the collector's file exporter writes batches
        spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
        path = tmp_path / "export.jsonl"
        path.write_text("\n".join(json.dumps(export([s])) for s in spans) + "\n", encoding="utf-8")
    else:
        path = tmp_path / "export.json.gz"
        path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    (trace,) = load_traces(path)
    check_genai(trace)


def test_protobuf_file(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.proto")
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    message = ParseDict(to_base64_ids(genai_current()), ExportTraceServiceRequest())
    path = tmp_path / "export.pb"
    path.write_bytes(message.SerializeToString())
    assert OtlpImporter().detect(path)
    (trace,) = load_traces(path)  # detected by content
    check_genai(trace)


def test_older_genai_attributes_and_events(tmp_path: Path) -> None:
    doc = export(
        [
            span(
                "a000000000000001",
                None,
                "workflow",
                0,
                {
                    "traceloop.span.kind": "agent",
                    "traceloop.entity.name": "Writer",
                    "gen_ai.agent.name": "Writer",
                },
            ),
            span(
                "b000000000000002",
                "a000000000000001",
                "openai.chat",
                10,
                {
                    "gen_ai.request.model": "m1",
                    "gen_ai.prompt.0.role": "system",
                    "gen_ai.prompt.0.content": "Be brief.",
                    "gen_ai.prompt.1.role": "user",
                    "gen_ai.prompt.1.content": "Weather in Oslo?",
                    "gen_ai.completion.0.role": "assistant",
                    "gen_ai.completion.0.finish_reason": "tool_calls",
                    "gen_ai.completion.0.tool_calls.0.id": "c9",
                    "gen_ai.completion.0.tool_calls.0.name": "weather",
                    "gen_ai.completion.0.tool_calls.0.arguments": '{"city": "Oslo"}',
                    "gen_ai.usage.prompt_tokens": 9,
                    "gen_ai.usage.completion_tokens": 4,
                },
            ),
            span(
                "c000000000000003",
                "a000000000000001",
                "chat m1",
                20,
                {"gen_ai.system": "openai", "gen_ai.request.model": "m1"},
                events=[
                    {"name": "gen_ai.user.message", "attrs": {"content": "Weather in Oslo?"}},
                    {"name": "gen_ai.tool.message", "attrs": {"content": "rain", "id": "c9"}},
                    {
                        "name": "gen_ai.choice",
                        "attrs": {
                            "index": 0,
                            "finish_reason": "stop",
                            "message.content": "It rains.",
                        },
                    },
                ],
            ),
        ]
    )
    (trace,) = load_traces(write(tmp_path, "old.json", doc))
    assert [s.agent for s in trace.steps] == ["Writer", "Writer"]
    a, b = trace.steps
    assert a.input_messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
    ]
    assert [(c.id, c.name) for c in a.tool_calls] == [("c9", "weather")]
    assert a.metadata["finish_reason"] == "tool_calls"
    assert a.usage is not None and a.usage.total_tokens == 13
    assert b.content == "It rains."
    assert b.input_messages is not None and [m["role"] for m in b.input_messages] == [
        "user",
        "tool",
    ]
    assert b.metadata["conventions"] == ["gen_ai message events", "gen_ai.choice events"]


def test_openinference_attributes_and_nested_duplicates(tmp_path: Path) -> None:
    llm = {
        "openinference.span.kind": "LLM",
        "llm.model_name": "m2",
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": "hi",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.contents.0.message_content.type": "text",
        "llm.output_messages.0.message.contents.0.message_content.text": "hello",
        "llm.token_count.prompt": 3,
        "llm.token_count.completion": 2,
    }
    doc = export(
        [
            span(
                "a000000000000001",
                None,
                "Greeter",
                0,
                {"openinference.span.kind": "AGENT", "agent.name": "Greeter"},
            ),
            span("b000000000000002", "a000000000000001", "response", 10, llm),
            # the same call seen by a second instrumentation: not a second step
            span("c000000000000003", "b000000000000002", "ChatCompletion", 11, llm),
        ]
    )
    (trace,) = load_traces(write(tmp_path, "oi.json", doc))
    assert [(s.agent, s.content, s.model) for s in trace.steps] == [("Greeter", "hello", "m2")]


def test_tool_error_and_tool_without_llm(tmp_path: Path) -> None:
    doc = export(
        [
            span(
                "a000000000000001",
                None,
                "invoke_agent Runner",
                0,
                {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Runner"},
            ),
            span(
                "b000000000000002",
                "a000000000000001",
                "execute_tool fetch",
                5,
                {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch"},
                status=2,
            ),
        ]
    )
    (trace,) = load_traces(write(tmp_path, "tool.json", doc))
    (step,) = trace.steps
    assert step.kind == "tool" and step.agent == "Runner"
    assert step.tool_results[0].status == "error" and step.tool_results[0].content == "tool failed"


def test_public_otlp_example_has_no_agent_and_no_llm_call() -> None:
    path = SAMPLES / "opentelemetry-proto" / "trace.json"
    if not path.exists():
        pytest.skip(f"sample not present: {path} (shared data is not part of the repository)")
    (trace,) = load_traces(path)
    assert trace.steps == [] and trace.agents == []
    assert trace.metadata["spans"] == 1 and trace.metadata["service"] == "my.service"


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"resourceSpans": "x"}, "resourceSpans"),
        (
            {"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "a000000000000001"}]}]}]},
            "traceId",
        ),
        (
            {
                "resourceSpans": [
                    {"scopeSpans": [{"spans": [{"traceId": "zz", "spanId": "a000000000000001"}]}]}
                ]
            },
            "traceId",
        ),
        (
            {
                "resourceSpans": [
                    {
                        "scopeSpans": [
                            {
                                "spans": [
                                    {
                                        "traceId": TRACE,
                                        "spanId": "a000000000000001",
                                        "startTimeUnixNano": "soon",
                                    }
                                ]
                            }
                        ]
                    }
                ]
            },
            "startTime",
        ),
        (
            {
                "resourceSpans": [
                    {
                        "scopeSpans": [
                            {
                                "spans": [
                                    {
                                        "traceId": TRACE,
                                        "spanId": "a000000000000001",
                                        "attributes": [{"value": {}}],
                                    }
                                ]
                            }
                        ]
                    }
                ]
            },
            "attributes[0]",
        ),
    ],
)
def test_malformed_otlp_names_the_field(tmp_path: Path, doc: object, field: str) -> None:
    path = write(tmp_path, "bad.json", doc)
    with pytest.raises(TraceFormatError) as err:
        load_traces(path, format="otlp")
    assert field in err.value.field and str(path) in str(err.value)


def test_bad_jsonl_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(genai_current()) + "\n{oops\n", encoding="utf-8")
    with pytest.raises(TraceFormatError, match=r"bad\.jsonl:2"):
        load_traces(path, format="otlp")


def test_nothing_fits_lists_what_was_tried(tmp_path: Path) -> None:
    path = write(tmp_path, "mystery.json", {"hello": "world"})
    with pytest.raises(TraceFormatError) as err:
        load_traces(path)
    message = str(err.value)
    for name in ("faultfinder", "otlp", "langfuse", "phoenix", "ag2", "generic"):
        assert name in message


def test_written_trace_reads_back(tmp_path: Path) -> None:
    from faultfinder.traces.io import write_trace

    (trace,) = load_traces(write(tmp_path, "export.json", genai_current()))
    write_trace(trace, tmp_path / "out.json")
    assert trace_from_dict(read_json(tmp_path / "out.json")) == trace


def _run_ending_with(last: dict[str, object], *, root_status: int = 0, under: str = "") -> object:
    """An OpenInference agent span with no output (as the OpenAI Agents SDK's instrumentation
    writes it) holding two model calls; the second one's output attributes are ``last``,
    inside a span of kind ``under`` when one is given."""
    first = {
        "openinference.span.kind": "LLM",
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": "Sum 2 and 3.",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.tool_calls.0.tool_call.id": "c1",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "add",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": "{}",
    }
    second = {"openinference.span.kind": "LLM", **last}
    parent = "a000000000000001"
    spans = [
        span(parent, None, "Adder", 0, {"openinference.span.kind": "AGENT"}, status=root_status),
        span("b000000000000002", parent, "response", 10, first),
        span("c000000000000003", parent, "add", 20, {"openinference.span.kind": "TOOL"}),
    ]
    if under:
        check = {"openinference.span.kind": under}
        spans.append(span("d000000000000004", parent, "check", 25, check))
        parent = "d000000000000004"
    spans.append(span("e000000000000005", parent, "response", 30, second))
    return export(spans)


REPLY = {
    "llm.output_messages.0.message.role": "assistant",
    "llm.output_messages.0.message.content": "The sum is 5.",
}


def test_the_last_reply_is_the_final_answer_when_no_span_records_one(tmp_path: Path) -> None:
    """No span carries the run's output: the reply of the last model call, which asked
    for no tool, is the final answer, and the trace says where it came from."""
    (trace,) = load_traces(write(tmp_path, "run.json", _run_ending_with(REPLY)))
    assert trace.final_answer == "The sum is 5."
    assert trace.metadata["final_answer_from"].startswith(
        "reply of the last model call 'response' (e000000000000005), which asked for no tool"
    )


@pytest.mark.parametrize(
    ("last", "root_status", "under"),
    [
        # the run was cut off while the model asked for a tool
        (
            {
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.tool_calls.0.tool_call.id": "c2",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "add",
            },
            0,
            "",
        ),
        ({"llm.output_messages.0.message.role": "assistant"}, 0, ""),  # no text
        # text, and a tool call the instrumentation did not record: only the span's
        # finish reasons (OTel GenAI's string array) say the model stopped for a tool
        ({**REPLY, "gen_ai.response.finish_reasons": ["stop", "tool_calls"]}, 0, ""),
        # the same said by a GenAI output message ('tool_call', the convention's value)
        (
            {
                "gen_ai.output.messages": json.dumps(
                    [
                        {
                            "role": "assistant",
                            "parts": [{"type": "text", "content": "The sum is 5."}],
                            "finish_reason": "tool_call",
                        }
                    ]
                )
            },
            0,
            "",
        ),
        (REPLY, 2, ""),  # the run ended in error: it returned nothing
        (REPLY, 0, "GUARDRAIL"),  # a guardrail's model call judges the output
    ],
    ids=[
        "asks-for-a-tool",
        "no-text",
        "finish-reasons-attribute",
        "genai-tool-call-finish",
        "run-failed",
        "inside-a-guardrail",
    ],
)
def test_no_final_answer_is_made_up_from_a_call_that_did_not_end_the_run(
    tmp_path: Path, last: dict[str, object], root_status: int, under: str
) -> None:
    doc = _run_ending_with(last, root_status=root_status, under=under)
    (trace,) = load_traces(write(tmp_path, "run.json", doc))
    assert trace.final_answer is None and "final_answer_from" not in trace.metadata


def test_finish_reasons_come_from_the_messages_or_the_span(tmp_path: Path) -> None:
    """The span's ``gen_ai.response.finish_reasons`` is read when the messages carry none,
    and every distinct reason is kept when they differ."""
    stopped = {**REPLY, "gen_ai.response.finish_reasons": ["stop"]}
    (trace,) = load_traces(write(tmp_path, "run.json", _run_ending_with(stopped)))
    assert trace.steps[-1].metadata["finish_reason"] == "stop"
    assert "finish_reasons" not in trace.steps[-1].metadata
    assert trace.final_answer == "The sum is 5."
    both = {
        **REPLY,
        "llm.output_messages.0.message.finish_reason": "length",
        "gen_ai.response.finish_reasons": json.dumps(["length", "stop"]),  # JSON text
    }
    (trace,) = load_traces(write(tmp_path, "run2.json", _run_ending_with(both)))
    assert trace.steps[-1].metadata["finish_reason"] == "length"
    assert trace.steps[-1].metadata["finish_reasons"] == ["length", "stop"]


def test_numeric_request_parameters_written_as_text_are_numbers(tmp_path: Path) -> None:
    """Parameters that are numbers by the GenAI convention read as numbers when an
    exporter wrote them as strings; text that spells no such number stays as written."""
    params = {
        "gen_ai.request.temperature": "1",
        "gen_ai.request.top_p": " 0.5 ",
        "gen_ai.request.max_tokens": "256",
        "gen_ai.request.seed": "-7",
        "gen_ai.request.frequency_penalty": "nan",  # no finite number: kept
        "gen_ai.request.presence_penalty": "high",  # no number: kept
        "gen_ai.request.choice.count": "2.0",  # an int field: not an integer, kept
        "gen_ai.request.top_k": 40,  # already a number
        "gen_ai.request.stop_sequences": ["1"],  # not a numeric field
    }
    doc = _run_ending_with({**REPLY, **params})
    (trace,) = load_traces(write(tmp_path, "run.json", doc))
    assert trace.steps[-1].request == {
        "temperature": 1.0,
        "top_p": 0.5,
        "max_tokens": 256,
        "seed": -7,
        "frequency_penalty": "nan",
        "presence_penalty": "high",
        "choice.count": "2.0",
        "top_k": 40,
        "stop_sequences": ["1"],
    }


def _two_adds_without_ids(first: str, second: str) -> object:
    """OpenInference spans of an agent whose model asks for ``add`` twice (c1, c2); the two
    tool spans name no call id (as the OpenAI Agents SDK's do) and return ``first`` and
    ``second``; the next model call's input answers c2 with "7", then c1 with "5"."""
    out = "llm.output_messages.0.message.tool_calls"
    asked = {"openinference.span.kind": "LLM", "llm.output_messages.0.message.role": "assistant"}
    for n, call in enumerate(["c1", "c2"]):
        asked[f"{out}.{n}.tool_call.id"] = call
        asked[f"{out}.{n}.tool_call.function.name"] = "add"
        asked[f"{out}.{n}.tool_call.function.arguments"] = "{}"
    inp = "llm.input_messages"
    answered = {
        "openinference.span.kind": "LLM",
        f"{inp}.0.message.role": "user",
        f"{inp}.0.message.content": "Sum twice.",
        f"{inp}.1.message.role": "tool",
        f"{inp}.1.message.tool_call_id": "c2",
        f"{inp}.1.message.content": "7",
        f"{inp}.2.message.role": "tool",
        f"{inp}.2.message.tool_call_id": "c1",
        f"{inp}.2.message.content": "5",
        **REPLY,
    }
    parent = "a000000000000001"

    def tool(span_id: str, start: int, output: str) -> dict[str, object]:
        attrs = {"openinference.span.kind": "TOOL", "tool.name": "add", "output.value": output}
        return span(span_id, parent, "add", start, attrs)

    return export(
        [
            span(parent, None, "Adder", 0, {"openinference.span.kind": "AGENT"}),
            span("b000000000000002", parent, "response", 10, asked),
            tool("c000000000000003", 20, first),
            tool("d000000000000004", 21, second),
            span("e000000000000005", parent, "response", 30, answered),
        ]
    )


def test_a_tool_span_without_call_id_gets_the_one_a_later_input_answers(
    tmp_path: Path,
) -> None:
    """Two calls of one tool: each result takes the id whose answer in the next model
    call's input is its own content, and the trace says where the id came from."""
    (trace,) = load_traces(write(tmp_path, "run.json", _two_adds_without_ids("5", "7")))
    step = trace.steps[0]
    assert [(r.content, r.call_id) for r in step.tool_results] == [("5", "c1"), ("7", "c2")]
    spans = step.metadata["tool_spans"]
    assert [t["matched_by"] for t in spans] == ["tool name", "tool name"]
    assert [t["call_id_from"] for t in spans] == [
        "input of step 1 (span e000000000000005): the only 'add' call answered with this "
        "result's content"
    ] * 2


def test_a_call_id_is_not_guessed_when_the_answers_do_not_tell(tmp_path: Path) -> None:
    """Both results say "5" while the input answers "7" and "5": the "5" fits either
    call, so neither result gets an id (the "7" answer matches no result either)."""
    (trace,) = load_traces(write(tmp_path, "run.json", _two_adds_without_ids("5", "5")))
    step = trace.steps[0]
    assert [r.call_id for r in step.tool_results] == [None, None]
    assert all("call_id_from" not in t for t in step.metadata["tool_spans"])


def _parallel_tools(second_tool_start: int) -> object:
    """A model call asking for `hello` then `bye`; the tool spans are listed bye first, and
    `bye` starts at ``second_tool_start`` (hello at 20)."""
    call = {
        "openinference.span.kind": "LLM",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.tool_calls.0.tool_call.id": "c-hello",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "hello",
        "llm.output_messages.0.message.tool_calls.1.tool_call.id": "c-bye",
        "llm.output_messages.0.message.tool_calls.1.tool_call.function.name": "bye",
    }

    def tool(name: str) -> dict[str, object]:
        return {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": f"c-{name}",
            "output.value": f"{name} done",
        }

    root = "a000000000000001"
    return export(
        [
            span(root, None, "invoke_agent Greeter", 0, {"gen_ai.operation.name": "invoke_agent"}),
            span("b000000000000002", root, "chat", 10, call),
            span("c000000000000003", root, "execute_tool bye", second_tool_start, tool("bye")),
            span("d000000000000004", root, "execute_tool hello", 20, tool("hello")),
        ]
    )


def test_tool_results_that_started_together_follow_the_calls(tmp_path: Path) -> None:
    """Two tool spans started in the same instant (Koog's parallel calls, timed to the
    millisecond): their results are in the order of the calls, not of the file."""
    (trace,) = load_traces(write(tmp_path, "tie.json", _parallel_tools(20)))
    (step,) = trace.steps
    assert [r.call_id for r in step.tool_results] == ["c-hello", "c-bye"]
    assert [t["span_id"] for t in step.metadata["tool_spans"]] == [
        "d000000000000004",
        "c000000000000003",
    ]


def test_tool_results_that_started_apart_keep_their_start_order(tmp_path: Path) -> None:
    """Only ties are reordered: a result whose span started first comes first."""
    (trace,) = load_traces(write(tmp_path, "apart.json", _parallel_tools(15)))
    (step,) = trace.steps
    assert [r.call_id for r in step.tool_results] == ["c-bye", "c-hello"]


@pytest.mark.parametrize(
    ("message", "task"),
    [
        ("\nCurrent Task: Sum 2 and 3.", "Sum 2 and 3."),
        # the wrapper's closing words only when they end the message
        (
            "\nCurrent Task: Sum 2 and 3.\n\nBegin! This is VERY important to you, use the tools "
            "available and give your best Final Answer, your job depends on it!\n\nThought:",
            "Sum 2 and 3.",
        ),
        ("Current Task: Sum 2 and 3.", "Current Task: Sum 2 and 3."),  # not CrewAI's words
        ("\nCurrent Task: ", "\nCurrent Task: "),  # nothing inside: kept as written
    ],
)
def test_only_crewais_task_wrapper_is_removed_from_the_task(
    tmp_path: Path, message: str, task: str
) -> None:
    llm = {
        "openinference.span.kind": "LLM",
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": message,
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "5",
    }
    (trace,) = load_traces(write(tmp_path, "t.json", export([span(TRACE[:16], None, "c", 0, llm)])))
    assert trace.task == task
    removed = trace.metadata.get("task_unwrapped")
    if task == message:
        assert removed is None
    else:
        assert removed["before"] + task + removed.get("after", "") == message
