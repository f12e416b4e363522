"""Chat messages out of span attributes, in every convention the importers meet.

Each reader returns OpenAI chat-format messages (``{"role", "content", "name"?,
"tool_calls"?, "tool_call_id"?}``) or None when the span does not use that convention:

- OTel GenAI (current): ``gen_ai.input.messages`` / ``gen_ai.output.messages`` /
  ``gen_ai.system_instructions``, JSON lists of ``{role, parts: [{type, ...}]}``;
- OTel GenAI (older): ``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*`` attributes, and the
  ``gen_ai.{system,user,assistant,tool}.message`` / ``gen_ai.choice`` events;
- OpenInference: ``llm.input_messages.N.message.*`` / ``llm.output_messages.N.message.*``;
- free-form payloads (Langfuse inputs/outputs, ``input.value``): OpenAI messages, LangChain
  messages (``type: human/ai/tool``), OpenAI Responses API items and response objects.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from faultfinder.traces.importers._common import text_of, without_credentials
from faultfinder.traces.importers._openai import plain
from faultfinder.traces.importers._pyrepr import ReprSyntaxError, parse_repr
from faultfinder.traces.importers._spans import Span, maybe_json
from faultfinder.usage import Usage

Message = dict[str, Any]


def nested(attrs: dict[str, Any], prefix: str) -> Any:
    """The attributes under ``prefix.`` rebuilt as nested data (numeric keys become lists)."""
    root: dict[str, Any] = {}
    cut = len(prefix) + 1
    for key, value in attrs.items():
        if not key.startswith(prefix + "."):
            continue
        node = root
        parts = key[cut:].split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[parts[-1]] = value
    return _listify(root) if root else None


def _listify(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    items = {k: _listify(v) for k, v in node.items()}
    if items and all(k.isdigit() for k in items):
        return [items[k] for k in sorted(items, key=int)]
    return items


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "" if value is None else json.dumps(value, ensure_ascii=False)


def _tool_call(tc: Any) -> dict[str, Any] | None:
    """One tool call in OpenAI form, from OpenAI, OpenInference or flat spellings."""
    if not isinstance(tc, dict):
        return None
    inner = tc.get("tool_call")  # OpenInference wraps each call in 'tool_call'
    tc = inner if isinstance(inner, dict) else tc
    function = tc.get("function") if isinstance(tc.get("function"), dict) else {}
    name = function.get("name") or tc.get("name")
    if not isinstance(name, str) or not name:
        return None
    call_id = tc.get("id") or tc.get("call_id")
    return {
        "id": str(call_id) if call_id else None,
        "type": "function",
        "function": {
            "name": name,
            "arguments": _arguments(function.get("arguments", tc.get("arguments"))),
        },
    }


def _calls(value: Any) -> list[dict[str, Any]]:
    value = maybe_json(value)
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        return []
    return [c for c in (_tool_call(v) for v in value) if c is not None]


def _text(content: Any) -> str:
    """Message content as text: strings, OpenAI/Responses part lists, OpenInference contents."""
    content = maybe_json(content) if isinstance(content, str) and content[:1] == "[" else content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            part = part.get("message_content", part) if isinstance(part, dict) else part
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict):
                text = part.get("text", part.get("content"))
                texts.append(text if isinstance(text, str) else f"[{part.get('type', 'part')}]")
        return "\n".join(texts)
    return text_of(content)


_LANGCHAIN_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


def chat_message(raw: Any) -> Message | None:
    """Any single message-like object as an OpenAI chat message (None if it is not one)."""
    if not isinstance(raw, dict):
        return None
    raw = raw.get("message", raw) if isinstance(raw.get("message"), dict) else raw
    if isinstance(raw.get("data"), dict) and str(raw.get("type")) in _LANGCHAIN_ROLES:
        raw = {**raw["data"], "type": raw["type"]}  # LangChain's messages_to_dict form
    kind = raw.get("type")
    if kind == "function_call":  # Responses API item
        call = _tool_call(raw)
        return {"role": "assistant", "content": "", "tool_calls": [call] if call else []}
    if kind == "function_call_output":
        return {
            "role": "tool",
            "content": _text(raw.get("output")),
            "tool_call_id": raw.get("call_id"),
        }
    role = raw.get("role") or _LANGCHAIN_ROLES.get(str(kind))
    if not isinstance(role, str):
        return None
    if "parts" in raw and "content" not in raw:
        return _from_parts(role, raw)
    message: Message = {"role": role, "content": _text(raw.get("content", raw.get("contents")))}
    if raw.get("name"):
        message["name"] = str(raw["name"])
    calls = _calls(raw.get("tool_calls"))
    extra = raw.get("additional_kwargs")
    if not calls and isinstance(extra, dict):
        calls = _calls(extra.get("tool_calls"))
    if not calls and raw.get("function_call_name"):
        calls = _calls(
            {
                "name": raw["function_call_name"],
                "arguments": raw.get("function_call_arguments_json"),
            }
        )
    if calls:
        message["tool_calls"] = calls
    if raw.get("tool_call_id"):
        message["tool_call_id"] = str(raw["tool_call_id"])
    if raw.get("finish_reason"):
        message["finish_reason"] = raw["finish_reason"]
    return message


def _from_parts(role: str, raw: dict[str, Any]) -> Message:
    """A GenAI ``{role, parts}`` message."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    answered: str | None = None
    for part in raw.get("parts") or []:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "tool_call":
            call = _tool_call(part)
            if call:
                calls.append(call)
        elif kind == "tool_call_response":
            answered = str(part.get("id")) if part.get("id") else None
            texts.append(_text(part.get("response", part.get("result"))))
        elif isinstance(part.get("content"), str):
            embedded = _repr_message(part["content"]) if role == "assistant" else None
            if embedded is not None:
                texts.append(embedded.get("content") or "")
                calls.extend(embedded.get("tool_calls", []))
            else:
                texts.append(part["content"])
        else:
            texts.append(f"[{kind or 'part'}]")
    message: Message = {
        "role": "tool" if answered and role != "assistant" else role,
        "content": "\n".join(texts),
    }
    if raw.get("name"):
        message["name"] = str(raw["name"])
    if calls:
        message["tool_calls"] = calls
    if answered:
        message["tool_call_id"] = answered
    if raw.get("finish_reason"):
        message["finish_reason"] = raw["finish_reason"]
    return message


