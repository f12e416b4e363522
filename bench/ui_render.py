"""(g) UI: server-side render time of the trace page for long traces, and of the runs
index and catalog over all of Who&When.

    python bench/ui_render.py                 # --steps 1000,2000,5000 --repeats 7

For each size a synthetic trace is made (4 agents, ~330-character outputs, a tool call
and result every 7th step, an input message per step, a gold label) with three methods'
answers on it, and GET /trace/<key> is timed through the whole app (Starlette routing,
page context, Jinja rendering, response) with Starlette's in-process test client: the
median and the slowest of --repeats requests after one warm-up. With --data (default the
shared Who&When copy) the catalog over its 184 files is built and the index is timed too.

Each trace page is also timed as the page of a recording served with `--allow-replay`
(a "change this step" button per step and the edit panel). With --replays N the offline
demo team is recorded against the loopback fake upstream and its decisive step replayed N
times with an edit, directly through `replay_run` (what `faultfinder replay` calls) and
through the UI (POST /replay-jobs, then polling the job every 50 ms until done): the
median wall time of each, so the UI's own cost per replay shows.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _shared import WHO_AND_WHEN_DATA
from starlette.testclient import TestClient

from faultfinder.dover.edit_repeats import Program
from faultfinder.judging.method import Attribution
from faultfinder.replay.edits import Edit
from faultfinder.replay.replayer import ReplayOptions
from faultfinder.replay.session import SessionOptions, replay_run, run_sync
from faultfinder.traces.io import write_trace
from faultfinder.traces.schema import GoldLabel, Step, ToolCall, ToolResult, Trace
from faultfinder.ui.app import create_app
from faultfinder.ui.catalog import AttributionEntry, Catalog
from faultfinder.ui.replay_jobs import ReplayRunner
from faultfinder.ui.replay_requests import ReplaySettings
from faultfinder.ui.scan import build_catalog

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


def editable(catalog: Catalog, run_dir: Path) -> TestClient:
    """The app with replays enabled, the catalog's one trace served as a recording."""
    entry = next(iter(catalog.traces.values()))
    entry.kind, entry.run_dir = "recording", run_dir
    replays = ReplayRunner(catalog, ReplaySettings(Program(command=("true",))))
    return TestClient(create_app(catalog, replays=replays), base_url="http://127.0.0.1")


TEAM = [sys.executable, "-m", "faultfinder.demo_team", "--quiet", "--task-id", "avalon-2020"]
FIX = "NEXT: Researcher | Look up the population of Avalon in 2020"


def replay_overhead(n: int) -> None:
    """Median wall time of a replay of the demo team with its fix: direct and via the UI."""
    from click.testing import CliRunner

    from faultfinder.cli import main as cli
    from faultfinder.demo_team import mock_model
    from faultfinder.testing import FakeOpenAIServer

    with tempfile.TemporaryDirectory() as tmp, FakeOpenAIServer(reply=mock_model.reply) as up:
        runs = Path(tmp) / "runs"
        args = ["record", "--upstream", up.base_url, "--out", str(runs), "--run-id", "avalon"]
        done = CliRunner().invoke(cli, [*args, "--ground-truth", "144630", "--quiet", "--", *TEAM])
        assert done.exit_code == 0, done.output
        run = runs / "avalon"
        catalog = build_catalog([runs])
        replays = ReplayRunner(
            catalog, ReplaySettings(Program(command=tuple(TEAM), upstream=up.base_url))
        )
        key = next(k for k, t in catalog.traces.items() if t.kind == "recording")
        direct: list[float] = []
        via_ui: list[float] = []
        with TestClient(create_app(catalog, replays=replays), base_url="http://127.0.0.1") as c:
            page = c.get("/").text
            token = page.split('name="ff-token" content="', 1)[1].split('"', 1)[0]
            body = {"trace": key, "at": 1, "edit": {"kind": "message", "text": FIX}}
            for i in range(n + 1):  # alternating, the first pair a warm-up
                started = time.perf_counter()
                outcome = run_sync(
                    replay_run(
                        run,
                        TEAM,
                        ReplayOptions(at=1, edit=Edit(output=FIX)),
                        upstream=up.base_url,
                        branch_id=f"direct-{i}",
                        options=SessionOptions(echo=False),
                    )
                )
                assert outcome.report.edit_applied
                took = time.perf_counter() - started
                direct += [took] if i else []
                started = time.perf_counter()
                answer = c.post("/replay-jobs", json=body, headers={"X-Faultfinder-Token": token})
                url = answer.json()["url"] + "/status"
                while c.get(url).json()["state"] in ("queued", "running"):
                    time.sleep(0.05)
                took = time.perf_counter() - started
                via_ui += [took] if i else []
        print(
            f"replay of the demo team's fix ({n} each): direct median "
            f"{statistics.median(direct):.2f} s, through the UI median "
            f"{statistics.median(via_ui):.2f} s (job start, polling every 50 ms)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", default="1000,2000,5000")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--data", default=str(WHO_AND_WHEN_DATA))
    parser.add_argument("--replays", type=int, default=5, help="0: skip the replay timing")
    args = parser.parse_args()
    print(
        f"{'steps':>6} {'median s':>9} {'max s':>7} {'page KiB':>9} "
        f"{'editable median s':>18} {'editable KiB':>13}"
    )
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
            e_median, _, e_size = timed(editable(catalog, Path(tmp)), f"/trace/{key}", args.repeats)
            print(
                f"{n:>6} {median:>9.3f} {slowest:>7.3f} {size / 1024:>9.0f} "
                f"{e_median:>18.3f} {e_size / 1024:>13.0f}"
            )
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
    if args.replays > 0:
        replay_overhead(args.replays)
    print("1,000-step trace page under 1 s:", "yes" if worst < 1.0 else "NO")
    return 0 if worst < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
