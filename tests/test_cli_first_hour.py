"""What a first user trips on: numeric options, --model specs, --set keys, `methods NAME`,
methods that need no model, empty files, and repository hygiene."""

from __future__ import annotations

import gzip
import json
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.registry import methods

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "tests" / "fixtures" / "core" / "tiny_trace.json")
GOOD = "Agent Name: Calculator\nStep Number: 2\nReason for Mistake: 17 * 3 is 51"


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def numeric_options() -> list[tuple[str, click.Option]]:
    out = []
    ctx = click.Context(main)
    for name in main.list_commands(ctx):
        command = main.get_command(ctx, name)
        assert command is not None
        for param in command.params:
            if isinstance(param, click.Option) and isinstance(
                param.type, click.types.IntParamType | click.types.FloatParamType
            ):
                out.append((name, param))
    return out


def test_every_numeric_option_has_a_range() -> None:
    options = numeric_options()
    assert len(options) > 20
    unranged = [
        f"{name} {option.opts[0]}"
        for name, option in options
        if not isinstance(option.type, click.IntRange | click.FloatRange) or option.type.min is None
    ]
    assert unranged == []


@pytest.mark.parametrize(
    ("command", "option"), [(n, o.opts[0]) for n, o in numeric_options()], ids=str
)
def test_out_of_range_numbers_are_one_line_usage_errors(command: str, option: str) -> None:
    result = CliRunner().invoke(main, [command, option, "-5"])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and option in errors[0] and "-5" in errors[0]
    assert "Traceback" not in result.output


@pytest.mark.parametrize("value", ["0", "-1"])
def test_concurrency_zero_or_negative_is_refused_at_once(value: str, tmp_path: Path) -> None:
    for args in (
        ["attribute", TINY, "--method", "random"],
        ["eval", TINY, "--out", str(tmp_path / "r.jsonl")],
    ):
        result = invoke(*args, "--concurrency", value)
        assert result.exit_code == 2
        assert f"Invalid value for '--concurrency': {value} is not in the range x>=1" in (
            result.stderr
        )


def test_function_model_is_found_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_judge_h10c.py").write_text(f"def judge(request):\n    return {GOOD!r}\n")
    monkeypatch.chdir(tmp_path)
    result = invoke("attribute", TINY, "--model", "function:my_judge_h10c:judge", "--cache", "none")
    assert result.exit_code == 0, result.output
    assert "agent:      Calculator" in result.output and "step:       2" in result.output


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("function:no_such_module_h10c:fn", "no module named 'no_such_module_h10c'"),
        ("function:bad_import_h10c:fn", "importing 'bad_import_h10c' failed: ZeroDivisionError"),
        ("function:good_h10c:missing", "module 'good_h10c' has no 'missing'"),
        ("function:good_h10c:VALUE", "'VALUE' in 'good_h10c' is not callable"),
        ("function:good_h10c", "write function:package.module:callable"),
        ("gpt-4o", "Unknown model 'gpt-4o'. Write KIND:NAME, e.g. openai:gpt-4o"),
        ("lcoal", "Unknown model 'lcoal'. Did you mean 'local'? Otherwise write KIND:NAME"),
        ("Local", "Did you mean 'local'?"),
        ("nnoe", "Did you mean 'none'?"),
        ("nosuch:thing", "Unknown model backend 'nosuch'"),
        ("openai:", "Name a model"),
        ("scripted:missing.json", "Scripted replies file not found"),
        ("scripted:empty.json", "empty file"),
        ("scripted:broken.json", "invalid JSON"),
        ("local:missing.gguf", "GGUF file not found"),
    ],
)
def test_every_bad_model_is_one_line(
    spec: str, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bad_import_h10c.py").write_text("1 / 0\n")
    (tmp_path / "good_h10c.py").write_text("VALUE = 3\n")
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "broken.json").write_text("[1,")
    monkeypatch.chdir(tmp_path)
    result = invoke("attribute", TINY, "--model", spec, "--cache", "none")
    if spec.startswith("local:") and "llama-cpp-python" in result.stderr:
        pytest.skip("embedded model not installed")
    assert result.exit_code == 1, result.output
    assert result.stderr.count("\n") == 1, result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.output


def test_unknown_set_key_lists_the_valid_ones() -> None:
    result = invoke("attribute", TINY, "--set", "step_indicez=false", "--model", "scripted:x")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1
    assert "has no option 'step_indicez'. Did you mean 'step_indices'?" in result.stderr
    assert "Options: with_ground_truth, observability, context_budget," in result.stderr
    assert "step_indices" in result.stderr.split("Options:")[1]


def test_every_method_option_is_documented() -> None:
    for name, cls in methods().items():
        for field, info in cls.Config.model_fields.items():
            assert info.description, f"{name}.{field} has no docstring"


# The package's own methods: a test module may register a fake one, and collection order
# must not decide whether it is parametrised here.
SHIPPED = sorted(n for n, c in methods().items() if c.__module__.startswith("faultfinder."))


