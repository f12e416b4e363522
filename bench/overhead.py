"""Harness overhead: `all-at-once` over all Who&When traces against a fake endpoint.

The fake OpenAI-compatible server answers every request after a fixed latency with a
valid all-at-once answer for that trace (an agent and a step read from the prompt's
log), so every case costs exactly one call. With C cases in flight the ideal wall time
is ceil(N / C) × latency; the ratio measured / ideal is the harness's overhead (target
≤ 1.15). Peak RSS of the whole process is reported too (target < 500 MB).

    /work/venv/bin/python bench/overhead.py [--data PATH] [--concurrency 32] [--latency 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import resource
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from faultfinder.eval.datasets import load_dataset
from faultfinder.eval.runner import EvalOptions, plan_methods, run_eval
from faultfinder.llm import LLM, make_backend
from faultfinder.testing.fake_openai import FakeOpenAIServer

DEFAULT_DATA = Path("/work/shared/data/who-and-when")
STEP_LINE = re.compile(r"^Step (\d+) - ([^:\n]+):", re.MULTILINE)


def all_at_once_answer(body: dict[str, Any]) -> str:
    """A well-formed answer naming the speaker of the log's last step."""
    prompt = "\n".join(
        m["content"] for m in body.get("messages", []) if isinstance(m.get("content"), str)
    )
    expected = 0
    agent, step = None, None
    for match in STEP_LINE.finditer(prompt):
        # Step headers are numbered 0, 1, 2...; anything else is text inside a step.
        if int(match.group(1)) == expected:
            step, agent = expected, match.group(2).strip()
            expected += 1
    if agent is None:
        return "I cannot tell."
    return f"Agent Name: {agent}\nStep Number: {step}\nReason for Mistake: fake judge."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.5)
    args = parser.parse_args()

    loading = time.perf_counter()
    traces = load_dataset(args.data)
    loading = time.perf_counter() - loading
    plans = plan_methods(["all-at-once"])
    with FakeOpenAIServer(all_at_once_answer, latency=args.latency) as server:
        backend = make_backend("openai:fake", base_url=server.base_url, api_key="not-needed")
        llm = LLM(backend, cache=None, concurrency=args.concurrency)
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            outcome = asyncio.run(
                run_eval(
                    traces,
                    plans,
                    llm,
                    Path(tmp) / "overhead.jsonl",
                    EvalOptions(concurrency=args.concurrency, progress=False),
                )
            )
            wall = time.perf_counter() - started
        requests = len(server.chat_requests)
        peak_in_flight = server.max_in_flight
    n = len(traces)
    ideal = math.ceil(n / args.concurrency) * args.latency
    ratio = wall / ideal
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    statuses = Counter(row.status for row in outcome.rows)
    print(f"traces: {n} (loaded in {loading:.2f} s); cases run: {outcome.ran}")
    print(f"statuses: {dict(statuses)}; requests to the fake server: {requests}")
    print(f"peak requests in flight: {peak_in_flight} (concurrency {args.concurrency})")
    print(f"wall time:  {wall:.2f} s")
    print(f"ideal:      {ideal:.2f} s  (ceil({n}/{args.concurrency}) × {args.latency} s)")
    print(f"ratio:      {ratio:.3f}  (target ≤ 1.15: {'met' if ratio <= 1.15 else 'MISSED'})")
    print(f"peak RSS:   {peak_rss_mb:.0f} MB  (target < 500 MB: "
          f"{'met' if peak_rss_mb < 500 else 'MISSED'})")
    ok = ratio <= 1.15 and peak_rss_mb < 500 and statuses.get("ok", 0) == n
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
