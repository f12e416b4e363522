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

from faultfinder.traces.importers._common import fail, json_in_text, text_of, without_credentials
from faultfinder.traces.importers._pyrepr import Call, Name, ReprSyntaxError, parse_repr
from faultfinder.traces.io import UnknownKeys
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
    unread: bool = False
    """A JSON response had keys no field above holds (reported as unknown): the caller
    keeps the response whole, as the unknown-key warning promises."""


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


def content_text(content: Any, *, path: str | Path = "<memory>", where: str = "content") -> str:
    """Message content as text. A list of OpenAI content parts keeps its text parts and
    shows other parts as ``[type]``; a part that is not an object with a string ``type``
    (and, for text parts, a string ``text``) is an error."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for i, part in enumerate(content):
            kind = field_of(part, "type")
            if not isinstance(kind, str):
                fail(path, f"{where}[{i}]", "expected a content part object with a 'type'")
            if kind == "text":
                text = field_of(part, "text")
                if not isinstance(text, str):
                    fail(path, f"{where}[{i}].text", "a text part needs its text as a string")
                parts.append(text)
            else:
                parts.append(f"[{kind}]")
        return "\n".join(parts)
    fail(path, where, "expected text, a list of content parts or null")


_TOOL_CALL_KEYS = frozenset({"id", "type", "function", "index"})
_FUNCTION_KEYS = frozenset({"name", "arguments"})
_USAGE_KEYS = frozenset(
    {"prompt_tokens", "completion_tokens", "total_tokens", "completion_tokens_details"}
    | {"prompt_tokens_details"}
)


def tool_calls_from(
    value: Any, *, path: str | Path, where: str, unknown: UnknownKeys | None = None
) -> list[ToolCall]:
    """OpenAI ``tool_calls`` (dicts or repr calls) as ToolCall objects."""
    if value is None:
        return []
    if not isinstance(value, list):
        fail(path, where, "expected a list of tool calls")
    calls: list[ToolCall] = []
    for i, raw in enumerate(value):
        _check_keys(raw, _TOOL_CALL_KEYS, f"{where}[{i}]", unknown)
        if isinstance(raw, dict) and isinstance(raw.get("function"), dict):
            _check_keys(raw["function"], _FUNCTION_KEYS, f"{where}[{i}].function", unknown)
        kind = field_of(raw, "type")
        if kind is not None and kind != "function":
            fail(path, f"{where}[{i}].type", f"unsupported tool call type {kind!r}")
        function = field_of(raw, "function")
        source = function if function is not None else raw
        name = field_of(source, "name")
        if not isinstance(name, str) or not name:
            fail(path, f"{where}[{i}]", "tool call without a function name")
        call_id = field_of(raw, "id")
        if call_id is not None and not isinstance(call_id, str):
            fail(path, f"{where}[{i}].id", "expected a string id")
        calls.append(
            ToolCall(
                id=call_id,
                name=name,
                arguments=_arguments_text(
                    field_of(source, "arguments"), path=path, where=f"{where}[{i}].arguments"
                ),
            )
        )
    return calls


def tool_calls_fully_read(value: Any) -> bool:
    """Whether :func:`tool_calls_from` reads every key of ``value``'s JSON entries (and of
    their ``function``), so the calls it makes lose nothing. A reader keeps the raw list
    (say, in metadata) when this is false, as the unknown-key warning promises."""
    if not isinstance(value, list):
        return True
    for raw in value:
        if not isinstance(raw, dict):
            continue
        if not raw.keys() <= _TOOL_CALL_KEYS:
            return False
        function = raw.get("function")
        if isinstance(function, dict) and not function.keys() <= _FUNCTION_KEYS:
            return False
    return True


def _arguments_text(arguments: Any, *, path: str | Path, where: str) -> str:
    """Tool arguments as JSON text: a string as written, an object or list as its JSON."""
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, dict | list | Call):
        return json.dumps(plain(arguments), ensure_ascii=False)
    fail(path, where, "expected the arguments as JSON text or an object")


_COMPLETION_KEYS = frozenset(
    {"id", "object", "created", "model", "choices", "usage", "system_fingerprint"}
    | {"service_tier", "prompt_filter_results"}
)
_CHOICE_KEYS = frozenset({"index", "message", "finish_reason", "logprobs"})
_MESSAGE_KEYS = frozenset(
    {"role", "content", "tool_calls", "function_call", "refusal", "audio", "annotations"}
    | {"reasoning_content", "name"}
)


def _check_keys(value: Any, known: frozenset[str], where: str, unknown: UnknownKeys | None) -> bool:
    """Report keys of a JSON reply object the reader does not use; True when there are any
    (the caller then keeps the object). A repr comes from the SDK's own objects, whose
    fields are known, and is not checked."""
    if unknown is None or not isinstance(value, dict):
        return False
    unknown.check(value, known, where)
    return not value.keys() <= known


def read_completion(
    output: Any, *, path: str | Path, where: str, unknown: UnknownKeys | None = None
) -> CompletionParts:
    """A step's recorded response: repr string, JSON object, or plain text.

    With ``unknown``, keys of a JSON response that are not part of the OpenAI format are
    reported through it (a misspelt ``usage`` would otherwise vanish)."""
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
        return _from_value(value, path=path, where=where, unknown=None)
    if isinstance(output, dict):
        return _from_value(output, path=path, where=where, unknown=unknown)
    fail(path, where, "expected the response as text, a repr string or a JSON object")


def _from_value(
    value: Any, *, path: str | Path, where: str, unknown: UnknownKeys | None
) -> CompletionParts:
    name = value.name if isinstance(value, Call) else None
    is_dict = isinstance(value, dict)
    if name == "ChatCompletion" or (
        is_dict and any(k in value for k in ("choices", "object", "usage", "created"))
    ):
        return _from_completion(value, path=path, where=where, unknown=unknown)
    if name == "ChatCompletionMessage" or (
        is_dict and ("content" in value or "tool_calls" in value)
    ):
        return _from_message(value, path=path, where=where, unknown=unknown)
    if isinstance(value, Call):
        fail(path, where, f"a {value.name} repr is not a chat completion")
    if isinstance(value, dict):  # another JSON object: kept whole, as its JSON text
        _check_keys(value, _COMPLETION_KEYS | _MESSAGE_KEYS, where, unknown)
        return CompletionParts(content=text_of(plain(value)))
    fail(path, where, "expected a chat completion (with choices) or a message (with content)")


def _from_completion(
    value: Any, *, path: str | Path, where: str, unknown: UnknownKeys | None
) -> CompletionParts:
    unread = _check_keys(value, _COMPLETION_KEYS, where, unknown)
    choices = field_of(value, "choices")
    if choices is None:
        choices = []
    if not isinstance(choices, list):
        fail(path, f"{where}.choices", "expected a list")
    if choices:
        first = choices[0]
        unread |= _check_keys(first, _CHOICE_KEYS, f"{where}.choices[0]", unknown)
        index = field_of(first, "index")
        if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
            fail(path, f"{where}.choices[0].index", "expected an integer")
        message = field_of(first, "message")
        if message is None:
            fail(path, f"{where}.choices[0]", "choice without a message")
        parts = _from_message(
            message, path=path, where=f"{where}.choices[0].message", unknown=unknown
        )
        finish = field_of(first, "finish_reason")
        if finish is not None:
            parts.metadata["finish_reason"] = plain(finish)
    else:
        parts = CompletionParts()
    if len(choices) > 1:
        # Only the first choice continues the run; the count is kept so nothing is hidden.
        parts.metadata["choices"] = len(choices)
    model = field_of(value, "model")
    if model is not None and not isinstance(model, str):
        fail(path, f"{where}.model", "expected a string")
    parts.model = model
    for key in ("id", "created", "system_fingerprint", "service_tier"):
        item = field_of(value, key)
        if item is not None:
            parts.metadata[key if key != "id" else "response_id"] = plain(item)
    usage = field_of(value, "usage")
    parts.unread |= unread | _check_keys(usage, _USAGE_KEYS, f"{where}.usage", unknown)
    total = field_of(usage, "total_tokens")
    if total is not None and (isinstance(total, bool) or not isinstance(total, int)):
        fail(path, f"{where}.usage.total_tokens", "expected an integer")
    if usage is not None:
        prompt, completion = field_of(usage, "prompt_tokens"), field_of(usage, "completion_tokens")
        if not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (prompt, completion)
        ):
            fail(
                path,
                f"{where}.usage",
                "expected non-negative integer prompt_tokens and completion_tokens",
            )
        parts.usage = Usage(prompt_tokens=prompt, completion_tokens=completion, calls=1)
    return parts


def _from_message(
    message: Any, *, path: str | Path, where: str, unknown: UnknownKeys | None
) -> CompletionParts:
    if not isinstance(message, dict | Call):
        fail(path, where, "expected a message object")
    unread = _check_keys(message, _MESSAGE_KEYS, where, unknown)
    role = plain(field_of(message, "role"))
    if role is not None and not isinstance(role, str):
        fail(path, f"{where}.role", "expected a string")
    parts = CompletionParts(
        content=content_text(field_of(message, "content"), path=path, where=f"{where}.content")
    )
    raw_calls = field_of(message, "tool_calls")
    parts.tool_calls = tool_calls_from(
        raw_calls, path=path, where=f"{where}.tool_calls", unknown=unknown
    )
    legacy = field_of(message, "function_call")
    if legacy is not None:
        parts.tool_calls += tool_calls_from([legacy], path=path, where=f"{where}.function_call")
        unread |= _check_keys(legacy, _FUNCTION_KEYS, f"{where}.function_call", unknown)
    parts.unread = unread or (unknown is not None and not tool_calls_fully_read(raw_calls))
    if role not in (None, "assistant"):
        parts.metadata["role"] = role
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
        decoded = json_in_text(request, path=path, where=where)
        if decoded is None:
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
        at = f"{where}[{i}]"
        name_value = _first(log, _TOOL_NAME_KEYS, used)
        args = _first(log, _TOOL_ARGS_KEYS, used)
        if isinstance(name_value, dict):  # {"function": {"name": ..., "arguments": ...}}
            args = name_value.get("arguments", args)
            name_value = name_value.get("name")
        if name_value is not None and not isinstance(name_value, str):
            fail(path, f"{at}.tool_name", "expected the tool name as a string")
        name = name_value or None
        call_id_value = _first(log, _TOOL_ID_KEYS, used)
        if call_id_value is not None and not isinstance(call_id_value, str):
            fail(path, f"{at}.id", "expected the call id as a string")
        call_id = call_id_value
        output = _first(log, _TOOL_OUTPUT_KEYS, used)
        if output is not None and not isinstance(output, str | dict | list):
            fail(path, f"{at}.output", "expected the tool output as text or JSON")
        status = _first(log, _TOOL_STATUS_KEYS, used)
        if status is not None and not isinstance(status, str):
            fail(path, f"{at}.status", "expected a string")
        if name is not None:
            arguments = _arguments_text(args, path=path, where=f"{at}.arguments")
            calls.append(ToolCall(id=call_id, name=name, arguments=arguments))
        results.append(
            ToolResult(call_id=call_id, name=name, content=text_of(output), status=status)
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
            call.name == known.name
            and (call.id is None or known.id is None or call.id == known.id)
            and _same_arguments(call.arguments, known.arguments)
            for known in merged
        )
        if not duplicate:  # a log that disagrees with the response is kept, not dropped
            merged.append(call)
    return merged


def _same_arguments(a: str, b: str) -> bool:
    """Equal as JSON when both parse (a log may format them differently), else as text."""
    if a == b:
        return True
    try:
        return bool(json.loads(a) == json.loads(b))
    except (ValueError, RecursionError):
        return False
