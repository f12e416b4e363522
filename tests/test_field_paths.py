"""Field paths in errors and warnings are built one way (``traces.io.field_at``): a list
item is ``[0]``, a key under it ``[0].x``, never ``[0].`` with nothing after the dot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.errors import TraceFormatError
from faultfinder.traces.io import field_at, field_path, trace_from_dict
from faultfinder.traces.loader import load_traces
from otel_helpers import export, span


def imported(tmp_path: Path, doc: Any) -> str:
    path = tmp_path / "export.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    result = CliRunner().invoke(main, ["import", "--format", "otlp", str(path)])
    assert result.exit_code == 1, result.output
    return result.stderr


def test_a_list_item_that_is_not_an_export_is_named_without_a_stray_dot(
    tmp_path: Path,
) -> None:
    # It said "field '[0].': expected an object with 'resourceSpans'".
    said = imported(tmp_path, [1, 2])
    assert "field '[0]': expected an object with 'resourceSpans'" in said
    assert "'[0].'" not in said


def test_a_list_of_one_export_names_its_place(tmp_path: Path) -> None:
    # The one export's fields were named as if the list were not there ('resourceSpans').
    said = imported(tmp_path, [{"resourceSpans": 5}])
    assert "field '[0].resourceSpans': expected a list" in said


def test_a_field_deep_in_a_later_export_is_named_whole(tmp_path: Path) -> None:
    bad = span("00000000000000a2", None, "llm", 0, {})
    bad["name"] = 5
    good = span("00000000000000a1", None, "llm", 0, {})
    said = imported(tmp_path, [export([good]), export([bad])])
    assert "field '[1].resourceSpans[0].scopeSpans[0].spans[0].name': expected a string" in said


def test_an_export_inside_an_envelope_in_a_list_is_named_through_it(tmp_path: Path) -> None:
    said = imported(tmp_path, [{"data": {"resourceSpans": 5}}, {"data": {"resourceSpans": []}}])
    assert "field '[0].data.resourceSpans': expected a list" in said


def test_an_unknown_key_of_a_listed_export_is_warned_at_its_place(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    path.write_text(json.dumps([{**export([]), "extra": 1}]), encoding="utf-8")
    with pytest.warns(UserWarning, match=r"field '\[0\]\.extra': unknown key"):
        load_traces(path, format="otlp")


def test_field_at_builds_every_shape() -> None:
    assert field_at("", "steps", 3, "agent") == "steps[3].agent"
    assert field_at("[0]", "x") == "[0].x"
    assert field_at("", 0) == "[0]"
    assert field_at("a") == "a"
    assert field_path(()) == "(root)"
    assert field_path(("steps", 0, "index")) == "steps[0].index"


def test_a_canonical_trace_names_its_fields_as_before() -> None:
    tiny = Path(__file__).resolve().parent / "fixtures" / "core" / "tiny_trace.json"
    data = json.loads(tiny.read_text("utf-8"))
    data["steps"][1]["agent"] = 5
    with pytest.raises(TraceFormatError, match=r"field 'steps\[1\]\.agent'"):
        trace_from_dict(data)
    data["steps"][1]["agent"] = "Planner"
    data["steps"][1]["tool_calls"] = [{"lable": 1}]
    with pytest.raises(TraceFormatError, match=r"field 'steps\[1\]\.tool_calls\[0\]\."):
        trace_from_dict(data)
