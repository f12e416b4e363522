"""Spans → canonical traces, following the GenAI and OpenInference semantic conventions.

Every LLM call becomes one step; tool executions are attached to the step that asked for
them; the agent of each step is inferred and *how* it was inferred is kept in
``Step.metadata['inferred']``. Steps are ordered by a depth-first walk of the span tree with
siblings in start-time order, so causality (parent before child) wins over clock skew.
What one span says is read by ``_span_fields``; what a model-call, tool or handoff span
becomes, and which agent made the call, by ``_call_spans``; agent spans with no LLM span
under them become steps by ``_agent_spans``. This module walks the spans and assembles the
trace: duplicates dropped, roster, metadata, source records kept, credentials scrubbed
(from the steps, the roster, the task and the final answer).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from faultfinder.redact import Redactor
from faultfinder.traces.importers._agent_spans import (
    add_tool,
    agent_step,
    agent_step_spans,
    encloses_llm,
    final_answer,
)
from faultfinder.traces.importers._autogen import (
    KEYWORD,
    is_autogen,
    linked_runs,
    runtime_hints,
    without_keyword,
)
from faultfinder.traces.importers._call_spans import (
    attach_tool,
    chain_agents,
    fill_call_ids,
    handoff,
    last_reply,
    llm_step,
    order_tied_results,
)
from faultfinder.traces.importers._common import make_trace, scrubbed, scrubbed_agent
from faultfinder.traces.importers._koog import NAMED_BY as KOOG_NAMED_BY
from faultfinder.traces.importers._koog import name_koog_agents
from faultfinder.traces.importers._messages import message_list
from faultfinder.traces.importers._react import attach_react
from faultfinder.traces.importers._span_fields import (
    SpanTree,
    agent_span_name,
    named_agent,
    span_input,
    span_kind,
    str_or_none,
)
from faultfinder.traces.importers._spans import Span
from faultfinder.traces.importers._tool_targets import LaterAnswers, ToolTargets
from faultfinder.traces.schema import Agent, SourceInfo, Step, ToolResult, Trace


def build_traces(spans: list[Span], *, path: str | Path, fmt: str, id_prefix: str) -> list[Trace]:
    """One canonical trace per trace id, in order of first appearance."""
    runs = linked_runs(spans)  # AutoGen without a span around the run: one trace a message
    groups: dict[str, list[Span]] = {}
    for span in spans:
        groups.setdefault(runs.get(span.trace_id, span.trace_id), []).append(span)
    traces = []
    for tid, group in groups.items():
        trace = build_trace(group, path=path, fmt=fmt, trace_id=f"{id_prefix}/{tid}")
        joined = list(dict.fromkeys(s.trace_id for s in group))
        if len(joined) > 1:
            trace.metadata["stitched_traces"] = joined
            trace.metadata["stitched_by"] = (
                "span links of AutoGen's runtime spans (each delivery links to the span "
                "that sent its message)"
            )
        traces.append(trace)
    return traces


def dedupe(spans: list[Span]) -> tuple[list[Span], int, list[Any]]:
    """Spans with each span id once (an exporter retry or a file written twice repeats
    spans); of two copies the one with more attributes is kept, at the first one's place.
    Returns the spans, how many copies were dropped, and the source records of dropped
    copies that differ from the kept one (kept in the trace, so nothing is lost)."""
    kept: dict[str, Span] = {}
    dropped: list[Span] = []
    for span in spans:
        first = kept.get(span.span_id)
        if first is None:
            kept[span.span_id] = span
        elif len(span.attributes) > len(first.attributes) or (first.end is None and span.end):
            span.hints.setdefault("_position", first.hints.get("_position", 0))
            kept[span.span_id] = span
            dropped.append(first)
        else:
            dropped.append(span)
    differing = [s.raw for s in dropped if s.raw is not None and s.raw != kept[s.span_id].raw]
    return list(kept.values()), len(dropped), differing


def build_trace(
    spans: list[Span],
    *,
    path: str | Path,
    fmt: str,
    trace_id: str,
    task: str | None = None,
    secrets: Iterable[str] = (),
) -> Trace:
    """The canonical trace of one trace's spans (``secrets``: values other spans of the
    trace revealed, scrubbed too)."""
    every = spans  # dropped copies of a span teach secrets too
    spans, duplicates, differing = dedupe(spans)
    runtime_hints(spans)  # AutoGen: its runtime's spans hold what its GenAI spans leave out
    koog_names = name_koog_agents(spans)  # Koog: agents named by strategy, not a random id
    tree = SpanTree(spans)
    order = tree.walk()
    kinds = {s.span_id: span_kind(s) for s in order}
    agent_steps = agent_step_spans(order, tree, kinds)
    chains = chain_agents(order, tree, kinds)
    in_calls = _under_model_calls(order, tree, kinds)
    steps: list[Step] = []
    roster: dict[str, Agent] = {}
    handoffs: list[dict[str, Any]] = []
    step_of_agent_span: dict[str, Step] = {}
    for span in order:
        kind = kinds[span.span_id]
        ancestors = tree.ancestors(span)
        if kind == "agent" and (
            named_agent(span) or span.span_id in agent_steps or encloses_llm(span, tree, kinds)
        ):
            name = agent_span_name(span)
            roster.setdefault(
                name,
                Agent(
                    name=name,
                    description=str_or_none(span.attributes.get("gen_ai.agent.description")),
                ),
            )
            owner = agent_steps.get(span.span_id)
            if owner == span.span_id:
                step = agent_step(span, name, index=len(steps))
                steps.append(step)
                step_of_agent_span[span.span_id] = step
            elif owner is not None:
                step_of_agent_span[span.span_id] = step_of_agent_span[owner]
                step_of_agent_span[owner].metadata.setdefault("merged_agent_spans", []).append(
                    span.span_id
                )
        elif kind == "handoff":
            handoffs.append(handoff(span, ancestors, kinds))
        elif kind == "llm":
            if span.span_id in in_calls:
                continue  # the same call seen by a second instrumentation (nested LLM spans)
            steps.append(llm_step(span, ancestors, kinds, chains, index=len(steps)))
    started: dict[int, tuple[Span, ToolResult]] = {}
    targets = ToolTargets(steps)
    for span in order:
        if kinds[span.span_id] != "tool":
            continue
        ancestors = tree.ancestors(span)
        if _inside_call(ancestors, kinds):
            continue  # a tool inside a tool (the same call seen twice) or inside a model call
        owner_span = next((a for a in ancestors if kinds[a.span_id] == "agent"), None)
        owner_step = step_of_agent_span.get(owner_span.span_id) if owner_span else None
        if owner_span is not None and owner_step is not None:
            result = add_tool(owner_step, span, f"TOOL span under agent span '{owner_span.name}'")
            targets.note(owner_step)
        else:
            result = attach_tool(span, tree, kinds, chains, targets)
        started[id(result)] = (span, result)  # the result is kept too, so its id stays its own
    later_answers = LaterAnswers(steps)
    for position, step in enumerate(steps):
        fill_call_ids(position, steps, started, later_answers)
        order_tied_results(step, started)
    for step in steps:
        roster.setdefault(step.agent, Agent(name=step.agent, model=step.model))
        if roster[step.agent].model is None and step.model:
            roster[step.agent].model = step.model
    of_agent_spans = {id(s) for s in step_of_agent_span.values()}
    agent_made = [id(s) in of_agent_spans for s in steps]
    steps = [s.model_copy(update={"index": i}) for i, s in enumerate(steps)]
    if len({s.trace_id for s in spans}) > 1:  # stitched: each step's span keeps its trace
        for step in steps:
            found = tree.by_id.get(str(step.metadata.get("span_id")))
            if found is not None:
                step.metadata["trace_id"] = found.trace_id
    attach_react(steps, {id(s) for s, made in zip(steps, agent_made, strict=True) if made})
    root = order[0] if order else None
    metadata: dict[str, Any] = {
        "trace_id": spans[0].trace_id if spans else None,
        "spans": len(spans),
    }
    if duplicates:
        metadata["duplicate_spans"] = duplicates
    if differing:
        metadata["duplicate_spans_differing"] = differing
    _keep_sources(spans, steps, metadata)
    if agent_steps:
        metadata["agent_steps"] = len(set(agent_steps.values()))
    if handoffs:
        metadata["handoffs"] = handoffs
    named = {name: agent_id for agent_id, name in koog_names.items() if name in roster}
    if named:  # the ids the names replaced, kept
        metadata["agent_ids"] = named
        metadata["agent_ids_named_by"] = KOOG_NAMED_BY
    scopes = sorted({s.scope for s in spans if s.scope})
    if scopes:
        metadata["instrumentations"] = scopes
    service = next(
        (s.resource.get("service.name") for s in spans if s.resource.get("service.name")), None
    )
    if service:
        metadata["service"] = service
    if task is None:
        task, unwrapped = _task(root, steps)
        if unwrapped:
            metadata["task_unwrapped"] = unwrapped
    final, final_from = final_answer(order, kinds)
    if final is None:
        final, final_from = last_reply(steps, tree, kinds)
    if final is not None and KEYWORD in final and is_autogen(spans):
        final = without_keyword(final)
        final_from += f", '{KEYWORD}' removed (AutoGen's word for ending the chat)"
        if final is None:
            final_from += ": nothing else was said, so no final answer"
    if final_from:
        metadata["final_answer_from"] = final_from
    # The source records were scrubbed as they were kept; the text taken from them into
    # the steps and the roster is scrubbed here, with the secrets the spans' attributes reveal.
    # Learned from what was read (each kept record was scrubbed alone, so a secret another
    # record reveals, such as a resource's key quoted in a message, is only known here),
    # every copy of a span included: the copy dedupe dropped may be the one that revealed it.
    redactor = Redactor(secrets)
    redactor.learn_data([(s.attributes, s.resource) for s in every])
    return make_trace(
        path,
        id=trace_id,
        task=redactor.text(task) if task else task,
        final_answer=redactor.text(final) if final else final,
        agents=[scrubbed_agent(agent, redactor) for agent in roster.values()],
        steps=[scrubbed(step, redactor) for step in steps],
        source=SourceInfo(format=fmt, path=str(path)),
        metadata=redactor.data(metadata),
    )


def _under_model_calls(order: list[Span], tree: SpanTree, kinds: dict[str, str | None]) -> set[str]:
    """Ids of the spans with an LLM span among their ancestors, in one pass (``order``
    lists each span after its parent), where asking each span's ancestors would take time
    growing with the square of a deep chain's depth."""
    under: set[str] = set()
    for span in order:
        parent = tree.parent(span)
        if parent is not None and (kinds.get(parent.span_id) == "llm" or parent.span_id in under):
            under.add(span.span_id)
    return under


