"""Prompt-token cost per case of each method on Who&When, counted with the real tokenizer.

Every method runs its normal path through the eval harness (importer -> runner -> method
-> LLM layer -> rows, response cache off) against a stand-in backend that generates
nothing: its replies come from a per-method *answerer*, and its token counts come from
the embedded model's own tokenizer (SmolLM2-135M-Instruct, loaded vocabulary-only through
llama.cpp). Generating with the 135M model takes minutes per case on this CPU, so a
full-data run with real replies is not possible here; prompts do not depend on what the
model is, so their sizes are measured exactly. What does depend on the replies:

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
import re
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from faultfinder.cli.common import method_overrides
from faultfinder.errors import FaultfinderError
from faultfinder.eval.cases import MethodPlan, plan_methods
from faultfinder.eval.datasets import DatasetOptions, load_dataset, subsets
from faultfinder.eval.prompt_cost import trace_ratio
from faultfinder.eval.rows import EvalRow, latest_by_key, read_rows
from faultfinder.eval.runner import EvalOptions, run_eval
from faultfinder.judging.method import Observability, Verdict
from faultfinder.judging.render import own_text, step_output_text
from faultfinder.llm.base import ChatRequest, Completion, messages_text
from faultfinder.llm.client import LLM
from faultfinder.llm.local import MODEL_NAME, find_weights
from faultfinder.methods.chief.prompts import stage_of
from faultfinder.testing.prefix_cache import PrefixCache, prompt_text
from faultfinder.traces.schema import ToolCall, Trace
from faultfinder.usage import Usage

# ../shared/data/who-and-when, seen from the repository root
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "who-and-when"
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
"""Methods also run with their own default observability (both 'full')."""
AGENTIC_READS = 3
"""Steps the agentic navigator reads (one per turn) before it submits."""
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


# --- answerers ---------------------------------------------------------------------

NO_REASON = "The step is consistent with the task and the conversation so far."


@dataclasses.dataclass(frozen=True)
class Gold:
    """What the annotator-like judge answers with: the trace's label."""

    agent: str
    step: int
    speaker: str
    reason: str

    @classmethod
    def of(cls, trace: Trace) -> Gold:
        label = trace.label
        if label is None or label.agent is None or label.step is None:
            raise FaultfinderError(f"cost probe: trace {trace.id} has no gold agent and step")
        reason = (label.reason or "").strip() or "This step caused the wrong final answer."
        return cls(label.agent, label.step, trace.steps[label.step].agent, reason)


REPLY_SCALE = 1.0
"""Multiplies the length of every excerpt a stand-in reply quotes (``--reply-scale``): a
sensitivity check of the figures that depend on how long a model's replies are."""


def snippet(text: str, limit: int = 90) -> str:
    limit = round(limit * REPLY_SCALE)
    flat = re.sub(r"\s+", " ", text).strip()
    return flat if len(flat) <= limit else flat[:limit] + "..."


def last_user(request: ChatRequest) -> str:
    for message in reversed(request.messages):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return str(message["content"])
    return ""


def system_text(request: ChatRequest) -> str:
    first = request.messages[0] if request.messages else {}
    content = first.get("content") if first.get("role") == "system" else None
    return content if isinstance(content, str) else ""


def answer(
    trace: Trace, request: ChatRequest, *, agentic_reads: int = AGENTIC_READS
) -> str | list[ToolCall]:
    """The stand-in reply for one request, chosen by the prompt's kind."""
    gold = Gold.of(trace)
    if request.tools:
        return agentic_answer(trace, gold, request, agentic_reads)
    if "Objective Analysis Agent" in system_text(request):
        return echo_answer(trace, gold, system_text(request))
    prompt = last_user(request)
    stage = stage_of(prompt)
    if stage:
        return chief_answer(trace, gold, stage, prompt)
    if "Agent Name: (Your prediction)" in prompt:
        return agent_step_reason(gold)
    if "1. Yes/No. 2. Reason for the judgment." in prompt:
        judged = judged_step(trace, prompt)
        return f"1. Yes. 2. {gold.reason}" if judged == gold.step else f"1. No. 2. {NO_REASON}"
    if "'upper half' or 'lower half'" in prompt:
        return half_answer(gold, prompt)
    if "Reason for Mistake: (Your reason)" in prompt:
        return f"Reason for Mistake: {gold.reason}"
    raise FaultfinderError("cost probe: no answerer for this prompt (method not supported)")


