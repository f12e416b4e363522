"""The least uncached prompt tokens any CHIEF prompt layout can reach, per Who&When case.

Whatever the order of its prompts, a CHIEF run must have the server read, at least once
and uncached, the conversation and the causal graph it built from the model's own replies
(subtasks, OTAR summaries, edges with their counterfactual patterns, step edges, loop
groups, oracles): a prefix cache only serves text that an earlier *prompt* held, and the
graph first appears as replies. This script builds every trace's graph with the cost
probe's stand-in replies (``bench/cost_probe.py``; the same replies, so the same graphs as
in its CHIEF rows), counts the graph as the default layout shows it with the same
tokenizer, and reports (trace + graph) / trace: the floor of "uncached x trace" for any
layout, before instructions, requests, the candidate set and the cache's 128-token
rounding. Real models write longer replies than the stand-ins, so their floor is higher.

    python bench/chief_floor.py
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cost_probe

from faultfinder.eval.datasets import DatasetOptions, load_dataset
from faultfinder.llm.client import LLM
from faultfinder.methods.chief import ChiefConfig, build_graph
from faultfinder.methods.chief.graph_render import graph_sections


async def graph_tokens(traces: list, backend: cost_probe.StandInBackend) -> dict[str, int]:
    out: dict[str, int] = {}
    for trace in traces:
        cost_probe._CASE.set(trace)
        cost_probe._PLAN.set("chief-floor")
        graph = await build_graph(
            trace, LLM(backend, cache=None), ChiefConfig(stage_cache=None), with_oracles=True
        )
        out[trace.id] = sum(backend.count_tokens(s) for s in graph_sections(graph))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=cost_probe.DEFAULT_DATA)
    parser.add_argument("--limit", type=int, default=None, help="traces per subset")
    args = parser.parse_args()
    tokenizer = cost_probe.SmolTokenizer()
    backend = cost_probe.StandInBackend(tokenizer)
    print(
        "| subset | cases | trace tok/case mean | median | graph tok/case | floor x trace "
        "(totals) | floor x trace (per case) | cases with floor <= 2x |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for subset in ("Algorithm-Generated", "Hand-Crafted"):
        traces = load_dataset(args.data, DatasetOptions(subsets=[subset], limit=args.limit))
        own = cost_probe.trace_tokens(traces, tokenizer.count)
        graph = asyncio.run(graph_tokens(traces, backend))
        ratios = [(own[t.id] + graph[t.id]) / own[t.id] for t in traces]
        total = (sum(own.values()) + sum(graph.values())) / sum(own.values())
        print(
            f"| {subset} | {len(traces)} | {statistics.mean(own.values()):,.0f} "
            f"| {statistics.median(own.values()):,.0f} | {statistics.mean(graph.values()):,.0f} "
            f"| {total:.2f} | {statistics.mean(ratios):.2f} | {sum(r <= 2 for r in ratios)} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
