"""Which agent made a call, and whether a replayed call asks what the recorded one asked.

Calls are matched by (agent, the agent's call number); the request is then checked by
a hash over its normalised form. Normalisation drops transport details (streaming,
user tags) and representation noise (``None`` fields, one-part content lists), and can
mask volatile text (timestamps, UUIDs) with user-given regular expressions.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any, Literal
from urllib.parse import unquote

AGENT_HEADER = "x-faultfinder-agent"
"""Request header naming the calling agent (the most explicit identity)."""

AgentSource = Literal["header", "path", "system-prompt", "default"]

IGNORED_KEYS = frozenset({"stream", "stream_options", "user", "metadata", "store", "service_tier"})
"""Request keys that do not change what the model is asked."""

_YOU_ARE = re.compile(
    r"\b(?i:you are|you're) (?i:the |an? )?([A-Z][A-Za-z0-9_\-]*(?:[ _][A-Z][A-Za-z0-9_\-]*)?)"
)
_NAME_LINE = re.compile(r"^\s*(?:name|agent|role)\s*:\s*([A-Za-z][\w\- ]{0,40})\s*$", re.I | re.M)
_GENERIC = {"helpful", "assistant", "ai", "expert", "agent", "large", "language", "model", "llm"}


def split_agent_path(path: str) -> tuple[str | None, str]:
    """``/agent/<name>/v1/chat/completions`` -> (name, ``/v1/chat/completions``)."""
    if path.startswith("/agent/"):
        rest = path[len("/agent/") :]
        name, _, remainder = rest.partition("/")
        return (unquote(name) or None), "/" + remainder
    return None, path


def system_prompt(body: dict[str, Any]) -> str | None:
    """The first system (or developer) message's text."""
    for message in body.get("messages") or []:
        if isinstance(message, dict) and message.get("role") in ("system", "developer"):
            return content_text(message.get("content"))
    return None


def agent_from_system_prompt(prompt: str | None) -> str | None:
    """A name the system prompt gives the agent ('You are the Orchestrator...')."""
    if not prompt:
        return None
    line = _NAME_LINE.search(prompt)
    if line:
        return line.group(1).strip()
    for match in _YOU_ARE.finditer(prompt):
        # Only capitalised words name an agent: 'You are a helpful assistant' names nobody.
        words = [w for w in match.group(1).replace("_", " ").split() if w.lower() not in _GENERIC]
        if words:
            return " ".join(words)
    return "agent-" + hashlib.sha256(prompt.encode()).hexdigest()[:6]


def resolve_agent(
    header: str | None, path_agent: str | None, body: dict[str, Any]
) -> tuple[str, AgentSource]:
    """The calling agent's name and where it came from."""
    if header and header.strip():
        return header.strip(), "header"
    if path_agent:
        return path_agent, "path"
    named = agent_from_system_prompt(system_prompt(body))
    if named:
        return named, "system-prompt"
    return "assistant", "default"


def content_text(content: Any) -> str:
    """Message content as text (text parts of a list joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    return str(content)


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def _normalise_message(message: Any, masks: Sequence[re.Pattern[str]]) -> Any:
    if not isinstance(message, dict):
        return message
    out = _drop_none(dict(message))
    content = out.get("content")
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" for p in content
    ):
        content = content_text(content)
    if isinstance(content, str):
        for mask in masks:
            content = mask.sub("<masked>", content)
    if content is not None:
        out["content"] = content
    if out.get("content") == "" and out.get("tool_calls"):
        # Clients differ in sending '' or null next to tool calls; both mean no text.
        del out["content"]
    return out


def normalise_request(body: dict[str, Any], masks: Sequence[str] = ()) -> dict[str, Any]:
    """The parts of a request that determine the model's answer, in canonical form."""
    compiled = [re.compile(m) for m in masks]
    out = {k: _drop_none(v) for k, v in body.items() if k not in IGNORED_KEYS and v is not None}
    out["messages"] = _renumber_tool_call_ids(
        [_normalise_message(m, compiled) for m in body.get("messages") or []]
    )
    return out


def _renumber_tool_call_ids(messages: list[Any]) -> list[Any]:
    """Tool call ids replaced by their order of appearance, consistently in the calls and
    in the results answering them. Programs mint ids of their own (LangGraph's handoff
    messages carry fresh UUIDs each run); which result answers which call is what
    matters, not the id's text. Works on the already-copied normalised messages."""
    ids: dict[str, str] = {}

    def number(value: Any) -> Any:
        return ids.setdefault(value, f"call-{len(ids)}") if isinstance(value, str) else value

    for message in messages:
        if not isinstance(message, dict):
            continue
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict) and "id" in call:
                call["id"] = number(call["id"])
        if "tool_call_id" in message:
            message["tool_call_id"] = number(message["tool_call_id"])
    return messages


def request_hash(body: dict[str, Any], masks: Sequence[str] = ()) -> str:
    """Short stable hash of the normalised request."""
    blob = json.dumps(normalise_request(body, masks), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def first_difference(expected: Any, got: Any, path: str = "") -> str | None:
    """Where two normalised requests first differ, as 'messages[3].content: ... != ...'."""
    if type(expected) is not type(got):
        return f"{path or '(root)'}: {_short(expected)} != {_short(got)}"
    if isinstance(expected, dict):
        for key in sorted(set(expected) | set(got)):
            if key not in expected:
                return f"{path}.{key}: (absent) != {_short(got[key])}".lstrip(".")
            if key not in got:
                return f"{path}.{key}: {_short(expected[key])} != (absent)".lstrip(".")
            found = first_difference(expected[key], got[key], f"{path}.{key}" if path else key)
            if found:
                return found
        return None
    if isinstance(expected, list):
        for i, (a, b) in enumerate(zip(expected, got, strict=False)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found:
                return found
        if len(expected) != len(got):
            return f"{path}: {len(expected)} items != {len(got)} items"
        return None
    if expected != got:
        return f"{path or '(root)'}: {_short(expected)} != {_short(got)}"
    return None


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
