"""`faultfinder demo`: the main job end to end, offline, with nothing to install but the
package.

1. Attribute a small bundled failed trace (default: the offline ``shortlist``, no model)
   and put the answer beside its gold label and beside the floors.
2. Record the demo team failing on its scripted model, replay it with the decisive step
   fixed, and show the outcome flip (``cli/demo_replay.py``).
"""

from __future__ import annotations

import asyncio
import json
from importlib import resources
from pathlib import Path
from typing import Any

import click

from faultfinder.cli.attribute import format_attribution, gold_lines
from faultfinder.cli.common import (
    build_llm,
    exit_for,
    method_options,
    method_overrides,
    model_options,
    pass_errors,
    pop_sampling,
)
from faultfinder.cli.progress import with_progress
from faultfinder.eval.floors import FLOORS
from faultfinder.exitcodes import CaseCounts
from faultfinder.judging.method import Attribution, run_method
from faultfinder.llm.client import LLM
from faultfinder.llm.doubles import NoModelBackend
from faultfinder.registry import create_method
from faultfinder.traces.io import trace_from_dict
from faultfinder.traces.schema import Trace

DEMO_TRACE = "data/demo_trace.json"
SAVED_TRACE = Path(".faultfinder") / "demo-trace.json"
"""Where `demo` saves the bundled trace by default, for the commands that follow it."""
DEMO_RUN = Path(".faultfinder") / "demo-run"
"""Where `demo` records the demo team (replaced by each demo)."""


def demo_trace_text() -> str:
    """The bundled demo trace as stored (a canonical faultfinder trace file)."""
    return resources.files("faultfinder").joinpath(DEMO_TRACE).read_text(encoding="utf-8")


def load_demo_trace() -> Trace:
    """The hand-written demo trace shipped inside the package."""
    return trace_from_dict(json.loads(demo_trace_text()), f"faultfinder/{DEMO_TRACE}")


