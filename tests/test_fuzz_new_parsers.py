"""Property-based fuzzing of the parsers added for untrusted text and settings: a model
reply's answer part, stated reason and Python-literal objects; a replayed request matched
against a recording with ``[REDACTED]`` holes; OTLP export headers from the environment;
the JSON messages of AutoGen's runtime spans. Each input gives a result or the documented
error (ParseError, ConfigError, TraceFormatError), never another exception."""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultfinder.errors import ConfigError, TraceFormatError, TraceFormatWarning
from faultfinder.judging.answer_json import answer_object
from faultfinder.judging.answers import (
    answer_part,
    json_answer,
    parse_agent_step_reason,
    parse_step_number,
    parse_yes_no,
    stated_reason,
)
from faultfinder.llm import ParseError
from faultfinder.redact import REDACTED
from faultfinder.replay.rescrubbed import RedactedRequests
from faultfinder.traces.io import trace_from_dict
from faultfinder.traces.loader import load_traces
from faultfinder.writeback import OTLP_HEADER_VARIABLES, otlp_headers

FAST = settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
AUTOGEN = Path(__file__).parent / "fixtures" / "otel" / "autogen-selector.otlp.jsonl"

PIECES = [
    *("<think>", "</think>", "<reasoning>", "</thinking>", "<answer>", "</answer>"),
    *("<json>", "</json>", "```", "```json\n", "\n", " ", "{", "}", "[", "]", "(", ")"),
    *("'", '"', "\\", ",", ":", "Agent Name", "Step Number", "Reason for Mistake", "Reason"),
    *("Yes", "No", "1.", "step", "**", "7", "0x" + "f" * 30, "9" * 4_400, "True", "None"),
    *("null", "NaN", "1e999", "\x00", "\u2028", "\ud800", "b'x'", "{1, 2}", "1+2j", "f'x'"),
    *("'Agent Name': 'A'", '"Step Number": 3', "__import__('os')", "maybe"),
    *("[" + "9" * 4_400 + "]", '{"Step Number": ' + "8" * 4_400 + "}"),
]
REPLY = st.lists(st.sampled_from(PIECES) | st.text(max_size=3), max_size=30).map("".join)


def _parsed(call: Any) -> None:
    with contextlib.suppress(ParseError):  # anything else is a crash
        call()


@FAST
@given(reply=REPLY)
def test_any_reply_is_read_or_a_parse_error(reply: str) -> None:
    _parsed(lambda: answer_part(reply))
    _parsed(lambda: answer_object(reply))
    _parsed(lambda: stated_reason(reply, json_answer(reply)))
    _parsed(lambda: parse_agent_step_reason(reply, ["A", "B"], 10))
    _parsed(lambda: parse_yes_no(reply))
    _parsed(lambda: parse_step_number(reply, 10))


TEXT = st.text(alphabet="ab", max_size=4) | st.text(max_size=8)
"""Strings of few letters too, so literal parts and fills overlap (the hard case)."""
HOLED = st.lists(TEXT, min_size=2, max_size=4).map(REDACTED.join)


@FAST
@given(parts=st.lists(TEXT | HOLED, min_size=1, max_size=3), data=st.data())
def test_a_filled_recording_is_found_and_its_fills_rebuild_the_request(
    parts: list[str], data: st.DataObject
) -> None:
    """Completeness: holes filled with any non-empty text are matched. Soundness: the fills
    returned, put back into the holes in order, give the replayed request."""
    recorded = {"messages": [{"role": "user", "content": p} for p in parts]}
    filled = [
        REDACTED.join(p.split(REDACTED)[:1])
        + "".join(
            data.draw(st.text(alphabet="ab", min_size=1, max_size=4) | st.text(min_size=1)) + rest
            for rest in p.split(REDACTED)[1:]
        )
        for p in parts
    ]
    replayed = {"messages": [{"role": "user", "content": f} for f in filled]}
    requests = RedactedRequests()
    requests.add("A", "h1", recorded)
    found = requests.find("A", replayed)
    if REDACTED not in "".join(parts):
        assert found is None  # nothing to match by holes: exact matching decides
        return
    assert found is not None and found[0] == "h1"
    fills = iter(found[1])
    rebuilt = [
        "".join(
            s + (next(fills) if i < p.count(REDACTED) else "")
            for i, s in enumerate(p.split(REDACTED))
        )
        for p in parts
    ]
    assert rebuilt == filled
    assert requests.find("B", replayed) is None  # another agent's recording never matches


ENTRY = st.text(max_size=12) | st.sampled_from(
    ["authorization=Bearer%20k", "a=%ff", "a=%C3%A9", "k=v\udcff", "x=%0D%0A", "=v", "a==b"]
)


@FAST
@given(entries=st.lists(ENTRY, max_size=4), variable=st.sampled_from(OTLP_HEADER_VARIABLES))
def test_any_header_variable_gives_sendable_headers_or_a_config_error(
    entries: list[str], variable: str
) -> None:
    try:
        headers = otlp_headers({variable: ",".join(entries)})
    except ConfigError as exc:
        assert str(exc).startswith(f"{variable}: entry ")
        return
    for name, value in headers.items():
        assert name == name.lower() and name.isascii() and name.strip() == name
        assert value.isascii() and all(" " <= c != "\x7f" for c in value)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6) | st.just("a\udc00"),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)
MESSAGE_KEYS = ["messages", "message", "response", "chat_message", "inner_messages", "content"]
MESSAGE_KEYS += ["id", "call_id", "created_at", "name", "source", "type", "arguments"]


@FAST
@given(key=st.sampled_from(MESSAGE_KEYS), value=JSON, which=st.integers(0, 30))
def test_autogen_runtime_messages_of_any_shape_import_or_are_refused(
    tmp_path_factory: Any, key: str, value: Any, which: int
) -> None:
    """One delivered message's field replaced by any JSON value: a trace that writes and
    reads back, or a TraceFormatError."""
    lines = [json.loads(line) for line in AUTOGEN.read_text(encoding="utf-8").splitlines()]
    deliveries = [
        attribute["value"]
        for line in lines
        for resource in line["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
        for attribute in span.get("attributes", [])
        if attribute["key"] == "message" and attribute["value"]["stringValue"][:1] == "{"
    ]
    target = deliveries[which % len(deliveries)]
    target["stringValue"] = json.dumps(_replace(json.loads(target["stringValue"]), key, value))
    path = Path(tmp_path_factory.mktemp("autogen")) / "run.otlp.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TraceFormatWarning)
            traces = load_traces(path, format="otlp")
    except TraceFormatError:
        return
    for trace in traces:
        assert trace_from_dict(json.loads(trace.model_dump_json()), "<again>") == trace


def _replace(value: Any, key: str, new: Any) -> Any:
    """``value`` with every entry named ``key``, at any depth, set to ``new``."""
    if isinstance(value, dict):
        return {k: new if k == key else _replace(v, key, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace(v, key, new) for v in value]
    return value
