"""Importers under hostile input: a clear error (file, line, field) or a correct trace,
nothing in between."""

from __future__ import annotations

import json
import math
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultfinder.cli import main
from faultfinder.errors import TraceFormatError, TraceFormatWarning
from faultfinder.testing.fuzz import TARGETS, FuzzTarget, fuzz
from faultfinder.traces.io import MAX_NESTING
from faultfinder.traces.loader import load_traces

REPO = Path(__file__).resolve().parent.parent
FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def who_and_when(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "question": "What is 2 + 2?",
        "ground_truth": "4",
        "history": [
            {"role": "user", "name": "human", "content": "What is 2 + 2?"},
            {"role": "assistant", "name": "Solver", "content": "5"},
        ],
        "mistake_agent": "Solver",
        "mistake_step": "1",
        "mistake_reason": "Bad sum.",
        "question_ID": "q1",
    }
    data.update(overrides)
    return data


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def refused(path: Path, fmt: str | None = None, **options: Any) -> str:
    with pytest.raises(TraceFormatError) as info:
        load_traces(path, format=fmt, **options)
    return str(info.value)


# --- the crashes of the issue ---------------------------------------------------------------


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 5_000, 200_000])
def test_deep_nesting_is_an_error_not_a_recursion_error(tmp_path: Path, depth: int) -> None:
    text = json.dumps(who_and_when(level="@@")).replace('"@@"', "[" * depth + "]" * depth)
    message = refused(write(tmp_path, "1.json", text), "who-and-when")
    assert "1.json" in message and "nested deeper" in message


def test_non_utf8_jsonl_names_the_line(tmp_path: Path) -> None:
    good = json.dumps({"role": "user", "content": "hi"})
    path = write(tmp_path, "chat.jsonl", (good + "\n" + good + "\n").encode() + b'{"r": "\xff"}\n')
    message = refused(path, "generic")
    assert "chat.jsonl:3" in message and "not UTF-8" in message and "0xff" in message


def test_a_damaged_later_line_names_the_line(tmp_path: Path) -> None:
    good = json.dumps({"role": "user", "content": "hi"})
    path = write(tmp_path, "chat.jsonl", f"{good}\n{good}\n{good[:-3]}\n{good}\n")
    message = refused(path, "generic")
    assert "chat.jsonl:3" in message and "invalid JSON" in message


def test_a_damaged_later_line_of_canonical_jsonl_names_the_line(tmp_path: Path) -> None:
    lines = (REPO / "tests/fixtures/eval/traces.jsonl").read_text().split("\n")
    lines[3] = lines[3][:50]
    message = refused(write(tmp_path, "traces.jsonl", "\n".join(lines)))
    assert "traces.jsonl:4" in message


@pytest.mark.parametrize("number", ["9" * 25, "-" + "9" * 5000, "1e999", "NaN", "-Infinity"])
def test_huge_and_non_finite_numbers_are_errors(tmp_path: Path, number: str) -> None:
    text = json.dumps(who_and_when(level="@@")).replace('"@@"', number)
    message = refused(write(tmp_path, "1.json", text), "who-and-when")
    assert "1.json" in message and "'(json)'" in message


def test_duplicate_keys_are_an_error(tmp_path: Path) -> None:
    text = json.dumps(who_and_when()).replace(
        '"mistake_agent": "Solver"', '"mistake_agent": "human", "mistake_agent": "Solver"'
    )
    assert "duplicate key 'mistake_agent'" in refused(write(tmp_path, "1.json", text))


def test_lone_surrogates_are_an_error(tmp_path: Path) -> None:
    text = json.dumps(who_and_when(question="a \\ud800 b")).replace("\\\\ud800", "\\ud800")
    assert "surrogate" in refused(write(tmp_path, "1.json", text), "who-and-when")


def test_an_empty_file_is_called_empty(tmp_path: Path) -> None:
    assert "empty file" in refused(write(tmp_path, "1.json", ""), "who-and-when")


# --- the misreads of the issue --------------------------------------------------------------


