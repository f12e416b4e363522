"""Prompt-token cost per case of each method on Who&When, counted with the real tokenizer.

Every method runs its normal path through the eval harness (importer -> runner -> method
-> LLM layer -> rows, response cache off) against a stand-in backend that generates
nothing: its replies come from a per-method *answerer* (``bench/_cost_answerers.py``), and
its token counts come from the embedded model's own tokenizer (SmolLM2-135M-Instruct,
loaded vocabulary-only through llama.cpp). Generating with the 135M model takes minutes per
case on this CPU, so a full-data run with real replies is not possible here; prompts do
not depend on what the model is, so their sizes are measured exactly. What does depend on
the replies:

- the path a method takes. The answerer is an *annotator-like judge*: it names the gold
  agent and the gold step of the trace's label wherever an answer needs one. Step-by-step
  therefore answers No up to the gold step and Yes there (it stops at the gold step);
  binary search steers towards the gold step; hybrid's all-at-once names the gold agent;
  ECHO's analysts vote for the gold agent and step; CHIEF's backtracking flags the gold
  step's subtask, speaker and step; the agentic navigator reads a few steps around the
  gold step (``--agentic-reads``) and submits it. A real model stops elsewhere;
- later prompts that quote earlier replies (CHIEF's graph views carry its OTAR, edge and
  oracle replies; the agentic conversation carries its tool results);
- completion tokens, which here are those of the stand-in replies, not of a model.

Prompt tokens per call are the tokenizer count of all message texts (the LLM layer's
``messages_text``), plus the JSON tool definitions when tools are offered (an API bills
them as prompt); the chat template's few tokens per message are not counted. Cached
prompt tokens are what a server with automatic prefix caching would serve from its cache
(``faultfinder.testing.prefix_cache``: OpenAI's rule, a 1,024-token minimum in 128-token
blocks, over the prompts of the requests that completed before each one was sent, so
requests sent together do not serve each other);
"uncached x trace" divides the rest by the trace's own tokens (task plus step outputs).

    python bench/cost_probe.py --out /tmp/cost-probe.jsonl
    python bench/cost_probe.py --methods step-by-step --limit 5 --force
    python bench/cost_probe.py --report-only --out /tmp/cost-probe.jsonl
    python bench/cost_probe.py --methods compose,compose:k5 --out /tmp/cost-compose.jsonl

By default no context window is declared, so no prompt is truncated (the papers' models
have long contexts); ``--context-window 8192`` makes the methods fit their prompts to the
embedded model's window instead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import dataclasses
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import _cost_answerers
from _cost_answerers import AGENTIC_READS, ProseCut, answer
from _shared import WHO_AND_WHEN_DATA

from faultfinder.cli.common import method_overrides
from faultfinder.errors import FaultfinderError
from faultfinder.eval.cases import MethodPlan, plan_methods
from faultfinder.eval.datasets import DatasetOptions, load_dataset, subsets
from faultfinder.eval.prompt_cost import trace_ratio
from faultfinder.eval.rows import EvalRow, latest_by_key, read_rows
from faultfinder.eval.runner import EvalOptions, run_eval
from faultfinder.judging.method import Observability, Verdict
from faultfinder.judging.render import own_text
from faultfinder.llm.base import ChatRequest, Completion, messages_text
from faultfinder.llm.client import LLM
from faultfinder.llm.local import MODEL_NAME, find_weights
from faultfinder.testing.prefix_cache import PrefixCache, prompt_text
from faultfinder.traces.schema import Trace
from faultfinder.usage import Usage

DEFAULT_DATA = WHO_AND_WHEN_DATA
DEFAULT_METHODS = (
    "all-at-once",
    "step-by-step",
    "binary-search",
    "hybrid",
    "echo",
    "echo:I3",
    "chief",
    "chief:M1",
    "agentic",
    "compose",
    "compose:k5",
)
OWN_DEFAULT_OBSERVABILITY = ("echo", "chief")
"""Methods also run with their own default observability. Both default to 'outputs' now,
the probe's own setting, so these runs are dropped as duplicates unless ``--observability``
names another level."""
METHOD_OVERRIDES: dict[str, dict[str, Any]] = {"chief": {"stage_cache": "none"}}
"""Per base method: options every run of it gets (CHIEF pays for its own graph per case)."""

_CASE: contextvars.ContextVar[Trace | None] = contextvars.ContextVar(
    "cost_probe_case", default=None
)
_PLAN: contextvars.ContextVar[str] = contextvars.ContextVar("cost_probe_plan", default="")
"""The method configuration a call belongs to (its prefix cache)."""


# --- the tokenizer and the stand-in backend ---------------------------------------


class SmolTokenizer:
    """SmolLM2-135M-Instruct's tokenizer via llama.cpp (vocabulary only, no weights run)."""

    def __init__(self, model_path: Path | None = None) -> None:
        import llama_cpp

        self.path = model_path or find_weights()
        self._llama = llama_cpp.Llama(model_path=str(self.path), vocab_only=True, verbose=False)
        # The LLM layer and the backend count the same prompt text; count it once.
        self._memo: dict[str, int] = {}
        self.tokenized_chars = 0
        self.seconds = 0.0

    def count(self, text: str) -> int:
        if not text:
            return 0
        hit = self._memo.get(text)
        if hit is not None:
            return hit
        started = time.perf_counter()
        n = len(self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=False))
        self.seconds += time.perf_counter() - started
        self.tokenized_chars += len(text)
        if len(self._memo) > 512:
            self._memo.clear()
        self._memo[text] = n
        return n