def _inside_call(ancestors: Sequence[Span], kinds: dict[str, str | None]) -> bool:
    """Whether a tool span sits in a model call or another tool span with no agent span
    between (the same call seen twice). A tool span under an agent span that runs inside
    a tool (an agent delegating to another through a tool) is that agent's own call."""
    for a in ancestors:
        kind = kinds[a.span_id]
        if kind == "agent":
            return False
        if kind in ("llm", "tool"):
            return True
    return False


def _keep_sources(spans: list[Span], steps: list[Step], metadata: dict[str, Any]) -> None:
    """Every span's source record, verbatim: on the step it became (``metadata.source``),
    on the step a tool span was attached to (``tool_spans[*].source``), else in the trace's
    ``metadata.other_spans``; resources and scopes once in ``metadata.sources``."""
    used: set[str] = set()
    raws = {s.span_id: s.raw for s in spans if s.raw is not None}
    for step in steps:
        span_id = step.metadata.get("span_id")
        raw = raws.get(str(span_id)) if span_id else None
        if raw is not None:
            step.metadata["source"] = raw
            used.add(str(span_id))
        for tool in step.metadata.get("tool_spans", []):
            found = raws.get(tool["span_id"])
            if found is not None:
                tool["source"] = found
                used.add(tool["span_id"])
        for merged in step.metadata.get("merged_agent_spans", []):
            found = raws.get(merged)
            if found is not None:
                step.metadata.setdefault("merged_sources", []).append(found)
                used.add(merged)
    others = [s.raw for s in spans if s.raw is not None and s.span_id not in used]
    if others:
        metadata["other_spans"] = others
    contexts: dict[str, Any] = {}
    for span in spans:
        if span.context is not None:
            contexts.setdefault(json.dumps(span.context, sort_keys=True, default=str), span.context)
    if contexts:
        metadata["sources"] = list(contexts.values())


