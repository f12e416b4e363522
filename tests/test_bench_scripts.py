"""Every script in bench/ still imports against the package as it is now.

The bench scripts are run by hand, rarely (their numbers go to bench/README.md), so a
module moved or renamed in src/ would break one silently until the next person tried to
reproduce a figure: `bench/ui_render.py` imported `build_catalog` from the module it had
left for months. Importing each catches that class of rot in a second; running them is
the benches' own job (minutes to an hour each).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"

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