class StandInBackend:
    """Backend protocol, no generation: replies from ``answer``, usage from the tokenizer."""

    is_real = False
    supports_tools = True

    def __init__(
        self,
        tokenizer: SmolTokenizer,
        context_window: int | None = None,
        agentic_reads: int = AGENTIC_READS,
    ) -> None:
        self.tokenizer = tokenizer
        self.agentic_reads = agentic_reads
        self.model = f"{MODEL_NAME}-tokenizer"
        suffix = f"@ctx{context_window}" if context_window else ""
        self.name = f"cost-probe:{self.model}{suffix}"
        if context_window:
            # render.backend_context_window reads this, so methods fit prompts to it.
            self.context_window = context_window
        # What a server with automatic prefix caching would serve from its cache (OpenAI's
        # rule: 1,024-token minimum, 128-token blocks), counted with the same tokenizer.
        # One cache per method configuration, as if each ran alone: a cache shared by all
        # would serve one method's prompts from another's (echo:I3 from echo's log).
        self.prefix_caches: dict[str, PrefixCache] = {}

    def identity(self) -> dict[str, Any]:
        return {"backend": "cost-probe", "tokenizer": self.tokenizer.path.name, "name": self.name}

    def count_tokens(self, text: str) -> int:
        return self.tokenizer.count(text)

    async def complete(self, request: ChatRequest) -> Completion:
        trace = _CASE.get()
        if trace is None:
            raise FaultfinderError("cost probe: a model call outside a case (no trace set)")
        # Requests sent together miss each other's prefixes, as on a real server.
        cache = self.prefix_caches.setdefault(_PLAN.get(), PrefixCache(self.count_tokens))
        async with cache.request(prompt_text(request.messages, request.tools)) as cached:
            reply = answer(trace, request, agentic_reads=self.agentic_reads)
        text = reply if isinstance(reply, str) else ""
        calls = [] if isinstance(reply, str) else reply
        prompt = self.count_tokens(messages_text(request.messages))
        if request.tools:
            prompt += self.count_tokens(json.dumps(request.tools))
        completion = self.count_tokens(text + "".join(c.name + c.arguments for c in calls))
        return Completion(
            text=text,
            tool_calls=calls,
            usage=Usage(
                prompt_tokens=prompt,
                completion_tokens=completion,
                cached_prompt_tokens=min(cached, prompt),
            ),
            model=self.model,
            finish_reason="tool_calls" if calls else "stop",
        )


