"""Which agent made a call, and which recorded call a replayed one asks for.

A replayed call is matched to the recording by its *content*: the calling agent plus a
hash of the normalised request (messages, tools, parameters), and its ordinal among
identical requests (the 2nd identical request gets the 2nd recorded answer to it).
Arrival order plays no part, so concurrent and interleaved calls match whatever order
they arrive in. Normalisation drops transport details (streaming, user tags) and
representation noise (``None`` fields, one-part content lists), and replaces volatile
text: built-in normalisers (timestamps, UUIDs, temporary paths, PIDs; each can be
switched off) and user-given regular expressions (``--mask``). The same normalised text
decides agent identity when an agent is known only by its system prompt.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple
from urllib.parse import unquote

from faultfinder.replay.framework_prompts import built_in_agent

AGENT_HEADER = "x-faultfinder-agent"
"""Request header naming the calling agent (the most explicit identity)."""

AgentSource = Literal["header", "path", "system-prompt", "default"]

IGNORED_KEYS = frozenset({"stream", "stream_options", "user", "metadata", "store", "service_tier"})
"""Request keys that do not change what the model is asked."""

_YOU_ARE = re.compile(
    r"\b(?i:you are|you're) (?i:the |an? )?([A-Z][A-Za-z0-9_\-]*(?:[ _][A-Z][A-Za-z0-9_\-]*)?)"
)
# From the line's own start (not from each blank line above it): linear on blank lines.
_NAME_LINE = re.compile(
    r"^[^\S\n]*+(?:name|agent|role)\s*:\s*([A-Za-z][\w\- ]{0,40})\s*$", re.I | re.M
)
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


def agent_from_system_prompt(prompt: str | None, matcher: Matcher | None = None) -> str | None:
    """A name the system prompt gives the agent ('You are the Orchestrator...'); else a
    hash of the prompt with its volatile text normalised, so a timestamp in the prompt
    does not make a new agent of every run."""
    if not prompt:
        return None
    built_in = built_in_agent(prompt)
    if built_in:
        return built_in
    prompt = (matcher or Matcher()).text(prompt)
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
    header: str | None,
    path_agent: str | None,
    body: dict[str, Any],
    matcher: Matcher | None = None,
) -> tuple[str, AgentSource]:
    """The calling agent's name and where it came from."""
    if header and header.strip():
        return header.strip(), "header"
    if path_agent:
        return path_agent, "path"
    named = agent_from_system_prompt(system_prompt(body), matcher)
    if named:
        return named, "system-prompt"
    # A framework's prompt sent as the first user message (SelectorGroupChat does so for
    # model families it does not take for OpenAI's) still names the framework's agent.
    first = next((m for m in body.get("messages") or [] if isinstance(m, dict)), None)
    built_in = built_in_agent(content_text(first.get("content")) if first else None)
    if built_in:
        return built_in, "system-prompt"
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


class Normaliser(NamedTuple):
    """A built-in rewrite of volatile text."""

    pattern: re.Pattern[str]
    replacement: str
    summary: str


_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*"
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*"

NORMALISERS: dict[str, Normaliser] = {
    "temp-paths": Normaliser(
        re.compile(
            r"(?:/private)?/(?:tmp|var/tmp|var/folders/[^\s/]+/[^\s/]+/T)(?:/[^\s'\"`,;)\]]*)?"
            # At most MAX_PATH (260) characters before '\Temp': an unbounded lazy scan
            # from every 'C:\' of a long run of them is quadratic.
            r"|[A-Za-z]:\\[^\s'\"`]{0,260}?\\Temp(?:\\[^\s'\"`,;)\]]*)?"
            r"|\btmp[a-z0-9_]{6,}\b"
        ),
        "<tmp-path>",
        "temporary files and directories (/tmp/..., /var/folders/.../T/..., tmpXXXXXXXX)",
    ),
    "uuids": Normaliser(
        re.compile(
            r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
        ),
        "<uuid>",
        "UUIDs (8-4-4-4-12 hex)",
    ),
    "timestamps": Normaliser(
        re.compile(
            r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?"
            r"(?:\s?(?:Z|UTC|[+-]\d{2}:?\d{2}))?)?"
            rf"|\b{_DAY},? (?:\d{{1,2}} {_MONTH}|{_MONTH} \d{{1,2}}),?(?: \d{{4}})?"
            r"(?: \d{2}:\d{2}(?::\d{2})?)?(?: (?:[A-Z]{2,4}|[+-]\d{4}))?(?: \d{4})?"
            r"|\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b"
            r"|\b1[5-9]\d{8}(?:\d{3}|\.\d+)?\b"
        ),
        "<timestamp>",
        "dates and times (ISO 8601, RFC 2822 / ctime, hh:mm:ss, Unix epoch seconds or ms)",
    ),
    "pids": Normaliser(
        # Possessive blanks (digits follow): a long run of spaces is read once.
        re.compile(r"\b(?i:pid|process id|process)(\s*+[:=#]?\s*+)\d{2,7}\b"),
        "pid\\1<pid>",
        "process ids ('pid 4242', 'PID=4242', 'process 4242')",
    ),
}
"""Built-in normalisers, applied in this order (paths first: they may hold ids and dates)."""

TEXT_CACHE_SIZE = 20_000
"""Normalised strings a :class:`Matcher` remembers (then it starts over)."""

DEFAULT_NORMALISERS: tuple[str, ...] = tuple(NORMALISERS)
"""All built-in normalisers are on unless switched off (``--no-normalise NAME``)."""