def save_demo_trace(path: Path) -> Path:
    """Write the demo trace to ``path`` (creating its folder) so other commands can read it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(demo_trace_text(), encoding="utf-8")
    return path


def describe_trace(trace: Trace) -> str:
    """Task, agents and a one-line view of each step."""
    lines = [
        f"trace:      {trace.id}  ({len(trace.steps)} steps, {len(trace.agents)} agents)",
        f"task:       {trace.task}",
        f"reference:  {trace.ground_truth or '-'}    system's answer: {trace.final_answer or '-'}",
        "agents:",
    ]
    for agent in trace.agents:
        lines.append(f"  {agent.name:<13} {agent.description or ''}")
    lines.append("steps:")
    for step in trace.steps:
        text = " ".join(step.content.split())
        calls = "".join(f" [calls {c.name}]" for c in step.tool_calls)
        shown = text if len(text) <= 80 else text[:77] + "..."
        lines.append(f"  {step.index:>2} {step.agent:<13} {shown}{calls}")
    return "\n".join(lines)


def compare_with_gold(trace: Trace, result: Attribution) -> str:
    """The gold label and whether the attribution matches it."""
    return "\n".join(gold_lines(trace, result)) if trace.label else "gold label: (none)"


def floor_table(trace: Trace, result: Attribution, floors: list[Attribution]) -> str:
    """The answer and each floor: agent, step, and whether each matches the gold label."""
    gold = trace.label

    def mark(ok: bool) -> str:
        return "yes" if ok else "no"

    rows = [("", "agent", "step", "agent right", "step right")]
    for shown in (result, *floors):
        step = "-" if shown.step is None else str(shown.step)
        right = ("-", "-")
        if gold is not None:
            right = (mark(shown.agent == gold.agent), mark(shown.step in gold.acceptable_steps))
        rows.append((shown.method, shown.agent or "-", step, *right))
    if gold is not None:
        rows.append(("(gold label)", gold.agent or "-", str(gold.step), "", ""))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return "\n".join(
        "  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


@click.command()
@click.option(
    "--method",
    "method_spec",
    default="shortlist",
    show_default=True,
    help="Method name or name:preset (see `faultfinder methods`); the default needs no model.",
)
@click.option(
    "--save-trace",
    "save_trace",
    default=str(SAVED_TRACE),
    show_default=True,
    help="Also save the demo trace here, for `attribute`, `eval`, `graph`; 'none' skips it.",
)
@click.option(
    "--replay/--no-replay",
    "replay",
    default=True,
    show_default=True,
    help="Also record the demo team failing on its scripted model and replay it with the "
    "decisive step fixed (offline: a loopback endpoint and a subprocess).",
)
@click.option(
    "--run-dir",
    "run_dir",
    default=str(DEMO_RUN),
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where the demo team's recording goes (an earlier demo recording there is replaced).",
)
@method_options
@model_options
@pass_errors
def demo(
    method_spec: str,
    save_trace: str,
    replay: bool,
    run_dir: str,
    with_ground_truth: bool,
    observability: str | None,
    settings: tuple[str, ...],
    **llm_options: Any,
) -> None:
    """Attribute a bundled failed trace beside the floors, then replay a failing team with
    the fix and watch it flip — offline, no key, no model to install."""
    trace = load_demo_trace()
    click.echo("== 1. Which agent, at which step, caused this failure? ==\n")
    click.echo(describe_trace(trace))
    click.echo("")
    overrides = method_overrides(with_ground_truth, observability, settings)
    overrides.update(pop_sampling(llm_options))
    method = create_method(method_spec, **overrides)
    progress = llm_options.pop("progress")
    llm = with_progress(
        build_llm(
            **llm_options,
            needs_model=method.needs_model,
            needed_by=f"method '{method_spec}'",
        ),
        progress,
    )
    result = asyncio.run(run_method(method, trace, llm, label=method_spec))
    click.echo(format_attribution(result, len(trace.steps)))
    click.echo("")
    click.echo(compare_with_gold(trace, result))
    floors = asyncio.run(run_offline(trace, FLOORS))
    click.echo("\nbeside the floors (no model; a method has to beat these):")
    click.echo(floor_table(trace, result, floors))
    if method.needs_model and str(llm_options.get("model", "")).startswith("local"):
        click.echo(
            "\nNote: the embedded SmolLM2-135M model only shows that the LLM pipeline runs end "
            "to end; its attributions are not meaningful. Use --model openai:MODEL for a real "
            "judge."
        )
    statuses: list[str] = [result.status]
    if replay:
        statuses.append(show_replay(Path(run_dir)))
    click.echo("\nnext:")
    if save_trace.lower() != "none":
        saved = save_demo_trace(Path(save_trace))
        click.echo(f"  faultfinder attribute {saved} --method shortlist      # the trace is saved")
        click.echo(f"  faultfinder attribute {saved} --method all-at-once --model openai:MODEL")
    click.echo("  faultfinder methods                 # every method, its presets and options")
    click.echo("  README: record, replay and debug your own team offline")
    exit_for(CaseCounts.of(statuses))


async def run_offline(trace: Trace, specs: tuple[str, ...]) -> list[Attribution]:
    """The answers of methods that call no model (floors, the shortlist) on ``trace``."""
    llm = LLM(NoModelBackend())
    return [await run_method(create_method(spec), trace, llm, label=spec) for spec in specs]


def show_replay(run_dir: Path) -> str:
    """Record the demo team failing, replay it fixed, print what happened; the case status
    ('ok' when the failure flipped, 'error' otherwise)."""
    from faultfinder.cli.demo_replay import changed_lines, describe_origins, record_and_fix

    click.echo("\n== 2. Does fixing that step help? Replay it. ==\n")
    flip = asyncio.run(record_and_fix(run_dir))
    recorded = flip.recorded
    click.echo(
        "The demo team (Orchestrator, Researcher, Calculator: `python -m faultfinder.demo_team`)\n"
        "ran on its scripted stand-in model (a rule-following test double, not a model),\n"
        "recorded through the proxy, all on loopback."
    )
    click.echo(f"task:       {flip.task}")
    click.echo(f"recorded:   {flip.run_dir}  ({len(recorded.steps)} steps)")
    click.echo(
        f"answer:     {recorded.final_answer or '-'}  (reference {recorded.ground_truth}): "
        f"{flip.before}"
    )
    [ranked] = asyncio.run(run_offline(recorded, ("shortlist",)))
    same = " (the step fixed below)" if ranked.step == flip.step else ""
    holds = ""
    if ranked.step_set is not None and ranked.step_set_level is not None:
        claimed = ranked.step_set_calibrated is not False
        level = f"{ranked.step_set_level:.0%} " if claimed else ""
        size = f"{len(ranked.step_set)} of {len(recorded.steps)} steps"
        if not claimed:
            size += ", no coverage claimed: unlike the calibration data"
        has = "holds" if flip.step in ranked.step_set else "does not hold"
        holds = f"; its {level}step set ({size}) {has} step {flip.step}"
    click.echo(
        f"shortlist:  {ranked.agent or '-'} at step {'-' if ranked.step is None else ranked.step}"
        f"{same}{holds}"
    )
    click.echo(f"fix:        step {flip.step} ({flip.agent}), one line of it:")
    for was, now in changed_lines(flip.original, flip.fixed):
        click.echo(f"  was:      {was}")
        click.echo(f"  now:      {now}")
    click.echo(
        f"replayed:   {describe_origins(flip.origins)}; answer {flip.replayed.final_answer or '-'}"
    )
    click.echo(f"outcome:    {flip.before} -> {flip.after}")
    if flip.flipped:
        click.echo(
            f"Fixing step {flip.step} alone turns the failure into a success: it was decisive.\n"
            "(The fix is the demo's scripted correction; `faultfinder debug` proposes and tests\n"
            "fixes with a model: DoVer.)"
        )
        return "ok"
    click.echo(
        f"error: the replay did not flip the outcome ({flip.before} -> {flip.after}); "
        f"see {flip.run_dir}",
        err=True,
    )
    return "error"
