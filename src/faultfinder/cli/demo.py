"""`faultfinder demo`: run a method on a small bundled trace and compare with its gold label."""

from __future__ import annotations

import asyncio
import json
from importlib import resources
from pathlib import Path
from typing import Any

import click

from faultfinder.cli.attribute import format_attribution
from faultfinder.cli.common import (
    build_llm,
    exit_for,
    method_options,
    method_overrides,
    model_options,
    pass_errors,
    pop_sampling,
    with_progress,
)
from faultfinder.exitcodes import CaseCounts
from faultfinder.judging.method import Attribution, run_method
from faultfinder.registry import create_method
from faultfinder.traces.io import trace_from_dict
from faultfinder.traces.schema import Trace

DEMO_TRACE = "data/demo_trace.json"
SAVED_TRACE = Path(".faultfinder") / "demo-trace.json"
"""Where `demo` saves the bundled trace by default, for the commands that follow it."""


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
    gold = trace.label
    if gold is None:
        return "gold label: (none)"

    def mark(ok: bool) -> str:
        return "match" if ok else "no match"

    lines = [
        f"gold agent: {gold.agent}    ({mark(result.agent == gold.agent)})",
        f"gold step:  {gold.step}    ({mark(result.step in gold.acceptable_steps)})",
        f"gold why:   {gold.reason or '-'}",
    ]
    return "\n".join(lines)


@click.command()
@click.option(
    "--method",
    "method_spec",
    default="all-at-once",
    show_default=True,
    help="Method name or name:preset (see `faultfinder methods`).",
)
@click.option(
    "--save-trace",
    "save_trace",
    default=str(SAVED_TRACE),
    show_default=True,
    help="Also save the demo trace here, for `attribute`, `eval`, `graph`; 'none' skips it.",
)
@method_options
@model_options
@pass_errors
def demo(
    method_spec: str,
    save_trace: str,
    with_ground_truth: bool,
    observability: str | None,
    settings: tuple[str, ...],
    **llm_options: Any,
) -> None:
    """Attribute the failure of a small bundled trace and show its gold label."""
    trace = load_demo_trace()
    click.echo(describe_trace(trace))
    click.echo("")
    if save_trace.lower() != "none":
        saved = save_demo_trace(Path(save_trace))
        click.echo(f"trace saved to {saved}; next, try:")
        click.echo(f"  faultfinder attribute {saved} --method baseline:first-speaker")
        click.echo("")
    overrides = method_overrides(with_ground_truth, observability, settings)
    overrides.update(pop_sampling(llm_options))
    method = create_method(method_spec, **overrides)
    progress = llm_options.pop("progress")
    llm = with_progress(build_llm(**llm_options, needs_model=method.needs_model), progress)
    result = asyncio.run(run_method(method, trace, llm, label=method_spec))
    click.echo(format_attribution(result))
    click.echo("")
    click.echo(compare_with_gold(trace, result))
    if str(llm_options.get("model", "")).startswith("local"):
        click.echo(
            "\nNote: the embedded SmolLM2-135M model only shows that the pipeline runs end to "
            "end; its attributions are not meaningful. Use --model openai:MODEL for a real judge."
        )
    # The demo shows the pipeline running; an unreadable answer from the tiny embedded
    # model is an expected outcome (printed above), so only a failure to run is an error.
    if result.status in ("error", "budget-exceeded"):
        exit_for(CaseCounts.of([result.status]))
