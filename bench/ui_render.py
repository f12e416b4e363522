"""(g) UI: server-side render time of the trace page for long traces, and of the runs
index and catalog over all of Who&When.

    python bench/ui_render.py                 # --steps 1000,2000,5000 --repeats 7

For each size a synthetic trace is made (4 agents, ~330-character outputs, a tool call
and result every 7th step, an input message per step, a gold label) with three methods'
answers on it, and GET /trace/<key> is timed through the whole app (Starlette routing,
page context, Jinja rendering, response) with Starlette's in-process test client: the
median and the slowest of --repeats requests after one warm-up. With --data (default the
shared Who&When copy) the catalog over its 184 files is built and the index is timed too.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from starlette.testclient import TestClient

from faultfinder.judging.method import Attribution
from faultfinder.traces.io import write_trace
from faultfinder.traces.schema import GoldLabel, Step, ToolCall, ToolResult, Trace
from faultfinder.ui.app import create_app
from faultfinder.ui.catalog import AttributionEntry, build_catalog

AGENTS = ("Orchestrator", "WebSurfer", "Coder", "ComputerTerminal")


def synthetic(n: int) -> Trace:
    steps = [
        Step(
            index=i,
            agent=AGENTS[i % 4],
            content=f"Step {i}: " + "the agent reasons about the task & <data> " * 8,
            tool_calls=[ToolCall(id=f"c{i}", name="search", arguments='{"q": "x"}')]
            if i % 7 == 0
            else [],
            tool_results=[ToolResult(call_id=f"c{i}", content="result " * 30)]
            if i % 7 == 0
            else [],
            input_messages=[{"role": "user", "content": f"input {i}"}],
        )
        for i in range(n)
    ]
    return Trace(
        id=f"bench-{n}",
        task="synthetic",
        steps=steps,
        label=GoldLabel(agent=AGENTS[(n // 2) % 4], step=n // 2),
    )


def answer(trace: Trace, method: str, step: int) -> Attribution:
    return Attribution(
        agent=trace.steps[step].agent,
        step=step,
        reason="because",
        trace_id=trace.id,
        method=method,
        config={},
        model="bench",
        prompt_version="x",
        with_ground_truth=False,
        observability="full",
    )


def timed(client: TestClient, url: str, repeats: int) -> tuple[float, float, int]:
    client.get(url)
    times: list[float] = []
    size = 0
    for _ in range(repeats):
        started = time.perf_counter()
        response = client.get(url)
        times.append(time.perf_counter() - started)
        assert response.status_code == 200
        size = len(response.content)
    return statistics.median(times), max(times), size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", default="1000,2000,5000")
    parser.add_argument("--repeats", type=int, default=7)
    # ../shared/data/who-and-when, seen from the repository root
    default_data = Path(__file__).resolve().parents[2] / "shared" / "data" / "who-and-when"
    parser.add_argument("--data", default=str(default_data))
    args = parser.parse_args()
    print(f"{'steps':>6} {'median s':>9} {'max s':>7} {'page KiB':>9}")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.steps.split(",")):
            trace = synthetic(n)
            path = Path(tmp) / f"t{n}.json"
            write_trace(trace, path)
            catalog = build_catalog([path])
            for i, method in enumerate(("all-at-once", "echo", "chief")):
                catalog.attributions.append(
                    AttributionEntry(answer(trace, method, (n // 3) * i), "attribution", path)
                )
            client = TestClient(create_app(catalog), base_url="http://127.0.0.1")
            key = next(iter(catalog.traces))
            median, slowest, size = timed(client, f"/trace/{key}", args.repeats)
            worst = max(worst, median) if n <= 1000 else worst
            print(f"{n:>6} {median:>9.3f} {slowest:>7.3f} {size / 1024:>9.0f}")
    data = Path(args.data)
    if data.is_dir():
        started = time.perf_counter()
        catalog = build_catalog([data])
        built = time.perf_counter() - started
        client = TestClient(create_app(catalog), base_url="http://127.0.0.1")
        median, slowest, size = timed(client, "/", args.repeats)
        longest = max(catalog.traces.values(), key=lambda t: len(t.trace.steps))
        t_median, _, _ = timed(client, f"/trace/{longest.key}", args.repeats)
        print(
            f"Who&When: {len(catalog.traces)} traces, catalog built in {built:.2f} s; "
            f"index median {median:.3f} s (max {slowest:.3f}, {size / 1024:.0f} KiB); "
            f"longest trace ({len(longest.trace.steps)} steps) median {t_median:.3f} s"
        )
    print("1,000-step trace page under 1 s:", "yes" if worst < 1.0 else "NO")
    return 0 if worst < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
