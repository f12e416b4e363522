"""Commands given nothing they can work on say so, with what to do, and never exit 0."""

from __future__ import annotations

import gzip
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
    assert "has no steps: there is nothing to attribute" in output


def test_eval_says_when_no_trace_is_labelled(tmp_path: Path) -> None:
    code, output = run("eval", str(OTEL), "--method", "shortlist", "--out", str(tmp_path / "r"))
    assert code == 1
    assert "has a gold label" in output and "--include-unlabelled" in output
    assert "with these filters" not in output