_REPR_ITEMS = ("ResponseFunctionToolCall(",)
"""Responses API output items the GenAI Agents SDK instrumentation writes as their repr
in a text part (a function call made on the Responses API)."""


def _repr_message(text: str) -> Message | None:
    """A message written as the Python repr of a dict (``"{'content': None, 'role':
    'assistant', 'tool_calls': [...]}"``) or of a Responses function-call item
    (``"ResponseFunctionToolCall(arguments='{}', call_id=..., name=...)"``), as one GenAI
    instrumentation puts in text parts. Read with the safe repr parser (nothing is
    evaluated); None when it is not one."""
    if not (text.startswith("{'") and "'role'" in text) and not text.startswith(_REPR_ITEMS):
        return None
    try:
        value = plain(parse_repr(text))
    except ReprSyntaxError:
        return None
    return chat_message(value) if isinstance(value, dict) else None


def message_list(value: Any) -> list[Message] | None:
    """A list of messages from a JSON string, a list, a ``{messages: [...]}`` wrapper, a
    Responses API request/response, or one message; None when nothing looks like messages."""
    value = maybe_json(value)
    if isinstance(value, dict):
        if isinstance(value.get("messages"), list):
            value = value["messages"]
        elif isinstance(value.get("input"), list):  # Responses API request
            value = value["input"]
        elif value.get("object") == "response" and isinstance(value.get("output"), list):
            value = value["output"]
        elif isinstance(value.get("choices"), list):  # chat completion
            value = [c.get("message") for c in value["choices"] if isinstance(c, dict)]
        else:
            one = chat_message(value)
            return [one] if one else None
    if not isinstance(value, list):
        return None
    out = [m for m in (chat_message(v) for v in value) if m is not None]
    return out or None


