"""The cost probe's stand-in replies (``bench/cost_probe.py``): one *answerer* per kind of prompt.

``answer`` reads which method and stage a request comes from by its wording and replies as an
annotator-like judge would: with the trace's gold agent and step (``Gold``) wherever an answer
needs one, in the format that prompt asks for (Who&When's fields, ECHO's JSON analysis, each
CHIEF stage's JSON, the agentic navigator's tool calls). ``REPLY_SCALE`` (``--reply-scale``)
lengthens the excerpts the replies quote; ``ProseCut`` (``--graph-prose-chars``) is the
what-if that cuts CHIEF's graph text fields in its prompts.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from faultfinder.errors import FaultfinderError
from faultfinder.judging.render import step_output_text
from faultfinder.llm.base import ChatRequest
from faultfinder.methods.chief.prompts import stage_of
from faultfinder.traces.schema import ToolCall, Trace

AGENTIC_READS = 3
"""Steps the agentic navigator reads (one per turn) before it submits."""

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