def check_normalisers(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` validated against the registry (unknown names list what exists)."""
    unknown = [n for n in names if n not in NORMALISERS]
    if unknown:
        raise ValueError(f"unknown normaliser {unknown[0]!r}; available: {', '.join(NORMALISERS)}")
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class Matcher:
    """How requests are normalised for matching and for agent identity."""

    normalisers: tuple[str, ...] = DEFAULT_NORMALISERS
    """Built-in normalisers to apply (names in :data:`NORMALISERS`)."""
    masks: tuple[str, ...] = ()
    """User regular expressions whose matches become ``<masked>``."""
    _rules: tuple[tuple[str, re.Pattern[str], str], ...] = field(
        init=False, repr=False, compare=False
    )
    _seen: dict[str, tuple[str, frozenset[str]]] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        names = check_normalisers(self.normalisers)
        rules = [(n, NORMALISERS[n].pattern, NORMALISERS[n].replacement) for n in names]
        for mask in self.masks:
            try:
                rules.append(("mask", re.compile(mask), "<masked>"))
            except re.error as exc:
                raise ValueError(f"--mask {mask!r} is not a regular expression: {exc}") from None
        object.__setattr__(self, "_rules", tuple(rules))

    def text(self, value: str, applied: set[str] | None = None) -> str:
        """``value`` with volatile text replaced; names of the rules that fired go to
        ``applied``."""
        # Each request repeats the conversation so far: without this cache the same
        # messages are normalised again on every call (quadratic in the conversation).
        seen = self._seen
        cached = seen.get(value)
        if cached is None:
            out, fired = value, set()
            for name, pattern, replacement in self._rules:
                out, count = pattern.subn(replacement, out)
                if count:
                    fired.add(name)
            if len(seen) >= TEXT_CACHE_SIZE:
                seen.clear()
            cached = seen[value] = (out, frozenset(fired))
        if applied is not None:
            applied.update(cached[1])
        return cached[0]

    def _strings(self, value: Any, path: str, fields: dict[str, set[str]] | None) -> Any:
        if isinstance(value, str):
            applied: set[str] = set()
            out = self.text(value, applied)
            if applied and fields is not None:
                fields.setdefault(path, set()).update(applied)
            return out
        if isinstance(value, dict):
            return {
                k: self._strings(v, f"{path}.{k}" if path else k, fields) for k, v in value.items()
            }
        if isinstance(value, list):
            return [self._strings(v, f"{path}[{i}]", fields) for i, v in enumerate(value)]
        return value

    def normalise(
        self, body: dict[str, Any], fields: dict[str, set[str]] | None = None
    ) -> dict[str, Any]:
        """The parts of a request that determine the model's answer, in canonical form,
        volatile text replaced. Changed fields (path -> rule names) go to ``fields``."""
        out = {k: _drop_none(v) for k, v in body.items() if k not in IGNORED_KEYS and v is not None}
        out["messages"] = _renumber_tool_call_ids(
            [_canonical_message(m) for m in body.get("messages") or []]
        )
        for key in UNORDERED_KEYS:
            if isinstance(out.get(key), list):
                out[key] = sorted(out[key], key=lambda item: json.dumps(item, sort_keys=True))
        return dict(self._strings(out, "", fields))

    def hash(self, body: dict[str, Any]) -> str:
        """Short stable hash of the normalised request."""
        return hash_normalised(self.normalise(body))

    def agent(
        self, header: str | None, path_agent: str | None, body: dict[str, Any]
    ) -> tuple[str, AgentSource]:
        """The calling agent's name and where it came from (see :func:`resolve_agent`)."""
        return resolve_agent(header, path_agent, body, self)


def hash_normalised(normalised: dict[str, Any]) -> str:
    """Short stable hash of an already normalised request."""
    blob = json.dumps(normalised, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


UNORDERED_KEYS = ("tools", "functions")
"""Request lists compared as sets: programs build their tool lists from dicts and sets
whose order can change from run to run (langgraph-supervisor's handoff tools follow the
interpreter's string hashing), and the tools offered, not their order, are the request."""


def _renumber_tool_call_ids(messages: list[Any]) -> list[Any]:
    """Tool call ids replaced by their order of appearance, consistently in the calls and
    in the results answering them. Programs mint ids of their own (LangGraph's handoff
    messages carry fresh ones each run, not always UUIDs); which result answers which
    call is what matters, not the id's text. Works on already-copied messages."""
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


def _canonical_message(message: Any) -> Any:
    if not isinstance(message, dict):
        return message
    out = _drop_none(dict(message))
    content = out.get("content")
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" for p in content
    ):
        content = content_text(content)
    if content is not None:
        out["content"] = content
    if out.get("content") == "" and out.get("tool_calls"):
        # Clients differ in sending '' or null next to tool calls; both mean no text.
        del out["content"]
    return out


def request_hash(
    body: dict[str, Any],
    masks: Sequence[str] = (),
    normalisers: Sequence[str] = DEFAULT_NORMALISERS,
) -> str:
    """Short stable hash of the normalised request (see :meth:`Matcher.hash`)."""
    return Matcher(tuple(normalisers), tuple(masks)).hash(body)


def request_diff(expected: dict[str, Any], got: dict[str, Any], limit: int = 40) -> str:
    """A unified diff of two normalised requests (recorded first), at most ``limit`` lines."""
    a = json.dumps(expected, indent=1, sort_keys=True, ensure_ascii=False).split("\n")
    b = json.dumps(got, indent=1, sort_keys=True, ensure_ascii=False).split("\n")
    lines = list(difflib.unified_diff(a, b, "recorded", "replayed", n=2, lineterm=""))
    if len(lines) > limit:
        lines = [*lines[:limit], f"... ({len(lines) - limit} more diff lines)"]
    return "\n".join(lines)


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