def merge_responses(messages: list[Message]) -> list[Message]:
    """Consecutive assistant items of a Responses API output joined into one message."""
    merged: list[Message] = []
    for m in messages:
        if merged and m["role"] == "assistant" and merged[-1]["role"] == "assistant":
            prev = merged[-1]
            prev["content"] = "\n".join(t for t in (prev.get("content"), m.get("content")) if t)
            if m.get("tool_calls"):
                prev["tool_calls"] = [*prev.get("tool_calls", []), *m["tool_calls"]]
        else:
            merged.append(dict(m))
    return merged


_EVENT_ROLES = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
MESSAGE_EVENTS = frozenset({*_EVENT_ROLES, "gen_ai.choice"})
DETAILS_EVENT = "gen_ai.client.inference.operation.details"


def _attrs(span: Span) -> dict[str, Any]:
    """Span attributes, plus those of a GenAI 'operation details' event when it has them."""
    attrs = span.attributes
    for event in span.events:
        if event.name == DETAILS_EVENT:
            attrs = {**event.attributes, **attrs}
    return attrs


def input_messages(span: Span) -> tuple[list[Message] | None, str]:
    """The span's input messages and the convention they were read from."""
    a = _attrs(span)
    current = message_list(a.get("gen_ai.input.messages")) or message_list(
        nested(a, "gen_ai.input.messages")
    )
    if current is not None:
        system = a.get("gen_ai.system_instructions")
        system = (
            maybe_json(system) if system is not None else nested(a, "gen_ai.system_instructions")
        )
        if system:
            parts = system if isinstance(system, list) else [system]
            instructions = {"role": "system", "content": _text(parts)}
            if not any(
                m["role"] == "system" and m["content"] == instructions["content"] for m in current
            ):
                current = [instructions, *current]
        return current, "gen_ai.input.messages"
    oi = nested(a, "llm.input_messages")
    if isinstance(oi, list):
        return [m for m in (chat_message(x) for x in oi) if m], "llm.input_messages"
    old = nested(a, "gen_ai.prompt")
    if isinstance(old, list):
        return [m for m in (chat_message(_old_genai(x)) for x in old) if m], "gen_ai.prompt"
    events = [
        {**nested_all(e.attributes), "role": _EVENT_ROLES[e.name]}
        for e in span.events
        if e.name in _EVENT_ROLES
    ]
    if events:
        return [m for m in (chat_message(x) for x in events) if m], "gen_ai message events"
    hinted = message_list(span.hints.get("input"))
    if hinted is not None:
        return hinted, "source input"
    return None, ""


def output_messages(span: Span) -> tuple[list[Message] | None, str]:
    """The span's output messages (assistant replies) and the convention they came from."""
    a = _attrs(span)
    current = message_list(a.get("gen_ai.output.messages")) or message_list(
        nested(a, "gen_ai.output.messages")
    )
    if current is not None:
        return current, "gen_ai.output.messages"
    oi = nested(a, "llm.output_messages")
    if isinstance(oi, list):
        return [m for m in (chat_message(x) for x in oi) if m], "llm.output_messages"
    old = nested(a, "gen_ai.completion")
    if isinstance(old, list):
        msgs = [
            chat_message(_old_genai({"role": "assistant", **x}) if isinstance(x, dict) else x)
            for x in old
        ]
        return [m for m in msgs if m], "gen_ai.completion"
    choices = [nested_all(e.attributes) for e in span.events if e.name == "gen_ai.choice"]
    if choices:
        msgs = [chat_message({"role": "assistant", **(c.get("message") or c)}) for c in choices]
        return [m for m in msgs if m], "gen_ai.choice events"
    for source, value in (
        ("output.value", a.get("output.value")),
        ("source output", span.hints.get("output")),
    ):
        if value is None:
            continue
        found = message_list(value)
        if found is not None:
            return merge_responses([m for m in found if m["role"] == "assistant"]) or found, source
        if isinstance(value, str):
            return [{"role": "assistant", "content": value}], source
    return None, ""


def _old_genai(x: Any) -> Any:
    """An older GenAI ``gen_ai.prompt.N`` / ``gen_ai.completion.N`` entry; Koog writes
    tool-call lists as 'content'. The entry's finish reason stays with the rewritten
    message (Koog's ``gen_ai.completion.N.finish_reason``, "tool_calls")."""
    if not isinstance(x, dict):
        return x
    content = x.get("content")
    if (
        x.get("role") in ("tool", "assistant", None)
        and isinstance(content, str)
        and content.startswith("[{")
    ):
        calls = _calls(content)
        if calls:
            rewritten: Message = {"role": "assistant", "content": "", "tool_calls": calls}
            if x.get("finish_reason"):
                rewritten["finish_reason"] = x["finish_reason"]
            return rewritten
    return x


