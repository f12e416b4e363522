"""Test doubles shipped with the package, so tests and the CLI run offline.

``ScriptedBackend`` answers with fixed replies in order; ``FunctionBackend`` calls a
Python function with each request. Neither is a real model: ALLOW_MODEL_REQUESTS does
not apply to them.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import difflib
import hashlib
import inspect
import itertools
import json
import secrets
import threading
import types
import weakref
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from faultfinder.errors import ConfigError, FaultfinderError
from faultfinder.llm import json_text
from faultfinder.llm.base import ChatRequest, Completion, approx_token_count
from faultfinder.traces.schema import ToolCall
from faultfinder.usage import Usage

REPLY_FORMS = (
    'expected a string, a {"text", "tool_calls", "usage"} object or a Completion (docs/llm.md, '
    "Test doubles)"
)
"""What a scripted reply or a function model's return value may be, for error messages."""

_PROCESS = secrets.token_hex(8)
_LOCAL_NUMBERS = itertools.count(1)
_LOCAL_TOKENS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_LOCAL_LOCK = threading.Lock()


def local_token() -> str:
    """A name no other object gets, in this process or any other, now or later: a random
    number drawn once per process and a counter. ``id()`` is not one: Python gives a
    freed object's address to the next, so two test doubles made one after the other
    could share cache entries."""
    return f"local:{_PROCESS}:{next(_LOCAL_NUMBERS)}"


def _local_identity(fn: Callable[..., Any]) -> str:
    """The :func:`local_token` of ``fn``, the same for as long as ``fn`` lives; a fresh
    one per call for an object that takes no weak reference (it is then never cached)."""
    with _LOCAL_LOCK:
        try:
            token = _LOCAL_TOKENS.get(fn)
            if token is None:
                token = _LOCAL_TOKENS[fn] = local_token()
        except TypeError:
            return local_token()
        return token


_REPLY_KEYS = ("text", "tool_calls", "usage")
_CALL_KEYS = ("id", "name", "arguments")
_USAGE_KEYS = ("prompt_tokens", "completion_tokens")


def _shown(value: object) -> str:
    """A short, one-line picture of a bad value: its repr (cut) and its type."""
    text = repr(value).replace("\n", " ")
    if len(text) > 60:
        text = text[:57] + "..."
    return text if value is None else f"{text} ({type(value).__name__})"


def _unknown_keys(given: dict[str, Any], known: tuple[str, ...]) -> str | None:
    """'unknown key 'txt' (did you mean 'text'?)', or None when every key is known."""
    unknown = [str(k) for k in given if k not in known]
    if not unknown:
        return None
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hints.append(f"'{key}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
    return f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(hints)}"


def reply_problem(reply: object) -> str | None:
    """What is wrong with a scripted reply or a function model's return value, or None
    when it is one of :data:`REPLY_FORMS`. Unknown keys are wrong, not ignored: a
    misspelt ``"txt"`` would otherwise answer with an empty text."""
    if isinstance(reply, str | Completion):
        return None
    if not isinstance(reply, dict):
        return f"is {_shown(reply)}"
    if unknown := _unknown_keys(reply, _REPLY_KEYS):
        return f"has an {unknown}"
    if not isinstance(reply.get("text", ""), str):
        return f'has "text" {_shown(reply["text"])}, not a string'
    usage = reply.get("usage", {})
    if not isinstance(usage, dict):
        return f'has "usage" {_shown(usage)}, not an object'
    if unknown := _unknown_keys(usage, _USAGE_KEYS):
        return f'has "usage" with an {unknown}'
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in usage.values()):
        return 'has "usage" counts that are not whole numbers'
    calls = reply.get("tool_calls", [])
    if not isinstance(calls, list):
        return f'has "tool_calls" {_shown(calls)}, not a list'
    for i, call in enumerate(calls):
        where = f"tool call {i + 1}"
        if not isinstance(call, dict):
            return f"has {where} {_shown(call)}, not an object"
        if unknown := _unknown_keys(call, _CALL_KEYS):
            return f"has {where} with an {unknown}"
        if not isinstance(call.get("name"), str) or not call["name"]:
            return f'has {where} without a "name" string'
        if call.get("id") is not None and not isinstance(call["id"], str):
            return f'has {where} with "id" {_shown(call["id"])}, not a string'
        arguments = call.get("arguments", {})
        if not isinstance(arguments, str):
            try:
                json.dumps(arguments)
            except (TypeError, ValueError):
                return f'has {where} with "arguments" {_shown(arguments)}, not JSON'
    return None


