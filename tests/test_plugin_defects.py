"""Plugin defects of the second plugin audit, each through the real CLI in a fresh process
with a real installed distribution (as tests/test_plugins.py installs the doc's examples).

The distribution ``ff-plugin-defects`` (tests/fixtures/plugins_audit/) declares an
importer whose ``detect()`` and ``load()`` raise, a method that is not a method, a floor
method, a format with a suffix of its own (``.lines``), a backend factory that raises, one
that reads its key as docs/plugins.md says, and one that names every backend it builds the
same.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from test_plugins import DEMO_TRACE, pip_install

FIXTURE = Path(__file__).parent / "fixtures" / "plugins_audit" / "ff-plugin-defects"
DIST = "plugin ff-plugin-defects 0.0.1"
EVAL_SET = Path(__file__).parent / "fixtures" / "eval" / "traces.jsonl"

LINES = "TASK: What is 2 + 3?\nPlanner: Solver, add the numbers.\nSolver: 2 + 3 = 6.\n"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("defects")
    project = base / "project"
    shutil.copytree(FIXTURE, project)
    pip_install(project, base / "site")
    return base / "site"


def environment(site: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "KEYED_API_KEY")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH")) if p)
    return {**env, **extra}


def faultfinder(
    site: Path, *args: str, cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """``faultfinder ARGS`` in a new process that sees the packages installed in ``site``,
    with the environment variables ``env`` added."""
    return subprocess.run(
        [sys.executable, "-m", "faultfinder", *args],
        capture_output=True,
        text=True,
        env=environment(site, **env),
        cwd=cwd or site.parent,
        timeout=300,
        check=False,
    )


def ui_start(site: Path, *paths: Path) -> tuple[list[str], str]:
    """`faultfinder ui PATHS --port 0`: what it prints up to 'serving ...' (then it is
    stopped), or until it exits; and its stderr."""
    child = subprocess.Popen(
        [sys.executable, "-m", "faultfinder", "ui", *map(str, paths), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(site),
        cwd=site.parent,
    )
    watchdog = threading.Timer(120, child.kill)
    watchdog.start()
    lines: list[str] = []
    try:
        assert child.stdout is not None
        while line := child.stdout.readline():
            lines.append(line.rstrip("\n"))
            if line.startswith("serving "):
                break
    finally:
        watchdog.cancel()
        child.terminate()
        _, stderr = child.communicate(timeout=30)
    return lines, stderr


def one_line(stderr: str) -> None:
    assert "Traceback" not in stderr and "PluginWarning" not in stderr, stderr


def naming(text: str, word: str) -> list[str]:
    return [line for line in text.splitlines() if word in line]


# -- 1. an importer whose detect() raises does not stop the UI ----------------------------


def test_ui_skips_an_importer_whose_detect_raises(site: Path, tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    shutil.copy(DEMO_TRACE, folder / "demo.json")
    shown, stderr = ui_start(site, folder)
    assert shown and shown[-1].startswith("serving "), stderr
    assert shown[0].startswith("1 trace,"), shown
    one_line(stderr)
    (warning,) = naming(stderr, "zz-buggy")  # once, however many places asked it
    assert warning.startswith("warning: ") and DIST in warning
    assert "detect()" in warning and "RuntimeError: detect bug" in warning


# -- 2. a plugin registered as a method that is not one -----------------------------------


def test_a_plugin_that_is_not_a_method_is_skipped_with_one_warning(site: Path) -> None:
    listed = faultfinder(site, "methods")
    assert listed.returncode == 0, listed.stderr
    assert "notamethod" not in listed.stdout and "last-speaker" in listed.stdout
    one_line(listed.stderr)
    (warning,) = naming(listed.stderr, "notamethod")
    assert warning.startswith("warning: ") and DIST in warning
    assert "is not a method" in warning and "summary" in warning and "Config" in warning


@pytest.mark.parametrize("command", ["attribute", "eval", "methods"])
def test_naming_a_plugin_that_is_not_a_method_is_one_error_line(
    site: Path, tmp_path: Path, command: str
) -> None:
    args = {
        "attribute": ("attribute", str(DEMO_TRACE), "--method", "notamethod", "--cache", "none"),
        "eval": ("eval", str(EVAL_SET), "--method", "notamethod", "--out", "r.jsonl"),
        "methods": ("methods", "notamethod"),
    }[command]
    run = faultfinder(site, *args, cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    one_line(run.stderr)
    (error,) = naming(run.stderr, "notamethod")
    assert error.startswith("Error: ") and DIST in error and "is not a method" in error


def test_a_plugin_that_is_not_a_method_is_not_offered(site: Path) -> None:
    run = faultfinder(site, "attribute", str(DEMO_TRACE), "--method", "notamethd")
    assert run.returncode == 1
    one_line(run.stderr)
    error = next(line for line in run.stderr.splitlines() if line.startswith("Error: "))
    assert "notamethod" not in error, error


# -- 3. a plugin's load() or factory that raises is one error line --------------------------


def test_a_plugin_importer_whose_load_raises_is_one_error_line(site: Path, tmp_path: Path) -> None:
    source = tmp_path / "run.lines"
    source.write_text(LINES, encoding="utf-8")
    for command in (("import",), ("attribute", "--method", "random")):
        run = faultfinder(site, *command, str(source), "--format", "zz-buggy")
        assert run.returncode == 1, run.stderr
        one_line(run.stderr)
        (error,) = naming(run.stderr, "zz-buggy")
        assert error.startswith("Error: ") and DIST in error
        assert "load()" in error and "RuntimeError: load bug" in error and str(source) in error


@pytest.mark.parametrize("command", ["attribute", "eval"])
def test_a_backend_factory_that_raises_is_one_error_line(
    site: Path, tmp_path: Path, command: str
) -> None:
    target = str(DEMO_TRACE) if command == "attribute" else str(EVAL_SET)
    extra = ("--out", "r.jsonl") if command == "eval" else ()
    run = faultfinder(
        site, command, target, "--method", "all-at-once", "--model", "angry:big-1",
        "--cache", "none", *extra, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr
    one_line(run.stderr)
    (error,) = naming(run.stderr, "angry")
    assert error.startswith("Error: ") and DIST in error
    assert "angry:big-1" in error and "RuntimeError: MYCLOUD_API_KEY is not set" in error


# -- 4. a backend plugin never gets the OpenAI key's variable unasked ---------------------


def test_a_backend_plugin_reads_its_own_key_unless_the_user_names_one(
    site: Path, tmp_path: Path
) -> None:
    log = tmp_path / "keyed.log"
    keys = {"OPENAI_API_KEY": "sk-openai-SECRET", "KEYED_API_KEY": "sk-keyed", "FFD_LOG": str(log)}
    args = ("attribute", str(DEMO_TRACE), "--method", "all-at-once", "--cache", "none")
    plain = faultfinder(site, *args, "--model", "keyed:big-1", **keys)
    assert plain.returncode == 0, plain.stderr
    named = faultfinder(
        site, *args, "--model", "keyed:big-1", "--api-key-env", "MY_KEY", MY_KEY="sk-mine", **keys
    )
    assert named.returncode == 0, named.stderr
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    assert seen == [
        {"model": "big-1", "key_env": "KEYED_API_KEY", "key": "sk-keyed"},
        {"model": "big-1", "key_env": "MY_KEY", "key": "sk-mine"},
    ]
    assert "sk-openai-SECRET" not in log.read_text()


# -- 5. results are labelled and keyed by the model spec -----------------------------------


def test_a_backend_named_otherwise_than_its_spec_is_refused(site: Path, tmp_path: Path) -> None:
    run = faultfinder(
        site, "eval", str(EVAL_SET), "--method", "all-at-once", "--model", "selfnamed:big-1",
        "--cache", "none", "--out", "r.jsonl", cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr
    one_line(run.stderr)
    (error,) = naming(run.stderr, "selfnamed")
    assert error.startswith("Error: ") and DIST in error
    assert "'selfnamed'" in error and "selfnamed:big-1" in error
    assert not (tmp_path / "r.jsonl").exists() or not (tmp_path / "r.jsonl").read_text()


def test_two_models_of_one_plugin_kind_keep_rows_of_their_own(site: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    for model in ("keyed:big-1", "keyed:big-2"):
        run = faultfinder(
            site, "eval", str(EVAL_SET), "--method", "all-at-once", "--model", model,
            "--cache", "none", "--out", str(out), "--resume", "--no-progress",
        )  # fmt: skip
        assert run.returncode in (0, 3), run.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["model"] for r in rows} == {"keyed:big-1", "keyed:big-2"}
    assert len({r["key"] for r in rows}) == len(rows)


# -- 6. report --floors computes the floors plugins add ------------------------------------


def test_report_floors_computes_a_plugin_floor(site: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    ran = faultfinder(
        site, "eval", str(EVAL_SET), "--method", "all-at-once", "--model", "keyed:big-1",
        "--cache", "none", "--out", str(out), "--no-progress",
    )  # fmt: skip
    assert ran.returncode in (0, 3), ran.stderr
    report = faultfinder(site, "report", str(out), "--floors", str(EVAL_SET), "--format", "json")
    assert report.returncode == 0, report.stderr
    records = json.loads(report.stdout)
    floors = {r["method"] for r in records if r["floor"]}
    assert floors == {
        "random",
        "baseline:first-speaker",
        "baseline:majority-agent",
        "baseline:position",
        "last-speaker",
        "last-speaker:minus1",
    }
    one_line(report.stderr)


# -- 7. the UI finds traces in a plugin's format -------------------------------------------


def test_ui_finds_traces_in_a_plugin_format(site: Path, tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    (folder / "deeper").mkdir(parents=True)
    shutil.copy(DEMO_TRACE, folder / "demo.json")
    (folder / "deeper" / "run.lines").write_text(LINES, encoding="utf-8")
    (folder / "notes.txt").write_text("not a trace\n", encoding="utf-8")
    shown, stderr = ui_start(site, folder)
    assert shown and shown[-1].startswith("serving "), stderr
    assert shown[0].startswith("2 traces,") and "not shown" not in shown[0], shown
