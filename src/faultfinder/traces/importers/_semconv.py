"""Spans → canonical traces, following the GenAI and OpenInference semantic conventions.

Every LLM call becomes one step; tool executions are attached to the step that asked for
them; the agent of each step is inferred and *how* it was inferred is kept in
``Step.metadata['inferred']``. Steps are ordered by a depth-first walk of the span tree with
siblings in start-time order, so causality (parent before child) wins over clock skew.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from faultfinder.traces.importers._common import make_trace, text_of
from faultfinder.traces.importers._langgraph import span_graph_node_agent
from faultfinder.traces.importers._messages import (
    MESSAGE_EVENTS,
    Message,
    input_messages,
    message_list,
    output_messages,
    request_of,
    usage_of,
)
from faultfinder.traces.importers._spans import Span, maybe_json
from faultfinder.traces.schema import Agent, SourceInfo, Step, ToolCall, ToolResult, Trace

_LLM_OPS = {"chat", "text_completion", "generate_content", "completion", "responses"}
_AGENT_OPS = {"invoke_agent", "create_agent"}
_MLFLOW_KINDS = {"LLM": "llm", "CHAT_MODEL": "llm", "AGENT": "agent", "TOOL": "tool"}
_MESSAGE_PREFIXES = (
    "gen_ai.prompt.",
    "gen_ai.completion.",
    "llm.input_messages.",
    "llm.output_messages.",
)


def span_kind(span: Span) -> str | None:
    """'llm', 'agent', 'tool', 'handoff' or None (any other span)."""
    a = span.attributes
    oi = str(a.get("openinference.span.kind") or "").upper()
    op = str(a.get("gen_ai.operation.name") or "")
    if span.name.startswith(("handoff", "agent_handoff")) or op in ("handoff", "agent_handoff"):
        return "handoff"
    if oi == "LLM" or op in _LLM_OPS:
        return "llm"
    if oi == "AGENT" or op in _AGENT_OPS or a.get("traceloop.span.kind") == "agent":
        return "agent"
    if oi == "TOOL" or op == "execute_tool" or a.get("traceloop.span.kind") == "tool":
        return "tool"
    mlflow = str(maybe_json(a.get("mlflow.spanType")) or "")
    if mlflow in _MLFLOW_KINDS:
        return _MLFLOW_KINDS[mlflow]
    hint = span.hints.get("kind")
    if hint in ("llm", "agent", "tool"):
        return str(hint)
    if oi or op:
        return None  # an explicit kind we do not map (CHAIN, RETRIEVER, embeddings...)
    if "gen_ai.input.messages" in a or "gen_ai.output.messages" in a:
        return "llm"
    if any(k.startswith(_MESSAGE_PREFIXES) for k in a):
        return "llm"
    if any(e.name in MESSAGE_EVENTS for e in span.events):
        return "llm"
    if "gen_ai.tool.name" in a:
        return "tool"
    return None


_PREFIX = re.compile(r"^(?:invoke_agent|create_agent|execute_tool|chat|agent|tool)[ .:]\s*")
_CREW_ROLE = re.compile(r"role='((?:[^'\\]|\\.)*)'")


_AGENT_KEYS = ("gen_ai.agent.name", "agent.name")
_NODE_KEYS = ("graph.node.id", "gen_ai.agent.id")


def named_agent(span: Span, keys: tuple[str, ...] = _AGENT_KEYS + _NODE_KEYS) -> str | None:
    """An agent name written explicitly on the span (``keys`` in order, then the source's
    own hint: a Langfuse LangGraph node, for example, then LangGraph's metadata on the span
    as OpenInference's LangChain instrumentation writes it)."""
    a = span.attributes
    for key in keys:
        value = a.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    if keys[-1] not in _NODE_KEYS:
        return None
    hint = span.hints.get("agent")
    return str(hint) if hint else span_graph_node_agent(a)


def agent_span_name(span: Span) -> str:
    """The name of an agent span: explicit attribute, CrewAI role, else the span name."""
    explicit = named_agent(span) or _str(span.attributes.get("traceloop.entity.name"))
    if explicit:
        return explicit
    value = maybe_json(span.attributes.get("input.value"))
    if isinstance(value, dict) and isinstance(value.get("agent"), str):
        found = _CREW_ROLE.search(value["agent"])  # CrewAI: repr of the Agent object
        if found:
            return found.group(1)
    return _PREFIX.sub("", span.name) or span.name or "agent"


class SpanTree:
    """Parent/child links of one trace's spans, siblings ordered by start time."""

    def __init__(self, spans: list[Span]) -> None:
        self.by_id = {s.span_id: s for s in spans}
        self.children: dict[str | None, list[Span]] = defaultdict(list)
        for position, s in enumerate(spans):
            s.hints.setdefault("_position", position)
            parent = s.parent_id if s.parent_id in self.by_id else None
            self.children[parent].append(s)
        for kids in self.children.values():
            kids.sort(key=_start_key)

    def walk(self) -> list[Span]:
        """All spans, depth first, parents before children, siblings by start time."""
        out: list[Span] = []
        stack = list(reversed(self.children[None]))
        seen: set[str] = set()
        while stack:
            span = stack.pop()
            if span.span_id in seen:
                continue  # a cycle in parent ids: visit each span once
            seen.add(span.span_id)
            out.append(span)
            stack.extend(reversed(self.children.get(span.span_id, [])))
        return out

    def ancestors(self, span: Span) -> list[Span]:
        out: list[Span] = []
        current = self.by_id.get(span.parent_id or "")
        while current is not None and current not in out:
            out.append(current)
            current = self.by_id.get(current.parent_id or "")
        return out


def _start_key(span: Span) -> tuple[float, int]:
    return (span.start.timestamp() if span.start else float("inf"), span.hints.get("_position", 0))


def build_traces(spans: list[Span], *, path: str | Path, fmt: str, id_prefix: str) -> list[Trace]:
    """One canonical trace per trace id, in order of first appearance."""
    groups: dict[str, list[Span]] = {}
    for span in spans:
        groups.setdefault(span.trace_id, []).append(span)
    return [
        build_trace(group, path=path, fmt=fmt, trace_id=f"{id_prefix}/{tid}")
        for tid, group in groups.items()
    ]


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
    spans: list[Span], *, path: str | Path, fmt: str, trace_id: str, task: str | None = None
) -> Trace:
    """The canonical trace of one trace's spans."""
    spans, duplicates, differing = dedupe(spans)
    tree = SpanTree(spans)
    order = tree.walk()
    kinds = {s.span_id: span_kind(s) for s in order}
    agent_steps = _agent_step_spans(order, tree, kinds)
    steps: list[Step] = []
    roster: dict[str, Agent] = {}
    handoffs: list[dict[str, Any]] = []
    step_of_agent_span: dict[str, Step] = {}
    for span in order:
        kind = kinds[span.span_id]
        ancestors = tree.ancestors(span)
        if kind == "agent" and (
            named_agent(span) or span.span_id in agent_steps or _encloses_llm(span, tree, kinds)
        ):
            name = agent_span_name(span)
            roster.setdefault(
                name,
                Agent(name=name, description=_str(span.attributes.get("gen_ai.agent.description"))),
            )
            owner = agent_steps.get(span.span_id)
            if owner == span.span_id:
                step = _agent_step(span, name, index=len(steps))
                steps.append(step)
                step_of_agent_span[span.span_id] = step
            elif owner is not None:
                step_of_agent_span[span.span_id] = step_of_agent_span[owner]
                step_of_agent_span[owner].metadata.setdefault("merged_agent_spans", []).append(
                    span.span_id
                )
        elif kind == "handoff":
            handoffs.append(_handoff(span, ancestors, kinds))
        elif kind == "llm":
            if any(kinds[a.span_id] == "llm" for a in ancestors):
                continue  # the same call seen by a second instrumentation (nested LLM spans)
            steps.append(_llm_step(span, ancestors, kinds, index=len(steps)))
    for span in order:
        if kinds[span.span_id] != "tool":
            continue
        ancestors = tree.ancestors(span)
        if any(kinds[a.span_id] in ("llm", "tool") for a in ancestors):
            continue  # a tool inside a tool (the same call seen twice) or inside a model call
        owner_span = next((a for a in ancestors if kinds[a.span_id] == "agent"), None)
        owner_step = step_of_agent_span.get(owner_span.span_id) if owner_span else None
        if owner_span is not None and owner_step is not None:
            _add_tool(owner_step, span, f"TOOL span under agent span '{owner_span.name}'")
        else:
            _attach_tool(span, tree, kinds, steps)
    for step in steps:
        roster.setdefault(step.agent, Agent(name=step.agent, model=step.model))
        if roster[step.agent].model is None and step.model:
            roster[step.agent].model = step.model
    steps = [s.model_copy(update={"index": i}) for i, s in enumerate(steps)]
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
    scopes = sorted({s.scope for s in spans if s.scope})
    if scopes:
        metadata["instrumentations"] = scopes
    service = next(
        (s.resource.get("service.name") for s in spans if s.resource.get("service.name")), None
    )
    if service:
        metadata["service"] = service
    if task is None:
        task = _task(root, steps)
    final, final_from = _final_answer(order, kinds)
    if final_from:
        metadata["final_answer_from"] = final_from
    return make_trace(
        path,
        id=trace_id,
        task=task,
        final_answer=final,
        agents=list(roster.values()),
        steps=steps,
        source=SourceInfo(format=fmt, path=str(path)),
        metadata=metadata,
    )


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


