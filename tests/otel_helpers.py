"""Builders for small OTLP/JSON documents used by the import tests.

These exercise the encoding quirks (ids, key case, AnyValue, dict attributes) one at a time;
the traces produced by real instrumented programs are in tests/fixtures/otel/.
"""

from __future__ import annotations

import base64
import json
from typing import Any

T0 = 1_700_000_000_000_000_000
TRACE = "0af7651916cd43dd8448eb211c80319c"


def any_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    return {"stringValue": value}


def span(
    span_id: str,
    parent: str | None,
    name: str,
    start: int,
    attrs: dict[str, Any],
    *,
    events: list[dict[str, Any]] | None = None,
    status: int = 0,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": TRACE,
        "spanId": span_id,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(T0 + start * 1_000_000),
        "endTimeUnixNano": str(T0 + (start + 5) * 1_000_000),
        "attributes": [{"key": k, "value": any_value(v)} for k, v in attrs.items()],
    }
    if parent:
        out["parentSpanId"] = parent
    if events:
        out["events"] = [
            {
                "name": e["name"],
                "timeUnixNano": str(T0 + start * 1_000_000),
                "attributes": [{"key": k, "value": any_value(v)} for k, v in e["attrs"].items()],
            }
            for e in events
        ]
    if status:
        out["status"] = {"code": status, "message": "tool failed"}
    return out


def export(spans: list[dict[str, Any]], scope: str = "test.scope") -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "demo"}}]
                },
                "scopeSpans": [{"scope": {"name": scope}, "spans": spans}],
            }
        ]
    }


def genai_current() -> dict[str, Any]:
    """Two agents in the current GenAI conventions: a planner calls a tool, hands to a coder."""
    user = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Sum 2 and 3."}]}])
    call = json.dumps(
        [
            {
                "role": "assistant",
                "parts": [
                    {
                        "type": "tool_call",
                        "id": "call_1",
                        "name": "add",
                        "arguments": {"a": 2, "b": 3},
                    }
                ],
                "finish_reason": "tool_call",
            }
        ]
    )
    answer = json.dumps(
        [
            {
                "role": "assistant",
                "parts": [{"type": "text", "content": "The sum is 6."}],
                "finish_reason": "stop",
            }
        ]
    )
    system = json.dumps([{"type": "text", "content": "You plan."}])
    return export(
        [
            span(
                "a000000000000001",
                None,
                "invoke_agent Planner",
                0,
                {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Planner"},
            ),
            span(
                "b000000000000002",
                "a000000000000001",
                "chat gpt-4o",
                10,
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-4o",
                    "gen_ai.request.temperature": 0.0,
                    "gen_ai.input.messages": user,
                    "gen_ai.system_instructions": system,
                    "gen_ai.output.messages": call,
                    "gen_ai.usage.input_tokens": 12,
                    "gen_ai.usage.output_tokens": 7,
                },
            ),
            span(
                "c000000000000003",
                "a000000000000001",
                "execute_tool add",
                20,
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "add",
                    "gen_ai.tool.call.id": "call_1",
                    "gen_ai.tool.call.arguments": '{"a": 2, "b": 3}',
                    "gen_ai.tool.call.result": "5",
                },
            ),
            span(
                "d000000000000004",
                "a000000000000001",
                "invoke_agent Coder",
                30,
                {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Coder"},
            ),
            span(
                "e000000000000005",
                "d000000000000004",
                "chat gpt-4o",
                40,
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.response.model": "gpt-4o-2024",
                    "gen_ai.input.messages": user,
                    "gen_ai.output.messages": answer,
                },
            ),
        ]
    )


def to_base64_ids(doc: dict[str, Any]) -> dict[str, Any]:
    """The same export with ids in base64 and keys in snake_case (protobuf JSON mapping)."""
    text = json.dumps(doc)
    data = json.loads(text)
    for rs in data["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in sp:
                        sp[key] = base64.b64encode(bytes.fromhex(sp[key])).decode()
    return json.loads(
        json.dumps(data)
        .replace('"resourceSpans"', '"resource_spans"')
        .replace('"scopeSpans"', '"scope_spans"')
        .replace('"traceId"', '"trace_id"')
        .replace('"spanId"', '"span_id"')
        .replace('"parentSpanId"', '"parent_span_id"')
        .replace('"startTimeUnixNano"', '"start_time_unix_nano"')
        .replace('"endTimeUnixNano"', '"end_time_unix_nano"')
        .replace('"stringValue"', '"string_value"')
        .replace('"intValue"', '"int_value"')
    )


def to_dict_attributes(doc: dict[str, Any]) -> dict[str, Any]:
    """The same export with attributes written as plain objects."""
    data = json.loads(json.dumps(doc))
    for rs in data["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                sp["attributes"] = {
                    a["key"]: next(iter(a["value"].values())) for a in sp["attributes"]
                }
    return data