def with_case(plan: MethodPlan) -> MethodPlan:
    """The plan with a method class that tells the stand-in backend which trace it is on.

    Only ``attribute`` is wrapped; prompts, config and label (so row keys) are unchanged.
    """
    base: type[Any] = plan.cls

    key = f"{plan.label}|{plan.config_id}"

    class CaseAware(base):
        async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
            token = _CASE.set(trace)
            plan_token = _PLAN.set(key)
            try:
                verdict: Verdict = await super().attribute(trace, llm)
                return verdict
            finally:
                _PLAN.reset(plan_token)
                _CASE.reset(token)

    CaseAware.__name__ = base.__name__
    CaseAware.__qualname__ = base.__qualname__
    return dataclasses.replace(plan, cls=CaseAware)


# --- planning, running, reporting ---------------------------------------------------


def base_name(spec: str) -> str:
    return spec.split(":", 1)[0]


def build_plans(
    specs: Sequence[str],
    observability: Observability,
    own_default: Sequence[str],
    with_ground_truth: bool,
    options: Sequence[str] = (),
) -> list[MethodPlan]:
    plans: list[MethodPlan] = []
    for spec in specs:
        overrides = dict(METHOD_OVERRIDES.get(base_name(spec), {}))
        overrides.update(method_overrides(with_ground_truth, None, tuple(options)))
        settings: list[Observability | None] = [observability]
        if spec in own_default:
            settings.append(None)
        plans.extend(plan_methods([spec], overrides, settings))
    return [with_case(p) for p in plans]


def verdict_matches_gold(row: EvalRow) -> bool:
    gold = row.gold
    return (
        gold is not None
        and row.status == "ok"
        and row.agent == gold.agent
        and row.step is not None
        and row.step in gold.acceptable_steps
    )


def unparsed_replies(row: EvalRow) -> int:
    return sum(not call.parsed for call in row.calls)


def _k(value: float) -> str:
    return f"{value / 1000:.1f}k" if value >= 1000 else f"{value:.0f}"


def trace_tokens(traces: Sequence[Trace], count: Any) -> dict[str, int]:
    """The trace's own tokens: its task and every step's output text, as the log shows
    them at ``outputs`` observability (no prompt wording, no step headers)."""
    return {t.id: count(own_text(t)) for t in traces}