@pytest.mark.parametrize("name", SHIPPED)
def test_methods_name_shows_every_option_with_default_and_doc(name: str) -> None:
    result = invoke("methods", name)
    assert result.exit_code == 0, result.output
    fields = methods()[name].Config.model_fields
    for field, info in fields.items():
        line = next(ln for ln in result.output.splitlines() if ln.startswith(f"  {field}  ("))
        assert ", default " in line
        first_words = " ".join((info.description or "").split()[:3])
        assert first_words in result.output
    assert ("none (no --model)" in result.output) == (not methods()[name].needs_model)


def test_methods_name_shows_presets_and_unknown_lists_methods() -> None:
    shown = invoke("methods", "baseline").output
    assert "baseline:majority-agent" in shown and "rule=majority-agent" in shown
    assert "relative_position  (float, default 0.5)" in shown
    unknown = invoke("methods", "nope")
    assert unknown.exit_code == 1 and "Available: agentic, all-at-once" in unknown.stderr


def only_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make building any backend but the no-model stand-in fail the test."""
    from faultfinder.llm import registry

    def guarded(spec: str, **kwargs: Any) -> Any:
        if spec != registry.NO_MODEL:
            raise AssertionError(f"a model backend was built: {spec}")
        return registry.make_backend(spec, **kwargs)

    monkeypatch.setattr("faultfinder.llm.spec.make_backend", guarded)


@pytest.mark.parametrize(
    "method",
    ["random", "baseline:first-speaker", "baseline:majority-agent", "baseline:position"],
)
def test_methods_needing_no_model_never_build_one(
    method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    only_none(monkeypatch)
    result = invoke("attribute", TINY, "--method", method, "--json")  # default --model local
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)
    assert row["model"] == "none" and row["usage"]["calls"] == 0
    assert "not used" not in result.stderr  # --model was not given, so no note


def test_eval_of_floors_needs_no_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    only_none(monkeypatch)
    out = tmp_path / "r.jsonl"
    data = str(ROOT / "tests" / "fixtures" / "eval" / "traces.jsonl")
    methods = "random,baseline:first-speaker,baseline:majority-agent,baseline:position"
    result = invoke("eval", data, "--method", methods, "--out", str(out), "--no-progress")
    assert result.exit_code == 0, result.output
    assert len(out.read_text().splitlines()) == 20


@pytest.mark.parametrize(
    ("command", "needer"),
    [
        (["attribute", TINY, "--method", "all-at-once"], "method 'all-at-once'"),
        (["eval", TINY, "--method", "random,echo:I1", "--include-unlabelled"], "method 'echo:I1'"),
        (["graph", TINY], "CHIEF's graph"),
        (["demo", "--method", "binary-search"], "method 'binary-search'"),
    ],
    ids=["attribute", "eval", "graph", "demo"],
)
def test_model_none_for_a_method_that_calls_one_is_refused_up_front(
    command: list[str], needer: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It ran and failed every case with "This method declared that it needs no model ...
    # set needs_model = True on its class", exit 4, and eval said to rerun with --resume.
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "r.jsonl"
    extra = ["--out", str(out), "--no-progress"] if command[0] == "eval" else []
    result = invoke(*command, *extra, "--model", "none")
    assert result.exit_code == 1, result.output
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"--model none calls no model, but {needer} needs one" in result.stderr
    assert "--model local" in result.stderr and "shortlist" in result.stderr
    assert "needs_model" not in result.output
    assert not out.exists() and not (tmp_path / ".faultfinder" / "results.jsonl").exists()


EXPORT = ROOT / "tests" / "fixtures" / "otel" / "crewai-openinference.otlp.jsonl"


def test_a_gzipped_export_cut_off_is_called_cut_off(tmp_path: Path) -> None:
    # A gzip'd export copied part way was "a binary file (it holds NUL bytes, so it is not
    # text)", which sent a user looking for the wrong problem.
    whole = gzip.compress(EXPORT.read_bytes())
    good, cut = tmp_path / "export.jsonl.gz", tmp_path / "cut.jsonl.gz"
    good.write_bytes(whole)
    cut.write_bytes(whole[: len(whole) // 2])
    assert invoke("attribute", str(good), "--method", "shortlist", "--no-save").exit_code == 0
    for command in (["attribute", str(cut), "--method", "shortlist"], ["import", str(cut)]):
        result = invoke(*command)
        assert result.exit_code == 1, result.output
        assert result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith(f"Error: {cut} is a gzip file that is cut off or damaged")
        assert "export or copy it again" in result.stderr and "NUL" not in result.stderr


def test_a_gzipped_file_is_judged_by_what_it_holds(tmp_path: Path) -> None:
    strings, png = tmp_path / "strings.json.gz", tmp_path / "plot.png.gz"
    strings.write_bytes(gzip.compress(b'["a", "b"]'))
    png.write_bytes(gzip.compress(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"))
    said = invoke("attribute", str(strings), "--method", "shortlist").stderr
    assert "no reader recognises it" in said and "binary" not in said
    said = invoke("attribute", str(png), "--method", "shortlist").stderr
    assert f"{png} is a gzip-compressed binary file (what it decompresses to holds NUL" in said
    # Still never written over: a user's gzip'd export is not import's to replace.
    result = invoke("import", TINY, "--out", str(strings), "--force")
    assert result.exit_code == 1 and "is a gzip-compressed file, not a trace" in result.stderr
    assert gzip.decompress(strings.read_bytes()) == b'["a", "b"]'


def test_import_says_which_command_reads_what_it_wrote(tmp_path: Path) -> None:
    # It said only "wrote 2 trace file(s) under traces/": the files are named after trace
    # ids (with "__" for "/"), which a new user had to find with ls before going on.
    exports = tmp_path / "exports"
    exports.mkdir()
    for name in ("crewai-openinference.otlp.jsonl", "openai-agents-genai.otlp.jsonl"):
        (exports / name).write_bytes((ROOT / "tests" / "fixtures" / "otel" / name).read_bytes())
    out_dir = tmp_path / "my traces"
    result = invoke("import", str(exports), "--out-dir", str(out_dir))
    assert result.exit_code == 0, result.output
    hint = result.stdout.splitlines()[-1]
    assert hint.startswith("next: faultfinder attribute ")
    one, _, every = hint.removeprefix("next: ").partition("   # one trace; all of them: ")
    for command in (one, every):
        args = shlex.split(command)
        assert args[0] == "faultfinder"
        if args[1] == "eval":
            args[args.index("--out") + 1] = str(tmp_path / "results.jsonl")
        else:
            args.append("--no-save")
        ran = invoke(*args[1:])
        assert ran.exit_code == 0, (command, ran.output)
    single = invoke(
        "import",
        str(exports / "crewai-openinference.otlp.jsonl"),
        "--out",
        str(tmp_path / "run.json"),
    )
    assert single.stdout.splitlines()[-1] == (
        f"next: faultfinder attribute {shlex.quote(str(tmp_path / 'run.json'))} --method shortlist"
    )


@pytest.mark.parametrize(
    ("name", "content"),
    [("t.json", ""), ("t.json", "  \n\n"), ("t.jsonl", ""), ("t.txt", "")],
)
def test_empty_trace_file_is_called_empty(name: str, content: str, tmp_path: Path) -> None:
    path = tmp_path / name
    path.write_text(content)
    result = invoke("attribute", str(path), "--method", "random")
    assert result.exit_code == 1
    assert result.stderr.strip() == f"Error: {path}: field '(file)': empty file"


def test_empty_directory_is_called_empty(tmp_path: Path) -> None:
    result = invoke("eval", str(tmp_path), "--method", "random", "--out", "x.jsonl")
    assert result.exit_code == 1 and "empty directory" in result.stderr


def test_runs_is_ignored_by_git() -> None:
    assert "runs/" in (ROOT / ".gitignore").read_text().splitlines()


def test_no_machine_paths_in_committed_files() -> None:
    try:
        files = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    pattern = re.compile(r"(?<![\w.~-])/(?:work|home|Users|root|mnt)/")
    hits = []
    for name in files:
        path = ROOT / name
        if path.suffix in {".png", ".gguf", ".sqlite"} or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="ignore")
        hits.extend(f"{name}: {m.group(0)}" for m in pattern.finditer(text))
    assert hits == []


def test_readme_first_attribute_example_uses_the_demo_trace() -> None:
    readme = (ROOT / "README.md").read_text()
    first = next(ln for ln in readme.splitlines() if ln.startswith("faultfinder attribute "))
    assert first.split()[2] == ".faultfinder/demo-trace.json"
    for command in ("check", "proxy", "serve-local", "debug-report"):
        assert f"faultfinder {command} " in readme, command


def test_the_cost_line_counts_one_call_in_the_singular(tmp_path: Path) -> None:
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps([GOOD]))
    result = invoke(
        "attribute", TINY, "--method", "all-at-once", "--model", f"scripted:{replies}", "--no-save"
    )
    assert result.exit_code == 0, result.output
    cost = next(line for line in result.stdout.splitlines() if line.startswith("cost:"))
    assert cost.startswith("cost:       1 call (0 cached), "), cost


def test_every_out_option_takes_the_short_o() -> None:
    """`-o FILE` is what people type first; every command that writes to --out takes it."""
    ctx = click.Context(main)
    missing, found = [], 0
    for name in main.list_commands(ctx):
        command = main.get_command(ctx, name)
        assert command is not None
        for param in command.params:
            if isinstance(param, click.Option) and "--out" in param.opts:
                found += 1
                if "-o" not in param.opts:
                    missing.append(name)
    assert found >= 10 and missing == []


def test_import_writes_with_the_short_o(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    result = invoke("import", TINY, "-o", str(out))
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["steps"]


def test_eval_names_the_model_it_runs_with(tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    result = invoke("eval", TINY, "--method", "shortlist", "-o", str(out), "--no-progress")
    assert result.exit_code == 0, result.output
    assert "run(s) with model none" in result.stderr
