"""The contract between the proxy and one model wire format (:class:`WireAdapter`).

The proxy, the matcher, edits, the trace builder, DoVer, the importers and the UI speak
one **canonical call**: a request shaped like a Chat Completions request (``messages``
with ``system``/``user``/``assistant``/``tool`` roles, assistant ``tool_calls`` in
OpenAI's function format, ``tool`` messages carrying ``tool_call_id``; every other
parameter kept under its own name) and a reply that is one assistant message
(:class:`CanonicalReply`). An adapter translates one wire format to and from it:

- requests: :meth:`WireAdapter.canonical_request` (for matching, agent identity and the
  trace), :meth:`~WireAdapter.rewrite_tool_result` and :meth:`~WireAdapter.edit_input`
  (request edits applied to the wire body), :meth:`~WireAdapter.for_upstream` (what a
  live call sends);
- replies: :meth:`~WireAdapter.reply_ok`, :meth:`~WireAdapter.canonical_reply`,
  :meth:`~WireAdapter.with_reply` (the wire reply carrying an edited message);
- streams: :meth:`~WireAdapter.accumulator` adds a stream's events up to the complete
  reply it stands for, :meth:`~WireAdapter.synthesise` makes a stream of a complete
  reply (edited replies, or a streamed request matched to a non-streamed recording),
  :meth:`~WireAdapter.visible` hides events the client did not ask for;
- chains: :meth:`~WireAdapter.remember` files a finished call in a :class:`Chains`
  store, so a later request naming it (the Responses API's ``previous_response_id``) is
  understood, and :meth:`~WireAdapter.for_upstream` can make it self-contained;
- the program's environment: :meth:`~WireAdapter.client_env`, and the credential
  header of a key: :meth:`~WireAdapter.auth_headers`.

Recorded streams are kept as the events the upstream sent, grouped as they arrived
(:class:`~faultfinder.replay.run_format.RecordedCall` ``events``/``writes``), and replayed
as such for every API: an adapter only parses events (:class:`SSEEvent`), it never
re-encodes a recorded stream.

A new API is one module with one class following this protocol, listed in
``faultfinder.registry.APIS`` (in the tree) or declared in the entry-point group
``faultfinder.apis`` of a package of your own (docs/plugins.md: the registry checks its
name and members; :func:`faultfinder.replay.apis.register`, which does not, adds one
from running code, a test). Adapters are stateless; all per-run state (chains) is passed
in. Subclassing :class:`AdapterBase` is optional: it gives the members most APIs share
(POST on one path, ``stream: true``, overrides the API has, no chains, every event
shown, OpenAI's error body, environment and bearer key), so an adapter writes only what
differs; :func:`tool_call`, :func:`edited_id` and :func:`openai_usage` are the canonical
tool call, the id of an edited reply and the token counts of an OpenAI reply.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from faultfinder.contracts import interface_problem
from faultfinder.llm import json_text
from faultfinder.llm import usage as llm_usage


@dataclass(frozen=True)
class SSEEvent:
    """One server-sent event as received: its raw bytes, ``event:`` name and data."""

    raw: bytes
    """The event exactly as sent, blank-line terminator included."""
    name: str | None
    """The ``event:`` field, when present."""
    data: Any
    """The ``data:`` field parsed as JSON (a str when it is not JSON, e.g. ``[DONE]``;
    None for an event without data, e.g. a comment)."""

    @classmethod
    def parse(cls, raw: bytes) -> SSEEvent:
        name: str | None = None
        data_lines: list[bytes] = []
        for line in raw.split(b"\n"):
            if line.startswith(b"event:"):
                name = line[6:].strip().decode("utf-8", errors="replace")
            elif line.startswith(b"data:"):
                data_lines.append(line[5:].lstrip(b" "))
        if not data_lines:
            return cls(raw, name, None)
        text = b"\n".join(data_lines).decode("utf-8", errors="replace")
        try:
            data: Any = json_text.loads(text)
        except json_text.JSONTextError:
            data = text
        return cls(raw, name, data)


def encode_sse(data: Any, name: str | None = None) -> bytes:
    """One SSE event (``event:`` line when named, one ``data:`` line)."""
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {text}\n\n".encode()


@dataclass
class CanonicalReply:
    """A reply as one assistant message, whatever the wire format."""

    message: dict[str, Any]
    """``{"role": "assistant", "content": str | None, "tool_calls": [...]}`` in Chat
    Completions form; tool call ids are the API's own (``call_...``, ``toolu_...``)."""
    finish_reason: str | None = None
    """Why the reply ended ('stop', 'tool_calls', 'length'...), as the API says it."""
    model: str | None = None
    """Model that answered."""
    prompt_tokens: int | None = None
    """Input tokens, when the reply reports usage."""
    completion_tokens: int | None = None
    """Output tokens, when the reply reports usage."""
    cached_tokens: int | None = None
    """Input tokens served from the provider's prompt cache, when reported (None when the
    reply does not say, which is not a 0)."""
    cache_write_tokens: int | None = None
    """Input tokens written to the provider's prompt cache, when reported (the Messages
    API's ``cache_creation_input_tokens``)."""
    reply_id: str | None = None
    """The reply's id (``chatcmpl-...``, ``resp_...``, ``msg_...``)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """What the canonical message cannot hold, kept for the trace (e.g. reasoning)."""


class Chains:
    """Finished calls by reply id, for APIs whose requests can name an earlier reply
    instead of repeating it (``previous_response_id``). What is filed under an id is
    the adapter's business."""

    def __init__(self) -> None:
        self._items: dict[str, Any] = {}

    def put(self, reply_id: str, value: Any) -> None:
        self._items[reply_id] = value

    def get(self, reply_id: str) -> Any:
        return self._items.get(reply_id)

    def __contains__(self, reply_id: object) -> bool:
        return reply_id in self._items


