"""Steps from agent spans that have no LLM span under them (a framework traced without its
model client): each such agent span is its agent's step, the tool spans under it its tool
calls, and the crew, chain or workflow output the final answer."""

from __future__ import annotations

from typing import Any

from faultfinder.traces.importers._messages import (
    input_messages,
    message_list,
    output_messages,
    usage_of,
)
from faultfinder.traces.importers._span_fields import (
    SpanTree,
    agent_span_name,
    clean_message,
    payload_text,
    span_input,
    span_output,
    str_or_none,
    tool_fields,
)
from faultfinder.traces.importers._spans import Span, maybe_json
from faultfinder.traces.schema import Step, ToolCall, ToolResult


def _has_io(span: Span) -> bool:
    a = span.attributes
    return (
        span_input(span) is not None
        or span_output(span) is not None
        or "gen_ai.input.messages" in a
        or "gen_ai.output.messages" in a
    )


def agent_step_spans(
    order: list[Span], tree: SpanTree, kinds: dict[str, str | None]
) -> dict[str, str]:
    """Agent spans that are steps themselves: those with an input or output and no LLM span
    anywhere under them (the model client was not instrumented). Maps each such span id to
    the span id of its step: an agent span nested in another of the same agent (a framework
    that wraps one execution twice) is part of the outer one's step.

    One pass down ``order`` (depth first, parents before children) keeps the path from the
    root with, per agent name, the agent steps on it; each span's subtree is asked about
    once, bottom up. A chain thousands of agent spans deep is read in linear time, where
    searching each span's subtree and ancestors grew with the square of its depth."""
    holds_llm = _holding(order, tree, kinds, "llm")
    owner: dict[str, str] = {}
    path: list[Span] = []
    on_path: dict[str, list[str]] = {}  # agent name -> its agent steps on the path, inner last
    named: dict[str, str] = {}  # span id of an agent step on the path -> its agent name
    for span in order:
        while path and path[-1].span_id != span.parent_id:
            left = path.pop().span_id
            if left in named:
                on_path[named.pop(left)].pop()
        path.append(span)
        if kinds[span.span_id] != "agent" or not _has_io(span) or span.span_id in holds_llm:
            continue
        name = agent_span_name(span)
        same = on_path.setdefault(name, [])
        owner[span.span_id] = owner[same[-1]] if same else span.span_id
        same.append(span.span_id)
        named[span.span_id] = name
    return owner


def _holding(
    order: list[Span], tree: SpanTree, kinds: dict[str, str | None], kind: str
) -> set[str]:
    """Ids of the spans of ``order`` with a span of ``kind`` anywhere under them, children
    before parents, each child read once."""
    found: set[str] = set()
    for span in reversed(order):
        if any(
            kinds.get(c.span_id) == kind or c.span_id in found
            for c in tree.children.get(span.span_id, [])
        ):
            found.add(span.span_id)
    return found


def agent_step(span: Span, agent: str, index: int) -> Step:
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
    if span.hints.get("io_from"):
        metadata["inferred"]["io"] = str(span.hints["io_from"])
    if span.status == "error":
        metadata["status"] = "error"
        if span.status_message:
            metadata["status_message"] = span.status_message
    a = span.attributes
    model = next(
        (str(a[k]) for k in ("gen_ai.response.model", "gen_ai.request.model") if a.get(k)),
        str_or_none(span.hints.get("model")),
    )
    return Step(
        index=index,
        agent=agent,
        role="assistant",
        kind="llm",
        content=content,
        input_messages=[clean_message(m) for m in inputs] if inputs else None,
        model=model,
        usage=usage_of(span),
        started_at=span.start,
        ended_at=span.end,
        source_id=span.span_id,
        metadata=metadata,
    )


def add_tool(step: Step, span: Span, rule: str) -> ToolResult:
    """One tool span as a call and its result on ``step`` (the agent step enclosing it);
    returns the result."""
    fields = tool_fields(span)
    step.tool_calls.append(
        ToolCall(id=fields["call_id"], name=fields["name"], arguments=fields["arguments"])
    )
    result = ToolResult(
        call_id=fields["call_id"],
        name=fields["name"],
        content=fields["content"],
        status=fields["status"],
    )
    step.tool_results.append(result)
    step.metadata.setdefault("tool_spans", []).append({"span_id": span.span_id, "matched_by": rule})
    return result


def final_answer(order: list[Span], kinds: dict[str, str | None]) -> tuple[str | None, str]:
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


def encloses_llm(span: Span, tree: SpanTree, kinds: dict[str, str | None]) -> bool:
    stack = list(tree.children.get(span.span_id, []))
    while stack:
        s = stack.pop()
        if kinds.get(s.span_id) == "llm":
            return True
        if kinds.get(s.span_id) != "agent":
            stack.extend(tree.children.get(s.span_id, []))
    return False
