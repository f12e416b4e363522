"""AutoGen's runtime spans: what they say about the GenAI spans of an AutoGen AgentChat run.

autogen-core (0.4 and later) writes `invoke_agent` and `execute_tool` spans that carry
names and ids only: no input, no output, no tool arguments, no result. Its agent runtime
(`SingleThreadedAgentRuntime`, the gRPC worker runtime) writes a span for every message it
delivers, `autogen process <agent type>`, whose `message` attribute holds the message as
JSON: the task (a group chat's start), each agent's response (its chat message and inner
messages: the tool call requests and their executions) and the streamed events. This module
gives the GenAI spans what those deliveries say, as the hints the span readers fall back
on (``input``, ``output``, ``agent``); what a span records itself always wins.

- an `invoke_agent` span with no input or output of its own: its output is the response
  of that agent created while the span was open (`created_at` inside the span), its input
  the messages delivered to the agent before the span started, with its own earlier
  replies, in order;
- an `execute_tool` span: its arguments and result from the request and execution events
  with its call id;
- a model call under a delivery and no agent span (a SelectorGroupChat's speaker
  selection): its agent is the delivery's recipient (`SelectorGroupChatManager`), not the
  service name.

Without a span of the user's around the run, the runtime starts a new trace for every
message it sends and ties each delivery to the span that sent it by a span link only;
:func:`linked_runs` puts the traces so linked back together, one run each.

The run's final answer loses the ``TERMINATE`` keyword an agent says to end the chat
(:func:`without_keyword`), as the AG2 reader's does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from faultfinder.errors import TraceFormatError
from faultfinder.traces.importers._common import text_of
from faultfinder.traces.importers._messages import Message
from faultfinder.traces.importers._spans import Span, maybe_json, norm_id

_TEAM_SUFFIX = re.compile(r"_[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}$")
"""AgentChat registers each participant's agent type as ``<name>_<team id>``."""

_OWN_IO = ("gen_ai.input.messages", "gen_ai.output.messages", "input.value", "output.value")


KEYWORD = "TERMINATE"
"""The word AgentChat's documented termination (``TextMentionTermination("TERMINATE")``)
and its agents' default prompts use to end a chat: a signal to the team, not the answer."""
_KEYWORD = re.compile(rf"(?<![A-Za-z0-9_]){KEYWORD}(?![A-Za-z0-9_])")


def is_autogen(spans: list[Span]) -> bool:
    """Whether the spans include autogen-core's own (GenAI spans of ``gen_ai.system``
    ``autogen``)."""
    return any(s.attributes.get("gen_ai.system") == "autogen" for s in spans)


def without_keyword(answer: str) -> str | None:
    """``answer`` without each ``TERMINATE`` that stands as a word (a word containing it,
    such as ``TERMINATED``, is kept), blanks around the answer trimmed; None when nothing
    is left, as the AG2 reader gives none for a last message that only ends the chat."""
    kept = _KEYWORD.sub("", answer)
    return kept.strip() or None


def linked_runs(spans: list[Span]) -> dict[str, str]:
    """For each trace id, the trace id of the run it belongs to: traces joined by the span
    links of AutoGen's runtime spans (a delivery's link to the span that sent the message),
    when both ends are runtime spans in ``spans``; a run is named by its trace that appears
    first. Links of other spans join nothing (a link alone does not say two traces are one
    run)."""
    runtime = {s.span_id: s for s in spans if _is_runtime(s)}
    first: dict[str, int] = {}
    for n, span in enumerate(spans):
        first.setdefault(span.trace_id, n)
    boss: dict[str, str] = {}

    def find(tid: str) -> str:
        while boss.get(tid, tid) != tid:
            boss[tid] = boss.get(boss[tid], boss[tid])
            tid = boss[tid]
        return tid

    for span in runtime.values():
        for linked in _linked_span_ids(span):
            other = runtime.get(linked)
            if other is None:
                continue
            a, b = find(span.trace_id), find(other.trace_id)
            if a != b:
                a, b = sorted((a, b), key=first.__getitem__)
                boss[b] = a
    return {tid: find(tid) for tid in first}


def _is_runtime(span: Span) -> bool:
    return (span.scope or "").startswith("autogen") and bool(
        span.attributes.get("messaging.operation")
    )


def _linked_span_ids(span: Span) -> list[str]:
    """The span ids ``span`` links to, as its source record holds them (OTLP ``links``);
    a link whose id cannot be read links nothing."""
    links = (span.raw or {}).get("links")
    found: list[str] = []
    for link in links if isinstance(links, list) else []:
        value = link.get("spanId", link.get("span_id")) if isinstance(link, dict) else None
        try:
            span_id = norm_id(value, path="", where="links", size=8)
        except TraceFormatError:
            continue
        if span_id:
            found.append(span_id)
    return found


@dataclass
class _Delivery:
    span: Span
    recipient: str
    message: dict[str, Any]


