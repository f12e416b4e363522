"""What a model-call span, a tool span and a handoff span become, and which agent made each
call: the per-span half of the span-to-step mapping (``_semconv`` walks the spans and
assembles the trace; ``_agent_spans`` does the same for agent spans with no LLM span under
them).

A model call is one step whose agent is inferred, with *how* it was inferred kept in
``Step.metadata['inferred']``: an enclosing agent span, the span's own agent attribute, a
graph node, a chain holding the call (LangSmith's rule), the service name, else
'assistant'. A tool execution is attached to the step that asked for it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from faultfinder.traces.importers._langgraph import INNER_NODES
from faultfinder.traces.importers._messages import (
    input_messages,
    output_messages,
    request_of,
    response_finish_reasons,
    usage_of,
)
from faultfinder.traces.importers._span_fields import (
    AGENT_KEYS,
    SpanTree,
    agent_span_name,
    clean_message,
    named_agent,
    str_or_none,
    tool_fields,
)
from faultfinder.traces.importers._spans import Span
from faultfinder.traces.importers._tool_targets import LaterAnswers, ToolTargets
from faultfinder.traces.schema import Step, ToolCall, ToolResult


def agent_of(
    span: Span, ancestors: Sequence[Span], kinds: dict[str, str | None], chains: set[str]
) -> tuple[str, str]:
    """The agent speaking in ``span`` and how that was inferred (``chains``: the span ids
    of :func:`chain_agents`)."""
    own = named_agent(span, AGENT_KEYS)
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
            hinted = a.hints.get("agent_from") if named == a.hints.get("agent") else None
            return named, str(hinted or f"graph node of span '{a.name}'")
    chain = next((a for a in ancestors if a.span_id in chains), None)
    if chain is not None:
        return chain.name, f"chain span '{chain.name}' holding model or tool calls (no agent span)"
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


WRAPPER_CHAINS = frozenset(
    {
        "LangGraph",  # a compiled graph's default name
        "__start__",
        "__end__",
        "ChannelWrite",
        "ChannelRead",
        "Branch",
        "RunnableSequence",
        "RunnableParallel",
        "RunnableMap",
        "RunnableLambda",
        "RunnableCallable",
        "RunnableAssign",
        "RunnablePassthrough",
        "RunnablePick",
        "RunnableBranch",
        "RunnableBinding",
        "RunnableEach",
        "RunnableRetry",
        "RunnableGenerator",
        "RunnableWithFallbacks",
        "RunnableWithMessageHistory",
    }
)
"""Span names LangChain and LangGraph give the runnables they compose (a class name, with
``<...>`` after some): structure, never an agent the user named."""


def chain_agents(order: list[Span], tree: SpanTree, kinds: dict[str, str | None]) -> set[str]:
    """Span ids of the chains taken as agents by the LangSmith reader's rule, for the calls
    no agent span encloses: an OpenInference CHAIN span that holds a model call or a tool
    span, directly or through LangChain's and LangGraph's own wrapper chains
    (:data:`WRAPPER_CHAINS`, a prebuilt agent's inner nodes); never the root span (the run
    itself, as LangSmith's root run)."""
    found: set[str] = set()
    for span in order:
        if kinds[span.span_id] in ("llm", "tool"):
            holder = _holding_chain(tree.ancestors(span))
            if holder is not None:
                found.add(holder.span_id)
    return found


def _holding_chain(ancestors: Sequence[Span]) -> Span | None:
    """The first CHAIN span up from a call that is not a wrapper chain, or None when a span
    of another kind or the root comes first."""
    for n, span in enumerate(ancestors):
        if str(span.attributes.get("openinference.span.kind") or "").upper() != "CHAIN":
            return None
        if n == len(ancestors) - 1:
            return None  # the root: the run itself, as LangSmith's root run
        name = span.name.split("<", 1)[0].strip()
        if name and name not in WRAPPER_CHAINS and name not in INNER_NODES:
            return span
    return None


def llm_step(
    span: Span,
    ancestors: Sequence[Span],
    kinds: dict[str, str | None],
    chains: set[str],
    index: int,
) -> Step:
    agent, how = agent_of(span, ancestors, kinds, chains)
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
        str_or_none(span.hints.get("model")),
    )
    metadata: dict[str, Any] = {
        "span_id": span.span_id,
        "span_name": span.name,
        "inferred": {"agent": how},
    }
    if in_conv or out_conv:
        metadata["conventions"] = sorted({c for c in (in_conv, out_conv) if c})
    finish = finish_reasons(outputs or [], span)
    if finish:
        metadata["finish_reason"] = finish[0]
        if len(finish) > 1:
            metadata["finish_reasons"] = finish
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
        input_messages=[clean_message(m) for m in inputs] if inputs else None,
        request=request_of(span),
        tool_calls=calls,
        model=model,
        usage=usage_of(span),
        started_at=span.start,
        ended_at=span.end,
        source_id=span.span_id,
        metadata=metadata,
    )


