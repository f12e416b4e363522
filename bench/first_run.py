"""The README's first command on a fresh clone with an empty pip cache, timed.

    python bench/first_run.py            # add --write to record the figures in bench/README.md

What it does, as a new user would:

1. ``git clone`` this repository (its committed HEAD) into a new temporary folder;
2. reads the first command of the README's Quickstart (the first ```bash block) and runs
   it verbatim with ``bash -c`` in the clone, with ``PIP_NO_CACHE_DIR=1`` (nothing comes
   from pip's cache: every package is downloaded), no virtualenv active, and none of
   this venv's directories on PATH;
3. checks that its output holds an answered attribution (``status: ok`` with an agent and
   a step) and the demo team's replay flipping the failure (``failure -> success``).

Printed and written: the wall time of the whole command (venv, download, install, demo),
the time of a second ``faultfinder demo`` in the same clone (the demo alone, warm), the
size of the new venv, and the number of packages installed. The network is the package
registry's: the time depends on it and on the machine's load.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _readme import write_section

ROOT = Path(__file__).resolve().parents[1]
README = Path(__file__).with_name("README.md")
BEGIN, END = "<!-- first-run:begin -->", "<!-- first-run:end -->"
HEADING = "\n## First run from a fresh clone — `bench/first_run.py`\n\n"


def first_command(readme: Path) -> str:
    """The first ```bash block after the README's '## Quickstart' heading."""
    text = readme.read_text(encoding="utf-8")
    quickstart = text.split("## Quickstart", 1)[1]
    found = re.search(r"```bash\n(.+?)\n```", quickstart, re.DOTALL)
    if not found:
        raise SystemExit("no ```bash block in the README's Quickstart")
    return found.group(1).strip()


def clean_env() -> dict[str, str]:
    """This environment without the active venv, with pip's cache off."""
    env = dict(os.environ)
    venv = env.pop("VIRTUAL_ENV", None)
    here = str(Path(sys.executable).parent)
    parts = [
        p
        for p in env.get("PATH", "").split(os.pathsep)
        if p and p != here and not (venv and p.startswith(venv))
    ]
    env["PATH"] = os.pathsep.join(parts)
    env["PIP_NO_CACHE_DIR"] = "1"
    env.pop("PYTHONPATH", None)
    return env


def size_mb(path: Path) -> float:
    total = sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
    return total / 1e6


def check_output(text: str) -> list[str]:
    """What the first command's output lacks (empty: it showed everything)."""
    missing = []
    if not re.search(r"^status:\s+ok", text, re.MULTILINE):
        missing.append("an answered attribution (status: ok)")
    if not re.search(r"^agent:\s+\S", text, re.MULTILINE):
        missing.append("an agent")
    if not re.search(r"^step set:\s+\S", text, re.MULTILINE):
        missing.append("a step set")
    if "failure -> success" not in text:
        missing.append("the replayed fix flipping the failure")
    return missing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=ROOT, help="repository to clone")
    parser.add_argument("--keep", action="store_true", help="keep the clone (path printed)")
    parser.add_argument("--write", action="store_true", help="write into bench/README.md")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ff-first-run-"))
    clone = tmp / "fresh"
    try:
        subprocess.run(["git", "clone", "-q", str(args.repo), str(clone)], check=True)
        command = first_command(clone / "README.md")
        print(f"the README's first command:\n  {command}\n", file=sys.stderr)
        env = clean_env()
        started = time.perf_counter()
        done = subprocess.run(
            ["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True
        )
        total = time.perf_counter() - started
        print(done.stdout[-6000:])
        if done.returncode != 0:
            print(done.stderr[-4000:], file=sys.stderr)
            print(f"exit {done.returncode} after {total:.1f} s", file=sys.stderr)
            return 1
        missing = check_output(done.stdout)
        venv = clone / ".venv"
        started = time.perf_counter()
        again = subprocess.run(
            [str(venv / "bin" / "faultfinder"), "demo"],
            cwd=clone,
            env=env,
            capture_output=True,
            text=True,
        )
        demo_alone = time.perf_counter() - started
        freeze = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
            capture_output=True,
            text=True,
            env=env,
        )
        packages = [line for line in freeze.stdout.splitlines() if line.strip()]
        venv_mb = size_mb(venv)
    finally:
        if args.keep:
            print(f"clone kept in {clone}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    date = datetime.date.today().isoformat()
    verdict = "showed everything" if not missing else "MISSING: " + ", ".join(missing)
    lines = [
        f"Measured {date} on a 2-core machine shared with other work (Python "
        f"{sys.version.split()[0]}, pip's cache off, packages from the registry):",
        "",
        "| what | figure |",
        "|---|---:|",
        f"| the README's first command, start to finish (venv, download, install, demo) | "
        f"{total:.0f} s |",
        f"| `faultfinder demo` again in the same clone (exit {again.returncode}) | "
        f"{demo_alone:.1f} s |",
        f"| the new `.venv` on disk | {venv_mb:.0f} MB |",
        f"| packages installed (faultfinder and its dependencies, pip and setuptools "
        f"included) | {len(packages)} |",
        "",
        f"Output check: {verdict}.",
    ]
    text = "\n".join(lines)
    print("\n" + text)
    if args.write:
        intro = (
            "```sh\npython bench/first_run.py --write\n```\n\n"
            "Clones the repository into a new folder, runs the README's first command "
            "verbatim there with `PIP_NO_CACHE_DIR=1` and no venv active, and checks its "
            "output shows an answered attribution with a step set and the replayed fix "
            "flipping the demo team's failure.\n\n"
        )
        write_section(README, BEGIN, END, text, HEADING + intro)
    return 0 if not missing and again.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