def _task(root: Span | None, steps: list[Step]) -> tuple[str, dict[str, str] | None]:
    """The root span's input, else the first user message of the first step that has one
    (with CrewAI's task wrapper removed, and what was removed: see :func:`unwrap_task`)."""
    if root is not None:
        value = span_input(root)
        found = _first_user(value)
        if found:
            return found, None
    for step in steps:
        found = _first_user(step.input_messages)
        if found:
            return unwrap_task(found)
    return "", None


CREWAI_TASK_BEFORE = "\nCurrent Task: "
CREWAI_TASK_AFTER = (
    "\n\nBegin! This is VERY important to you, use the tools available and give your best "
    "Final Answer, your job depends on it!\n\nThought:"
)
"""CrewAI's ``task`` prompt slice, ``"\nCurrent Task: {input}"`` followed (in releases of
2025) by :data:`CREWAI_TASK_AFTER`: the words it wraps around the task's own prompt
(the task description, then its expected output) in an agent's first user message."""


def unwrap_task(text: str) -> tuple[str, dict[str, str] | None]:
    """``text`` without CrewAI's task wrapper, and what was removed (None when nothing
    was): only a message that opens with the wrapper's exact words loses them, and its
    closing words only when they end it; the task's own prompt inside is kept whole."""
    if not text.startswith(CREWAI_TASK_BEFORE):
        return text, None
    body = text[len(CREWAI_TASK_BEFORE) :]
    removed = {"wrapper": "CrewAI task prompt", "before": CREWAI_TASK_BEFORE}
    if body.endswith(CREWAI_TASK_AFTER):
        body = body[: -len(CREWAI_TASK_AFTER)]
        removed["after"] = CREWAI_TASK_AFTER
    if not body.strip():
        return text, None
    return body, removed


def _first_user(value: Any) -> str | None:

    messages = message_list(value)
    if messages:
        return next((m["content"] for m in messages if m["role"] == "user" and m["content"]), None)
    return value if isinstance(value, str) and value.strip() and value[:1] not in "[{" else None