def span_input(span: Span) -> Any:
    """The span's input payload (OpenInference, Traceloop, MLflow or the source's own)."""
    a = span.attributes
    for key in ("input.value", "traceloop.entity.input", "mlflow.spanInputs"):
        if a.get(key) is not None:
            return a[key]
    return span.hints.get("input")


def span_output(span: Span) -> Any:
    """The span's output payload (OpenInference, Traceloop, MLflow or the source's own)."""
    a = span.attributes
    for key in ("output.value", "traceloop.entity.output", "mlflow.spanOutputs", "final_result"):
        if a.get(key) is not None:
            return a[key]
    return span.hints.get("output")


def _has_io(span: Span) -> bool:
    a = span.attributes
    return (
        span_input(span) is not None
        or span_output(span) is not None
        or "gen_ai.input.messages" in a
        or "gen_ai.output.messages" in a
    )


def _agent_step_spans(
    order: list[Span], tree: SpanTree, kinds: dict[str, str | None]
) -> dict[str, str]:
    """Agent spans that are steps themselves: those with an input or output and no LLM span
    anywhere under them (the model client was not instrumented). Maps each such span id to
    the span id of its step: an agent span nested in another of the same agent (a framework
    that wraps one execution twice) is part of the outer one's step."""
    owner: dict[str, str] = {}
    for span in order:
        if kinds[span.span_id] != "agent" or not _has_io(span):
            continue
        if _subtree_has(span, tree, kinds, "llm"):
            continue
        name = agent_span_name(span)
        outer = next(
            (
                owner[a.span_id]
                for a in tree.ancestors(span)
                if a.span_id in owner and agent_span_name(a) == name
            ),
            None,
        )
        owner[span.span_id] = outer or span.span_id
    return owner