def _to_completion(reply: object, model: str, where: str) -> Completion:
    """``reply`` as a Completion; ``ConfigError`` naming ``where`` (which double, which
    reply) and the accepted forms when it is none of them."""
    if problem := reply_problem(reply):
        raise ConfigError(f"{where} {problem}; {REPLY_FORMS}.")
    if isinstance(reply, Completion):
        return reply
    if isinstance(reply, str):
        return Completion(text=reply, model=model, finish_reason="stop")
    assert isinstance(reply, dict)
    calls = [
        ToolCall(
            id=c.get("id") or f"call_{i}",
            name=c["name"],
            arguments=c["arguments"]
            if isinstance(c.get("arguments"), str)
            else json.dumps(c.get("arguments", {})),
        )
        for i, c in enumerate(reply.get("tool_calls", []))
    ]
    return Completion(
        text=reply.get("text", ""),
        tool_calls=calls,
        usage=Usage(**reply.get("usage", {})),
        model=model,
        finish_reason="tool_calls" if calls else "stop",
    )


class ScriptedBackend:
    """Replies from a list, in order.

    Each reply is a string, or ``{"text": ..., "tool_calls": [{"name", "arguments"}]}``
    (:data:`REPLY_FORMS`); one of another shape is a ``ConfigError`` here, before any
    call. When the list runs out it raises, unless ``repeat_last`` is set.
    """

    is_real = False
    supports_tools = True

    def __init__(
        self, replies: list[str | dict[str, Any]], *, repeat_last: bool = False, model: str = ""
    ) -> None:
        self.replies = list(replies)
        self.repeat_last = repeat_last
        self.model = model or "scripted"
        self.name = f"scripted:{self.model}" if model else "scripted"
        self.requests: list[ChatRequest] = []
        self._instance = local_token()
        for i, reply in enumerate(self.replies):
            if problem := reply_problem(reply):
                raise ConfigError(f"{self.name}: reply {i + 1} {problem}; {REPLY_FORMS}.")

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedBackend:
        """Load replies from JSON: a list, or ``{"replies": [...], "repeat_last": true}``."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"Scripted replies file not found: {p}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{p}: cannot read scripted replies: {exc}") from None
        if not text.strip():
            raise ConfigError(f"{p}: empty file (expected a JSON list of scripted replies)")
        try:
            data = json_text.loads(text)
        except json_text.JSONTextError as exc:
            raise ConfigError(f"{p}: invalid JSON for scripted replies: {exc}") from None
        if isinstance(data, list):
            return cls(data, model=p.name)
        if isinstance(data, dict) and isinstance(data.get("replies"), list):
            if unknown := _unknown_keys(data, ("replies", "repeat_last")):
                raise ConfigError(
                    f'{p}: {unknown}; the scripted replies file takes "replies" (a list) '
                    'and "repeat_last" (true or false).'
                )
            repeat_last = data.get("repeat_last", False)
            if not isinstance(repeat_last, bool):
                raise ConfigError(
                    f'{p}: "repeat_last" is {_shown(repeat_last)}; use true or false.'
                )
            return cls(data["replies"], repeat_last=repeat_last, model=p.name)
        raise ConfigError(
            f'{p}: expected a JSON list of replies or {{"replies": [...]}} for the scripted model'
        )

    def identity(self) -> dict[str, Any]:
        # Scripted replies depend on call order, not on the request: never cache them.
        return {"backend": "scripted", "instance": self._instance, "n": len(self.requests)}

    async def complete(self, request: ChatRequest) -> Completion:
        position = len(self.requests)
        self.requests.append(request)
        if position < len(self.replies):
            where = f"{self.name}: reply {position + 1}"
            return _to_completion(self.replies[position], self.model, where)
        if self.repeat_last and self.replies:
            where = f"{self.name}: reply {len(self.replies)}"
            return _to_completion(self.replies[-1], self.model, where)
        raise FaultfinderError(
            f"The scripted model ran out of replies after {len(self.replies)}: add more replies "
            'or set "repeat_last": true in the replies file.'
        )

    def count_tokens(self, text: str) -> int:
        return approx_token_count(text)


ReplyFunction = Callable[
    [ChatRequest],
    "str | dict[str, Any] | Completion | Awaitable[str | dict[str, Any] | Completion]",
]


def function_identity(fn: Callable[..., Any]) -> str:
    """A module-level function is known by its import path and a digest of its compiled
    code, the same in every process (so cache keys and request hashes agree across Ray
    workers) and different once its body is edited (so an edited function is not served
    its old answers); a closure, lambda or bound method only by the object itself, with a
    :func:`local_token` that no other object, in any process, ever gets."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "")
    if module and qualname and "<" not in qualname and not inspect.ismethod(fn):
        code = getattr(fn, "__code__", None)
        if not isinstance(code, types.CodeType):
            return f"{module}:{qualname}"
        digest = hashlib.sha256()
        _digest_code(code, digest)
        return f"{module}:{qualname}@{digest.hexdigest()[:12]}"
    return _local_identity(fn)


