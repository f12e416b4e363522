"""`faultfinder label`: the decisive step written into a trace, then used by `calibrate`."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from demo_recording import record_demo
from faultfinder.cli import main
from faultfinder.traces.io import write_trace
from faultfinder.traces.loader import load_trace

AG = Path(__file__).parent / "fixtures" / "oracle" / "Algorithm-Generated"


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def unlabelled(tmp_path: Path, name: str = "1.json") -> Path:
    """A canonical trace of the user's, with no label yet."""
    trace = load_trace(AG / name).model_copy(update={"label": None})
    path = tmp_path / f"run-{name}"
    write_trace(trace, path)
    return path


def test_label_writes_the_step_and_its_speaker_in_place(tmp_path: Path) -> None:
    path = unlabelled(tmp_path)
    speaker = load_trace(path).steps[2].agent
    code, output = cli("label", str(path), "--step", "2", "--reason", "wrong figure")
    assert code == 0, output
    assert f"step 2, agent {speaker}" in output
    label = json.loads(path.read_text())["label"]
    assert label == {
        "agent": speaker,
        "step": 2,
        "acceptable_steps": [2],
        "reason": "wrong figure",
    }
    # Labelled already: replacing it takes --force.
    code, output = cli("label", str(path), "--step", "1")
    assert code == 1 and "--force" in output and json.loads(path.read_text())["label"] == label
    code, output = cli("label", str(path), "--step", "1", "--also", "3", "--force")
    assert code == 0 and load_trace(path).label.acceptable_steps == [1, 3]  # type: ignore[union-attr]


def test_a_trace_of_another_format_is_written_elsewhere(tmp_path: Path) -> None:
    code, output = cli("label", str(AG / "1.json"), "--step", "0", "--force")
    assert code == 2 and "--out FILE" in output
    out = tmp_path / "labelled" / "1.json"
    code, output = cli("label", str(AG / "1.json"), "--step", "0", "--force", "--out", str(out))
    assert code == 0, output
    written = json.loads(out.read_text())
    assert written["schema_version"] and written["label"]["step"] == 0


def test_bad_steps_and_agents_are_usage_errors(tmp_path: Path) -> None:
    path = unlabelled(tmp_path)
    before = path.read_text()
    code, output = cli("label", str(path), "--step", "999")
    assert code == 2 and "outside the trace" in output
    code, output = cli("label", str(path), "--step", "1", "--agent", "Nobody")
    assert code == 2 and "not an agent of the trace" in output
    assert path.read_text() == before


def test_labelled_runs_calibrate(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    for source in sorted(AG.glob("*.json")):
        path = unlabelled(runs, source.name)
        gold = load_trace(source).label
        assert gold is not None and gold.step is not None
        assert cli("label", str(path), "--step", str(gold.step))[0] == 0
    code, output = cli(
        "calibrate", str(runs), "--source", "mine", "--out", str(tmp_path / "w.json")
    )
    assert code == 0 and "calibrated on 12 labelled trace(s) of mine" in output, output


def test_out_never_replaces_another_file_without_force(tmp_path: Path) -> None:
    # Labelling a second run with --out pointing at the first run's labelled file used to
    # replace that file silently: one labelled run lost.
    first = unlabelled(tmp_path, "1.json")
    assert cli("label", str(first), "--step", "2")[0] == 0
    kept = first.read_text()
    second = unlabelled(tmp_path, "3.json")
    code, output = cli("label", str(second), "--step", "1", "--out", str(first))
    assert code == 1 and f"{first} exists" in output and "--force" in output
    assert first.read_text() == kept
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    code, output = cli("label", str(second), "--step", "1", "--out", str(notes))
    assert code == 1 and notes.read_text() == "mine"
    # --force overwrites; --out naming the trace itself is labelling in place.
    code, output = cli("label", str(second), "--step", "1", "--out", str(first), "--force")
    assert code == 0 and load_trace(first).id == load_trace(second).id
    code, output = cli("label", str(second), "--step", "1", "--out", str(second))
    assert code == 0 and load_trace(second).label.step == 1  # type: ignore[union-attr]


def test_a_folder_of_recordings_labelled_in_place_calibrates(tmp_path: Path) -> None:
    # The documented flow: `record -o runs` writes runs/<run-id>/trace.json, `label`
    # writes the step into each in place, and `calibrate runs/` (or `eval runs/`) reads
    # them. The folder used to be refused as "only folders", its advice naming a run
    # directory, which is refused too.
    runs = tmp_path / "runs"
    assert record_demo(runs, run_id="avalon").trace is not None
    for source in sorted(AG.glob("*.json")):
        (runs / source.stem).mkdir()
        path = unlabelled(runs / source.stem, source.name).rename(runs / source.stem / "trace.json")
        gold = load_trace(source).label
        assert gold is not None and gold.step is not None
        assert cli("label", str(path), "--step", str(gold.step))[0] == 0
    (runs / "no-trace").mkdir()
    code, output = cli(
        "calibrate", str(runs), "--source", "mine", "--out", str(tmp_path / "w.json")
    )
    assert code == 0, output
    assert "calibrated on 12 labelled trace(s) of mine" in output
    assert "1 × no labelled decisive step (e.g. avalon)" in output
    assert "no-trace: skipped: a folder without a trace.json" in output


def test_a_run_directory_is_labelled_through_its_trace(tmp_path: Path) -> None:
    # `label runs/RUN` used to be refused as "a recording, not a trace", with a hint to
    # run `attribute`: the run's trace.json is what there is to label.
    runs = tmp_path / "runs"
    assert record_demo(runs, run_id="avalon").trace is not None
    code, output = cli("label", str(runs / "avalon"), "--step", "1", "--reason", "slip")
    assert code == 0, output
    assert f"labelled {runs / 'avalon' / 'trace.json'}: step 1" in output
    label = load_trace(runs / "avalon" / "trace.json").label
    assert label is not None and label.step == 1 and label.reason == "slip"


def test_a_run_that_succeeded_is_not_labelled_without_force(tmp_path: Path) -> None:
    # The demo team solves the round trip: its answer is the reference, nothing failed.
    runs = tmp_path / "runs"
    recorded = record_demo(runs, task_id="round-trip", run_id="ok", ground_truth="684").trace
    assert recorded is not None and recorded.final_answer == "684"
    trace = runs / "ok" / "trace.json"
    code, output = cli("label", str(runs / "ok"), "--step", "1")
    assert code == 1, output
    assert f"{recorded.id} in {trace} succeeded: its final answer matches its reference" in output
    assert "--force" in output and load_trace(trace).label is None
    # The user's word overrides the exact match (a wrong reference answer...).
    code, output = cli("label", str(runs / "ok"), "--step", "1", "--force")
    assert code == 0, output
    label = load_trace(trace).label
    assert label is not None and label.step == 1
    # Without a reference answer, success cannot be told: the run is labelled.
    bare = record_demo(runs, task_id="round-trip", run_id="bare", ground_truth=None)
    assert bare.trace is not None and bare.trace.ground_truth is None
    code, output = cli("label", str(runs / "bare"), "--step", "1")
    assert code == 0, output
