"""`faultfinder import`, round trips through canonical files, and `attribute` on raw formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.cli.import_cmd import trace_file_name
from faultfinder.errors import TraceFormatError, TraceFormatWarning
from faultfinder.traces.importers import get_importer
from faultfinder.traces.io import write_trace
from faultfinder.traces.loader import load_trace, load_traces

FIXTURES = Path(__file__).parent / "fixtures" / "importers"
WW = FIXTURES / "whoandwhen"
TE = FIXTURES / "traceelephant"
HC_FILE = WW / "Hand-Crafted" / "1.json"
TE_DIR = TE / "captain-runs-gaia" / "task_7"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("path", "fmt", "options"),
    [
        (WW, "who-and-when", {}),
        (TE, "traceelephant", {}),
        (FIXTURES / "generic" / "chat.jsonl", "generic", {}),
        (
            FIXTURES / "generic" / "wrapped.json",
            "generic",
            {
                "messages_key": "turns",
                "agent_field": "speaker",
                "content_field": "text",
                "step_base": "1",
            },
        ),
    ],
)
def test_round_trip_import_write_load(
    tmp_path: Path, path: Path, fmt: str, options: dict[str, str]
) -> None:
    imported = get_importer(fmt).load(path, **options)
    assert imported
    for n, trace in enumerate(imported):
        target = tmp_path / f"{n}.json"
        write_trace(trace, target)
        assert load_trace(target) == trace


def test_import_single_file_auto_detected(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    code, output = run("import", str(HC_FILE), "--out", str(out))
    assert code == 0, output
    assert "wrote 1 trace(s)" in output
    assert load_trace(out) == load_trace(HC_FILE)
    assert json.loads(out.read_text("utf-8"))["schema_version"] == "1"


def test_a_trace_written_under_another_suffix_reads_back(tmp_path: Path) -> None:
    # `import --out run.trace` writes canonical JSON; every command must read it back.
    out = tmp_path / "run.trace"
    code, output = run("import", str(HC_FILE), "--out", str(out))
    assert code == 0, output
    assert load_trace(out) == load_trace(HC_FILE)
    code, output = run("attribute", str(out), "--method", "shortlist", "--no-save")
    assert code == 0, output
    assert "step:" in output
    lines = tmp_path / "runs.log"
    lines.write_text((tmp_path / "run.trace").read_text("utf-8").replace("\n", " ") + "\n")
    assert load_traces(lines) == [load_trace(HC_FILE)]
    other = tmp_path / "other.trace"
    other.write_text('{"hello": 1}', "utf-8")
    with pytest.raises(TraceFormatError, match="schema_version"):
        load_traces(other, format="faultfinder")


def test_a_folder_reads_every_file_a_reader_recognises_and_names_the_rest(
    tmp_path: Path,
) -> None:
    import gzip
    import shutil

    otel = Path(__file__).parent / "fixtures" / "otel"
    folder = tmp_path / "exports"
    folder.mkdir()
    shutil.copy(otel / "openai-agents-genai.otlp.jsonl", folder / "genai.otlp")
    raw = (otel / "crewai-openinference.otlp.jsonl").read_bytes()
    (folder / "crew.json.gz").write_bytes(gzip.compress(raw))
    write_trace(load_trace(HC_FILE), folder / "run.trace")
    (folder / "README.md").write_text("# notes\n", "utf-8")
    expected = (
        load_traces(otel / "openai-agents-genai.otlp.jsonl")
        + load_traces(otel / "crewai-openinference.otlp.jsonl")
        + [load_trace(HC_FILE)]
    )
    with pytest.warns(TraceFormatWarning, match=r"README\.md: skipped"):
        traces = load_traces(folder)
    assert sorted(len(t.steps) for t in traces) == sorted(len(t.steps) for t in expected)
    assert len(traces) == len(expected)


def test_import_many_to_directory(tmp_path: Path) -> None:
    code, output = run("import", str(WW), "--format", "who-and-when", "--out-dir", str(tmp_path))
    assert code == 0, output
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "Algorithm-Generated__1.json",
        "Algorithm-Generated__10.json",
        "Algorithm-Generated__2.json",
        "Hand-Crafted__1.json",
    ]
    originals = {t.id: t for t in load_traces(WW)}
    for file in tmp_path.iterdir():
        trace = load_trace(file)
        assert trace == originals[trace.id]


def test_import_many_to_jsonl(tmp_path: Path) -> None:
    out = tmp_path / "all.jsonl"
    code, output = run("import", str(TE), "--out", str(out))
    assert code == 0, output
    assert load_traces(out) == load_traces(TE)
    assert len(out.read_text("utf-8").splitlines()) == 3


def test_many_traces_refuse_a_json_file(tmp_path: Path) -> None:
    code, output = run("import", str(TE), "--out", str(tmp_path / "x.json"))
    assert code == 1
    assert "holds 3 traces" in output
    assert not (tmp_path / "x.json").exists()


def test_map_options_reach_the_importer(tmp_path: Path) -> None:
    out = tmp_path / "w.json"
    args = ["import", str(FIXTURES / "generic" / "wrapped.json"), "--format", "generic"]
    args += ["--map", "messages_key=turns", "--map", "agent_field=speaker"]
    args += ["--map", "content_field=text", "--map", "step_base=1", "--out", str(out)]
    code, output = run(*args)
    assert code == 0, output
    trace = load_trace(out)
    assert trace.label is not None and trace.label.step == 3
    code, output = run("import", str(HC_FILE), "--map", "oops")
    assert code == 2 and "expected KEY=VALUE" in output


def test_without_output_prints_a_summary() -> None:
    code, output = run("import", str(TE_DIR))
    assert code == 0, output
    assert "captain-runs-gaia/task_7: 3 steps, 2 agents, inputs; label Searcher @ step 1" in output
    assert "nothing written" in output


def test_a_summary_counts_one_step_and_one_agent_in_the_singular(tmp_path: Path) -> None:
    # A one-agent chat of one reply printed "1 steps, 1 agents".
    chat = tmp_path / "chat.jsonl"
    lines = [{"role": "assistant", "name": "Planner", "content": "Saturday, in the park."}]
    chat.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    code, output = run("import", str(chat), "--format", "generic")
    assert code == 0, output
    assert ": 1 step, 1 agent; label -" in output, output


def test_a_trace_with_no_step_is_named_with_a_warning(tmp_path: Path) -> None:
    # The OpenTelemetry protocol's own example: one server span, nothing an agent did.
    doc = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                                "name": "I'm a server span",
                                "kind": 2,
                            }
                        ]
                    }
                ]
            }
        ]
    }
    path = tmp_path / "server.json"
    path.write_text(json.dumps(doc), "utf-8")
    result = CliRunner().invoke(main, ["import", str(path), "--out", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 0, result.output
    assert "wrote 1 trace(s)" in result.stdout
    assert result.stderr.startswith("warning: server/5b8efff798038103d269b633813fc60c has no ")
    assert "none of its 1 span(s) is a model call, an agent or a tool" in result.stderr
    code, output = run("import", str(TE_DIR))
    assert code == 0 and "warning" not in output


def test_errors_are_one_line_messages(tmp_path: Path) -> None:
    code, output = run("import", str(HC_FILE), "--format", "nope")
    assert code == 1
    assert "Unknown trace format 'nope'" in output and "who-and-when" in output
    broken = tmp_path / "Hand-Crafted" / "9.json"
    broken.parent.mkdir()
    data = json.loads(HC_FILE.read_text("utf-8"))
    data["mistake_step"] = "99"
    broken.write_text(json.dumps(data), "utf-8")
    code, output = run("import", str(broken), "--format", "who-and-when")
    assert code == 1
    assert f"{broken}: field 'mistake_step'" in output
    assert "Traceback" not in output


def test_out_and_out_dir_are_exclusive(tmp_path: Path) -> None:
    code, output = run(
        "import", str(HC_FILE), "--out", str(tmp_path / "a.json"), "--out-dir", str(tmp_path)
    )
    assert code == 2 and "either --out or --out-dir" in output


def test_trace_file_names_stay_inside_the_directory() -> None:
    assert trace_file_name("Hand-Crafted/3") == "Hand-Crafted__3.json"
    assert trace_file_name("../../etc/passwd") == "etc__passwd.json"
    assert trace_file_name("a b\\c") == "a_b__c.json"
    assert trace_file_name("..") == "trace.json"


@pytest.mark.parametrize("path", [HC_FILE, TE_DIR])
def test_attribute_reads_raw_formats(tmp_path: Path, path: Path) -> None:
    # random needs no model, so none is named.
    code, output = run("attribute", str(path), "--method", "random", "--json")
    assert code == 0, output
    result = json.loads(output)
    trace = load_trace(path)
    assert result["agent"] in trace.agent_names()
    assert 0 <= result["step"] < len(trace.steps)


def test_the_summary_counts_the_listed_agents_and_names_other_speakers(tmp_path: Path) -> None:
    """A human turn is a speaker, not an agent of the roster: the line says which (it
    used to count it as an agent: "3 agents" beside a roster of 2)."""
    path = tmp_path / "chat.jsonl"
    lines = [
        {"role": "user", "content": "Add 2 and 2."},
        {"role": "assistant", "name": "Planner", "content": "Calculator, add them."},
        {"role": "assistant", "name": "Calculator", "content": "5"},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    result = CliRunner().invoke(main, ["import", str(path), "--format", "generic"])
    assert result.exit_code == 0, result.output
    assert "chat: 3 steps, 2 agents (+1 other speaker(s): user); label -" in result.output


def test_out_replaces_only_a_trace_faultfinder_wrote(tmp_path: Path) -> None:
    """`import --out notes.txt` (or the CSV beside it, or the very chat log being imported)
    replaced the file with a trace, silently: only eval results and other faultfinder files
    were refused. Now a file that is not a canonical trace is refused (exit 1, nothing
    written) unless --force; a canonical trace, one file or JSONL, is replaced as before."""
    notes = tmp_path / "notes.txt"
    notes.write_text("call the vendor back on Monday\n", "utf-8")
    table = tmp_path / "cases.csv"
    table.write_text("trace,agent,step\nrun1,Planner,3\n", "utf-8")
    chat = tmp_path / "chat.jsonl"  # the source itself as --out
    chat.write_bytes((FIXTURES / "generic" / "chat.jsonl").read_bytes())
    for target, source in ((notes, HC_FILE), (table, HC_FILE), (chat, chat)):
        before = target.read_bytes()
        code, output = run("import", str(source), "--out", str(target))
        assert code == 1, output
        assert f"--out {target} exists and is not a trace faultfinder wrote" in output
        assert "pass --force" in output
        assert target.read_bytes() == before
    code, output = run("import", str(HC_FILE), "--out", str(notes), "--force")
    assert code == 0, output
    assert load_trace(notes) == load_trace(HC_FILE)
    # faultfinder's own output, small or past what is parsed to tell a kind, is replaced
    big = load_trace(HC_FILE)
    big.steps[0].content = "x" * (5 * 1024 * 1024)
    write_trace(big, tmp_path / "big.json")
    (tmp_path / "big.jsonl").write_text(big.model_dump_json(exclude_none=True) + "\n", "utf-8")
    code, output = run("import", str(TE), "--out", str(tmp_path / "small.jsonl"))
    assert code == 0, output
    for name in ("big.json", "big.jsonl", "small.jsonl"):
        code, output = run("import", str(HC_FILE), "--out", str(tmp_path / name))
        assert code == 0, output
        assert load_traces(tmp_path / name) == [load_trace(HC_FILE)]


def test_out_dir_replaces_only_traces_faultfinder_wrote(tmp_path: Path) -> None:
    mine = tmp_path / "Hand-Crafted__1.json"  # the name the trace is written under
    mine.write_text('{"notes": "my own file"}', "utf-8")
    code, output = run("import", str(HC_FILE), "--out-dir", str(tmp_path))
    assert code == 1, output
    assert f"{mine} (in --out-dir) exists and is not a trace faultfinder wrote" in output
    assert mine.read_text("utf-8") == '{"notes": "my own file"}'
    for extra in (["--force"], []):  # forced once, then it is faultfinder's own trace
        code, output = run("import", str(HC_FILE), "--out-dir", str(tmp_path), *extra)
        assert code == 0, output
        assert load_trace(mine) == load_trace(HC_FILE)


def test_force_does_not_replace_a_file_of_another_known_kind(tmp_path: Path) -> None:
    rows = tmp_path / "results.jsonl"
    row = {"key": "k", "config_id": "c", "run": 0, "method": "random", "trace_id": "t"}
    rows.write_text(json.dumps(row) + "\n", "utf-8")
    code, output = run("import", str(HC_FILE), "--out", str(rows), "--force")
    assert code == 1, output
    assert "eval results file" in output and "Choose another --out" in output
    assert json.loads(rows.read_text("utf-8")) == row