def _subtree_has(span: Span, tree: SpanTree, kinds: dict[str, str | None], kind: str) -> bool:
    stack = list(tree.children.get(span.span_id, []))
    seen: set[str] = set()
    while stack:
        s = stack.pop()
        if s.span_id in seen:
            continue
        seen.add(s.span_id)
        if kinds.get(s.span_id) == kind:
            return True
        stack.extend(tree.children.get(s.span_id, []))
    return False


def payload_text(value: Any) -> str:
    """An agent's or a chain's input or output payload as text: a framework's result object
    (CrewAI's ``raw``, an ``output`` / ``final_output`` / ``content`` field, one chat
    message) reduced to its text; anything else as its JSON text."""
    value = maybe_json(value)
    if isinstance(value, str) and len(value) > 1 and value[0] == value[-1] == '"':
        value = maybe_json(f"[{value}]")  # a JSON string literal (Traceloop's entity output)
        value = value[0] if isinstance(value, list) and value else value
    if isinstance(value, dict):
        for key in ("raw", "final_output", "output", "content", "answer", "result"):
            if isinstance(value.get(key), str):
                return str(value[key])
        messages = message_list(value)
        if messages and len(messages) == 1 and messages[0]["content"]:
            return str(messages[0]["content"])
        if isinstance(value.get("messages"), list):
            value = value["messages"]  # a graph's state (LangGraph): its last reply
    if isinstance(value, list):
        messages = message_list(value)
        replies = [m["content"] for m in messages or [] if m["role"] == "assistant"]
        if replies and replies[-1]:
            return str(replies[-1])
    return text_of(value)