def table(rows: list[EvalRow], own_tokens: dict[str, int]) -> str:
    """Per (subset, method, observability): calls and prompt tokens per case; ``uncached``
    is the prompt less what a prefix-caching server serves from its cache; ``x trace
    (totals)`` is uncached prompt tokens over the traces' own tokens, both summed over the
    cases (what a batch costs per token of log); ``x trace (per case)`` the mean over cases
    of each case's ratio, which weighs a short log as much as a long one; ``<= 2x`` how
    many cases are at most 2x."""
    groups: dict[tuple[str, str, str], list[EvalRow]] = defaultdict(list)
    for row in rows:
        groups[(row.subset, row.method, row.observability)].append(row)
    lines = [
        "| subset | method | observability | cases | calls/case | prompt tok/case mean "
        "| median | max | uncached prompt tok/case | uncached x trace (totals) "
        "| uncached x trace (per case) | cases <= 2x "
        "| stand-in completion tok/case | unparsed replies | unparsed / error "
        "rows | no-error-found | verdict = gold |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (subset, method, obs), items in sorted(groups.items()):
        n = len(items)
        prompts = [r.usage.prompt_tokens for r in items]
        uncached = [r.usage.uncached_prompt_tokens for r in items]
        figures = trace_ratio(items, lambda r: own_tokens.get(r.trace_id))
        ratio = f"{figures.mean:.2f}" if figures else "-"
        totals = f"{figures.totals:.2f}" if figures else "-"
        within = figures.within if figures else 0
        lines.append(
            f"| {subset} | {method} | {obs} | {n} "
            f"| {statistics.mean(r.usage.calls + r.usage.cached_calls for r in items):.1f} "
            f"| {_k(statistics.mean(prompts))} | {_k(statistics.median(prompts))} "
            f"| {_k(max(prompts))} | {_k(statistics.mean(uncached))} | {totals} | {ratio} "
            f"| {within} "
            f"| {_k(statistics.mean(r.usage.completion_tokens for r in items))} "
            f"| {sum(unparsed_replies(r) for r in items)} "
            f"| {sum(r.status == 'unparsed' for r in items)} / "
            f"{sum(r.status in ('error', 'budget-exceeded') for r in items)} "
            f"| {sum(r.status == 'no-error-found' for r in items)} "
            f"| {sum(verdict_matches_gold(r) for r in items)} |"
        )
    return "\n".join(lines)


def outside_shortlist(row: EvalRow) -> bool:
    """A compose row whose judge named a step the shortlist did not offer (the gold step was
    not among its k candidates): compose's normal outcome then, not a stand-in failure."""
    candidates = row.details.get("candidates")
    rejected = row.details.get("rejected_step")
    return (
        row.status == "unparsed"
        and isinstance(candidates, list)
        and rejected is not None
        and rejected not in candidates
        and not unparsed_replies(row)
    )


def problems(rows: list[EvalRow]) -> list[str]:
    """Rows where the answerer did not keep the method on its normal path."""
    out: list[str] = []
    for row in rows:
        bad = unparsed_replies(row)
        if outside_shortlist(row):
            continue
        if row.status in ("unparsed", "error", "budget-exceeded") or bad:
            why = row.error or row.details.get("parse_error") or row.reason or ""
            out.append(
                f"{row.trace_id} {row.method} ({row.observability}): status {row.status}, "
                f"{bad} unparsed replies {str(why)[:160]}"
            )
        stages = row.details.get("stages")
        if isinstance(stages, dict):
            for name, record in stages.items():
                status = record.get("status") if isinstance(record, dict) else None
                if status not in ("ok", "cached", "loaded"):
                    out.append(f"{row.trace_id} {row.method}: CHIEF stage {name} {status}")
        if row.details.get("forced"):
            out.append(f"{row.trace_id} {row.method}: agentic verdict forced")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument(
        "--methods",
        default=",".join(DEFAULT_METHODS),
        help="comma-separated method specs (default: %(default)s)",
    )
    parser.add_argument(
        "--observability",
        default="outputs",
        choices=["full", "no-metadata", "no-inputs", "outputs"],
        help="observability for every method (default: outputs, the Who&When setting)",
    )
    parser.add_argument(
        "--own-default",
        default=",".join(OWN_DEFAULT_OBSERVABILITY),
        help="specs also run with their own default observability ('' for none)",
    )
    parser.add_argument("--limit", type=int, default=None, help="traces per subset")
    parser.add_argument("--subset", action="append", default=[], help="only this subset")
    parser.add_argument("--out", type=Path, default=Path("bench-cost-probe.jsonl"))
    parser.add_argument("--resume", action="store_true", help="continue --out")
    parser.add_argument("--force", action="store_true", help="overwrite --out")
    parser.add_argument("--concurrency", type=int, default=4, help="cases in progress at once")
    parser.add_argument(
        "--context-window",
        type=int,
        default=None,
        help="declare this context window (e.g. 8192, the embedded model's) so prompts are "
        "fitted to it; default: none, nothing is truncated",
    )
    parser.add_argument(
        "--agentic-reads", type=int, default=AGENTIC_READS, help="steps read before submitting"
    )
    parser.add_argument(
        "--reply-scale",
        type=float,
        default=1.0,
        help="multiply the length of the excerpts stand-in replies quote (CHIEF's OTAR, "
        "oracles, step edges...): how the figures move with longer replies",
    )
    parser.add_argument(
        "--set",
        dest="options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a method option for every method run (as faultfinder's --set), e.g. "
        "--set prompt_layout=shared-prefix with --methods chief",
    )
    parser.add_argument(
        "--graph-prose-chars",
        type=int,
        default=None,
        metavar="N",
        help="what-if: CHIEF's prompts show each text field of its graph and candidate set "
        "cut to N characters (0: none of it); a bound on what showing less of the graph "
        "could save, not a faultfinder option",
    )
    parser.add_argument("--with-ground-truth", action="store_true", help="the papers' w/ G")
    parser.add_argument(
        "--report-only", action="store_true", help="print the table of --out without running"
    )
    args = parser.parse_args()
    _cost_answerers.REPLY_SCALE = args.reply_scale
    prose_cut = None
    if args.graph_prose_chars is not None and not args.report_only:
        if args.graph_prose_chars < 0:
            parser.error("--graph-prose-chars must be 0 or more")
        prose_cut = ProseCut(args.graph_prose_chars)
        prose_cut.apply()

    traces = load_dataset(args.data, DatasetOptions(subsets=args.subset, limit=args.limit))
    tokenizer = SmolTokenizer()
    ran = 0
    if args.report_only:
        rows = list(latest_by_key(read_rows(args.out)).values())
    else:
        specs = [s.strip() for s in args.methods.split(",") if s.strip()]
        own = [s.strip() for s in args.own_default.split(",") if s.strip()]
        plans = build_plans(specs, args.observability, own, args.with_ground_truth, args.options)
        backend = StandInBackend(tokenizer, args.context_window, args.agentic_reads)
        llm = LLM(backend, cache=None, concurrency=args.concurrency)
        print(
            f"{len(traces)} traces {subsets(traces)} x {len(plans)} plans, {backend.name} "
            f"({tokenizer.path.name}), stand-in reply excerpts x{_cost_answerers.REPLY_SCALE:g}"
            + (f", graph text fields cut to {prose_cut.limit} chars" if prose_cut else ""),
            file=sys.stderr,
        )
        started = time.perf_counter()
        outcome = asyncio.run(
            run_eval(
                traces,
                plans,
                llm,
                args.out,
                EvalOptions(concurrency=args.concurrency, resume=args.resume, force=args.force),
            )
        )
        rows = outcome.rows
        ran = outcome.ran
        print(
            f"ran {outcome.ran} cases ({outcome.skipped} already in {args.out}) in "
            f"{time.perf_counter() - started:.0f} s; tokenizer: "
            f"{tokenizer.tokenized_chars / 1e6:.1f}M characters in {tokenizer.seconds:.0f} s",
            file=sys.stderr,
        )
    print(table(rows, trace_tokens(traces, tokenizer.count)))
    outside: dict[tuple[str, str], int] = defaultdict(int)
    for row in rows:
        if outside_shortlist(row):
            outside[(row.subset, row.method)] += 1
    if outside:
        print(
            "\ncompose: the judge named the gold step, which the shortlist did not offer "
            "(status unparsed by compose's rule, not a problem): "
            + "; ".join(f"{m} {s} {n}" for (s, m), n in sorted(outside.items()))
        )
    issues = problems(rows)
    if prose_cut is not None and ran and prose_cut.cut == 0:
        issues.append(
            "--graph-prose-chars cut no field: the graph renderer no longer writes through "
            "graph_render._compact, so these are the uncut figures"
        )
    if issues:
        print(f"\n{len(issues)} problem(s):")
        for line in issues[:50]:
            print(f"- {line}")
    return 1 if issues else 0


if __name__ == "__main__":
    sys.exit(main())