def runtime_hints(spans: list[Span]) -> None:
    """Hints on ``spans`` from the AutoGen runtime deliveries among them (none: no change)."""
    deliveries = _deliveries(spans)
    if not deliveries:
        return
    for d in deliveries:
        d.span.hints.setdefault("agent", d.recipient)
        d.span.hints.setdefault(
            "agent_from", f"AutoGen runtime span '{d.span.name}' delivering to '{d.recipient}'"
        )
    requests: dict[str, dict[str, Any]] = {}
    executions: dict[str, dict[str, Any]] = {}
    for item in _items(deliveries):
        content = item.get("content")
        calls = content if isinstance(content, list) else []
        for call in calls:
            if not isinstance(call, dict):
                continue
            if item.get("type") == "ToolCallRequestEvent" and isinstance(call.get("id"), str):
                requests.setdefault(call["id"], call)
            if item.get("type") == "ToolCallExecutionEvent" and isinstance(
                call.get("call_id"), str
            ):
                executions.setdefault(call["call_id"], call)
    concerning: dict[str, list[_Delivery]] = {}  # agent name -> its replies and its inputs
    for d in deliveries:
        named = d.message.get("name")
        for agent in {d.recipient, named} if isinstance(named, str) else {d.recipient}:
            concerning.setdefault(agent, []).append(d)
    for span in spans:
        a = span.attributes
        if any(k in a for k in _OWN_IO) or a.get("gen_ai.system") != "autogen":
            continue
        op = a.get("gen_ai.operation.name")
        name = a.get("gen_ai.agent.name")
        if op == "execute_tool":
            _tool_hints(span, requests, executions)
        elif op == "invoke_agent" and isinstance(name, str) and name in concerning:
            _agent_hints(span, name, concerning[name])


def _deliveries(spans: list[Span]) -> list[_Delivery]:
    found: list[_Delivery] = []
    for span in spans:
        a = span.attributes
        recipient = a.get("recipient_agent_type")
        if a.get("messaging.operation") != "process" or not isinstance(recipient, str):
            continue
        # Text that is not a JSON object stays text ('No Message', for an acknowledgement;
        # JSON too deep to decode, or escaping a lone surrogate: untrusted, kept as written).
        message = maybe_json(a.get("message"))
        if isinstance(message, dict):
            found.append(_Delivery(span, _TEAM_SUFFIX.sub("", recipient), message))
    found.sort(key=lambda d: d.span.start.timestamp() if d.span.start else 0.0)
    return found


def _items(deliveries: list[_Delivery]) -> list[dict[str, Any]]:
    """Every chat message and event the deliveries carry, each once (by id), in order."""
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    for d in deliveries:
        for item in _carried(d.message):
            key = str(item.get("id") or json.dumps(item, sort_keys=True, default=str))
            if key not in seen:
                seen.add(key)
                out.append(item)
    return out


def _carried(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The chat messages and events of one delivered message: a start's ``messages``, a
    streamed ``message``, a response's inner messages and chat message."""
    found: list[Any] = []
    if isinstance(message.get("messages"), list):
        found.extend(message["messages"])
    if isinstance(message.get("message"), dict):
        found.append(message["message"])
    response = message.get("response")
    if isinstance(response, dict):
        if isinstance(response.get("inner_messages"), list):
            found.extend(response["inner_messages"])
        found.append(response.get("chat_message"))
    return [m for m in found if isinstance(m, dict)]


def _tool_hints(
    span: Span, requests: dict[str, dict[str, Any]], executions: dict[str, dict[str, Any]]
) -> None:
    call_id = span.attributes.get("gen_ai.tool.call.id")
    if not isinstance(call_id, str):
        return
    if call_id in requests and "gen_ai.tool.call.arguments" not in span.attributes:
        span.hints.setdefault("input", requests[call_id].get("arguments"))
    if call_id in executions and "gen_ai.tool.call.result" not in span.attributes:
        span.hints.setdefault("output", text_of(executions[call_id].get("content")))


def _agent_hints(span: Span, name: str, deliveries: list[_Delivery]) -> None:
    """The agent's reply created while ``span`` was open, and what it had been given."""
    if span.start is None or span.end is None:
        return
    reply: dict[str, Any] | None = None
    earlier: list[tuple[datetime, dict[str, Any]]] = []
    for d in deliveries:
        response = d.message.get("response")
        chat = response.get("chat_message") if isinstance(response, dict) else None
        if d.message.get("name") == name and isinstance(chat, dict):
            created = _created(chat)
            if created is not None and span.start <= created <= span.end:
                reply = reply or chat
            elif created is not None and created < span.start:
                earlier.append((created, chat))
        elif d.recipient == name and d.span.start is not None and d.span.start < span.start:
            for item in _carried(d.message):
                created = _created(item) or d.span.start
                earlier.append((created, item))
    if reply is None:
        return
    history: list[Message] = []
    seen: set[str] = set()
    for _, item in sorted(earlier, key=lambda pair: pair[0]):
        key = str(item.get("id"))
        if key in seen or not isinstance(item.get("content"), str):
            continue  # events (tool calls) are the agent's own steps, not its input
        seen.add(key)
        source = str(item.get("source") or "user")
        role = "assistant" if source == name else "user"
        history.append({"role": role, "content": item["content"], "name": source})
    span.hints.setdefault("output", text_of(reply.get("content")))
    if history:
        span.hints.setdefault("input", history)
    span.hints.setdefault(
        "io_from",
        "AutoGen runtime spans: the messages delivered to the agent before the span, and "
        "its response created while the span was open",
    )


def _created(item: dict[str, Any]) -> datetime | None:
    value = item.get("created_at")
    if not isinstance(value, str):
        return None
    try:
        created = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return created if created.tzinfo is not None else None