def _agent_step(span: Span, agent: str, index: int) -> Step:
    """The step of an agent span that has no LLM span under it."""
    inputs, in_conv = input_messages(span)
    result = maybe_json(span_output(span))
    if not inputs and isinstance(result, dict) and isinstance(result.get("messages"), list):
        inputs = message_list(result["messages"])  # CrewAI: the agent's conversation
        in_conv = "messages of the agent's output" if inputs else ""
    if not inputs:
        raw = span_input(span)
        inputs = [{"role": "user", "content": payload_text(raw)}] if raw is not None else None
    outputs, out_conv = (
        output_messages(span)
        if "gen_ai.output.messages" in span.attributes
        else (
            None,
            "",
        )
    )
    if outputs:
        content = "\n".join(m["content"] for m in outputs if m.get("content"))
    else:
        raw_out = span_output(span)
        content = payload_text(raw_out) if raw_out is not None else ""
    metadata: dict[str, Any] = {
        "span_id": span.span_id,
        "span_name": span.name,
        "inferred": {
            "agent": f"agent span '{span.name}'",
            "step": "agent span with input/output and no LLM span under it: the content is "
            "the agent's output, its tool calls the TOOL spans under it",
        },
    }
    if in_conv or out_conv:
        metadata["conventions"] = sorted({c for c in (in_conv, out_conv) if c})
    if span.status == "error":
        metadata["status"] = "error"
        if span.status_message:
            metadata["status_message"] = span.status_message
    a = span.attributes
    model = next(
        (str(a[k]) for k in ("gen_ai.response.model", "gen_ai.request.model") if a.get(k)),
        _str(span.hints.get("model")),
    )
    return Step(
        index=index,
        agent=agent,
        role="assistant",
        kind="llm",
        content=content,
        input_messages=[_clean(m) for m in inputs] if inputs else None,
        model=model,
        usage=usage_of(span),
        started_at=span.start,
        ended_at=span.end,
        source_id=span.span_id,
        metadata=metadata,
    )


def _add_tool(step: Step, span: Span, rule: str) -> None:
    """One tool span as a call and its result on ``step`` (the agent step enclosing it)."""
    fields = tool_fields(span)
    step.tool_calls.append(
        ToolCall(id=fields["call_id"], name=fields["name"], arguments=fields["arguments"])
    )
    step.tool_results.append(
        ToolResult(
            call_id=fields["call_id"],
            name=fields["name"],
            content=fields["content"],
            status=fields["status"],
        )
    )
    step.metadata.setdefault("tool_spans", []).append({"span_id": span.span_id, "matched_by": rule})


def _final_answer(order: list[Span], kinds: dict[str, str | None]) -> tuple[str | None, str]:
    """The run's final answer: the root span's output, else the output of the outermost
    span that is neither a model call nor a tool (a crew, chain or workflow span), else
    that of the last agent span not inside another agent span."""
    for n, span in enumerate(order):
        if n and kinds[span.span_id] is not None:
            continue  # below the root, only a crew, chain or workflow span
        text = _output_text(span)
        if text:
            return text, f"output of span '{span.name}'"
    agents = [s for s in order if kinds[s.span_id] == "agent"]
    agents.sort(key=lambda s: s.end.timestamp() if s.end else float("-inf"))
    for span in reversed(agents):  # the agent that finished last
        text = _output_text(span)
        if text:
            return text, f"output of the last agent span '{span.name}'"
    return None, ""


def _output_text(span: Span) -> str | None:
    value = span_output(span)
    if value is not None and value != "":
        return payload_text(value) or None
    if "gen_ai.output.messages" in span.attributes:  # an invoke_agent span's reply
        outputs, _ = output_messages(span)
        return "\n".join(m["content"] for m in outputs or [] if m.get("content")) or None
    return None