@runtime_checkable
class StreamAccumulator(Protocol):
    """Adds a stream's events up to the complete reply they stand for."""

    def add(self, event: SSEEvent) -> None:
        """Take the next event."""
        ...

    @property
    def finished(self) -> bool:
        """The stream has sent its last event (Chat's ``[DONE]``, a Responses terminal
        event, Messages' ``message_stop``); the proxy records the call right then."""
        ...

    def result(self) -> dict[str, Any] | None:
        """The complete reply (the same object a non-streamed call returns), or None
        when the stream ended before the reply was complete."""
        ...


@runtime_checkable
class WireAdapter(Protocol):
    """One model API's wire format (see the module docstring for the contract)."""

    name: str
    """Short stable name, stored with every recorded call ('chat', 'responses', ...)."""

    def handles(self, method: str, path: str) -> bool:
        """Is ``method path`` (agent prefix removed, e.g. ``/v1/chat/completions``) a
        model call of this API?"""
        ...

    # --- requests ------------------------------------------------------------------

    def is_stream(self, body: dict[str, Any]) -> bool:
        """Did the client ask for a streamed reply?"""
        ...

    def canonical_request(self, body: dict[str, Any], chains: Chains) -> dict[str, Any]:
        """The request as a canonical call: ``messages`` (the whole conversation,
        chains resolved through ``chains``), ``tools`` and every parameter that changes
        the answer. Keys that do not (stream, store, user, metadata...) may stay: the
        matcher drops them."""
        ...

    def for_upstream(
        self,
        body: dict[str, Any],
        chains: Chains,
        *,
        overrides: dict[str, Any],
        stream_usage: bool,
        expand: bool,
    ) -> dict[str, Any]:
        """What a live call sends upstream: ``overrides`` applied where the API has the
        parameter, usage asked for on streams when ``stream_usage``, and, when
        ``expand``, a chained request made self-contained from ``chains`` (the upstream
        may never have seen a reply the recording served)."""
        ...

    def rewrite_tool_result(
        self, body: dict[str, Any], call_id: str, content: str
    ) -> dict[str, Any] | None:
        """``body`` with the result of tool call ``call_id`` replaced by ``content``
        (None when the request carries no such result)."""
        ...

    def edit_input(self, body: dict[str, Any], text: str, mode: str) -> dict[str, Any]:
        """``body`` with its last user message's text replaced by ``text``
        (mode 'replace-last-user') or a user message ``text`` added ('append-user')."""
        ...

    # --- replies -------------------------------------------------------------------

    def reply_ok(self, payload: Any) -> bool:
        """Is ``payload`` a complete, successful reply of this API?"""
        ...

    def canonical_reply(self, response: dict[str, Any]) -> CanonicalReply:
        """The reply as one assistant message."""
        ...

    def with_reply(self, response: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
        """``response`` (a recorded reply) carrying the canonical assistant ``message``
        instead of its own, ids kept where the message keeps them; a new reply id
        (the recorded one plus '-edited')."""
        ...

    def remember(self, chains: Chains, body: dict[str, Any], response: dict[str, Any]) -> None:
        """File a finished call for later requests that name its reply."""
        ...

    # --- streams -------------------------------------------------------------------

    def accumulator(self) -> StreamAccumulator:
        """A fresh accumulator for one stream."""
        ...

    def synthesise(self, response: dict[str, Any], body: dict[str, Any]) -> list[bytes]:
        """A conformant stream (encoded events, in order) of the complete reply
        ``response`` for a client asking ``body``."""
        ...

    def visible(self, event: SSEEvent, body: dict[str, Any]) -> bool:
        """Should a recorded event reach a client asking ``body``? (Chat hides the usage
        chunk the proxy asked for on the client's behalf.)"""
        ...

    # --- errors and environment ----------------------------------------------------

    def error_body(self, status: int, message: str, kind: str) -> dict[str, Any]:
        """An error in the API's own error format, so its SDK shows ``message``."""
        ...

    def client_env(self, proxy_url: str) -> dict[str, str]:
        """Environment variables pointing this API's SDKs at the proxy at
        ``proxy_url`` (scheme, host and port, no path)."""
        ...

    def auth_headers(self, key: str) -> dict[str, str]:
        """The header(s) carrying ``key`` to this API's upstream."""
        ...


ADAPTER_CALLS: tuple[str, ...] = tuple(
    member
    for member, value in vars(WireAdapter).items()
    if callable(value) and not member.startswith("_")
)
"""Every method of :class:`WireAdapter`, in the order it declares them: the proxy, the
replayer, the trace builder and ``record`` call each of them."""


def adapter_problem(cls: object) -> str | None:
    """What keeps ``cls`` from being an adapter class (:class:`WireAdapter`), as a phrase
    ('is not a model-API adapter: it lacks client_env'), or None. The registry asks it of
    every adapter it loads, so one that lacks a member is refused there, in one line naming
    it, before the proxy calls that member in the middle of a program's run."""
    return interface_problem(
        cls,
        "model-API adapter",
        "an adapter class follows faultfinder.replay.apis.base.WireAdapter; subclassing "
        "faultfinder.replay.apis.AdapterBase gives the members most APIs share",
        texts=("name",),
        calls=ADAPTER_CALLS,
        bare=True,
    )


def tool_call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    """A canonical tool call (OpenAI's function format) with the API's own ``call_id``."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def split_after_spaces(text: str) -> list[str]:
    """``text`` cut after each space (the last piece empty when it ends with one): the
    deltas a synthesised stream sends, so a client reassembles several."""
    return text.replace(" ", " \0").split("\0")


def edited_id(response: dict[str, Any], default: str) -> str:
    """The id of an edited reply: the recorded one (``default`` when it has none) plus
    '-edited'."""
    return str(response.get("id") or default) + "-edited"


def openai_usage(
    response: dict[str, Any], prompt: str, completion: str, details: str
) -> tuple[int | None, int | None, int | None]:
    """(prompt, completion, cached) tokens of an OpenAI reply's ``usage``, read under the
    API's own key names (``prompt_tokens``... or ``input_tokens``...; ``cached_tokens``
    under ``details``): all None when the reply reports no usage, cached None when it
    does not say."""
    reported = response.get("usage")
    if not isinstance(reported, dict):
        return None, None, None
    # The LLM layer's reading of the same object, so a recorded trace and a bill agree.
    usage = llm_usage.openai_usage(reported, prompt=prompt, completion=completion, details=details)
    cache = reported.get(details)
    said = isinstance(cache, dict) and "cached_tokens" in cache
    return (
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.cached_prompt_tokens if said else None,
    )


class AdapterBase:
    """What most adapters share; a subclass sets :attr:`name`, :attr:`path` and
    :attr:`overridable` and writes the rest of :class:`WireAdapter`, overriding a
    default only where its API differs. The defaults follow OpenAI's conventions (which
    most compatible gateways copy): a bearer key, ``OPENAI_BASE_URL``, OpenAI's error
    body."""

    name: str = ""
    """See :attr:`WireAdapter.name`."""
    path: str = ""
    """How a model call's path ends (``/chat/completions``); :meth:`handles` takes POSTs
    on such paths."""
    overridable: frozenset[str] | None = None
    """Live-call overrides the API has as parameters (None: every one)."""

    def handles(self, method: str, path: str) -> bool:
        return method == "POST" and path.rstrip("/").endswith(self.path)

    def is_stream(self, body: dict[str, Any]) -> bool:
        return bool(body.get("stream"))

    def for_upstream(
        self,
        body: dict[str, Any],
        chains: Chains,
        *,
        overrides: dict[str, Any],
        stream_usage: bool,
        expand: bool,
    ) -> dict[str, Any]:
        """``body`` with the overrides the API has (:meth:`overridden`): enough for an
        API whose requests carry the whole conversation and whose streams report usage
        unasked."""
        return self.overridden(body, overrides)

    def overridden(self, body: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
        """A copy of ``body`` with those of ``overrides`` the API has (:attr:`overridable`)."""
        sent = dict(body)
        if self.overridable is None:
            sent.update(overrides)
        else:
            sent.update({k: v for k, v in overrides.items() if k in self.overridable})
        return sent

    def remember(self, chains: Chains, body: dict[str, Any], response: dict[str, Any]) -> None:
        return None  # every request carries its whole conversation

    def visible(self, event: SSEEvent, body: dict[str, Any]) -> bool:
        return True

    def error_body(self, status: int, message: str, kind: str) -> dict[str, Any]:
        return {"error": {"message": message, "type": kind, "code": status}}

    def client_env(self, proxy_url: str) -> dict[str, str]:
        return {"OPENAI_BASE_URL": proxy_url + "/v1", "OPENAI_API_BASE": proxy_url + "/v1"}

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"}
