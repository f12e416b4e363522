"""Harness overhead: `all-at-once` over all Who&When traces against a fake endpoint.

The fake OpenAI-compatible server answers every request after a fixed latency with a
valid all-at-once answer for that trace (step 0 and its speaker, read from the prompt's
log), so every case costs exactly one call. With C cases in flight the ideal wall time
is ceil(N / C) × latency; the ratio measured / ideal is the overhead of harness, method,
LLM layer and HTTP client together (target ≤ 1.15). Each timed run is a fresh event
loop, as one `faultfinder eval` is; the best of --repeats is the least disturbed by
other load on the machine. For reference the same run is timed once without HTTP (an
in-process backend sleeping the same latency). Peak RSS of the whole process is
reported too (target < 500 MB).

The fake server runs in a process of its own, as a real endpoint runs on another
machine: in the same process its CPU would share the interpreter with the harness
being measured (`--same-process` shows that setting).

    python bench/overhead.py [--data PATH] [--concurrency 32] [--latency 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import math
import multiprocessing
import os
import re
import resource
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _shared import WHO_AND_WHEN_DATA

from faultfinder.eval.cases import plan_methods
from faultfinder.eval.datasets import load_dataset
from faultfinder.eval.runner import EvalOptions, run_eval
from faultfinder.llm import LLM, ChatRequest, FunctionBackend, make_backend
from faultfinder.testing.fake_openai import FakeOpenAIServer
from faultfinder.traces.schema import Trace

DEFAULT_DATA = WHO_AND_WHEN_DATA
FIRST_STEP = re.compile(r"^Step 0 - ([^:\n]+):", re.MULTILINE)


def all_at_once_answer(body: dict[str, Any]) -> str:
    """A well-formed answer naming step 0 and its speaker, read from the prompt's log.

    Only the first step header is searched for, so the fake server spends little CPU.
    """
    for message in reversed(body.get("messages") or []):
        content = message.get("content")
        if isinstance(content, str):
            match = FIRST_STEP.search(content)
            if match:
                agent = match.group(1).strip()
                return f"Agent Name: {agent}\nStep Number: 0\nReason for Mistake: fake judge."
    return "I cannot tell."


async def _sleeping_answer(request: ChatRequest, latency: float) -> str:
    await asyncio.sleep(latency)
    return all_at_once_answer({"messages": request.messages})


def timed_run(traces: list[Trace], llm: LLM, concurrency: int) -> tuple[float, float, Counter[str]]:
    """Wall time and process CPU time of one full eval run (fresh event loop, as the CLI
    does) and its statuses."""
    with tempfile.TemporaryDirectory() as tmp:
        cpu = time.process_time()
        started = time.perf_counter()
        outcome = asyncio.run(
            run_eval(
                traces,
                plan_methods(["all-at-once"]),
                llm,
                Path(tmp) / "overhead.jsonl",
                EvalOptions(concurrency=concurrency, progress=False),
            )
        )
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu
    return wall, cpu, Counter(row.status for row in outcome.rows)


def _serve(latency: float, urls: Any, stop: Any) -> None:
    with FakeOpenAIServer(all_at_once_answer, latency=latency) as server:
        urls.put(server.base_url)
        stop.wait()
        urls.put((len(server.chat_requests), server.max_in_flight))


class _InProcess:
    """The fake server in this process (for comparison)."""

    def __init__(self, latency: float) -> None:
        self._server = FakeOpenAIServer(all_at_once_answer, latency=latency)
        self.base_url = ""
        self.stats: tuple[int, int] = (0, 0)

    def __enter__(self) -> _InProcess:
        self._server.__enter__()
        self.base_url = self._server.base_url
        return self

    def __exit__(self, *exc: object) -> None:
        self.stats = (len(self._server.chat_requests), self._server.max_in_flight)
        self._server.__exit__(None, None, None)


class _ServerProcess:
    """The fake server in a child process; ``.base_url`` while running."""

    def __init__(self, latency: float) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._urls = ctx.Queue()
        self._stop = ctx.Event()
        self._process = ctx.Process(target=_serve, args=(latency, self._urls, self._stop))
        self.base_url = ""
        self.stats: tuple[int, int] = (0, 0)

    def __enter__(self) -> _ServerProcess:
        self._process.start()
        self.base_url = self._urls.get(timeout=60)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.stats = self._urls.get(timeout=60)
        self._process.join(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs (best and median)")
    parser.add_argument(
        "--same-process", action="store_true", help="run the fake server in this process"
    )
    args = parser.parse_args()

    loading = time.perf_counter()
    traces = load_dataset(args.data)
    loading = time.perf_counter() - loading
    n = len(traces)
    ideal = math.ceil(n / args.concurrency) * args.latency
    print(
        f"traces: {n} (loaded in {loading:.2f} s); concurrency {args.concurrency}; "
        f"latency {args.latency} s; load average {os.getloadavg()[0]:.2f}"
    )
    print(f"ideal: {ideal:.2f} s  (ceil({n}/{args.concurrency}) × {args.latency} s)")

    walls: list[float] = []
    all_ok = True
    server_cm = _InProcess(args.latency) if args.same_process else _ServerProcess(args.latency)
    where = "in-process" if args.same_process else "separate-process"
    with server_cm as server:
        backend = make_backend("openai:fake", base_url=server.base_url, api_key="not-needed")
        llm = LLM(backend, cache=None, concurrency=args.concurrency)
        for i in range(args.repeats):
            wall, cpu, statuses = timed_run(traces, llm, args.concurrency)
            walls.append(wall)
            all_ok = all_ok and statuses.get("ok", 0) == n
            print(
                f"  run {i + 1}: {wall:.2f} s  ratio {wall / ideal:.3f}  "
                f"CPU {1000 * cpu / n:.1f} ms/case (this process)  "
                f"statuses {dict(statuses)}"
            )
    requests, in_flight = server.stats
    print(f"fake server ({where}): {requests} requests, peak in flight {in_flight}")

    # The same run without HTTP: the harness, method and LLM layer alone.
    direct = LLM(
        FunctionBackend(functools.partial(_sleeping_answer, latency=args.latency)),
        concurrency=args.concurrency,
    )
    direct_wall, direct_cpu, _ = timed_run(traces, direct, args.concurrency)

    best, median = min(walls), statistics.median(walls)
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ratio = best / ideal
    print(f"wall time:  best {best:.2f} s, median {median:.2f} s")
    print(
        f"ratio:      best {ratio:.3f}, median {median / ideal:.3f}  "
        f"(target ≤ 1.15: {'met' if ratio <= 1.15 else 'MISSED'})"
    )
    print(
        f"no HTTP:    {direct_wall:.2f} s, ratio {direct_wall / ideal:.3f}, CPU "
        f"{1000 * direct_cpu / n:.1f} ms/case  (in-process backend with the same latency: "
        "harness + method + LLM layer only)"
    )
    print(
        f"peak RSS:   {peak_rss_mb:.0f} MB  (target < 500 MB: "
        f"{'met' if peak_rss_mb < 500 else 'MISSED'})"
    )
    return 0 if ratio <= 1.15 and peak_rss_mb < 500 and all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