def finish_reasons(outputs: list[dict[str, Any]], span: Span) -> list[str]:
    """Why the model stopped, each reason once: the output messages' own finish reasons
    first, then the span's ``gen_ai.response.finish_reasons`` (an export may hold either,
    or both: Koog writes both, its tool-call replies' only in the messages)."""
    found: list[str] = []
    for reason in [
        *(str(m["finish_reason"]) for m in outputs if m.get("finish_reason")),
        *response_finish_reasons(span),
    ]:
        if reason not in found:
            found.append(reason)
    return found


def attach_tool(
    span: Span,
    tree: SpanTree,
    kinds: dict[str, str | None],
    chains: set[str],
    targets: ToolTargets,
) -> ToolResult:
    """Attach a tool execution to the step that asked for it (by call id, then name, then
    the latest earlier step of the same agent); without any earlier step it becomes a step.
    Returns the result it added."""
    fields = tool_fields(span)
    agent, how = agent_of(span, tree.ancestors(span), kinds, chains)
    target: Step | None = None
    rule = ""
    if fields["call_id"]:
        target = targets.with_id(fields["call_id"])
        rule = "call id"
    if target is None:
        target = next(
            (
                s
                for s in targets.earlier(("name", fields["name"]), span.start)
                if targets.unanswered(s, fields["name"])
            ),
            None,
        )
        rule = "tool name"
    if target is None:
        target = next(targets.earlier(("agent", agent), span.start), None)
        rule = "latest earlier step of the same agent"
    result = ToolResult(
        call_id=fields["call_id"],
        name=fields["name"],
        content=fields["content"],
        status=fields["status"],
    )
    if target is None:
        targets.add(
            Step(
                index=len(targets.steps),
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
        return result
    asked, given = targets.counts(target, fields["name"])  # calls and results of that name
    if not targets.asks(target, fields["call_id"]) and given >= asked:  # each one answered
        target.tool_calls.append(
            ToolCall(id=fields["call_id"], name=fields["name"], arguments=fields["arguments"])
        )
    target.tool_results.append(result)
    targets.note(target)
    target.metadata.setdefault("tool_spans", []).append(
        {"span_id": span.span_id, "matched_by": rule}
    )
    return result


def fill_call_ids(
    position: int,
    steps: list[Step],
    started: dict[int, tuple[Span, ToolResult]],
    later_answers: LaterAnswers,
) -> None:
    """Call ids for the results of ``steps[position]`` whose tool span named none (the
    OpenAI Agents SDK's under OpenInference: attached by tool name), taken from a later
    model call's input, which answers the call by id (a Responses API
    ``function_call_output`` item, a ``tool`` message). Only when unambiguous: of the
    step's calls of that name, those answered there and claimed by no other result are
    exactly one for exactly one such result, or else exactly one whose answer is this
    result's content, that content answering no other of them. ``tool_spans`` says where
    the id came from (``call_id_from``)."""
    step = steps[position]
    missing = [r for r in step.tool_results if r.call_id is None and r.name]
    if not missing:
        return
    answers: dict[str, tuple[str, int]] = {}  # call id -> (answer, position of the step)
    for call in step.tool_calls:
        found = later_answers.after(call.id, position)
        if call.id is not None and found is not None:
            answers[call.id] = found
    claimed = {r.call_id for r in step.tool_results if r.call_id}
    # Grouped once, so a step with thousands of results is read in linear time.
    missing_named: dict[str, list[ToolResult]] = {}
    for r in missing:
        missing_named.setdefault(str(r.name), []).append(r)
    answered_named: dict[str, list[ToolCall]] = {}
    for c in step.tool_calls:
        if c.id in answers:
            answered_named.setdefault(c.name, []).append(c)
    entries: dict[Any, list[dict[str, Any]]] = {}
    for entry in step.metadata.get("tool_spans", []):
        entries.setdefault(entry.get("span_id"), []).append(entry)
    for name, results in missing_named.items():
        calls = [c for c in answered_named.get(name, []) if c.id not in claimed]
        pairs: list[tuple[ToolResult, str, str]] = []
        if len(calls) == 1 and len(results) == 1:
            pairs.append((results[0], str(calls[0].id), f"the only unanswered '{name}' call"))
        else:
            answering: dict[str, list[ToolCall]] = {}  # answer -> the calls it answers
            for c in calls:
                answering.setdefault(answers[str(c.id)][0], []).append(c)
            contents = Counter(r.content for r in results)
            for result in results:
                same = answering.get(result.content, [])
                if len(same) == 1 and contents[result.content] == 1:
                    why = f"the only '{name}' call answered with this result's content"
                    pairs.append((result, str(same[0].id), why))
        for result, call_id, why in pairs:
            result.call_id = call_id
            claimed.add(call_id)
            later = steps[answers[call_id][1]]
            source = started.get(id(result))
            for entry in entries.get(source[0].span_id, []) if source is not None else []:
                entry["call_id_from"] = (
                    f"input of step {answers[call_id][1]} "
                    f"(span {later.metadata.get('span_id')}): {why}"
                )


def order_tied_results(step: Step, started: dict[int, tuple[Span, ToolResult]]) -> None:
    """Results of tool spans that started at the same instant (parallel calls, timed to
    the millisecond) in the order the step asked for the calls, matched by call id; the
    walk left them in the order the file happened to list the spans. Other results keep
    their order, and ``metadata.tool_spans`` follows the results. ``started`` maps each
    result attached from a span (by ``id``) to that span and the result."""
    position = {c.id: n for n, c in enumerate(step.tool_calls) if c.id}
    results = step.tool_results
    ordered: list[ToolResult] = []
    i = 0
    while i < len(results):
        start = _start_of(results[i], started)
        j = i + 1
        while j < len(results) and start is not None and _start_of(results[j], started) == start:
            j += 1
        group = results[i:j]
        group.sort(key=lambda r: position.get(r.call_id or "", len(position)))
        ordered.extend(group)
        i = j
    if all(a is b for a, b in zip(ordered, results, strict=True)):
        return
    step.tool_results = ordered
    rank = {started[id(r)][0].span_id: n for n, r in enumerate(ordered) if id(r) in started}
    spans = step.metadata.get("tool_spans")
    if isinstance(spans, list):
        spans.sort(key=lambda entry: rank.get(entry.get("span_id"), -1))


def _start_of(result: ToolResult, started: dict[int, tuple[Span, ToolResult]]) -> Any:
    found = started.get(id(result))
    return found[0].start if found is not None else None


_ASKS_FOR_TOOLS = frozenset({"tool_calls", "tool_call", "function_call", "tool_use"})
"""Finish reasons that say the model stopped to call a tool: the run was not over
(OpenAI's ``tool_calls`` / ``function_call``, OTel GenAI output messages' ``tool_call``,
Anthropic's ``tool_use``)."""


def _asked_for_tools(step: Step) -> bool:
    several = step.metadata.get("finish_reasons")
    reasons = [step.metadata.get("finish_reason"), *(several if isinstance(several, list) else [])]
    return any(r in _ASKS_FOR_TOOLS for r in reasons if isinstance(r, str))


_CHECKS = frozenset({"GUARDRAIL", "EVALUATOR"})
"""OpenInference kinds of spans that judge the run's output: a model call inside one is a
check, not the run's answer."""


def last_reply(
    steps: list[Step], tree: SpanTree, kinds: dict[str, str | None]
) -> tuple[str | None, str]:
    """The run's final answer when no span records the run's output: the reply of its last
    model call, when that call ended the run. Agent frameworks whose agent spans carry no
    output (the OpenAI Agents SDK under OpenInference, Koog) end a run on a model reply
    that asks for no tool; that reply is the run's output. Nothing is taken when the last
    step asked for a tool or holds tool results (the run was cut off), has no text, failed,
    is not the last call to end, sits inside a guardrail or evaluator span, or when the
    run or an agent around the call ended in error."""
    if not steps:
        return None, ""
    last = steps[-1]
    span = tree.by_id.get(str(last.metadata.get("span_id") or ""))
    if (
        span is None
        or kinds.get(span.span_id) != "llm"
        or last.kind != "llm"
        or last.tool_calls
        or last.tool_results
        or not last.content.strip()
        or last.metadata.get("status") == "error"
        or _asked_for_tools(last)
    ):
        return None, ""
    ends = [s.ended_at for s in steps if s.kind == "llm" and s.ended_at is not None]
    if last.ended_at is not None and ends and last.ended_at < max(ends):
        return None, ""  # an earlier step (in tree order) ended later: no clear last call
    ancestors = tree.ancestors(span)
    for a in ancestors:
        if a.status == "error":
            return None, ""
        if str(a.attributes.get("openinference.span.kind") or "").upper() in _CHECKS:
            return None, ""
    roots = tree.children.get(None, [])
    if any(r.status == "error" for r in roots):
        return None, ""
    return last.content, (
        f"reply of the last model call '{span.name}' ({span.span_id}), which asked for no "
        "tool: no span records the run's output"
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


def handoff(span: Span, ancestors: Sequence[Span], kinds: dict[str, str | None]) -> dict[str, Any]:
    """What a handoff span records: from which agent to which, and when."""
    a = span.attributes
    source = next((agent_span_name(x) for x in ancestors if kinds[x.span_id] == "agent"), None)
    source = str_or_none(a.get("gen_ai.handoff.from_agent")) or source
    target = str_or_none(a.get("gen_ai.handoff.to_agent")) or str_or_none(a.get("handoff.to_agent"))
    if target is None:
        found = _HANDOFF_TARGET.search(span.name, _last_line_reach(span.name))
        target = found.group(1).strip() if found else None
    return {
        "span_id": span.span_id,
        "from": source,
        "to": target,
        "at": span.start.isoformat() if span.start else None,
    }