@pytest.mark.parametrize("value", [7, ["Solver"], {"name": "Solver"}, True])
def test_non_string_mistake_agent_is_rejected(tmp_path: Path, value: Any) -> None:
    path = write(tmp_path, "1.json", json.dumps(who_and_when(mistake_agent=value)))
    message = refused(path, "who-and-when")
    assert "field 'mistake_agent'" in message and "expected a string" in message


@pytest.mark.parametrize(
    ("field", "value"),
    [("ground_truth", 4), ("mistake_reason", ["x"]), ("question", None)],
)
def test_wrong_types_are_rejected(tmp_path: Path, field: str, value: Any) -> None:
    path = write(tmp_path, "1.json", json.dumps(who_and_when(**{field: value})))
    assert f"field '{field}'" in refused(path, "who-and-when")


def test_generic_content_of_the_wrong_type_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, "chat.jsonl", json.dumps({"role": "user", "content": 42}) + "\n")
    assert "chat.jsonl:1: field 'content'" in refused(path, "generic")


def test_a_misspelt_key_warns_and_strict_refuses(tmp_path: Path) -> None:
    data = who_and_when()
    data["mistake_agnet"] = data.pop("mistake_agent")
    path = write(tmp_path, "1.json", json.dumps(data))
    with pytest.warns(TraceFormatWarning, match="mistake_agnet.*did you mean 'mistake_agent'"):
        load_traces(path, format="who-and-when")
    with pytest.raises(TraceFormatError, match="field 'mistake_agnet': unknown key"):
        load_traces(path, format="who-and-when", strict=True)


def test_a_misspelt_key_in_a_canonical_trace_warns(tmp_path: Path) -> None:
    data = json.loads((REPO / "tests/fixtures/core/tiny_trace.json").read_text())
    data["lable"] = data.pop("label")
    path = write(tmp_path, "t.json", json.dumps(data))
    with pytest.warns(TraceFormatWarning, match="'lable'.*did you mean 'label'"):
        load_traces(path)
    with pytest.raises(TraceFormatError, match="lable"):
        load_traces(path, strict=True)


def test_released_who_and_when_keys_do_not_warn(tmp_path: Path) -> None:
    data = who_and_when(level=1, is_correct=False, mistake_type="x", labels="y")
    with warnings.catch_warnings():
        warnings.simplefilter("error", TraceFormatWarning)
        load_traces(write(tmp_path, "1.json", json.dumps(data)), format="who-and-when")


@pytest.mark.parametrize("command", ["import", "attribute", "eval"])
def test_strict_flag_on_the_commands_that_read_traces(tmp_path: Path, command: str) -> None:
    data = who_and_when()
    data["lable"] = "x"
    path = write(tmp_path, "1.json", json.dumps(data))
    extra = {
        "attribute": ["--method", "random"],
        "eval": ["--method", "random", "--out", str(tmp_path / "r.jsonl")],
        "import": [],
    }[command]
    args = [command, str(path), "--format", "who-and-when", *extra]
    loose = CliRunner().invoke(main, args)
    assert "warning:" in loose.output and "lable" in loose.output
    strict = CliRunner().invoke(main, [*args, "--strict"])
    assert strict.exit_code == 1, strict.output
    assert "field 'lable': unknown key" in strict.output
    assert "Traceback" not in strict.output


# --- property-based ---------------------------------------------------------------------


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
FIELDS = [
    "question",
    "ground_truth",
    "history",
    "mistake_agent",
    "mistake_step",
    "mistake_reason",
    "system_prompt",
    "question_ID",
]


@FAST
@given(changes=st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=3))
def test_who_and_when_fields_of_any_type_give_an_error_or_a_faithful_trace(
    tmp_path_factory: Any, changes: dict[str, Any]
) -> None:
    path = Path(tmp_path_factory.mktemp("ww")) / "1.json"
    data = who_and_when(**changes)
    path.write_text(json.dumps(data), encoding="utf-8")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TraceFormatWarning)
            (trace,) = load_traces(path, format="who-and-when")
    except TraceFormatError as exc:
        assert str(path) in str(exc)
        return
    # Accepted: every text field is the string the file held, never a conversion.
    assert trace.task == data["question"]
    if trace.label is not None:
        agent = data.get("mistake_agent")
        assert trace.label.agent == (None if agent is None else agent.strip())
        assert trace.label.reason == data.get("mistake_reason")
    assert trace.ground_truth == data.get("ground_truth")


