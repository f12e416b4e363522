"""`faultfinder graph`: build CHIEF's hierarchical causal graph of a trace and write it as
JSON, Graphviz DOT and Mermaid."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click

from faultfinder.cli.common import (
    budget_tokens_option,
    build_llm,
    exit_for,
    method_options,
    method_overrides,
    model_options,
    pass_errors,
    pop_sampling,
)
from faultfinder.cli.handling import InputPath
from faultfinder.cli.progress import with_progress
from faultfinder.cli.terminal import plural, safe, shown_name
from faultfinder.exitcodes import CaseCounts
from faultfinder.llm.scopes import track_usage
from faultfinder.methods.chief import CausalGraph, ChiefConfig, build_graph, write_graph
from faultfinder.methods.chief.graph_render import render_dot, render_mermaid
from faultfinder.registry import create_method
from faultfinder.traces.loader import load_trace


def format_graph(graph: CausalGraph) -> str:
    """The summary `graph` prints."""
    lines = [
        f"trace:     {shown_name(graph.trace_id)}  ({graph.n_steps} steps, "
        f"model {shown_name(graph.model)})"
    ]
    mode = (
        "zero-shot"
        if graph.decomposition.zero_shot
        else "exemplars " + ", ".join(shown_name(e.id) for e in graph.decomposition.exemplars)
    )
    lines.append(f"decompose: {mode}; reflection rounds {graph.decomposition.reflection_rounds}")
    if graph.decomposition.repaired:
        lines.append("           repaired: " + "; ".join(graph.decomposition.repaired))
    for sub in graph.subtasks:
        lines.append(
            f"  {shown_name(sub.id):<4} steps {sub.start:>3}-{sub.end:<3} {shown_name(sub.name)}  "
            f"[{', '.join(shown_name(agent) for agent in sub.agents)}]"
        )
    origins: dict[str, int] = {}
    for e in graph.step_edges:
        origins[e.origin] = origins.get(e.origin, 0) + 1
    lines.append(
        f"edges:     {len(graph.subtask_edges)} subtask, {len(graph.agent_edges)} agent, "
        f"{len(graph.step_edges)} step ("
        + ", ".join(f"{k} {v}" for k, v in sorted(origins.items()))
        + ")"
    )
    for loop in graph.loops:
        lines.append(
            f"loop {loop.id}:   {shown_name(loop.agent)} repeats at steps {loop.repeats} "
            f"(group {loop.start}-{loop.end})"
        )
    if graph.oracles:
        lines.append(f"oracles:   {len(graph.oracles)}")
    if graph.candidates is not None:
        c = graph.candidates
        lines.append(f"candidates: subtasks {c.subtasks}, agents {c.agents}, steps {c.steps}")
    for name, record in graph.stages.items():
        note = f"  ({record.note})" if record.note else ""
        lines.append(f"stage {name:<10} {record.status}{note}")
    return "\n".join(lines)


@click.command("graph")
@click.argument("trace_path", type=InputPath())
@click.option("-o", "--out", "out_path", default=None, help="Write the graph as JSON to this file.")
@click.option("--dot", "dot_path", default=None, help="Write a Graphviz DOT rendering here.")
@click.option("--mermaid", "mermaid_path", default=None, help="Write a Mermaid rendering here.")
@click.option(
    "--oracles",
    "with_oracles",
    is_flag=True,
    help="Also synthesise the virtual oracles and run backtracking (CHIEF's M2).",
)
@click.option("--format", "trace_format", default=None, help="Input format (default: detect).")
@click.option(
    "--stage-cache",
    "stage_cache",
    default=None,
    help="CHIEF stage cache directory (default .faultfinder/chief-stages; 'none' disables).",
)
@budget_tokens_option
@method_options
@model_options
@pass_errors
def graph(
    trace_path: str,
    out_path: str | None,
    dot_path: str | None,
    mermaid_path: str | None,
    with_oracles: bool,
    trace_format: str | None,
    stage_cache: str | None,
    with_ground_truth: bool,
    observability: str | None,
    settings: tuple[str, ...],
    **llm_options: Any,
) -> None:
    """Build CHIEF's hierarchical causal graph of a trace.

    Options given with --set are CHIEF's (e.g. --set knowledge_base=builtin). The graph is
    kept in the stage cache, so `attribute --method chief` on the same trace with the same
    model and options reuses it. Without --out/--dot/--mermaid the JSON goes to stdout.
    With --budget-tokens, a build that would spend more stops before the call that would
    overspend it, writes nothing and exits 5; the replies it got stay in the response cache
    (--cache), so a rerun with a larger budget does not pay for them again.
    """
    trace = load_trace(trace_path, format=trace_format)
    overrides = method_overrides(with_ground_truth, observability, settings)
    overrides.update(pop_sampling(llm_options))
    if stage_cache is not None:
        overrides["stage_cache"] = stage_cache
    config = create_method("chief", **overrides).config
    assert isinstance(config, ChiefConfig)
    progress = llm_options.pop("progress")
    llm = with_progress(build_llm(**llm_options, needed_by="CHIEF's graph"), progress)
    with track_usage(max_tokens=config.budget_tokens) as scope:
        result = asyncio.run(build_graph(trace, llm, config, with_oracles=with_oracles))
    written: list[str] = []
    if out_path:
        write_graph(result, out_path)
        written.append(out_path)
    if dot_path:
        Path(dot_path).write_text(render_dot(result), encoding="utf-8")
        written.append(dot_path)
    if mermaid_path:
        Path(mermaid_path).write_text(render_mermaid(result), encoding="utf-8")
        written.append(mermaid_path)
    stages = CaseCounts.of(record.status for record in result.stages.values())
    if not written:
        click.echo(result.model_dump_json(indent=2))
        exit_for(stages, "stage")
        return
    click.echo(safe(format_graph(result)))
    u = scope.usage
    click.echo(
        f"cost:      {plural(u.calls, 'call')} ({u.cached_calls} cached), "
        f"{u.prompt_tokens} prompt + "
        f"{u.completion_tokens} completion tokens" + (" (estimated)" if u.estimated else "")
    )
    click.echo("wrote:     " + ", ".join(written))
    exit_for(stages, "stage")
