"""LangSmith run exports → canonical traces, one per trace id.

LangSmith stores a trace as *runs* (its spans): ``{id, name, run_type, inputs, outputs,
start_time, end_time, parent_run_id, trace_id, dotted_order, extra, error, ...}``
(https://docs.smith.langchain.com/reference/data_formats/run_data_format). Read shapes: a
run with its children nested under ``child_runs`` (``Client.read_run(...,
load_child_runs=True)``, a ``RunTree``), a JSON list of runs (``Client.list_runs``), a
``{"runs": [...]}`` object, or JSON lines of runs. The tree comes from ``parent_run_id``,
else the nesting, else ``dotted_order`` (``<time>Z<run id>`` segments joined by dots).

``run_type`` gives the kind: ``llm`` runs are model calls, ``tool`` runs tool executions.
LangSmith has no agent run type: a LangGraph node (``extra.metadata.langgraph_node``) names
the agent; without one, a chain run (other than the root) that directly holds a model call
or a tool run is taken as an agent, and each step says so in ``metadata.inferred``.
LangChain's serialised messages (``{"lc": 1, "type": "constructor", "id": [...,
"AIMessage"], "kwargs": {...}}``) and ``generations`` outputs are read as chat messages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from faultfinder.errors import TraceFormatError
from faultfinder.traces.importers._common import check_options, fail
from faultfinder.traces.importers._langgraph import graph_node_agent
from faultfinder.traces.importers._semconv import build_trace
from faultfinder.traces.importers._spans import Span, check_keys, keep_raw, parse_time
from faultfinder.traces.importers.otlp import decode_text, json_lines, read_bytes, sniff, stem_of
from faultfinder.traces.io import parse_json
from faultfinder.traces.schema import Trace

RUN_KEYS = frozenset(
    [
        "id",
        "name",
        "start_time",
        "run_type",
        "end_time",
        "extra",
        "error",
        "serialized",
        "events",
        "inputs",
        "outputs",
        "reference_example_id",
        "parent_run_id",
        "tags",
        "attachments",
        "session_id",
        "session_name",
        "child_run_ids",
        "child_runs",
        "feedback_stats",
        "app_path",
        "manifest_id",
        "status",
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "prompt_token_details",
        "completion_token_details",
        "first_token_time",
        "total_cost",
        "prompt_cost",
        "completion_cost",
        "prompt_cost_details",
        "completion_cost_details",
        "parent_run_ids",
        "trace_id",
        "dotted_order",
        "in_dataset",
        "execution_order",
        "child_execution_order",
        "direct_child_run_ids",
        "inputs_preview",
        "outputs_preview",
        "inputs_s3_urls",
        "outputs_s3_urls",
        "share_token",
        "trace_min_start_time",
        "trace_max_start_time",
        "trace_first_received_at",
        "trace_tier",
        "ttl_seconds",
        "price_model_id",
        "last_queued_at",
        "dangerously_allow_filesystem",
        "replicas",
        "project_name",
    ]
)
"""Fields of a run in LangSmith's run schema, its API and its SDK's ``RunTree``."""
_TEXT_KEYS = ("id", "name", "run_type", "parent_run_id", "trace_id", "dotted_order", "error")
_LC_ROLES = {
    "HumanMessage": "user",
    "HumanMessageChunk": "user",
    "AIMessage": "assistant",
    "AIMessageChunk": "assistant",
    "SystemMessage": "system",
    "ToolMessage": "tool",
    "FunctionMessage": "tool",
    "ChatMessage": None,
}


def lc_message(value: Any) -> Any:
    """A LangChain serialised message (``{"lc": 1, "id": [..., "AIMessage"], "kwargs"}``)
    as an OpenAI chat message; any other value unchanged."""
    if not (isinstance(value, dict) and "lc" in value and isinstance(value.get("kwargs"), dict)):
        return value
    ident = value.get("id")
    cls = str(ident[-1]) if isinstance(ident, list) and ident else ""
    kw = value["kwargs"]
    role = _LC_ROLES.get(cls) or kw.get("role") or "user"
    message: dict[str, Any] = {"role": role, "content": kw.get("content", "")}
    calls = kw.get("tool_calls")
    if isinstance(calls, list) and calls:  # LangChain's {name, args, id}
        message["tool_calls"] = [
            {
                "id": c.get("id"),
                "type": "function",
                "function": {"name": c.get("name"), "arguments": c.get("args", {})},
            }
            if isinstance(c, dict) and "args" in c
            else c
            for c in calls
        ]
    for key in ("name", "tool_call_id"):
        if kw.get(key):
            message[key] = kw[key]
    return message


def _messages_in(inputs: Any) -> Any:
    """An LLM run's inputs with LangChain's serialised messages (``messages`` as a list of
    lists, one per prompt) read as chat messages."""
    if not isinstance(inputs, dict) or not isinstance(inputs.get("messages"), list):
        return inputs
    messages = inputs["messages"]
    if messages and all(isinstance(m, list) for m in messages):
        messages = messages[0]  # one conversation per prompt; a chat call has one
    return {**inputs, "messages": [lc_message(m) for m in messages]}


def _reply_of(outputs: Any) -> Any:
    """An LLM run's outputs: a chat completion as is; LangChain ``generations`` as the first
    generation's message."""
    if isinstance(outputs, dict) and isinstance(outputs.get("generations"), list):
        gens = outputs["generations"]
        first = gens[0] if gens else None
        first = first[0] if isinstance(first, list) and first else first
        if isinstance(first, dict):
            message = lc_message(first.get("message"))
            if isinstance(message, dict) and "role" in message:
                return message
            if isinstance(first.get("text"), str):
                return first["text"]
    return outputs


