"""The LLM interface: requests, completions and the backend protocol.

Methods never talk to a backend directly; they use :class:`faultfinder.llm.client.LLM`,
which owns retries, caching, budgets and token accounting.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from faultfinder.contracts import instance_problem
from faultfinder.traces.schema import ToolCall
from faultfinder.usage import Usage

ALLOW_MODEL_REQUESTS = True
"""Global switch. Tests set it to False so that any request to a real backend fails loudly."""


class OutputConstraint(BaseModel):
    """Restricts what a model may answer. Backends apply what they support and ignore the rest."""

    gbnf: str | None = None
    """A llama.cpp GBNF grammar the reply must match (used by the embedded model)."""
    json_schema: dict[str, Any] | None = None
    """A JSON schema the reply must satisfy (structured output where supported)."""


class ChatRequest(BaseModel):
    """One chat-completion request, without credentials."""

    messages: list[dict[str, Any]]
    """OpenAI-format messages."""
    temperature: float | None = 0.0
    """Sampling temperature; None sends none (the backend's default)."""
    top_p: float | None = None
    """Nucleus-sampling mass; None sends none (the backend's default)."""
    max_tokens: int | None = 1024
    """Upper bound on the reply length."""
    seed: int | None = None
    """Sampling seed, for backends that take one."""
    stop: list[str] | None = None
    """Stop sequences."""
    tools: list[dict[str, Any]] | None = None
    """OpenAI-format tool definitions offered to the model."""
    tool_choice: str | dict[str, Any] | None = None
    """OpenAI-format tool choice."""
    constraint: OutputConstraint | None = None
    """Restriction on the reply's form."""
    sample: int = 0
    """Sample index: the same request with another index is a distinct draw (and cache entry)."""


class Completion(BaseModel):
    """What a backend returned for one request."""

    text: str = ""
    """The reply's text content (empty when the model only called tools)."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    """Tool calls in the reply."""
    usage: Usage = Field(default_factory=Usage)
    """Tokens reported by the backend (zeros when it reports none)."""
    model: str = ""
    """Model name the backend reports."""
    finish_reason: str | None = None
    """Why generation stopped."""
    raw: dict[str, Any] | None = None
    """The backend's raw reply, JSON-serialisable."""


CUT_OFF = frozenset({"length", "max_tokens"})
"""Finish reasons of a reply cut off at the output limit (the request's ``max_tokens``, or
a server's own limit): OpenAI's name, and Anthropic's where a server passes it through."""
WITHHELD = frozenset({"content_filter", "refusal"})
"""Finish reasons of a reply the endpoint withheld: a content filter (OpenAI, Azure) or
the model's refusal (Anthropic's ``stop_reason``)."""


def incomplete_reason(completion: Completion, max_tokens: int | None) -> str | None:
    """Why ``completion`` is not a whole answer, or None when it is one: cut off at the
    output limit, withheld by the endpoint, or empty (no text, no tool call). Such a
    reply is never read as an answer nor kept in the response cache."""
    finish = completion.finish_reason
    if finish in CUT_OFF:
        limit = f"its {max_tokens}-token limit" if max_tokens is not None else "a server limit"
        return (
            f"reply cut off at {limit} (finish_reason '{finish}'): raise --max-output-tokens "
            "(or the server's output limit); a cut-off reply is not read as an answer"
        )
    if finish in WITHHELD:
        return (
            f"the endpoint withheld the reply (finish_reason '{finish}': a content filter, "
            "or the model refused); there is no answer to read"
        )
    if not completion.text.strip() and not completion.tool_calls:
        said = f"finish_reason '{finish}'" if finish else "no finish_reason"
        return f"the endpoint sent an empty reply ({said})"
    return None


class TransientLLMError(Exception):
    """A failure worth retrying (rate limit, timeout, 5xx). Backends raise it."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


_NEVER_SENT = "_faultfinder_never_sent"


def mark_never_sent(cancelled: BaseException) -> None:
    """Say, on the cancellation a backend's ``complete`` re-raises, that its request never
    reached the model (it was still queued inside the backend): the LLM layer then does
    not count the cut call as made. Without the mark, a cut call counts."""
    setattr(cancelled, _NEVER_SENT, True)


def never_sent(cancelled: BaseException) -> bool:
    """Whether a backend marked this cancellation with :func:`mark_never_sent`."""
    return getattr(cancelled, _NEVER_SENT, False) is True


_USED = "_faultfinder_used"


def report_usage(failure: BaseException, usage: Usage) -> None:
    """Say, on the exception a backend's ``complete`` raises instead of a reply (an
    ``LLMCallError``, or the cancellation it re-raises when the call is cut), what the
    model is known to have used: the prompt tokens it read (chat template included) and
    the tokens it generated before it stopped. The LLM layer charges a call that went out
    and brought no reply no less than this, nor less than its own prompt estimate; without
    a report, it charges the estimate alone. On the ``LLMCallError`` the LLM layer raises
    for such a call, it puts what it charged."""
    setattr(failure, _USED, usage)


def reported_usage(failure: BaseException) -> Usage | None:
    """What :func:`report_usage` put on this exception, if anything."""
    used = getattr(failure, _USED, None)
    return used if isinstance(used, Usage) else None


@runtime_checkable
class Backend(Protocol):
    """A model endpoint. Implementations live one per module in ``faultfinder.llm``."""

    name: str
    """Spec-like name, e.g. 'openai:gpt-4o', 'local', 'scripted'."""
    model: str
    """Model identifier sent with requests."""
    is_real: bool
    """False for test doubles; real backends obey ALLOW_MODEL_REQUESTS."""
    supports_tools: bool
    """True when the backend accepts OpenAI-style ``tools``."""

    def identity(self) -> dict[str, Any]:
        """What distinguishes this backend in a cache key (never credentials)."""
        ...

    async def complete(self, request: ChatRequest) -> Completion:
        """Answer one request. Raise TransientLLMError for retryable failures."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens in ``text`` by this backend's tokenizer (an estimate when it has none)."""
        ...


