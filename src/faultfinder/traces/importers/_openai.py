"""Reading OpenAI-style chat requests, responses and tool records into canonical pieces.

A response may arrive as a JSON object, as the ``repr`` of an ``openai`` ``ChatCompletion``
object (read with the safe parser in ``_pyrepr``, never evaluated), or as plain text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultfinder.traces.importers._common import fail, text_of, without_credentials
from faultfinder.traces.importers._pyrepr import Call, Name, ReprSyntaxError, parse_repr
from faultfinder.traces.schema import ToolCall, ToolResult
from faultfinder.usage import Usage

# Strings starting with one of these are reprs of openai objects, not model text.
REPR_PREFIXES = ("ChatCompletion(", "ChatCompletionMessage(")


@dataclass
class CompletionParts:
    """What a step's recorded response says."""

    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    model: str | None = None
    usage: Usage | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def field_of(obj: Any, key: str) -> Any:
    """``obj[key]`` for dicts, the keyword argument ``key`` for repr calls, else None."""
    if isinstance(obj, dict):
        return obj.get(key)
    if isinstance(obj, Call):
        return obj.kwargs.get(key)
    return None


def plain(value: Any) -> Any:
    """Repr nodes as JSON-ready data (a call becomes its keyword arguments plus '__class__')."""
    if isinstance(value, Call):
        out: dict[str, Any] = {"__class__": value.name}
        if value.args:
            out["args"] = [plain(a) for a in value.args]
        out.update({k: plain(v) for k, v in value.kwargs.items()})
        return out
    if isinstance(value, Name):
        return value.name
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, str) else k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def content_text(content: Any) -> str:
    """Message content as text; multimodal part lists keep their text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict):
                parts.append(f"[{part.get('type', 'part')}]")
        return "\n".join(parts)
    return text_of(plain(content))


def tool_calls_from(value: Any, *, path: str | Path, where: str) -> list[ToolCall]:
    """OpenAI ``tool_calls`` (dicts or repr calls) as ToolCall objects."""
    if value is None:
        return []
    if not isinstance(value, list):
        fail(path, where, "expected a list of tool calls")
    calls: list[ToolCall] = []
    for i, raw in enumerate(value):
        function = field_of(raw, "function")
        source = function if function is not None else raw
        name = field_of(source, "name")
        if not isinstance(name, str) or not name:
            fail(path, f"{where}[{i}]", "tool call without a function name")
        call_id = field_of(raw, "id")
        calls.append(
            ToolCall(
                id=call_id if isinstance(call_id, str) else None,
                name=name,
                arguments=_arguments_text(field_of(source, "arguments")),
            )
        )
    return calls


def _arguments_text(arguments: Any) -> str:
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(plain(arguments), ensure_ascii=False)


def read_completion(output: Any, *, path: str | Path, where: str) -> CompletionParts:
    """A step's recorded response: repr string, JSON object, or plain text."""
    if output is None:
        return CompletionParts()
    if isinstance(output, str):
        stripped = output.lstrip()
        if not stripped.startswith(REPR_PREFIXES):
            return CompletionParts(content=output)
        offset = len(output) - len(stripped)
        kind = stripped.split("(", 1)[0]
        try:
            value = parse_repr(stripped.rstrip())
        except ReprSyntaxError as exc:
            fail(
                path,
                where,
                f"unparseable {kind} repr at char {exc.position + offset} ({exc.message})",
            )
        return _from_value(value, path=path, where=where)
    if isinstance(output, dict):
        return _from_value(output, path=path, where=where)
    return CompletionParts(content=text_of(output))


def _from_value(value: Any, *, path: str | Path, where: str) -> CompletionParts:
    name = value.name if isinstance(value, Call) else None
    if name == "ChatCompletion" or (isinstance(value, dict) and "choices" in value):
        return _from_completion(value, path=path, where=where)
    if name == "ChatCompletionMessage" or (
        isinstance(value, dict) and ("content" in value or "tool_calls" in value)
    ):
        return _from_message(value, path=path, where=where)
    if isinstance(value, Call):
        fail(path, where, f"a {value.name} repr is not a chat completion")
    return CompletionParts(content=text_of(plain(value)))


def _from_completion(value: Any, *, path: str | Path, where: str) -> CompletionParts:
    choices = field_of(value, "choices")
    if choices is None:
        choices = []
    if not isinstance(choices, list):
        fail(path, f"{where}.choices", "expected a list")
    if choices:
        first = choices[0]
        message = field_of(first, "message")
        if message is None:
            fail(path, f"{where}.choices[0]", "choice without a message")
        parts = _from_message(message, path=path, where=f"{where}.choices[0].message")
        finish = field_of(first, "finish_reason")
        if finish is not None:
            parts.metadata["finish_reason"] = plain(finish)
    else:
        parts = CompletionParts()
    if len(choices) > 1:
        # Only the first choice continues the run; the count is kept so nothing is hidden.
        parts.metadata["choices"] = len(choices)
    model = field_of(value, "model")
    if isinstance(model, str):
        parts.model = model
    for key in ("id", "created", "system_fingerprint", "service_tier"):
        item = field_of(value, key)
        if item is not None:
            parts.metadata[key if key != "id" else "response_id"] = plain(item)
    usage = field_of(value, "usage")
    if usage is not None:
        prompt, completion = field_of(usage, "prompt_tokens"), field_of(usage, "completion_tokens")
        if not isinstance(prompt, int) or not isinstance(completion, int):
            fail(path, f"{where}.usage", "expected integer prompt_tokens and completion_tokens")
        parts.usage = Usage(prompt_tokens=prompt, completion_tokens=completion, calls=1)
    return parts