@FAST
@given(value=JSON, jsonl=st.booleans())
def test_generic_reads_any_json_without_crashing(
    tmp_path_factory: Any, value: Any, jsonl: bool
) -> None:
    folder = Path(tmp_path_factory.mktemp("g"))
    if jsonl:
        items = value if isinstance(value, list) else [value]
        path = folder / "x.jsonl"
        path.write_text("".join(json.dumps(v) + "\n" for v in items), encoding="utf-8")
    else:
        path = folder / "x.json"
        path.write_text(json.dumps(value), encoding="utf-8")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TraceFormatWarning)
            traces = load_traces(path, format="generic")
    except TraceFormatError:
        return
    for trace in traces:
        for step in trace.steps:
            assert isinstance(step.content, str) and step.agent


@FAST
@given(number=st.floats(allow_nan=True, allow_infinity=True))
def test_no_float_is_silently_changed(tmp_path_factory: Any, number: float) -> None:
    path = Path(tmp_path_factory.mktemp("f")) / "1.json"
    path.write_text(json.dumps(who_and_when(level=number)), encoding="utf-8")
    try:
        (trace,) = load_traces(path, format="who-and-when")
    except TraceFormatError:
        assert not math.isfinite(number)
        return
    assert trace.metadata["level"] == number


# --- the fuzzer -------------------------------------------------------------------------


def test_fuzzed_inputs_never_crash_and_are_never_misread() -> None:
    outcomes = fuzz(TARGETS, 600, seed=11, repo=REPO)
    verdicts = Counter(o.verdict for o in outcomes)
    bad = [o for o in outcomes if o.verdict in ("crash", "misread")]
    assert not bad, bad[:5]
    assert verdicts["error"] > 0 and verdicts["ok"] > 0


def test_the_fuzzer_catches_a_lenient_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    # Undo one fix (non-string labels turned into text): the fuzzer must notice.
    from faultfinder.traces.importers import _common, whoandwhen

    def lenient(data: Any, key: str, path: Any, where: str = "") -> str | None:
        value = data.get(key)
        return None if value is None else _common.text_of(value)

    monkeypatch.setattr(whoandwhen, "optional_str", lenient)
    target = FuzzTarget("who-and-when", TARGETS[0].seed)
    outcomes = fuzz([target], 400, seed=3, repo=REPO)
    assert any(o.verdict == "misread" for o in outcomes)


def _chat_span_file(tmp_path: Path, **attributes: str) -> Path:
    """An OTLP file of one chat span by Planner replying 'hi', with ``attributes`` added."""
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.agent.name": "Planner",
        "gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": "hi"}]}]
        ),
        **attributes,
    }
    span = {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": "b7ad6b7169203331",
        "name": "chat gpt-4o",
        "kind": 3,
        "startTimeUnixNano": "1",
        "endTimeUnixNano": "2",
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()],
    }
    scope = {"scope": {"name": "x"}, "spans": [span]}
    path = tmp_path / "span.otlp.json"
    path.write_text(json.dumps({"resourceSpans": [{"resource": {}, "scopeSpans": [scope]}]}))
    return path


def _imported_step(tmp_path: Path, path: Path) -> dict[str, Any]:
    """The one step ``faultfinder import`` writes for ``path`` (exit 0 required)."""
    result = CliRunner().invoke(main, ["import", str(path), "--out", str(tmp_path / "t.json")])
    assert result.exit_code == 0, result.output
    (step,) = json.loads((tmp_path / "t.json").read_text())["steps"]
    assert isinstance(step, dict)
    return step