def backend_problem(value: object) -> str | None:
    """What keeps ``value`` (what a plugin's backend factory built) from being a
    :class:`Backend`, as a phrase ('is a dict, not a model backend: it lacks name ...'), or
    None. Checked when the backend is built, so a backend that lacks ``identity`` or
    ``complete`` is refused once, naming its package, rather than failing every case."""
    return instance_problem(
        value,
        "model backend",
        "a backend follows faultfinder.llm.base.Backend",
        texts=("name", "model"),
        flags=("is_real", "supports_tools"),
        calls=("identity", "complete", "count_tokens"),
    )


def completion_of(backend: Backend, value: object) -> Completion:
    """``value``, what ``backend.complete()`` returned, when it is a :class:`Completion`;
    else an ``LLMCallError`` saying so, naming a plugin's package: the case errors with
    what to fix, not with an ``AttributeError`` from deep in the LLM layer."""
    if isinstance(value, Completion):
        return value
    from faultfinder.errors import LLMCallError

    what = f"returned a {type(value).__name__} from complete(), not a Completion"
    what += " (faultfinder.llm.base.Completion)"
    plugin = _plugin_of(backend)
    if plugin is None:
        raise LLMCallError(f"{backend.name} {what}")
    raise LLMCallError(f"The model backend {plugin} {what}. Fix or remove that package.")


def _plugin_of(backend: Backend) -> str | None:
    """The backend kind's entry point, as the registry names it ("'mycloud' from plugin
    DIST VERSION (module:factory)"), for a backend a plugin defines (None: a faultfinder
    class). Read from the entry points here: the registry is above this module's imports."""
    from importlib import metadata

    if type(backend).__module__.partition(".")[0] == "faultfinder":
        return None
    kind = str(backend.name).partition(":")[0]
    points = metadata.entry_points(group="faultfinder.backends", name=kind)
    for ep in sorted(points, key=lambda p: (p.dist.name if p.dist else "", p.value)):
        origin = f"plugin {ep.dist.name} {ep.dist.version}" if ep.dist else "plugin"
        return f"'{kind}' from {origin} ({ep.value})"
    return None


def approx_token_count(text: str) -> int:
    """Rough token count (~4 characters per token) for backends without a tokenizer."""
    return (len(text) + 3) // 4


def who_and_what(name: str, exc: BaseException) -> tuple[str, str]:
    """Who failed and what happened, from the error of the backend called ``name``, for a
    sentence that names the model once and goes on after it: a text that starts with the
    name (``openai:m at URL: HTTP 503: overloaded``) is split at its first ``": "``; any
    other text follows the name. No closing full stop."""
    text = str(exc).strip().rstrip(".").rstrip() or type(exc).__name__
    if text.startswith(name) and ": " in text:
        where, _, what = text.partition(": ")
        return where, what
    return name, text


def last_user_text(messages: list[dict[str, Any]]) -> str | None:
    """The text of the last user message that is plain text (what a call record keeps
    with ``keep_prompts``), or None."""
    for m in reversed(messages):
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            return str(m["content"])
    return None


def messages_text(messages: list[dict[str, Any]]) -> str:
    """All text in a message list, for token counting."""
    parts: list[str] = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
        for call in m.get("tool_calls") or []:
            parts.append(str(call))
    return "\n".join(parts)


def request_text(request: ChatRequest) -> str:
    """Everything of a request that counts as prompt: messages and tool definitions."""
    text = messages_text(request.messages)
    if request.tools:
        text += "\n" + json.dumps(request.tools, ensure_ascii=False)
    return text
