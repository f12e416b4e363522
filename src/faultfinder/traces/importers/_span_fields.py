"""What one span says, by the GenAI, OpenInference, Traceloop and MLflow conventions: its
kind, its agent, its input and output payloads, a tool span's fields; and the tree of one
trace's spans. Shared by the span-to-step mappings (``_semconv``, ``_agent_spans``)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any, overload

from faultfinder.traces.importers._common import text_of
from faultfinder.traces.importers._langgraph import span_graph_node_agent
from faultfinder.traces.importers._messages import (
    MESSAGE_EVENTS,
    Message,
    chat_message,
    message_list,
)
from faultfinder.traces.importers._spans import Span, maybe_json

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


KIND_PREFIX = re.compile(r"^(?:invoke_agent|create_agent|execute_tool|chat|agent|tool)[ .:]\s*")


_CREW_ROLE = re.compile(r"role='((?:[^'\\]|\\.)*)'")


AGENT_KEYS = ("gen_ai.agent.name", "agent.name")


_NODE_KEYS = ("graph.node.id", "gen_ai.agent.id")


def named_agent(span: Span, keys: tuple[str, ...] = AGENT_KEYS + _NODE_KEYS) -> str | None:
    """An agent name written explicitly on the span (``keys`` in order, then the source's
    own hint: a Langfuse LangGraph node, for example, then LangGraph's metadata on the span
    as OpenInference's LangChain instrumentation writes it)."""
    a = span.attributes
    for key in keys:
        value = a.get(key)
        if isinstance(value, str) and value.strip():
            if key == "gen_ai.agent.id" and span.hints.get("agent_for_id"):
                return str(span.hints["agent_for_id"])  # Koog: a generated id (_koog.py)
            return value.strip()
    if keys[-1] not in _NODE_KEYS:
        return None
    hint = span.hints.get("agent")
    return str(hint) if hint else span_graph_node_agent(a)


def agent_span_name(span: Span) -> str:
    """The name of an agent span: explicit attribute, CrewAI role, else the span name."""
    explicit = named_agent(span) or str_or_none(span.attributes.get("traceloop.entity.name"))
    if explicit:
        return explicit
    value = maybe_json(span.attributes.get("input.value"))
    if isinstance(value, dict) and isinstance(value.get("agent"), str):
        found = _CREW_ROLE.search(value["agent"])  # CrewAI: repr of the Agent object
        if found:
            return found.group(1)
    return KIND_PREFIX.sub("", span.name) or span.name or "agent"


class SpanTree:
    """Parent/child links of one trace's spans, siblings ordered by start time."""

    def __init__(self, spans: list[Span]) -> None:
        self.by_id = {s.span_id: s for s in spans}
        self._counts: dict[str, int] = {}
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

    def parent(self, span: Span) -> Span | None:
        """The span's parent, or None for a root (or a parent not in the trace)."""
        return self.by_id.get(span.parent_id or "")

    def ancestors(self, span: Span) -> Ancestors:
        """The span's ancestors, nearest first (see :class:`Ancestors`)."""
        return Ancestors(self, span)

    def count_from(self, span: Span | None) -> int:
        """How many spans are met going up from ``span`` (itself included), each once:
        memoised per span, so every count of a trace together costs one pass over it."""
        if span is None:
            return 0
        counts = self._counts
        path: list[Span] = []
        on_path: dict[str, int] = {}
        current: Span | None = span
        while current is not None and current.span_id not in counts:
            if current.span_id in on_path:  # a cycle in parent ids: each of it counts all
                start = on_path[current.span_id]
                for member in path[start:]:
                    counts[member.span_id] = len(path) - start
                del path[start:]
                break
            on_path[current.span_id] = len(path)
            path.append(current)
            current = self.parent(current)
        above = counts[current.span_id] if current is not None else 0
        for member in reversed(path):
            above += 1
            counts[member.span_id] = above
        return counts[span.span_id]


class Ancestors(Sequence[Span]):
    """A span's ancestors, nearest first, each once (a cycle in parent ids ends the walk
    where it comes back). Read from the tree's parent links as a caller goes, so making one
    costs nothing and a caller that stops at its first match reads only that far; the
    length is memoised in the tree. A chain thousands of spans deep is read in linear time,
    where a list per span would grow with the square of the depth."""

    __slots__ = ("_span", "_tree")

    def __init__(self, tree: SpanTree, span: Span) -> None:
        self._tree = tree
        self._span = span

    def __iter__(self) -> Iterator[Span]:
        seen: set[str] = set()
        current = self._tree.parent(self._span)
        while current is not None and current.span_id not in seen:
            seen.add(current.span_id)
            yield current
            current = self._tree.parent(current)

    def __len__(self) -> int:
        return self._tree.count_from(self._tree.parent(self._span))

    @overload
    def __getitem__(self, index: int) -> Span: ...
    @overload
    def __getitem__(self, index: slice) -> list[Span]: ...
    def __getitem__(self, index: int | slice) -> Span | list[Span]:
        return list(self)[index]


def _start_key(span: Span) -> tuple[float, int]:
    return (span.start.timestamp() if span.start else float("inf"), span.hints.get("_position", 0))


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


def tool_fields(span: Span) -> dict[str, Any]:
    """Name, call id, arguments, result and status of a tool span."""
    a = span.attributes
    name = (
        str_or_none(a.get("gen_ai.tool.name"))
        or str_or_none(a.get("tool.name"))
        or str_or_none(a.get("traceloop.entity.name"))
        or span.hints.get("tool_name")
    )
    call_id = (
        str_or_none(a.get("gen_ai.tool.call.id"))
        or str_or_none(a.get("tool_call.id"))
        or span.hints.get("call_id")
    )
    args = a.get("gen_ai.tool.call.arguments", span_input(span))
    result = a.get("gen_ai.tool.call.result", span_output(span))
    status = "error" if span.status == "error" else "success"
    message = tool_message(result)
    if message is not None:  # LangChain's ToolMessage: its content is the result
        result = message["content"]
        call_id = call_id or str_or_none(message.get("tool_call_id"))
        status = "error" if message.get("status") == "error" else status
    return {
        "name": name or KIND_PREFIX.sub("", span.name) or span.name,
        "call_id": call_id,
        "arguments": text_of(args),
        "content": text_of(result)
        if span.status != "error" or result is not None
        else (span.status_message or ""),
        "status": status,
    }


def tool_message(value: Any) -> Message | None:
    """A LangChain ``ToolMessage`` a tool span's output holds, as a chat message (its
    ``content`` as text, ``tool_call_id``, and ``status`` when LangChain wrote one): the
    ``{"type": "tool", "data": {...}}`` form OpenInference's LangChain instrumentation
    writes, or LangChain's own serialisation (``{"lc": 1, "id": [..., "ToolMessage"],
    "kwargs": {...}}``). None for any other value."""
    value = maybe_json(value)
    if not isinstance(value, dict):
        return None
    if value.get("type") == "tool" and isinstance(value.get("data"), dict):
        fields = value["data"]
    elif (
        value.get("lc")
        and isinstance(value.get("id"), list)
        and value["id"][-1:] == ["ToolMessage"]
        and isinstance(value.get("kwargs"), dict)
    ):
        fields = value["kwargs"]
    else:
        return None
    if "content" not in fields:
        return None
    message = chat_message({"type": "tool", "data": fields})
    if message is None:
        return None
    if isinstance(fields.get("status"), str):
        message["status"] = fields["status"]
    return message


def str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def clean_message(message: Message) -> Message:
    return {k: v for k, v in message.items() if k != "finish_reason" and v is not None}