def response_finish_reasons(span: Span) -> list[str]:
    """The span's ``gen_ai.response.finish_reasons`` (OTel GenAI: a string array, one
    reason per generation received), also when written as JSON text (Langfuse keeps
    attributes as strings: ``'["stop"]'``) or as one string."""
    value = _attrs(span).get("gen_ai.response.finish_reasons")
    if isinstance(value, str):
        value = maybe_json(value) if value[:1] == "[" else [value]
    if not isinstance(value, list):
        return []
    return [v for v in value if isinstance(v, str) and v]


def nested_all(attrs: dict[str, Any]) -> dict[str, Any]:
    """All flat attributes rebuilt as one nested object."""
    out = nested({f"_.{k}": v for k, v in attrs.items()}, "_")
    return out if isinstance(out, dict) else {}


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def _first_int(attributes: dict[str, Any], keys: tuple[str, ...], fallback: Any) -> int | None:
    """The first of ``keys`` whose attribute reads as an integer, else ``fallback``'s."""
    for key in keys:
        value = _int(attributes.get(key))
        if value is not None:
            return value
    return _int(fallback)


def usage_of(span: Span) -> Usage | None:
    """Token usage of an LLM span (GenAI, older GenAI, OpenInference, or the source's)."""
    a = span.attributes
    hint = span.hints.get("usage") or {}
    prompt = _first_int(
        a,
        ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt"),
        hint.get("input"),
    )
    completion = _first_int(
        a,
        (
            "gen_ai.usage.output_tokens",
            "gen_ai.usage.completion_tokens",
            "llm.token_count.completion",
        ),
        hint.get("output"),
    )
    if prompt is None and completion is None:
        return None
    return Usage(prompt_tokens=prompt or 0, completion_tokens=completion or 0, calls=1)


_DOUBLE_PARAMS = frozenset(
    {"temperature", "top_p", "top_k", "frequency_penalty", "presence_penalty"}
)
_INT_PARAMS = frozenset(
    {"max_tokens", "max_completion_tokens", "max_output_tokens", "seed", "choice.count", "n"}
)
"""Request parameters that are numbers by their convention (OTel GenAI's
``gen_ai.request.*``: temperature, top_p, top_k and the penalties are doubles, max_tokens,
seed and choice.count ints; OpenAI's names for the same)."""
_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_INTEGER = re.compile(r"[+-]?\d{1,19}")


def _numeric(key: str, value: Any) -> Any:
    """``value`` as the number it spells when ``key`` is a numeric parameter and it is a
    string (Langfuse keeps span attributes as strings: Koog's temperature is "1"); any
    other value, or a string that is no number of that kind, as it is."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if key in _INT_PARAMS and _INTEGER.fullmatch(text):
        return int(text)
    if key in _DOUBLE_PARAMS and _DECIMAL.fullmatch(text):
        number = float(text)
        return number if math.isfinite(number) else value
    return value


def request_of(span: Span) -> dict[str, Any] | None:
    """Request parameters of an LLM span, credentials removed; numeric parameters
    written as text (:func:`_numeric`) read as numbers."""
    a = span.attributes
    request: dict[str, Any] = {}
    params = maybe_json(a.get("llm.invocation_parameters"))
    if isinstance(params, dict):
        request.update(params)
    for key, value in a.items():
        if key.startswith("gen_ai.request.") and key != "gen_ai.request.model":
            request[key.removeprefix("gen_ai.request.")] = value
    hinted = span.hints.get("request")
    if isinstance(hinted, dict):
        request = {**hinted, **request}
    tools = [
        maybe_json(v)
        for k, v in sorted(a.items())
        if k.startswith("llm.tools.") and k.endswith(".tool.json_schema")
    ]
    if tools:
        request["tools"] = tools
    request = {key: _numeric(key, value) for key, value in request.items()}
    return without_credentials(request) or None