def agent_step_reason(gold: Gold) -> str:
    return f"Agent Name: {gold.agent}\nStep Number: {gold.step}\nReason for Mistake: {gold.reason}"


_HEADER = re.compile(r"^Step (\d+) - ", re.MULTILINE)


def judged_step(trace: Trace, prompt: str) -> int:
    """The step a step-by-step prompt asks about: the last step shown in its log."""
    found = -1
    for m in _HEADER.finditer(prompt):
        k = int(m.group(1))
        if k < len(trace.steps) and prompt.startswith(trace.steps[k].agent, m.end()):
            found = max(found, k)
    if found < 0:
        raise FaultfinderError(
            "cost probe: no 'Step N - agent' header in the step-by-step prompt "
            "(the answerer needs the default step_indices=true)"
        )
    return found


_RANGE = re.compile(r"conversation range from step (\d+) to step (\d+):")


def half_answer(gold: Gold, prompt: str) -> str:
    m = _RANGE.search(prompt)
    if m is None:
        raise FaultfinderError("cost probe: no step range in the binary-search prompt")
    low, high = int(m.group(1)), int(m.group(2))
    return "upper half" if gold.step <= (low + high) // 2 else "lower half"


# ECHO ------------------------------------------------------------------------------


def echo_answer(trace: Trace, gold: Gold, system: str) -> str:
    """An analyst's JSON analysis naming the gold agent (and step)."""
    agents = trace.agent_names()
    evidence = snippet(step_output_text(trace.steps[gold.step]), 120)
    evaluations = []
    for agent in agents:
        steps = [s.index for s in trace.steps_of(agent)]
        mine = agent == gold.agent
        evaluations.append(
            {
                "agent_name": agent,
                "step_index": gold.step if mine else (steps[-1] if steps else None),
                "error_likelihood": 0.8 if mine else 0.2,
                "reasoning": gold.reason if mine else f"{agent}'s steps follow from their inputs.",
                "evidence": evidence if mine else f"{agent} acted {len(steps)} time(s).",
            }
        )
    others = [a for a in agents if a != gold.agent]
    alternatives = []
    if others:
        alternatives.append(
            {
                "type": "single_agent",
                "attribution": [others[0]],
                "mistake_step": trace.steps_of(others[0])[0].index,
                "confidence": 0.2,
                "reasoning": f"{others[0]} could have caught the mistake.",
            }
        )
    analysis = {
        "analysis_summary": f"Checked each agent's steps; the decisive error is at step "
        f"{gold.step} by {gold.agent}.",
        "agent_evaluations": evaluations,
        "primary_conclusion": {
            "type": "single_agent",
            "attribution": [gold.agent],
            "mistake_step": gold.step,
            "confidence": 0.8,
            "reasoning": f"Step {gold.step}: {gold.reason}",
        },
        "alternative_hypotheses": alternatives,
    }
    return json.dumps(analysis, ensure_ascii=False)


# CHIEF -----------------------------------------------------------------------------

GRAPH_PROSE_KEYS = frozenset(
    {
        "name",
        "description",
        "observation",
        "thought",
        "action",
        "result",
        "bias",
        "anomaly",
        "data",
        "repeated_message",
        "goal",
        "preconditions",
        "key_evidence",
        "acceptance_criteria",
        "reason",
    }
)
"""The text fields of CHIEF's graph views and candidate set (subtasks, OTAR, edge patterns,
step-edge data, loop excerpts, oracles, reasons); ids, agent names, types and step numbers
are not among them."""


