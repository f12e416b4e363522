"""How long `faultfinder` takes to start: `--help`, `methods`, and an offline attribution.

    python bench/startup.py                  # --repeats 15; add --write for bench/README.md

Each command runs --repeats times as a fresh process (the installed `faultfinder` script
next to this Python, or `python -m faultfinder`), after one warm-up run so the figures
are for a warm file-system cache (what a user sees from the second command on; the very
first run after an install also compiles bytecode). Printed: the median and the slowest
wall time, and, for scale, a bare `python -c pass`. The `attribute` row runs the offline
shortlist on the demo trace (no model), so it is start-up plus one small case.

The test suite guards what `--help` and `methods` import (tests/test_startup.py), not
their time: timings depend on the machine and its load; these are benchmarks.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _readme import write_section

README = Path(__file__).with_name("README.md")
BEGIN, END = "<!-- startup:begin -->", "<!-- startup:end -->"
HEADING = "\n## Start-up time — `bench/startup.py`\n\n"


def faultfinder_command() -> list[str]:
    script = Path(sys.executable).with_name("faultfinder")
    return [str(script)] if script.exists() else [sys.executable, "-m", "faultfinder"]


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], cwd: Path, repeats: int) -> tuple[list[float], list[float]]:
    """Wall times and CPU times (user + system of the child) of ``repeats`` runs."""
    subprocess.run(command, cwd=cwd, capture_output=True, check=False)  # warm-up
    walls, cpus = [], []
    for _ in range(repeats):
        cpu = child_cpu()
        started = time.perf_counter()
        done = subprocess.run(command, cwd=cwd, capture_output=True, check=False)
        walls.append(time.perf_counter() - started)
        cpus.append(child_cpu() - cpu)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr!r}")
    return walls, cpus


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--write", action="store_true", help="write into bench/README.md")
    args = parser.parse_args()
    ff = faultfinder_command()
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        trace = cwd / "demo-trace.json"
        from faultfinder.cli.demo import demo_trace_text

        trace.write_text(demo_trace_text(), encoding="utf-8")
        cases = [
            ("`python -c pass` (the interpreter alone)", [sys.executable, "-c", "pass"]),
            ("`faultfinder --help`", [*ff, "--help"]),
            ("`faultfinder methods`", [*ff, "methods"]),
            ("`faultfinder methods chief`", [*ff, "methods", "chief"]),
            ("`faultfinder attribute --help`", [*ff, "attribute", "--help"]),
            (
                "`faultfinder attribute demo-trace.json --method shortlist`",
                [*ff, "attribute", str(trace.name), "--method", "shortlist"],
            ),
        ]
        rows = []
        load = os.getloadavg()[0]
        for label, command in cases:
            walls, cpus = timed(command, cwd, args.repeats)
            row = (label, statistics.median(walls), max(walls), statistics.median(cpus))
            rows.append(row)
            print(f"{label}: wall {row[1]:.3f} s (slowest {row[2]:.3f} s), CPU {row[3]:.3f} s")
        load = max(load, os.getloadavg()[0])
    date = datetime.date.today().isoformat()
    lines = [
        f"Measured {date} ({args.repeats} runs each after a warm-up; Python "
        f"{sys.version.split()[0]}; a 2-core machine shared with other work, load average up "
        f"to {load:.1f} during the run, so wall times are inflated: the CPU time, user + "
        "system of the process, is the steadier figure):",
        "",
        "| command | wall, median | wall, slowest | CPU, median |",
        "|---|---:|---:|---:|",
        *(f"| {label} | {m:.2f} s | {w:.2f} s | {c:.2f} s |" for label, m, w, c in rows),
    ]
    text = "\n".join(lines)
    print("\n" + text)
    print(json.dumps({"date": date, "rows": rows}), file=sys.stderr)
    if args.write:
        intro = (
            "```sh\npython bench/startup.py --write\n```\n\n"
            "Each command as a fresh process, warm file-system cache. The target of issue 28 "
            "is 0.3 s for `--help` and `methods`; tests/test_startup.py guards what they "
            "import.\n\n"
        )
        write_section(README, BEGIN, END, text, HEADING + intro)
    return 0


if __name__ == "__main__":
    sys.exit(main())