def _encloses_llm(span: Span, tree: SpanTree, kinds: dict[str, str | None]) -> bool:
    stack = list(tree.children.get(span.span_id, []))
    while stack:
        s = stack.pop()
        if kinds.get(s.span_id) == "llm":
            return True
        if kinds.get(s.span_id) != "agent":
            stack.extend(tree.children.get(s.span_id, []))
    return False


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _task(root: Span | None, steps: list[Step]) -> str:
    if root is not None:
        value = span_input(root)
        found = _first_user(value)
        if found:
            return found
    for step in steps:
        found = _first_user(step.input_messages)
        if found:
            return found
    return ""


def _first_user(value: Any) -> str | None:
    from faultfinder.traces.importers._messages import message_list

    messages = message_list(value)
    if messages:
        return next((m["content"] for m in messages if m["role"] == "user" and m["content"]), None)
    return value if isinstance(value, str) and value.strip() and value[:1] not in "[{" else None


def _agent_of(span: Span, ancestors: list[Span], kinds: dict[str, str | None]) -> tuple[str, str]:
    """The agent speaking in ``span`` and how that was inferred."""
    own = named_agent(span, _AGENT_KEYS)
    for a in ancestors:
        if kinds[a.span_id] == "agent":
            name = agent_span_name(a)
            how = f"enclosing agent span '{a.name}'"
            if own and own != name:
                how += f" (the span's own agent attribute says '{own}')"
            return name, how
    if own:
        return own, "agent attribute on the span"
    for a in (span, *ancestors):
        named = named_agent(a)
        if named:
            return named, f"graph node of span '{a.name}'"
    service = next(
        (
            str(s.resource["service.name"])
            for s in (span, *ancestors)
            if s.resource.get("service.name")
        ),
        None,
    )
    if service and service != "unknown_service" and not service.startswith("unknown_service:"):
        return service, "service.name (no agent span encloses the call)"
    return "assistant", "default (no agent span, attribute or service name)"


def _llm_step(span: Span, ancestors: list[Span], kinds: dict[str, str | None], index: int) -> Step:
    agent, how = _agent_of(span, ancestors, kinds)
    inputs, in_conv = input_messages(span)
    outputs, out_conv = output_messages(span)
    content = "\n".join(m["content"] for m in outputs or [] if m.get("content"))
    calls = [
        ToolCall(id=c.get("id"), name=c["function"]["name"], arguments=c["function"]["arguments"])
        for m in outputs or []
        for c in m.get("tool_calls", [])
    ]
    a = span.attributes
    model = next(
        (
            str(a[k])
            for k in ("gen_ai.response.model", "gen_ai.request.model", "llm.model_name")
            if a.get(k)
        ),
        _str(span.hints.get("model")),
    )
    metadata: dict[str, Any] = {
        "span_id": span.span_id,
        "span_name": span.name,
        "inferred": {"agent": how},
    }
    if in_conv or out_conv:
        metadata["conventions"] = sorted({c for c in (in_conv, out_conv) if c})
    finish = [m["finish_reason"] for m in outputs or [] if m.get("finish_reason")]
    if finish:
        metadata["finish_reason"] = finish[0]
    if span.status == "error":
        metadata["status"] = "error"
        if span.status_message:
            metadata["status_message"] = span.status_message
    return Step(
        index=index,
        agent=agent,
        role="assistant",
        kind="llm",
        content=content,
        input_messages=[_clean(m) for m in inputs] if inputs else None,
        request=request_of(span),
        tool_calls=calls,
        model=model,
        usage=usage_of(span),
        started_at=span.start,
        ended_at=span.end,
        source_id=span.span_id,
        metadata=metadata,
    )


def _clean(message: Message) -> Message:
    return {k: v for k, v in message.items() if k != "finish_reason" and v is not None}


def tool_fields(span: Span) -> dict[str, Any]:
    """Name, call id, arguments, result and status of a tool span."""
    a = span.attributes
    name = (
        _str(a.get("gen_ai.tool.name"))
        or _str(a.get("tool.name"))
        or _str(a.get("traceloop.entity.name"))
        or span.hints.get("tool_name")
    )
    call_id = (
        _str(a.get("gen_ai.tool.call.id"))
        or _str(a.get("tool_call.id"))
        or span.hints.get("call_id")
    )
    args = a.get("gen_ai.tool.call.arguments", span_input(span))
    result = a.get("gen_ai.tool.call.result", span_output(span))
    status = "error" if span.status == "error" else "success"
    return {
        "name": name or _PREFIX.sub("", span.name) or span.name,
        "call_id": call_id,
        "arguments": text_of(args),
        "content": text_of(result)
        if span.status != "error" or result is not None
        else (span.status_message or ""),
        "status": status,
    }