def test_an_attribute_nested_too_deep_to_decode_is_kept_as_text(tmp_path: Path) -> None:
    # A span attribute holding JSON nested 50,000 deep (trace content is untrusted): the
    # importer decoded it and crashed with a RecursionError traceback; it is read as text.
    deep = "[" * 50_000 + "]" * 50_000
    path = _chat_span_file(tmp_path, **{"gen_ai.input.messages": deep})
    step = _imported_step(tmp_path, path)
    assert step["agent"] == "Planner" and step["content"] == "hi"


@pytest.mark.parametrize("key", ["gen_ai.input.messages", "input.value"])
def test_an_attribute_with_a_huge_integer_is_kept_as_text(tmp_path: Path, key: str) -> None:
    # JSON in an attribute with an integer of 5,000 digits: Python's decoder refuses it with
    # a ValueError (over 4,300 digits), which stopped the import with a traceback.
    value = "[" + "9" * 5_000 + "]"
    step = _imported_step(tmp_path, _chat_span_file(tmp_path, **{key: value}))
    assert step["agent"] == "Planner" and step["content"] == "hi"
    assert value in json.dumps(step["metadata"])


@pytest.mark.parametrize("depth", [500, 900])
def test_a_string_holding_json_nested_deep_is_kept_as_text(tmp_path: Path, depth: int) -> None:
    # A message's own field holding JSON nested 500 deep, in a string (the file is 2 deep):
    # scrubbing the step decoded it, walked it and crashed with a RecursionError traceback.
    deep = "[" * depth + "]" * depth
    line = json.dumps({"role": "assistant", "content": "hi", "extra": deep})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceFormatWarning)
        (trace,) = load_traces(write(tmp_path, "chat.jsonl", line + "\n"), format="generic")
    assert trace.steps[0].metadata["extra"] == deep


def test_an_attribute_escaping_a_lone_surrogate_is_kept_as_text(tmp_path: Path) -> None:
    # '\ud800' escaped inside an attribute's JSON (the file itself holds only the escape):
    # decoded, it put a lone surrogate in the trace, which cannot be written as UTF-8, so
    # `import` stopped with a serialisation traceback.
    messages = '[{"role": "user", "parts": [{"type": "text", "content": "q \\ud800"}]}]'
    path = _chat_span_file(tmp_path, **{"gen_ai.input.messages": messages})
    step = _imported_step(tmp_path, path)
    assert step["agent"] == "Planner" and step["content"] == "hi"
    assert messages in _strings(step["metadata"])  # kept verbatim, escape and all


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def test_an_autogen_message_escaping_a_lone_surrogate_is_kept_as_text(tmp_path: Path) -> None:
    # The same in the JSON message an AutoGen runtime span delivers (a real run's export).
    fixture = REPO / "tests/fixtures/otel/autogen-selector.otlp.jsonl"
    said = "Solver, please add 2 and 3."
    text = fixture.read_text(encoding="utf-8")
    assert said in text
    path = write(tmp_path, "run.otlp.jsonl", text.replace(said, said + " \\\\ud800"))
    out = tmp_path / "t.jsonl"
    result = CliRunner().invoke(main, ["import", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    kept = [s for line in out.read_text().splitlines() for s in _strings(json.loads(line))]
    assert any(said + " \\ud800" in s for s in kept)  # the escape, kept as written


def test_no_separator_is_put_in_a_credential_held_in_json_text() -> None:
    # AG2 logs each client's {"api_key": ...} as JSON text (json_state); a separator put in
    # it is scrubbed with the key, by design, which the fuzzer counted as a misread.
    import random

    from faultfinder.testing.mutations import _Doc, _m_separator

    state = json.dumps({"api_key": "***REDACTED***", "base_url": None})
    raw = (json.dumps({"json_state": state, "class": "OpenAI client"}) + "\n").encode()
    rng = random.Random(0)
    names = [m.name for _ in range(200) if (m := _m_separator(_Doc("l.jsonl", raw), raw, rng))]
    assert names and not any("json_state" in name for name in names)
