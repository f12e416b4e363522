"""Commands given nothing they can work on say so, with what to do, and never exit 0."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.traces.io import write_trace
from faultfinder.traces.loader import load_traces

OTEL = Path(__file__).parent / "fixtures" / "otel" / "openai-agents-genai.otlp.jsonl"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_label_names_the_export_it_will_not_rewrite(tmp_path: Path) -> None:
    lines = tmp_path / "spans.trace"
    shutil.copy(OTEL, lines)
    packed = tmp_path / "spans.json.gz"
    packed.write_bytes(gzip.compress(OTEL.read_bytes()))
    for path in (lines, packed):
        code, output = run("label", str(path), "--step", "0")
        assert code == 2, output
        assert "is not a canonical faultfinder trace file" in output
        assert "--out FILE" in output
    out = tmp_path / "labelled.json"
    code, output = run("label", str(lines), "--step", "0", "--out", str(out))
    assert code == 0, output


def test_attribute_refuses_a_trace_with_no_steps(tmp_path: Path) -> None:
    trace = load_traces(OTEL)[0]
    empty = tmp_path / "empty.json"
    write_trace(trace.model_copy(update={"steps": [], "label": None}), empty)
    code, output = run("attribute", str(empty), "--method", "shortlist", "--no-save")
    assert code == 1
    assert "has no steps: " in output and "there is nothing to attribute" in output
    # The same reason `import` gives: here what its spans (which name agents) hold not.
    assert "hold no model call, agent turn or tool call" in " ".join(output.split())


def test_eval_says_when_no_trace_is_labelled(tmp_path: Path) -> None:
    code, output = run("eval", str(OTEL), "--method", "shortlist", "--out", str(tmp_path / "r"))
    assert code == 1
    assert "has a gold label" in output and "--include-unlabelled" in output
    assert "with these filters" not in output


def test_eval_records_a_trace_with_no_steps_as_an_error_not_a_verdict(tmp_path: Path) -> None:
    """`attribute` refuses a trace with no steps (exit 1); in a batch the same trace is an
    `error` row saying why, counted in the summary, and the batch exits 4 (a case errored),
    never 0 with `no-error-found`, which would tell a script the run was checked."""
    labelled = load_traces(Path(__file__).parent / "fixtures" / "eval" / "traces.jsonl")[0]
    dataset = tmp_path / "data"
    dataset.mkdir()
    write_trace(labelled, dataset / "a.json")
    empty = labelled.model_copy(update={"steps": [], "label": None, "id": "empty-run"})
    write_trace(empty, dataset / "b.json")
    out = tmp_path / "r.jsonl"
    code, output = run(
        "eval", str(dataset), "--method", "random", "--include-unlabelled", "--no-progress",
        "--out", str(out),
    )  # fmt: skip
    assert code == 4, output
    assert "empty-run · random: error: the trace has no steps" in output
    assert "exit 4: of 2 cases, 1 errored" in output
    rows = {r["trace_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["empty-run"]["status"] == "error"
    assert "nothing to attribute" in rows["empty-run"]["error"]
    assert rows[labelled.id]["status"] == "ok"
    # The report counts it as failed and says a retry will not help.
    code, output = run("report", str(out))
    assert code == 0, output
    assert "1 row(s) are of traces with no steps" in output
    assert "rerun the same `faultfinder eval` command with --resume" not in output
    data = json.loads(CliRunner().invoke(main, ["report", str(out), "--format", "json"]).stdout)
    assert [(r["errors"], r["empty_traces"]) for r in data] == [(1, 1)]