class ProseCut:
    """What if CHIEF's prompts showed each text field of its graph cut to ``limit``
    characters (``--graph-prose-chars``)? Not a faultfinder option: a bench what-if that
    wraps the one function the graph views and the candidate set are written with
    (``graph_render._compact``), and counts the fields it cut so that a run in which it cut
    nothing (the renderer changed) fails instead of reporting the uncut figures."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.cut = 0

    def apply(self) -> None:
        from faultfinder.methods.chief import graph_render

        compact = graph_render._compact

        def cut_compact(value: Any) -> str:
            return compact(self._cut(value, False))

        graph_render._compact = cut_compact

    def _cut(self, value: Any, prose: bool) -> Any:
        if isinstance(value, dict):
            return {k: self._cut(v, k in GRAPH_PROSE_KEYS) for k, v in value.items()}
        if isinstance(value, list):
            return [self._cut(v, prose) for v in value]
        if prose and isinstance(value, str) and len(value) > self.limit:
            self.cut += 1
            return value[: self.limit] + "…"
        return value


def chief_plan(trace: Trace) -> list[tuple[int, int]]:
    """Contiguous subtasks: 3 for short logs, one more per 15 steps (at most one per step)."""
    n = len(trace.steps)
    k = min(n, 3 + n // 15)
    bounds = [round(i * n / k) for i in range(k + 1)]
    return [(bounds[i], bounds[i + 1] - 1) for i in range(k)]


def _agents_in(trace: Trace, start: int, end: int) -> list[str]:
    return list(dict.fromkeys(trace.steps[i].agent for i in range(start, end + 1)))


def chief_answer(trace: Trace, gold: Gold, stage: str, prompt: str) -> str:
    """The JSON (or, for 'direct', plain-text) reply of one CHIEF stage."""
    plan = chief_plan(trace)
    ids = [f"S{i + 1}" for i in range(len(plan))]
    if stage == "direct":
        return agent_step_reason(gold)
    data: Any
    if stage in ("decompose", "decompose-refine"):
        data = {
            "subtasks": [
                {
                    "id": sid,
                    "name": f"Phase {i + 1}: {snippet(trace.steps[a].content, 40)}",
                    "description": f"Steps {a}-{b}: {snippet(trace.steps[b].content, 60)}",
                    "step_range": [a, b],
                }
                for i, (sid, (a, b)) in enumerate(zip(ids, plan, strict=True))
            ]
        }
    elif stage == "otar":
        data = {
            "subtasks": [
                chief_otar(trace, sid, a, b) for sid, (a, b) in zip(ids, plan, strict=True)
            ]
        }
    elif stage == "edges":
        data = chief_edges(trace, ids, plan)
    elif stage == "step-edges":
        data = {"step_edges": chief_step_edges(trace, gold, plan)}
    elif stage == "oracles":
        data = {
            "oracles": [
                chief_oracle(trace, sid, a, b) for sid, (a, b) in zip(ids, plan, strict=True)
            ]
        }
    elif stage == "oracle":
        m = re.search(r"synthesize the oracle for subtask (S\d+)", prompt)
        if m is None or m.group(1) not in ids:
            raise FaultfinderError("cost probe: no known subtask id in the oracle prompt")
        a, b = plan[ids.index(m.group(1))]
        data = chief_oracle(trace, m.group(1), a, b)
    elif stage == "backtrack":
        data = chief_backtrack(trace, gold, ids, plan)
    elif stage == "attribution":
        data = {
            "assessments": [
                {
                    "step": gold.step,
                    "agent": gold.speaker,
                    "local_origin": True,
                    "upstream_causes": [],
                    "loop_group": None,
                    "loop_responsibility": "none",
                    "data_flow": "misinterprets",
                    "reversible": False,
                    "irrecoverable": True,
                }
            ],
            "agent_name": gold.agent,
            "step_number": gold.step,
            "reason_for_mistake": gold.reason,
            "supporting_stages": ["Local", "Data-Flow", "Final Screening"],
        }
    else:
        raise FaultfinderError(f"cost probe: no answerer for CHIEF stage '{stage}'")
    return json.dumps(data, ensure_ascii=False)


def chief_otar(trace: Trace, sid: str, a: int, b: int) -> dict[str, Any]:
    entries = []
    for agent in _agents_in(trace, a, b):
        own = [i for i in range(a, b + 1) if trace.steps[i].agent == agent]
        first, last = own[0], own[-1]
        before = trace.steps[first - 1] if first > 0 else None
        entries.append(
            {
                "agent": agent,
                "observation": snippet(step_output_text(before)) if before else snippet(trace.task),
                "thought": f"{agent} works on this phase over {len(own)} step(s).",
                "action": snippet(step_output_text(trace.steps[first])),
                "result": snippet(step_output_text(trace.steps[last])),
            }
        )
    return {"subtask": sid, "agents": entries}


def _pattern(scenario: str, upstream: str, downstream: str) -> dict[str, Any]:
    return {
        "scenario": scenario,
        "bias": f"{upstream} passes on a wrong or unverified result",
        "anomaly": f"{downstream} builds on it and the answer is wrong",
        "reversible": None,
    }


def chief_edges(trace: Trace, ids: list[str], plan: list[tuple[int, int]]) -> dict[str, Any]:
    subtask_edges = [
        {
            "from": ids[i],
            "to": ids[i + 1],
            "type": "data_dependency",
            "counterfactual_patterns": [_pattern("data-flow", ids[i], ids[i + 1])],
        }
        for i in range(len(ids) - 1)
    ]
    agent_edges: list[dict[str, Any]] = []
    for sid, (a, b) in zip(ids, plan, strict=True):
        pairs: list[tuple[str, str]] = []
        for i in range(a, b):
            pair = (trace.steps[i].agent, trace.steps[i + 1].agent)
            if pair[0] != pair[1] and pair not in pairs:
                pairs.append(pair)
        agent_edges.extend(
            {
                "subtask": sid,
                "from": up,
                "to": down,
                "type": "decision_dependency",
                "counterfactual_patterns": [_pattern("planning-control", up, down)],
            }
            for up, down in pairs
        )
    return {"subtask_edges": subtask_edges, "agent_edges": agent_edges}


def chief_step_edges(trace: Trace, gold: Gold, plan: list[tuple[int, int]]) -> list[Any]:
    pairs = [(plan[i][1], plan[i + 1][0]) for i in range(len(plan) - 1)]
    if gold.step > 0:
        pairs.append((gold.step - 1, gold.step))
    edges = []
    for up, down in dict.fromkeys(p for p in pairs if p[0] < p[1]):
        edges.append(
            {
                "upstream_step": up,
                "output_data": snippet(step_output_text(trace.steps[up]), 50),
                "downstream_step": down,
                "input_data": snippet(step_output_text(trace.steps[down]), 50),
                "data_type": "text",
            }
        )
    return edges


def chief_oracle(trace: Trace, sid: str, a: int, b: int) -> dict[str, Any]:
    return {
        "subtask": sid,
        "goal": f"Steps {a}-{b} advance the task correctly: {snippet(trace.task, 60)}",
        "preconditions": [f"the outputs of the steps before step {a}"],
        "key_evidence": [snippet(step_output_text(trace.steps[b]), 60)],
        "acceptance_criteria": [f"the result at step {b} is correct and verified"],
    }


def chief_backtrack(
    trace: Trace, gold: Gold, ids: list[str], plan: list[tuple[int, int]]
) -> dict[str, Any]:
    """Every decision, downstream first; only the gold step's subtask, speaker and step
    are discrepant."""
    where = next(i for i, (a, b) in enumerate(plan) if a <= gold.step <= b)
    a, b = plan[where]
    subtasks = [
        {
            "id": ids[i],
            "discrepancy": int(i == where),
            "reason": gold.reason if i == where else "Matches its oracle.",
        }
        for i in reversed(range(len(plan)))
    ]
    agents = [
        {
            "subtask": ids[where],
            "agent": agent,
            "discrepancy": int(agent == gold.speaker),
            "reason": gold.reason if agent == gold.speaker else "Consistent with the oracle.",
        }
        for agent in _agents_in(trace, a, b)
    ]
    steps = [
        {
            "step": i,
            "agent": gold.speaker,
            "discrepancy": int(i == gold.step),
            "reason": gold.reason if i == gold.step else "Details match the OTAR and oracle.",
        }
        for i in range(a, b + 1)
        if trace.steps[i].agent == gold.speaker
    ]
    return {"subtasks": subtasks, "agents": agents, "steps": steps}


# agentic ---------------------------------------------------------------------------


def agentic_answer(
    trace: Trace, gold: Gold, request: ChatRequest, reads_before_submit: int
) -> list[ToolCall]:
    """Read steps around the gold step (gold-1, gold, gold+1, ...), one per turn, then submit."""
    turn = sum(1 for m in request.messages if m.get("role") == "assistant")
    n = len(trace.steps)
    order = [gold.step - 1, gold.step, gold.step + 1, gold.step - 2, gold.step + 2]
    reads = [s for s in dict.fromkeys(order) if 0 <= s < n][:reads_before_submit]
    if request.tool_choice is None and turn < len(reads):
        arguments: dict[str, Any] = {"step": reads[turn]}
        name = "read_step_output"
    else:
        name = "submit"
        arguments = {"agent": gold.agent, "step": gold.step, "reason": gold.reason}
        arguments["confidence"] = 0.8
    return [ToolCall(id=f"call_{turn}", name=name, arguments=json.dumps(arguments))]


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
    global REPLY_SCALE
    REPLY_SCALE = args.reply_scale
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
            f"({tokenizer.path.name}), stand-in reply excerpts x{REPLY_SCALE:g}"
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
