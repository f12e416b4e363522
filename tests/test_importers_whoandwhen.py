"""The Who&When importer: both subsets, kinds, labels, subset detection, errors."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from faultfinder.errors import ConfigError, TraceFormatError
from faultfinder.traces.importers import get_importer
from faultfinder.traces.importers.whoandwhen import WhoAndWhenImporter, normalise_agent
from faultfinder.traces.loader import load_trace, load_traces

FIXTURES = Path(__file__).parent / "fixtures" / "importers" / "whoandwhen"
AG = FIXTURES / "Algorithm-Generated"
HC = FIXTURES / "Hand-Crafted"
# ../shared/data/who-and-when, seen from the repository root
_DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "who-and-when"
REAL_DATA = Path(os.environ.get("FAULTFINDER_WHO_AND_WHEN", str(_DEFAULT_DATA)))


def write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def fixture_data(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def test_root_loads_both_subsets_in_numeric_order() -> None:
    traces = WhoAndWhenImporter().load(FIXTURES)
    assert [t.id for t in traces] == [
        "Algorithm-Generated/1",
        "Algorithm-Generated/2",
        "Algorithm-Generated/10",
        "Hand-Crafted/1",
    ]
    assert {t.source.format for t in traces} == {"who-and-when"}


def test_algorithm_generated_mapping() -> None:
    trace = load_trace(AG / "1.json")
    assert trace.id == "Algorithm-Generated/1"
    assert trace.task == "What is 40 + 2?"
    assert trace.ground_truth == "42"
    assert trace.system == "captain-agent"
    assert trace.source.subset == "Algorithm-Generated"
    assert trace.source.path == str(AG / "1.json")
    assert [s.agent for s in trace.steps] == [
        "Math_Expert",
        "Computer_terminal",
        "Checker_Expert",
        "Checker_Expert",
    ]
    assert [s.role for s in trace.steps] == ["assistant", "user", "user", "user"]
    assert [s.kind for s in trace.steps] == ["llm", "tool", "llm", "llm"]
    assert [s.source_id for s in trace.steps] == ["0", "1", "2", "3"]
    roster = {a.name: a.system_prompt for a in trace.agents}
    assert roster == {
        "Math_Expert": "You solve arithmetic.",
        "Checker_Expert": "You verify results.",
        "Computer_terminal": None,
    }
    assert trace.label is not None
    assert (trace.label.agent, trace.label.step) == ("Math_Expert", 0)
    assert trace.label.reason == "Reason for file 1."
    assert trace.metadata == {"is_correct": False, "question_ID": "q-ag-1", "level": "1"}
    assert not trace.has_inputs


def test_hand_crafted_normalises_orchestrator_and_keeps_raw_role() -> None:
    trace = load_trace(HC / "1.json")
    assert trace.id == "Hand-Crafted/1"
    assert trace.system == "magentic-one"
    assert [s.agent for s in trace.steps] == [
        "human",
        "Orchestrator",
        "Orchestrator",
        "WebSurfer",
        "Orchestrator",
        "ComputerTerminal",
        "Orchestrator",
    ]
    assert trace.steps[2].role == "Orchestrator (-> WebSurfer)"
    assert trace.steps[1].role == "Orchestrator (thought)"
    assert [s.kind for s in trace.steps] == ["human", "llm", "llm", "llm", "llm", "tool", "system"]
    assert [a.name for a in trace.agents] == ["Orchestrator", "WebSurfer", "ComputerTerminal"]
    assert trace.label is not None
    assert (trace.label.agent, trace.label.step) == ("WebSurfer", 3)
    assert trace.final_answer == "Example Tower"
    assert trace.metadata == {
        "is_corrected": False,
        "question_ID": "q-hc-1",
        "level": 2,
        "mistake_type": "wrong_reasoning",
    }


def test_label_agent_outside_roster_and_empty_content_still_load() -> None:
    odd = load_trace(AG / "10.json")
    assert odd.label is not None and odd.label.agent == "Geography_Expert"
    assert odd.agent("Geography_Expert") is None
    empty = load_trace(AG / "2.json")
    assert empty.steps[2].content == ""


@pytest.mark.parametrize(
    ("role", "agent"),
    [
        ("Orchestrator (thought)", "Orchestrator"),
        ("Orchestrator (-> WebSurfer)", "Orchestrator"),
        ("Orchestrator (termination condition)", "Orchestrator"),
        ("WebSurfer", "WebSurfer"),
        ("human", "human"),
    ],
)
def test_normalise_agent(role: str, agent: str) -> None:
    assert normalise_agent(role) == agent


def test_subset_detected_from_content_when_parent_is_not_a_subset(tmp_path: Path) -> None:
    ag = shutil.copy(AG / "1.json", tmp_path / "a.json")
    hc = shutil.copy(HC / "1.json", tmp_path / "b.json")
    assert load_trace(ag).source.subset == "Algorithm-Generated"
    assert load_trace(ag).id == "Algorithm-Generated/a"
    assert load_trace(hc).source.subset == "Hand-Crafted"
    forced = WhoAndWhenImporter().load(Path(hc), subset="Hand-Crafted")[0]
    assert forced.steps[1].agent == "Orchestrator"
    # Without system_prompt but with 'name' fields, a file is still Algorithm-Generated.
    data = fixture_data(AG / "1.json")
    del data["system_prompt"]
    assert load_trace(write(tmp_path / "c.json", data)).source.subset == "Algorithm-Generated"


def test_subset_directory_and_detection(tmp_path: Path) -> None:
    importer = get_importer("who-and-when")
    assert [t.id for t in importer.load(AG)] == [
        "Algorithm-Generated/1",
        "Algorithm-Generated/2",
        "Algorithm-Generated/10",
    ]
    assert importer.detect(FIXTURES) and importer.detect(HC) and importer.detect(HC / "1.json")
    assert not importer.detect(write(tmp_path / "list.json", [{"role": "user", "content": "x"}]))
    assert not importer.detect(tmp_path / "missing.json")
    (tmp_path / "broken.json").write_text("{not json", encoding="utf-8")
    assert not importer.detect(tmp_path / "broken.json")


def test_loader_auto_detects_root() -> None:
    assert len(load_traces(FIXTURES)) == 4


def _broken(tmp_path: Path, change: dict[str, Any], source: Path = AG / "1.json") -> Path:
    data = fixture_data(source)
    data.update(change)
    return write(tmp_path / "Algorithm-Generated" / "5.json", data)


def test_out_of_range_label_names_file_and_field(tmp_path: Path) -> None:
    path = _broken(tmp_path, {"mistake_step": "4"})
    with pytest.raises(TraceFormatError) as err:
        load_trace(path)
    assert err.value.path == str(path)
    assert err.value.field == "mistake_step"
    assert "step 4 (0-based) is outside the trace (valid steps: 0..3)" in str(err.value)


def test_non_numeric_label_step(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="expected a step number, got 'three'"):
        load_trace(_broken(tmp_path, {"mistake_step": "three"}))


def test_missing_speaker_name(tmp_path: Path) -> None:
    data = fixture_data(AG / "1.json")
    del data["history"][1]["name"]
    path = write(tmp_path / "Algorithm-Generated" / "6.json", data)
    with pytest.raises(TraceFormatError) as err:
        load_trace(path)
    assert err.value.field == "history[1].name"


def test_history_must_be_a_list(tmp_path: Path) -> None:
    path = _broken(tmp_path, {"history": "nope"})
    with pytest.raises(TraceFormatError) as err:
        WhoAndWhenImporter().load(path)
    assert (err.value.field, err.value.reason) == ("history", "missing or not a list")


def test_unknown_option_is_rejected() -> None:
    with pytest.raises(ConfigError, match="has no option 'agent_field'"):
        WhoAndWhenImporter().load(AG / "1.json", agent_field="x")


@pytest.mark.skipif(not REAL_DATA.is_dir(), reason="Who&When data not available")
def test_real_dataset_loads_with_labels_in_range() -> None:
    traces = WhoAndWhenImporter().load(REAL_DATA)
    subsets = [t.source.subset for t in traces]
    assert subsets.count("Algorithm-Generated") == 126
    assert subsets.count("Hand-Crafted") == 58
    for trace in traces:
        assert trace.label is not None and trace.label.step is not None
        assert 0 <= trace.label.step < len(trace.steps)


@pytest.mark.parametrize("whoandwhen_first", [True, False])
def test_a_folder_mixing_who_and_when_with_other_traces_reads_each_file(
    tmp_path: Path, whoandwhen_first: bool
) -> None:
    """Which file sorts first no longer decides: a flat folder is Who&When's only when all
    of its JSON files are; otherwise every file is read in its own format."""
    tiny = Path(__file__).parent / "fixtures" / "core" / "tiny_trace.json"
    names = ("a.json", "b.json") if whoandwhen_first else ("b.json", "a.json")
    shutil.copy(next(iter(sorted(AG.glob("*.json")))), tmp_path / names[0])
    shutil.copy(tiny, tmp_path / names[1])
    traces = load_traces(tmp_path)
    assert sorted(t.source.format for t in traces) == ["faultfinder", "who-and-when"]
