import json
from pathlib import Path

import pytest

from faultfinder.errors import TraceFormatError
from faultfinder.traces.io import read_json, trace_from_dict, write_trace
from faultfinder.traces.loader import load_trace
from faultfinder.traces.schema import GoldLabel, Step, Trace

FIXTURE = Path(__file__).parent / "fixtures" / "core" / "tiny_trace.json"


def test_fixture_loads_and_round_trips(tmp_path: Path) -> None:
    trace = load_trace(FIXTURE)
    assert trace.agent_names() == ["user", "Planner", "Calculator"]
    assert [s.index for s in trace.steps_of("Calculator")] == [2, 3]
    assert trace.label is not None and trace.label.acceptable_steps == [2]
    out = tmp_path / "copy.json"
    write_trace(trace, out)
    assert load_trace(out) == trace


def test_steps_must_be_numbered_in_order() -> None:
    data = json.loads(FIXTURE.read_text())
    data["steps"][2]["index"] = 7
    with pytest.raises(TraceFormatError) as info:
        trace_from_dict(data, "bad.json")
    assert "bad.json" in str(info.value)
    assert "steps[2].index is 7" in str(info.value)


def test_missing_field_names_file_and_field() -> None:
    data = json.loads(FIXTURE.read_text())
    del data["steps"][1]["agent"]
    with pytest.raises(TraceFormatError) as info:
        trace_from_dict(data, "run.json")
    assert info.value.path == "run.json"
    assert info.value.field == "steps[1].agent"


def test_label_outside_trace_is_rejected() -> None:
    data = json.loads(FIXTURE.read_text())
    data["label"]["step"] = 9
    with pytest.raises(TraceFormatError, match="outside the trace"):
        trace_from_dict(data, "run.json")


def test_gold_label_keeps_step_among_acceptable() -> None:
    label = GoldLabel(agent="A", step=3, acceptable_steps=[4])
    assert label.acceptable_steps == [3, 4]


def test_invalid_json_reports_position(tmp_path: Path) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text('{"id": "x",\n "steps": [}')
    with pytest.raises(TraceFormatError) as info:
        read_json(bad)
    assert "line 2" in str(info.value) and "broken.json" in str(info.value)


def test_has_inputs_reflects_recorded_messages() -> None:
    trace = Trace(id="t", task="q", steps=[Step(index=0, agent="a", content="x")])
    assert not trace.has_inputs
    trace.steps[0].input_messages = [{"role": "user", "content": "q"}]
    assert trace.has_inputs


def test_a_directory_of_canonical_traces_loads_in_natural_order(tmp_path: Path) -> None:
    from faultfinder.traces.loader import load_traces

    base = load_trace(FIXTURE)
    for n in (10, 2):
        write_trace(base.model_copy(update={"id": f"t{n}"}), tmp_path / f"{n}.json")
    assert [t.id for t in load_traces(tmp_path)] == ["t2", "t10"]
    (tmp_path / "10.json").write_text('{"schema_version": "1", "id": "x", "task": "t"}')
    with pytest.raises(TraceFormatError, match=r"10\.json"):
        load_traces(tmp_path)