def _attach_tool(
    span: Span, tree: SpanTree, kinds: dict[str, str | None], steps: list[Step]
) -> None:
    """Attach a tool execution to the step that asked for it (by call id, then name, then
    the latest earlier step of the same agent); without any earlier step it becomes a step."""
    fields = tool_fields(span)
    agent, how = _agent_of(span, tree.ancestors(span), kinds)
    before = [
        s for s in steps if s.started_at is None or span.start is None or s.started_at <= span.start
    ]
    answered = {r.call_id for s in steps for r in s.tool_results if r.call_id}
    target: Step | None = None
    rule = ""
    if fields["call_id"]:
        target = next(
            (s for s in reversed(steps) if any(c.id == fields["call_id"] for c in s.tool_calls)),
            None,
        )
        rule = "call id"
    if target is None:
        target = next(
            (
                s
                for s in reversed(before)
                if any(c.name == fields["name"] and c.id not in answered for c in s.tool_calls)
            ),
            None,
        )
        rule = "tool name"
    if target is None:
        target = next((s for s in reversed(before) if s.agent == agent), None)
        rule = "latest earlier step of the same agent"
    result = ToolResult(
        call_id=fields["call_id"],
        name=fields["name"],
        content=fields["content"],
        status=fields["status"],
    )
    if target is None:
        steps.append(
            Step(
                index=len(steps),
                agent=agent,
                role="tool",
                kind="tool",
                content=fields["content"],
                tool_calls=[
                    ToolCall(
                        id=fields["call_id"], name=fields["name"], arguments=fields["arguments"]
                    )
                ],
                tool_results=[result],
                started_at=span.start,
                ended_at=span.end,
                source_id=span.span_id,
                metadata={
                    "span_id": span.span_id,
                    "span_name": span.name,
                    "inferred": {"agent": how},
                },
            )
        )
        return
    asked = [c for c in target.tool_calls if c.name == fields["name"]]
    given = [r for r in target.tool_results if r.name == fields["name"]]
    known = fields["call_id"] and any(c.id == fields["call_id"] for c in target.tool_calls)
    if not known and len(given) >= len(asked):  # every call of that name already answered
        target.tool_calls.append(
            ToolCall(id=fields["call_id"], name=fields["name"], arguments=fields["arguments"])
        )
    target.tool_results.append(result)
    target.metadata.setdefault("tool_spans", []).append(
        {"span_id": span.span_id, "matched_by": rule}
    )


_HANDOFF_TARGET = re.compile(r"(?:->|to)\s*(.+)$")
"""'... -> Target' or '... to Target': the rest of the name, which must be its last line."""


def _last_line_reach(name: str) -> int:
    """Where a match of :data:`_HANDOFF_TARGET` can start: its '.+' is the name's last line,
    reached from a 2-character '->' or 'to' and the blanks after it. Searching from there
    (the same first match) keeps a long name with many 'to's linear, where each would
    otherwise scan to the end of its line and fail there."""
    body_end = len(name) - 1 if name.endswith("\n") else len(name)
    start = name.rfind("\n", 0, body_end)
    if start < 0:
        return 0
    while start > 0 and name[start - 1].isspace():
        start -= 1
    return max(0, start - 2)


def _handoff(span: Span, ancestors: list[Span], kinds: dict[str, str | None]) -> dict[str, Any]:
    a = span.attributes
    source = next((agent_span_name(x) for x in ancestors if kinds[x.span_id] == "agent"), None)
    source = _str(a.get("gen_ai.handoff.from_agent")) or source
    target = _str(a.get("gen_ai.handoff.to_agent")) or _str(a.get("handoff.to_agent"))
    if target is None:
        found = _HANDOFF_TARGET.search(span.name, _last_line_reach(span.name))
        target = found.group(1).strip() if found else None
    return {
        "span_id": span.span_id,
        "from": source,
        "to": target,
        "at": span.start.isoformat() if span.start else None,
    }