def _from_message(message: Any, *, path: str | Path, where: str) -> CompletionParts:
    if not isinstance(message, dict | Call):
        fail(path, where, "expected a message object")
    parts = CompletionParts(content=content_text(field_of(message, "content")))
    parts.tool_calls = tool_calls_from(
        field_of(message, "tool_calls"), path=path, where=f"{where}.tool_calls"
    )
    legacy = field_of(message, "function_call")
    if legacy is not None:
        parts.tool_calls += tool_calls_from([legacy], path=path, where=f"{where}.function_call")
    for key in ("refusal", "reasoning_content"):
        item = field_of(message, key)
        if item:
            parts.metadata[key] = plain(item)
    return parts


def split_request(
    request: Any, *, path: str | Path, where: str
) -> tuple[list[dict[str, Any]] | None, dict[str, Any] | None]:
    """A chat request as (messages, other parameters without credentials).

    A bare list is taken as the messages; a string that is not JSON becomes one user message.
    """
    if request is None:
        return None, None
    if isinstance(request, str):
        try:
            decoded = json.loads(request)
        except json.JSONDecodeError:
            return [{"role": "user", "content": request}], None
        if isinstance(decoded, dict | list):
            return split_request(decoded, path=path, where=where)
        return [{"role": "user", "content": request}], None
    if isinstance(request, list):
        return check_messages(request, path=path, where=where), None
    if not isinstance(request, dict):
        fail(path, where, f"expected a chat request object, got {type(request).__name__}")
    messages = request.get("messages")
    rest = without_credentials({k: v for k, v in request.items() if k != "messages"})
    checked = None
    if messages is not None:
        checked = check_messages(messages, path=path, where=f"{where}.messages")
    return checked, (rest or None)


def check_messages(messages: Any, *, path: str | Path, where: str) -> list[dict[str, Any]]:
    """Validate a list of chat messages (objects with at least a role or content)."""
    if not isinstance(messages, list):
        fail(path, where, "expected a list of chat messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            fail(path, f"{where}[{i}]", "expected a message object")
    return messages


_TOOL_NAME_KEYS = ("tool_name", "name", "tool", "function", "action")
_TOOL_ARGS_KEYS = ("arguments", "args", "tool_input", "input", "parameters", "params")
_TOOL_OUTPUT_KEYS = ("output", "result", "tool_output", "observation", "response", "content")
_TOOL_STATUS_KEYS = ("status", "execution_status", "state")
_TOOL_ID_KEYS = ("tool_call_id", "call_id", "id")


def _first(log: dict[str, Any], keys: Sequence[str], used: set[str]) -> Any:
    for key in keys:
        if key in log and log[key] is not None:
            used.add(key)
            return log[key]
    return None


def read_tool_logs(
    logs: Any, *, path: str | Path, where: str
) -> tuple[list[ToolCall], list[ToolResult], list[dict[str, Any]]]:
    """Tool log entries as (calls, results, unmapped fields per entry).

    Keys are matched by common spellings (tool_name/name/tool, arguments/args/input,
    output/result/observation, status). Fields no spelling matched are returned so the
    caller can keep them.
    """
    if logs is None:
        return [], [], []
    entries = logs if isinstance(logs, list) else [logs]
    calls: list[ToolCall] = []
    results: list[ToolResult] = []
    unmapped: list[dict[str, Any]] = []
    for i, log in enumerate(entries):
        if isinstance(log, str):
            results.append(ToolResult(content=log))
            continue
        if not isinstance(log, dict):
            fail(path, f"{where}[{i}]", "expected a tool log object or text")
        used: set[str] = set()
        name_value = _first(log, _TOOL_NAME_KEYS, used)
        args = _first(log, _TOOL_ARGS_KEYS, used)
        if isinstance(name_value, dict):  # {"function": {"name": ..., "arguments": ...}}
            args = name_value.get("arguments", args)
            name_value = name_value.get("name")
        name = name_value if isinstance(name_value, str) and name_value else None
        call_id_value = _first(log, _TOOL_ID_KEYS, used)
        call_id = str(call_id_value) if call_id_value is not None else None
        output = _first(log, _TOOL_OUTPUT_KEYS, used)
        status = _first(log, _TOOL_STATUS_KEYS, used)
        if name is not None:
            calls.append(ToolCall(id=call_id, name=name, arguments=_arguments_text(args)))
        results.append(
            ToolResult(
                call_id=call_id,
                name=name,
                content=text_of(output),
                status=None if status is None else text_of(status),
            )
        )
        rest = {k: v for k, v in log.items() if k not in used}
        if rest:
            unmapped.append({"entry": i, **rest})
    return calls, results, unmapped


def merge_tool_calls(recorded: list[ToolCall], from_logs: list[ToolCall]) -> list[ToolCall]:
    """The response's tool calls plus logged calls it does not already contain."""
    merged = list(recorded)
    for call in from_logs:
        duplicate = any(
            (call.id is not None and call.id == known.id)
            or (call.name == known.name and call.arguments == known.arguments)
            for known in merged
        )
        if not duplicate:
            merged.append(call)
    return merged