def _usage(run: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    outputs: dict[str, Any] = run["outputs"] if isinstance(run.get("outputs"), dict) else {}
    found = meta.get("usage_metadata") or outputs.get("usage_metadata")
    if isinstance(found, dict):
        return {"input": found.get("input_tokens"), "output": found.get("output_tokens")}
    usage = outputs.get("usage")
    if isinstance(usage, dict):
        return {"input": usage.get("prompt_tokens"), "output": usage.get("completion_tokens")}
    return {"input": run.get("prompt_tokens"), "output": run.get("completion_tokens")}


def _run_id(dotted: str) -> str:
    """The run id of one ``dotted_order`` segment (``20230914T223155647Z<uuid>``)."""
    return dotted.partition("Z")[2] or dotted


def span_of(run: Any, *, path: str | Path, where: str, parent: str | None) -> Span:
    """One run as a span (its ``child_runs`` are read by the caller)."""
    if not isinstance(run, dict):
        fail(path, where, "expected a run object")
    check_keys(run, RUN_KEYS, path=path, where=where)
    for key in _TEXT_KEYS:
        if run.get(key) is not None and not isinstance(run[key], str):
            fail(path, f"{where}.{key}", f"expected a string, got {type(run[key]).__name__}")
    if not run.get("id"):
        fail(path, f"{where}.id", "missing")
    for key in ("inputs", "outputs", "extra"):
        if run.get(key) is not None and not isinstance(run[key], dict):
            fail(path, f"{where}.{key}", f"expected an object, got {type(run[key]).__name__}")
    extra: dict[str, Any] = run.get("extra") or {}
    meta: dict[str, Any] = extra["metadata"] if isinstance(extra.get("metadata"), dict) else {}
    params: dict[str, Any] = (
        extra["invocation_params"] if isinstance(extra.get("invocation_params"), dict) else {}
    )
    dotted = str(run.get("dotted_order") or "")
    segments = dotted.split(".") if dotted else []
    parent_id = run.get("parent_run_id") or parent
    if not parent_id and len(segments) > 1:
        parent_id = _run_id(segments[-2])
    run_type = run.get("run_type")
    inputs: dict[str, Any] | None = run.get("inputs")
    outputs: dict[str, Any] | None = run.get("outputs")
    hints: dict[str, Any] = {"run_type": run_type}
    if run_type == "llm":
        hints["kind"] = "llm"
        hints["input"] = _messages_in(inputs)
        hints["output"] = _reply_of(outputs)
        hints["usage"] = _usage(run, meta)
        hints["model"] = next(
            (
                m
                for m in (
                    meta.get("ls_model_name"),
                    params.get("model"),
                    params.get("model_name"),
                    (inputs or {}).get("model"),
                    (outputs or {}).get("model"),
                )
                if isinstance(m, str) and m
            ),
            None,
        )
        request = {k: v for k, v in params.items() if k not in ("messages",)}
        if request:
            hints["request"] = request
    else:
        if run_type == "tool":
            hints["kind"] = "tool"
            hints["tool_name"] = run.get("name")
        hints["input"] = inputs
        only = list(outputs) if isinstance(outputs, dict) else []
        hints["output"] = outputs["output"] if outputs and only == ["output"] else outputs
    hints["agent"] = graph_node_agent(meta)
    error = run.get("error") or None
    status = run.get("status")
    return Span(
        trace_id=str(run.get("trace_id") or (_run_id(segments[0]) if segments else "") or "trace"),
        span_id=run["id"],
        parent_id=parent_id or None,
        name=str(run.get("name") or ""),
        start=parse_time(run.get("start_time"), path=path, where=f"{where}.start_time"),
        end=parse_time(run.get("end_time"), path=path, where=f"{where}.end_time"),
        status="error" if error or status == "error" else None,
        status_message=error,
        hints={k: v for k, v in hints.items() if v is not None},
        raw=keep_raw({k: v for k, v in run.items() if k != "child_runs"}),
    )


def _walk(runs: list[tuple[Any, str]], path: str | Path, parent: str | None = None) -> list[Span]:
    spans: list[Span] = []
    for run, where in runs:
        span = span_of(run, path=path, where=where, parent=parent)
        spans.append(span)
        children = run.get("child_runs")
        if children is None:
            continue
        if not isinstance(children, list):
            fail(path, f"{where}.child_runs", "expected a list")
        spans += _walk(
            [(c, f"{where}.child_runs[{n}]") for n, c in enumerate(children)], path, span.span_id
        )
    return spans


def _infer_agents(spans: list[Span]) -> None:
    """Without LangGraph node names, a chain run (not the root) that directly holds a model
    call or a tool run is taken as an agent."""
    if any(s.hints.get("agent") for s in spans):
        return
    by_id = {s.span_id: s for s in spans}
    for span in spans:
        if span.hints.get("run_type") not in ("llm", "tool"):
            continue
        parent = by_id.get(span.parent_id or "")
        if parent is None or parent.parent_id is None or parent.hints.get("kind"):
            continue
        if parent.hints.get("run_type") == "chain" and parent.parent_id in by_id:
            parent.hints["kind"] = "agent"
            parent.hints["kind_inferred"] = "a chain run that directly holds a model or tool run"


def _records(path: Path) -> list[tuple[Any, str]]:
    text = decode_text(read_bytes(path), path)
    lines = json_lines(text, path)
    if lines is not None:
        return [(value, f"(line {n})") for n, value in lines]
    whole = parse_json(text, path)
    if isinstance(whole, dict) and isinstance(whole.get("runs"), list):
        return [(r, f"runs[{n}]") for n, r in enumerate(whole["runs"])]
    if isinstance(whole, list):
        return [(r, f"[{n}]") for n, r in enumerate(whole)]
    return [(whole, "")]


def is_run(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("run_type"), str)
        and "id" in value
        and any(k in value for k in ("trace_id", "dotted_order", "parent_run_id", "child_runs"))
    )


class LangsmithImporter:
    name: ClassVar[str] = "langsmith"
    summary: ClassVar[str] = (
        "LangSmith run exports (a run with child_runs, a list of runs, JSON lines)"
    )

    def detect(self, path: Path) -> bool:
        path = Path(path)
        if not path.is_file():
            return False
        head = sniff(path)
        if b'"run_type"' not in head:
            return False
        try:
            records = _records(path)
        except (TraceFormatError, RecursionError):
            return False
        return bool(records) and is_run(records[0][0])

    def load(self, path: Path, **options: Any) -> list[Trace]:
        check_options(self.name, options, {})
        path = Path(path)
        spans = _walk(_records(path), path)
        _infer_agents(spans)
        groups: dict[str, list[Span]] = {}
        for span in spans:
            groups.setdefault(span.trace_id, []).append(span)
        return [
            build_trace(group, path=path, fmt=self.name, trace_id=f"{stem_of(path)}/{tid}")
            for tid, group in groups.items()
        ]
