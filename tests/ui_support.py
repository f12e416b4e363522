"""Artefacts for the UI tests, made offline the way a user makes them: the demo team
recorded, replayed and debugged through the CLI (scripted team model on a loopback fake
upstream, scripted debugger), `attribute --json` results from ECHO and CHIEF on their
fixture traces, a CHIEF graph, an evaluation of Who&When fixture cases, a long trace, and
a trace full of planted HTML and script."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.cli.demo import load_demo_trace
from faultfinder.demo_team import mock_model
from faultfinder.testing import FakeOpenAIServer
from faultfinder.traces.io import write_trace
from faultfinder.traces.schema import GoldLabel, Step, ToolCall, ToolResult, Trace

FIXTURES = Path(__file__).parent / "fixtures"
DEBUGGER = ["--model", "function:faultfinder.demo_team.mock_debugger:respond", "--cache", "none"]
PAYLOADS = (
    "<script>window.__pwned = 1; alert('xss')</script>",
    '<img src=x onerror="window.__pwned=2; alert(2)">',
    '<a href="javascript:window.__pwned=3">click me</a>',
    "</pre></details><script>window.__pwned=4</script>",
    '<svg onload="window.__pwned=5"></svg>',
)
XSS_ID = "xss-<script>window.__pwned=6</script>"


@dataclass
class Artifacts:
    root: Path
    run: Path
    dover: Path
    eval_file: Path
    graph: Path
    long_trace: Path
    xss_dir: Path
    """The planted trace and an attribution of it (not under ``root``)."""


def _ok(args: list[str], code: int = 0) -> str:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == code, result.output
    return result.output


def record_demo(root: Path) -> tuple[Path, Path]:
    """Record the demo team on 'avalon-2020', replay it with a fix, debug it with DoVer."""
    solution = root.parent / "work" / "solution.txt"
    solution.write_text(
        "Look up the population of Avalon in 2020: 48210.\nMultiply by 3: 144630.\n"
    )
    team = [sys.executable, "-m", "faultfinder.demo_team", "--quiet", "--task-id", "avalon-2020"]
    runs, dover = root / "runs", root / "results" / "dover.jsonl"
    with FakeOpenAIServer(reply=mock_model.reply) as upstream:
        _ok(
            [
                "record", "--upstream", upstream.base_url, "--out", str(runs), "--run-id",
                "avalon", "--ground-truth", "144630", "--reference-steps", str(solution),
                "--quiet", "--", *team,
            ]
        )  # fmt: skip
        run = runs / "avalon"
        fix = "NEXT: Researcher | Look up the population of Avalon in 2020"
        live = ["--upstream", upstream.base_url]
        _ok(
            ["replay", str(run), "--at", "1", "--edit", fix, "--branch-id", "fix", "--quiet",
             *live, "--", *team]
        )  # fmt: skip
        _ok(
            [
                "debug", str(run), "--repeats", "1", "--segment", "pattern:^PLAN",
                "--out", str(dover), *live, *DEBUGGER, "--", *team,
            ]
        )  # fmt: skip
    attributed = _ok(
        ["attribute", str(run / "trace.json"), "--json", "--method", "all-at-once", *DEBUGGER]
    )
    (root / "results" / "avalon-all-at-once.json").write_text(attributed)
    return run, dover


def long_trace(n: int = 1200) -> Trace:
    agents = ["Orchestrator", "WebSurfer", "Coder", "Executor"]
    steps = [
        Step(
            index=i,
            agent=agents[i % len(agents)],
            content=f"Step {i}: " + "reasoning about the task " * 12,
            tool_calls=[ToolCall(id=f"c{i}", name="search", arguments='{"q": "x"}')]
            if i % 7 == 0
            else [],
            tool_results=[ToolResult(call_id=f"c{i}", content="result " * 20)]
            if i % 7 == 0
            else [],
            input_messages=[{"role": "user", "content": f"input of step {i}"}],
        )
        for i in range(n)
    ]
    return Trace(
        id=f"long-{n}",
        task="A long synthetic run",
        steps=steps,
        label=GoldLabel(agent=agents[(n // 2) % 4], step=n // 2, reason="synthetic"),
    )


def xss_trace() -> Trace:
    p = PAYLOADS
    steps = [
        Step(
            index=0,
            agent="Planner",
            content=p[0],
            input_messages=[{"role": "user", "content": p[1]}],
        ),
        Step(
            index=1,
            agent='Coder<img src=x onerror="window.__pwned=7">',
            content=p[1] + "\n" + p[2],
            tool_calls=[ToolCall(name="run<script>window.__pwned=8</script>", arguments=p[3])],
            tool_results=[ToolResult(content=p[4], name="run")],
        ),
        Step(index=2, agent="Planner", content=p[3] + p[4]),
    ]
    return Trace(
        id=XSS_ID,
        task=p[0] + " task",
        ground_truth=p[2],
        final_answer=p[1],
        steps=steps,
        label=GoldLabel(agent="Planner", step=2, reason=p[0]),
        metadata={"outcome": "failure<script>window.__pwned=9</script>"},
    )


def build(root: Path) -> Artifacts:
    """Everything the UI tests browse, under ``root/served`` (inputs go to ``root/work``)."""
    work, root = root / "work", root / "served"
    work.mkdir(parents=True)
    traces, results = root / "traces", root / "results"
    traces.mkdir(parents=True)
    results.mkdir(parents=True)
    write_trace(load_demo_trace(), traces / "demo.json")
    # Who&When cases as the benchmark ships them (importer format).
    whowhen = traces / "whoandwhen"
    shutil.copytree(FIXTURES / "importers" / "whoandwhen", whowhen)
    # CHIEF: its loop trace, a graph with oracles and backtracking, a full attribution.
    chief = FIXTURES / "chief"
    shutil.copy(chief / "loop_trace.json", traces / "loop_trace.json")
    replies = json.loads((chief / "replies_loop.json").read_text("utf-8"))

    def scripted(name: str, *stages: str) -> str:
        path = work / f"{name}.json"
        items = [r if isinstance(r := replies[s], str) else json.dumps(r) for s in stages]
        path.write_text(json.dumps(items), encoding="utf-8")
        return f"scripted:{path}"

    graph_stages = ("decompose", "otar", "edges", "step-edges")
    graph = results / "loop-graph.json"
    _ok(
        [
            "graph", str(chief / "loop_trace.json"), "--out", str(graph), "--oracles", "--model",
            scripted("graph-replies", *graph_stages, "oracles", "backtrack"), "--cache", "none",
            "--stage-cache", "none",
        ]
    )  # fmt: skip
    chief_model = scripted("chief-replies", *graph_stages, "oracles", "backtrack", "attribution")
    chief_out = _ok(
        [
            "attribute", str(chief / "loop_trace.json"), "--method", "chief", "--json",
            "--model", chief_model, "--step-set", "0.8",
            "--cache", "none", "--set", "stage_cache=none",
        ]
    )  # fmt: skip
    (results / "loop-chief.json").write_text(chief_out)
    # ECHO on its rooms fixture.
    echo = FIXTURES / "echo"
    shutil.copy(echo / "rooms_outputs_only.json", traces / "rooms.json")
    echo_out = _ok(
        [
            "attribute", str(echo / "rooms_outputs_only.json"), "--method", "echo", "--json",
            "--model", f"scripted:{echo / 'decoupled_replies.json'}", "--cache", "none",
        ]
    )  # fmt: skip
    (results / "rooms-echo.json").write_text(echo_out)
    # An evaluation of the Who&When cases: the chance floor and a (scripted) judge, 2 runs.
    eval_file = results / "eval.jsonl"
    _ok(
        [
            "eval", str(whowhen), "--method", "random,all-at-once", "--runs", "2", "--out",
            str(eval_file), "--no-progress", *DEBUGGER,
        ]
    )  # fmt: skip
    # Every other method on one Who&When case, so its page shows all methods side by side.
    # The scripted debugger only answers all-at-once's prompt: the others come out
    # 'unparsed', which is what they would record with such a model, and is shown as such.
    _ok(
        [
            "eval", str(whowhen), "--subset", "Hand-Crafted", "--method",
            "step-by-step,binary-search,hybrid,echo,chief,agentic", "--out",
            str(results / "all-methods.jsonl"), "--no-progress", *DEBUGGER,
        ],
        code=3,  # exit code 3: cases stayed unparsed (docs/exit-codes.md)
    )  # fmt: skip
    long = traces / "long.json"
    write_trace(long_trace(), long)
    # The planted trace lives apart, so the other pages (and their screenshots) stay clean.
    xss_dir = root.parent / "xss"
    xss = xss_dir / "xss.json"
    write_trace(xss_trace(), xss)
    planted = {
        "trace_id": XSS_ID,
        "method": "all-at-once<script>window.__pwned=10</script>",
        "config": {},
        "model": '<img src=x onerror="window.__pwned=11">',
        "prompt_version": "x",
        "with_ground_truth": False,
        "observability": "full",
        "agent": "Planner",
        "step": 1,
        "status": "ok",
        "reason": PAYLOADS[0] + PAYLOADS[2],
    }
    (xss_dir / "xss-attribution.json").write_text(json.dumps(planted))
    run, dover = record_demo(root)
    return Artifacts(root, run, dover, eval_file, graph, long, xss_dir)


_BUILT: dict[str, Artifacts] = {}


def shared(factory: object) -> Artifacts:
    """One set of artefacts per test session (both UI test modules use it)."""
    if "a" not in _BUILT:
        _BUILT["a"] = build(factory.mktemp("ui-artifacts"))  # type: ignore[attr-defined]
    return _BUILT["a"]


TEAM = [sys.executable, "-m", "faultfinder.demo_team", "--quiet", "--task-id", "avalon-2020"]
"""The offline demo team on the task its recording fails (a dropped year)."""
FIX = "NEXT: Researcher | Look up the population of Avalon in 2020"
"""The edit of step 1 that makes it succeed."""


def record_team(runs: Path, upstream: str) -> Path:
    """Record the demo team on 'avalon-2020' into ``runs/avalon`` (it answers 154131, not
    144630: the Orchestrator dropped the year at step 1)."""
    _ok(
        [
            "record", "--upstream", upstream, "--out", str(runs), "--run-id", "avalon",
            "--ground-truth", "144630", "--quiet", "--", *TEAM,
        ]
    )  # fmt: skip
    return runs / "avalon"


def plant_hostile_recording(runs: Path, upstream: str, marker: Path) -> Path:
    """A recording as someone else might hand it over: script in its task and steps, a
    stored command that would create ``marker``, and a stored upstream (``upstream``, a
    canary server that must never be contacted)."""
    with FakeOpenAIServer(reply=mock_model.reply) as real:
        run = record_team(runs, real.base_url)
    meta = json.loads((run / "meta.json").read_text("utf-8"))
    meta["command"] = [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('ran')"]
    meta["upstream"] = upstream
    meta["task"] = PAYLOADS[0] + " " + (meta.get("task") or "")
    (run / "meta.json").write_text(json.dumps(meta), "utf-8")
    trace = json.loads((run / "trace.json").read_text("utf-8"))
    trace["task"] = PAYLOADS[0] + " " + trace["task"]
    last = trace["steps"][-1]
    last["content"] = PAYLOADS[1] + PAYLOADS[3] + last["content"]
    trace["steps"][0]["agent"] = 'Orchestrator<img src=x onerror="window.__pwned=12">'
    (run / "trace.json").write_text(json.dumps(trace), "utf-8")
    return run


def debug_team(run: Path, upstream: str) -> Path:
    """DoVer on a recording of the team (scripted debugger): its rows go where `debug`
    puts them by default, ``run/dover/``."""
    _ok(
        ["debug", str(run), "--repeats", "1", "--segment", "pattern:^PLAN", "--upstream",
         upstream, *DEBUGGER, "--", *TEAM]
    )  # fmt: skip
    (rows,) = (run / "dover").glob("*.jsonl")
    return rows


def intervention_on_a_tool_call(run: Path, at: int, text: str) -> ToolCall:
    """Write a DoVer row into ``run/dover/`` whose intervention replaces step ``at``'s
    text and keeps its tool call with new arguments (as `debug` keeps a handoff's calls);
    the call it serves is returned."""
    from faultfinder.dover.models import DoverRow, Hypothesis, Intervention, Trial
    from faultfinder.traces.loader import load_traces

    trace = load_traces(run / "trace.json", format="faultfinder")[0]
    step = trace.steps[at]
    assert step.tool_calls and step.tool_calls[0].id
    served = step.tool_calls[0].model_copy(update={"arguments": '{"query": "Avalon 2020"}'})
    row = DoverRow(
        run_dir=str(run),
        trace_id=trace.id,
        task=trace.task,
        trial=Trial(index=0, start=0, end=len(trace.steps) - 1),
        hypothesis=Hypothesis(trial=0, agent=step.agent, step=at, method="echo"),
        intervention=Intervention(
            category="modified_instruction",
            replacement=text,
            step=at,
            agent=step.agent,
            original=step.content,
            original_tool_calls=step.tool_calls,
            tool_calls=[served],
        ),
    )
    (run / "dover").mkdir(exist_ok=True)
    (run / "dover" / "handoff.jsonl").write_text(row.model_dump_json() + "\n", "utf-8")
    return served
