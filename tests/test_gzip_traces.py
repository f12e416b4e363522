"""A gzip'd file is read as what it holds, whatever the format: a canonical trace, a
benchmark log, a generic chat log and every tracing export (one decompression, in
traces/io.py, for every reader)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.errors import TraceFormatError
from faultfinder.traces.io import read_bytes, write_trace
from faultfinder.traces.loader import load_trace, load_traces

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TINY = FIXTURES / "core" / "tiny_trace.json"
PLAIN = {
    "canonical.json": TINY,
    "who-and-when.json": FIXTURES / "importers" / "whoandwhen" / "Hand-Crafted" / "1.json",
    "chat.jsonl": FIXTURES / "importers" / "generic" / "chat.jsonl",
    "export.otlp.jsonl": FIXTURES / "otel" / "crewai-openinference.otlp.jsonl",
}


def packed(tmp_path: Path, name: str, source: Path) -> Path:
    path = tmp_path / "Hand-Crafted" / f"{name}.gz"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(gzip.compress(source.read_bytes()))
    return path


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_every_format_reads_the_same_gzipped(tmp_path: Path, name: str) -> None:
    # Only Langfuse, OTLP and the other tracing exports were read through gzip; a
    # canonical trace, a Who&When log or a generic chat log was "not recognised".
    plain = tmp_path / "plain" / "Hand-Crafted" / name
    plain.parent.mkdir(parents=True)
    plain.write_bytes(PLAIN[name].read_bytes())
    path = packed(tmp_path, name, PLAIN[name])

    def dumped(p: Path) -> str:
        text = json.dumps([t.model_dump(mode="json") for t in load_traces(p)])
        return text.replace(json.dumps(str(p))[1:-1], "FILE")

    # The same traces, ids included; only the file they name differs.
    assert dumped(path) == dumped(plain)


def test_a_gzipped_canonical_trace_reads_whatever_it_is_called(tmp_path: Path) -> None:
    # It was "no reader recognises it (tried: faultfinder (canonical), ...)".
    trace = load_trace(TINY)
    lines = tmp_path / "runs.jsonl"
    lines.write_text(trace.model_dump_json() + "\n" + trace.model_dump_json() + "\n", "utf-8")
    for name, source in (("run.json", TINY), ("run", TINY), ("runs.jsonl", lines)):
        path = packed(tmp_path, name, source)
        got = load_traces(path)
        assert [t.id for t in got] == [trace.id] * (2 if name == "runs.jsonl" else 1)
        assert got[0].steps == trace.steps
    result = CliRunner().invoke(
        main,
        [
            "attribute",
            str(tmp_path / "Hand-Crafted" / "run.json.gz"),
            "--method",
            "random",
            "--no-save",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "no reader recognises it" not in result.output


def test_a_folder_of_gzipped_canonical_traces_reads_each(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "a.json.gz").write_bytes(gzip.compress(TINY.read_bytes()))
    write_trace(load_trace(TINY), folder / "b.json")
    assert len(load_traces(folder)) == 2


def test_gzip_damage_names_the_file_and_what_is_wrong(tmp_path: Path) -> None:
    whole = gzip.compress(TINY.read_bytes())
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(whole[:-6])
    with pytest.raises(TraceFormatError, match=r"cut\.json\.gz: field '\(gzip\)': cut off"):
        load_traces(cut, format="faultfinder")
    empty = tmp_path / "empty.json.gz"
    empty.write_bytes(gzip.compress(b"  \n"))
    with pytest.raises(TraceFormatError, match=r"empty\.json\.gz: field '\(file\)': empty file"):
        load_traces(empty)


def test_every_member_of_a_concatenated_gzip_file_is_read(tmp_path: Path) -> None:
    # `cat a.gz b.gz > c.gz` is a valid gzip file: gunzip gives both parts, and so do we.
    text = TINY.read_bytes()
    path = tmp_path / "two.json.gz"
    path.write_bytes(gzip.compress(text[:100]) + gzip.compress(text[100:]))
    assert read_bytes(path) == text
    assert load_trace(path).steps == load_trace(TINY).steps


def test_a_gzip_bomb_stops_at_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(gzip.compress(b" " * 5_000_000))
    with pytest.raises(TraceFormatError, match=r"decompresses to more than 1000000 bytes"):
        read_bytes(path, limit=1_000_000)


def test_label_never_rewrites_a_gzipped_trace_in_place(tmp_path: Path) -> None:
    # Read through gzip now, a gzip'd trace must still not be written over as plain JSON.
    path = packed(tmp_path, "run.json", TINY)
    before = path.read_bytes()
    result = CliRunner().invoke(main, ["label", str(path), "--step", "0", "--force"])
    assert result.exit_code != 0
    assert "--out" in result.output
    assert path.read_bytes() == before
