"""Every script in bench/ still imports against the package as it is now.

The bench scripts are run by hand, rarely (their numbers go to bench/README.md), so a
module moved or renamed in src/ would break one silently until the next person tried to
reproduce a figure: `bench/ui_render.py` imported `build_catalog` from the module it had
left for months. Importing each catches that class of rot in a second. Importing does not
catch a call that no longer fits its function, so the scripts that can run one small case
in a few seconds (against the loopback fake upstream, on test fixtures) are also run here;
the full runs are the benches' own job (minutes to an hour each).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from faultfinder.testing.fake_openai import FakeOpenAIServer

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
WHO_AND_WHEN = ROOT / "tests" / "fixtures" / "importers" / "whoandwhen"

IMPORT_ALL = """
import importlib, pathlib, sys
sys.path.insert(0, sys.argv[1])
failed = []
for p in sorted(pathlib.Path(sys.argv[1]).glob("*.py")):
    try:
        importlib.import_module(p.stem)
    except Exception as exc:
        failed.append(f"{p.name}: {type(exc).__name__}: {exc}")
print("\\n".join(failed))
"""


def test_every_bench_script_imports() -> None:
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, str(BENCH)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", done.stdout


def test_every_bench_script_runs_only_as_a_script() -> None:
    # Importing must not start a benchmark: each runnable script keeps its work under
    # the main guard (the modules whose names start with '_' are libraries of the others).
    scripts = [p for p in BENCH.glob("*.py") if not p.name.startswith("_")]
    assert scripts
    unguarded = [p.name for p in scripts if 'if __name__ == "__main__":' not in p.read_text()]
    assert unguarded == []


def run_bench(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``bench/<script>`` run to the end, as a user runs it, with this checkout's package."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True, text=True, timeout=120, check=False, env=env, cwd=ROOT,
    )  # fmt: skip


def test_tokens_runs_a_case_through_the_eval_harness(tmp_path: Path) -> None:
    # tokens.py built its LLM with positional arguments after build_llm became
    # keyword-only, so every run stopped with a TypeError before its first case.
    out = tmp_path / "rows.jsonl"
    with FakeOpenAIServer() as upstream:
        done = run_bench(
            "tokens.py", "--data", str(WHO_AND_WHEN), "--model", "openai:fake-model",
            "--base-url", upstream.base_url, "--methods", "all-at-once",
            "--subset", "Algorithm-Generated", "--limit", "1", "--out", str(out),
        )  # fmt: skip
        calls = len(upstream.requests)
    assert done.returncode == 0, done.stderr
    assert calls >= 1  # the case reached the model (an unreadable reply is re-asked)
    (row,) = [line for line in done.stdout.splitlines() if "all-at-once" in line]
    assert row.split()[:3] == ["Algorithm-Generated", "all-at-once", "1"]
    assert len(out.read_text().splitlines()) == 1


def test_the_default_data_is_found_from_a_worktree_elsewhere(tmp_path: Path) -> None:
    # The shared data sits beside the main checkout (../shared); a git worktree made
    # elsewhere (/tmp/wt-x) has no ../shared of its own, and its scripts looked there.
    main = tmp_path / "work" / "main"
    shutil.copytree(BENCH, main / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for args in (["init", "-q"], ["add", "bench"], ["commit", "-qm", "bench"]):
        subprocess.run([*git, *args], cwd=main, check=True, capture_output=True)
    worktree = tmp_path / "elsewhere" / "wt-x"
    subprocess.run(
        [*git, "worktree", "add", "-q", str(worktree)], cwd=main, check=True, capture_output=True
    )
    shared = tmp_path / "work" / "shared"
    (shared / "data" / "who-and-when").mkdir(parents=True)
    show = "import sys; sys.path.insert(0, sys.argv[1]); import floors; print(floors.DEFAULT_DATA)"

    def default_data(root: Path, **env: str) -> str:
        clean = {k: v for k, v in os.environ.items() if k != "FAULTFINDER_SHARED"}
        done = subprocess.run(
            [sys.executable, "-c", show, str(root / "bench")],
            capture_output=True, text=True, timeout=120, check=False,
            env={**clean, "PYTHONPATH": str(ROOT / "src"), **env},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    expected = str(shared / "data" / "who-and-when")
    assert default_data(main) == expected
    assert default_data(worktree) == expected
    # Pointed elsewhere by the environment, as bench/README.md says.
    other = tmp_path / "copy"
    assert default_data(worktree, FAULTFINDER_SHARED=str(other)) == str(
        other / "data" / "who-and-when"
    )
