"""How long the offline shortlist takes on long traces: its answer and its 90% step set.

    python bench/long_traces.py                 # add --write for bench/README.md

A run of an agent can hold thousands of model calls. Each length below is one seeded
synthetic trace (seven agents, 120 words a step drawn from a 20,000-word vocabulary with
Zipf-like frequencies, a failure signal every 97th step), ranked once by the shipped
weights through ``run_method`` as ``attribute --method shortlist`` does (the answer, then
its step set; no model call), in this process, after a warm-up on a short trace. Printed:
the wall time of each. The traces are made afresh each run, so nothing is memoised
between lengths.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import random
import subprocess
import sys
import time
from pathlib import Path

from _readme import write_section

from faultfinder.judging.method import run_method
from faultfinder.llm import LLM, ScriptedBackend
from faultfinder.registry import create_method
from faultfinder.traces.schema import Step, Trace

README = Path(__file__).with_name("README.md")
BEGIN, END = "<!-- long-traces:begin -->", "<!-- long-traces:end -->"
HEADING = "\n## The shortlist on long traces — `bench/long_traces.py`\n\n"
LENGTHS = (100, 500, 1000, 2000, 5000)


def synthetic(steps: int, seed: int = 0) -> Trace:
    """A seeded trace of ``steps`` steps (see the module's docstring)."""
    rng = random.Random(seed * 100_003 + steps)
    vocabulary = [f"w{i}" for i in range(20_000)]
    frequency = [1 / (i + 1) for i in range(len(vocabulary))]
    out = []
    for i in range(steps):
        words = " ".join(rng.choices(vocabulary, frequency, k=120))
        signal = " error: the lookup failed" if i % 97 == 96 else ""
        out.append(Step(index=i, agent=f"agent{i % 7}", content=words + signal))
    return Trace(id=f"long-{steps}", task="a long synthetic task", steps=out)


def seconds(trace: Trace) -> float:
    method = create_method("shortlist")
    llm = LLM(ScriptedBackend([]))
    start = time.perf_counter()
    result = asyncio.run(run_method(method, trace, llm, step_set=0.9))
    took = time.perf_counter() - start
    assert result.step is not None and result.step_set is not None
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write the table into README.md")
    args = parser.parse_args()
    seconds(synthetic(20, seed=1))
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    lines = [
        f"Measured {datetime.date.today().isoformat()} at commit {commit or 'unknown'}, one "
        "process, shipped weights. Seconds of wall time for the answer and its 90% step set:",
        "",
        "| steps | seconds |",
        "|---:|---:|",
    ]
    for n in LENGTHS:
        lines.append(f"| {n:,} | {seconds(synthetic(n)):.2f} |")
        print(lines[-1], flush=True)
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section(README, BEGIN, END, text, HEADING)
    return 0


if __name__ == "__main__":
    sys.exit(main())
