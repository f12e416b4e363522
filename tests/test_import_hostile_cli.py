"""What `import`, `label`, `attribute` and `export` do with input that is odd or hostile:
folders of raw exports, ids too long for a file name, JSON nested past any sense,
terminal escapes in trace text, and a verdict given with another trace."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.cli.import_cmd import trace_file_name
from faultfinder.cli.terminal import safe
from faultfinder.traces.loader import load_trace, load_traces

OTEL = Path(__file__).parent / "fixtures" / "otel"


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_a_folder_of_raw_exports_is_read_file_by_file(tmp_path: Path) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    for name in ("traceloop-team.otlp.jsonl", "logfire-pydantic-ai.otlp.jsonl"):
        shutil.copy(OTEL / name, folder / name)
    mixed = tmp_path / "mixed"
    shutil.copytree(folder, mixed)
    shutil.copy(OTEL / "mlflow-team.trace.json", mixed / "mlflow-team.trace.json")
    for args, count in (([str(folder)], 2), ([str(folder), "--format", "otlp"], 2)):
        code, out, err = invoke("import", *args)
        assert code == 0, err
        assert f"{count} trace(s); nothing written" in out
        assert "logfire-pydantic-ai.otlp/" in out and "traceloop-team.otlp/" in out
    code, out, err = invoke("import", str(mixed), "--out-dir", str(tmp_path / "canon"))
    assert code == 0, err
    assert "wrote 3 trace file(s)" in out
    # The canonical folder written reads back, and a folder mixing both still reads.
    shutil.copy(OTEL / "crewai-agents-only.otlp.jsonl", tmp_path / "canon" / "crew.otlp.jsonl")
    assert len(load_traces(tmp_path / "canon")) == 4
    (tmp_path / "canon" / "notes.json").write_text('{"hello": 1}', "utf-8")
    code, _, err = invoke("import", str(tmp_path / "canon"))
    assert code == 1 and "notes.json: field '(format)': no reader recognises it" in err


def test_an_id_too_long_for_a_file_name_is_cut_and_kept_apart() -> None:
    long_a, long_b = "a" * 600, "a" * 599 + "b"
    name_a, name_b = trace_file_name(long_a), trace_file_name(long_b)
    assert name_a != name_b
    assert len(name_a.encode()) <= 200 and name_a.endswith(".json")
    assert trace_file_name("Hand-Crafted/3") == "Hand-Crafted__3.json"


def test_an_imported_trace_with_a_long_id_is_written(tmp_path: Path) -> None:
    # The committed page of observations as a one-trace export (no shared data needed).
    page = OTEL.parent / "importers" / "langfuse" / "observations-page.json"
    data = {
        "trace": {"id": "t-1", "name": "run"},
        "observations": json.loads(page.read_text())["data"],
    }
    data["trace"]["id"] = "a" * 600
    for obs in data["observations"]:
        obs["traceId"] = "a" * 600
    path = tmp_path / "long.json"
    path.write_text(json.dumps(data), "utf-8")
    code, _, err = invoke("import", str(path), "--out-dir", str(tmp_path / "out"))
    assert code == 0, err
    (written,) = (tmp_path / "out").iterdir()
    assert load_trace(written).id.endswith("a" * 100)


def test_json_nested_past_any_sense_is_a_one_line_error(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 50000 + "]" * 50000, "utf-8")
    for command in ("import", "attribute"):
        code, _, err = invoke(command, str(deep))
        assert code == 1
        assert err.startswith("Error: ") and "nested deeper than" in err
        assert "Traceback" not in err


def test_terminal_escapes_in_a_trace_are_printed_inert(tmp_path: Path) -> None:
    assert safe("a\x1b]0;pwned\x07b\u202ec\nd\te") == "a\\x1b]0;pwned\\x07b\\u202ec\nd\te"
    trace = {
        "schema_version": "1",
        "task": "t",
        "id": "run\x1b[2J",
        "steps": [
            {"index": 0, "agent": "Planner\x1b]0;pwned\x07", "content": "plan"},
            {"index": 1, "agent": "Solver\u202e", "content": "Error: failed"},
        ],
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace), "utf-8")
    code, out, err = invoke("import", str(path))
    assert code == 0, err
    assert "\x1b" not in out and "run\\x1b[2J: 2 steps" in out
    code, out, err = invoke("attribute", str(path), "--method", "baseline:first-speaker")
    assert code == 0, err
    assert (
        "\x1b" not in out and "\x07" not in out and "agent:      Planner\\x1b]0;pwned\\x07" in out
    )


def test_label_names_a_trace_without_steps_and_keeps_each_step_once(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(
        json.dumps(
            {
                "schema_version": "1",
                "task": "t",
                "id": "t",
                "steps": [{"index": i, "agent": "A", "content": str(i)} for i in range(4)],
            }
        ),
        "utf-8",
    )
    code, _, err = invoke("label", str(path), "--step", "1", "--also", "2", "--also", "2")
    assert code == 0, err
    label = load_trace(path).label
    assert label is not None and label.acceptable_steps == [1, 2]
    empty = tmp_path / "empty.json"
    empty.write_text(
        json.dumps({"schema_version": "1", "task": "t", "id": "e", "steps": []}), "utf-8"
    )
    code, _, err = invoke("label", str(empty), "--step", "0")
    # The file cannot be labelled, whatever the command line: 1, as `attribute` exits.
    assert code == 1 and "e in " in err and "has no steps: there is no step to label" in err


def test_export_refuses_a_verdict_made_on_another_trace(tmp_path: Path) -> None:
    verdicts = {}
    for name in ("openai-agents-openinference", "traceloop-team"):
        trace = tmp_path / f"{name}.json"
        code, _, err = invoke("import", str(OTEL / f"{name}.otlp.jsonl"), "--out", str(trace))
        assert code == 0, err
        code, out, err = invoke("attribute", str(trace), "--method", "shortlist", "--json")
        assert code == 0, err
        verdicts[name] = tmp_path / f"{name}.verdict.json"
        verdicts[name].write_text(out, "utf-8")
    args = ["export", str(verdicts["openai-agents-openinference"])]
    code, _, err = invoke(
        *args,
        str(tmp_path / "traceloop-team.json"),
        "--to",
        "phoenix",
        "--out",
        str(tmp_path / "wrong.json"),
    )
    assert code == 1 and "The attribution is for trace openai-agents-openinference" in err
    assert not (tmp_path / "wrong.json").exists()
    # The raw export it was made on, renamed, is still the same trace.
    renamed = tmp_path / "renamed.otlp.jsonl"
    shutil.copy(OTEL / "openai-agents-openinference.otlp.jsonl", renamed)
    code, out, err = invoke(
        *args, str(renamed), "--to", "phoenix", "--out", str(tmp_path / "ok.json")
    )
    assert code == 0, err