def _digest_code(code: types.CodeType, digest: Any) -> None:
    """Feed what a function does into ``digest``: its bytecode, names and constants (nested
    functions' too), not its file or line numbers, and sets of constants in sorted order,
    so the digest is the same in every process whatever the hash seed."""
    digest.update(code.co_code)
    digest.update(repr((code.co_names, code.co_varnames, code.co_freevars)).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _digest_code(const, digest)
        elif isinstance(const, frozenset):
            digest.update(repr(sorted(map(repr, const))).encode())
        else:
            digest.update(repr(const).encode())


def _is_async(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is a coroutine function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


async def _in_thread(fn: Callable[[ChatRequest], Any], request: ChatRequest) -> Any:
    """``fn(request)`` in a daemon thread, with the caller's context variables.

    Not ``asyncio.to_thread``: a call abandoned by a timeout or Ctrl-C would then hold up
    the end of ``asyncio.run`` (and of the process) until it returned; a daemon thread is
    left to finish on its own and its answer is dropped.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():  # the caller gave up (timeout, cancellation)
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def work() -> None:
        try:
            result, error = context.run(fn, request), None
        except BaseException as exc:  # handed to the awaiting task, raised there
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=work, name="function-model", daemon=True).start()
    return await future


class FunctionBackend:
    """Answers each request by calling ``fn(request)`` (sync or async).

    A sync function runs in a thread of its own (the caller's context variables copied),
    so a slow one blocks no other case: concurrent cases overlap, ``--timeout`` cuts a
    call off (the thread finishes on its own, its answer dropped), Ctrl-C is heard, and an
    eval writes each row as its case ends. An async function is awaited on the event loop.
    """

    is_real = False
    supports_tools = True

    def __init__(self, fn: ReplyFunction, *, model: str = "function") -> None:
        self.fn = fn
        self.model = model
        self.name = f"function:{model}"
        self.requests: list[ChatRequest] = []

    def identity(self) -> dict[str, Any]:
        return {"backend": "function", "model": self.model, "fn": function_identity(self.fn)}

    async def complete(self, request: ChatRequest) -> Completion:
        self.requests.append(request)
        if _is_async(self.fn):
            result = self.fn(request)
        else:
            result = await _in_thread(self.fn, request)
        if inspect.isawaitable(result):
            result = await result
        return _to_completion(result, self.model, f"{self.name}: reply")

    def count_tokens(self, text: str) -> int:
        return approx_token_count(text)


class NoModelBackend:
    """Stands in for a model when every method run needs none (``random``, ``baseline``).

    Any request is a bug in the method that claimed to need no model, and says so.
    """

    is_real = False
    supports_tools = False
    name = "none"
    model = "none"

    def identity(self) -> dict[str, Any]:
        return {"backend": "none"}

    async def complete(self, request: ChatRequest) -> Completion:
        raise FaultfinderError(
            "This method declared that it needs no model (needs_model = False) but asked one; "
            "set needs_model = True on its class."
        )

    def count_tokens(self, text: str) -> int:
        return approx_token_count(text)
