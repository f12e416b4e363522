"""What the backends on an official SDK (``openai_compat``, ``anthropic_messages``) share.

:class:`SDKBackend` holds what such a backend is, whatever its API: the key and base URL
read once (a custom endpoint without a key gets :data:`PLACEHOLDER_KEY`), the SDK's own
retries off (the LLM layer, :mod:`faultfinder.llm.client`, owns retries), one client per
event loop, the key scrubbed from every error text, and each SDK failure told as
transient (retried by the LLM layer, with the wait the server asked for) or not (with
what to check). Each backend keeps what its API does differently: the request body, the
reply's shape and usage, and the wording of its hints.

``openai`` and ``anthropic`` are generated from one template, so their clients and error
classes match name for name; :class:`SDKErrors` names one SDK's.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import os
import re
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar, cast
from urllib.parse import urlsplit

from faultfinder import errors
from faultfinder.http_bodies import MAX_REPLY, BodyTooLargeError, limit_hook
from faultfinder.llm.base import TransientLLMError, approx_token_count
from faultfinder.loopback import URL_FORM, direct_to_loopback, is_loopback, url_problem
from faultfinder.redact import Redactor

PLACEHOLDER_KEY = "not-needed"
"""Sent when a custom endpoint is used without a key (local servers, gateways without
keys, the loopback fake): most ignore the key, but the SDKs insist on one."""

_OVERFLOW = re.compile(
    r"context[_ ]length[_ ]exceeded|maximum context length|context window|context size|"
    r"context limit|prompt is too long|too many (?:input )?tokens",
    re.I,
)
"""How endpoints say a prompt is longer than the model's context: OpenAI's chat and
Responses APIs (``context_length_exceeded``, "maximum context length is N tokens",
"exceeds the context window"), Anthropic's ("prompt is too long: N tokens > M maximum"),
and servers that follow them (vLLM, llama.cpp)."""
_WINDOW = re.compile(r"maximum context length is ([\d,]+)|tokens? > ([\d,]+) maximum", re.I)

_SDK_STATUS = re.compile(r"^Error code: \d+(?: - |$)")
"""How the SDKs begin a status error's text (``Error code: 401 - Incorrect API key``)."""

UNSUPPORTED_HINTS = {
    "tools": (
        re.compile(r"tool", re.I),
        "The endpoint refused the tools the request offered: this server or model has no "
        "tool calling (vLLM needs --enable-auto-tool-choice and --tool-call-parser; some "
        "Ollama models have none). Run --method agentic:text (or --set action_format=text), "
        "which writes its actions as text instead.",
    ),
    "response_format": (
        re.compile(r"response_format|json_schema|structured", re.I),
        "The endpoint refused the JSON schema sent as response_format: make the backend "
        "without structured_output; answers are read from plain text as well.",
    ),
}
"""For a request field that some endpoints do not take (local servers, mostly): what
their refusal mentions, and what to do instead."""


def context_overflow_hint(message: str) -> str | None:
    """What to do when ``message`` (an endpoint's error) says the prompt did not fit the
    model's context window; None when it says something else."""
    if not _OVERFLOW.search(message):
        return None
    found = _WINDOW.search(message)
    size = next((g for g in found.groups() if g), None) if found else None
    window = f" ({size} tokens)" if size else ""
    return (
        f"The prompt is longer than the model's context window{window}. Pass --set "
        "context_budget=N, N a little under the window, and the method cuts the log to fit "
        "around the steps it judges (docs/observability.md); or use --method compose, which "
        "reads only a shortlist of steps."
    )


TRANSIENT_STATUSES = frozenset({408, 409, 429})
"""Statuses below 500 worth retrying: the ones the SDKs themselves would retry (a request
timeout, a lock conflict, a rate limit). Every 5xx is transient as well."""


SETUP_STATUSES = frozenset({401, 404})
"""Statuses that refuse what every call shares (the key, the model name or the URL), not
one request: raised as :class:`~faultfinder.errors.EndpointSetupError`. Not 403: gateways
answer it for one request's content too (OpenRouter's moderation, "your input was
flagged"; a guardrail's block), which agent traces often trip; a batch that stopped there
would stop there again on every ``--resume``."""


class _Closable(Protocol):
    async def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)


class ClientPerLoop(Generic[C]):
    """One SDK client per event loop. An SDK's connection pool is tied to the loop it
    first ran on; eval runs and tests use several loops in turn, so a client is made
    anew when the running loop changes."""

    def __init__(self, make: Callable[[], C]) -> None:
        self._make = make
        self._client: C | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def get(self) -> C:
        loop = asyncio.get_running_loop()
        if self._client is not None and self._loop is loop:
            return self._client
        stale, stale_loop = self._client, self._loop
        client = self._make()
        self._client, self._loop = client, loop
        if stale is not None and stale_loop is not None and stale_loop.is_closed():
            # Its connections belong to a finished loop, so closing them fails; trying
            # still marks the client closed, which stops the SDK from scheduling the same
            # failing close on this loop when the client is garbage-collected.
            with contextlib.suppress(Exception):
                await stale.close()
        return client


def parse_retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date)."""
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        try:
            return max(float(ms) / 1000.0, 0.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    current = time.time() if now is None else now
    return max(when.timestamp() - current, 0.0)


def unreachable(exc: BaseException) -> str | None:
    """Why a connection failed for good (refused, unknown host), or None if it may pass."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError):
            return "connection refused (nothing is listening there)"
        if isinstance(current, socket.gaierror):
            return f"cannot resolve the host name ({current.strerror or current})"
        text = str(current)
        if "Connection refused" in text or "[Errno 111]" in text:
            return "connection refused (nothing is listening there)"
        if "Name or service not known" in text or "nodename nor servname" in text:
            return "cannot resolve the host name"
        current = current.__cause__ or current.__context__
    return None


def reported_count(reported: Mapping[str, Any], key: str) -> int:
    """The token count a reply's usage gives under ``key``; 0 when it is missing, not an
    integer, negative or past 2**53 (the LLM layer then estimates it)."""
    value = reported.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return value if 0 <= value < 2**53 else 0


@dataclass(frozen=True)
class SDKErrors:
    """The exception classes of one SDK."""

    base: type[Exception]
    """Every error the SDK raises (``OpenAIError``, ``AnthropicError``)."""
    status: type[Exception]
    """An error status in the reply (``APIStatusError``; see :class:`StatusError`)."""
    connection: type[Exception]
    """No reply: refused, unresolvable, reset or timed out (``APIConnectionError``)."""
    validation: type[Exception]
    """A reply the SDK could not read (``APIResponseValidationError``)."""


class _Headers(Protocol):
    @property
    def headers(self) -> Mapping[str, str]: ...


class StatusError(Protocol):
    """What an SDK's ``APIStatusError`` carries."""

    @property
    def status_code(self) -> int: ...
    @property
    def response(self) -> _Headers: ...
    @property
    def message(self) -> str: ...
    @property
    def body(self) -> object: ...


class SDKBackend(Generic[C]):
    """A model behind an API that an official SDK (client type ``C``) speaks. A subclass
    sets the class attributes below and implements ``complete``: it builds the body,
    sends it with ``client.post`` through :meth:`_reply`, and reads the reply."""

    is_real = True
    supports_tools = True

    kind: ClassVar[str]
    """The ``--model`` prefix (``openai``), also the identity's ``backend``."""
    key_env: ClassVar[str]
    """The variable the key is read from by default (``OPENAI_API_KEY``)."""
    base_url_env: ClassVar[str]
    """The variable read for the base URL when none is given (``OPENAI_BASE_URL``)."""
    default_base_url: ClassVar[str]
    """The API's own address, used when neither names another."""
    sdk_errors: ClassVar[SDKErrors]
    """The SDK's exception classes."""
    keyless: ClassVar[str]
    """How to reach a server that takes no key, in the no-key error."""
    speaks: ClassVar[str]
    """What ``--base-url`` should point at ("an OpenAI-compatible /v1 endpoint")."""
    implements: ClassVar[str]
    """The API a well-formed reply follows ("OpenAI chat completions")."""
    status_hints: ClassVar[Mapping[int, str]]
    """What to check on an error status, by status, ahead of the shared hints (401 and
    413); ``{model}`` stands for the model name."""
    parameters: ClassVar[str]
    """The request parameters an endpoint may reject, in the hint for other 4xx."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None,
        api_key: str | None,
        timeout: float,
        sdk_client: Callable[..., C],
        http_client: Callable[..., Any] | None = None,
    ) -> None:
        # Blanks around it are no part of a URL (url_problem reads it without them).
        custom_url = (base_url or os.environ.get(self.base_url_env) or "").strip()
        if not base_url and custom_url and (problem := url_problem(custom_url)):
            # Checked here, once, rather than failing every call: the variable is named,
            # its value never (it may hold a password).
            raise errors.EnvironmentValueError(
                f"{self.base_url_env} is {problem}: set it to {URL_FORM}, or unset it to "
                f"use {self.default_base_url} (--base-url overrides it)"
            )
        if not api_key:
            if not custom_url:
                raise errors.ModelNotAvailableError(
                    f"No API key for {self.kind}:{model}. Set {self.key_env}, or name the "
                    f"variable holding the key with --api-key-env ({self.keyless})."
                )
            api_key = PLACEHOLDER_KEY
        self.model = model
        self.name = f"{self.kind}:{model}"
        self.base_url = self.normalise_base_url(custom_url or self.default_base_url)
        self.timeout = timeout
        self._api_key = api_key
        # Error texts can echo the key (some endpoints quote it back); they end up in
        # result rows, so they are scrubbed.
        self._redactor = Redactor([api_key])
        self._sdk_client = sdk_client
        self._http_client = http_client
        self._clients = ClientPerLoop(self._new_client)

    @staticmethod
    def normalise_base_url(url: str) -> str:
        """The base URL the SDK is given."""
        return url.rstrip("/")

    def __repr__(self) -> str:
        # Never show the key.
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

    def identity(self) -> dict[str, Any]:
        return {"backend": self.kind, "base_url": self.base_url, "model": self.model}

    def count_tokens(self, text: str) -> int:
        return approx_token_count(text)

    def _new_client(self) -> C:
        extra: dict[str, Any] = {}
        if self._http_client is not None:
            # Every reply is read within MAX_REPLY: an endpoint sending an endless body
            # fails that call (BodyTooLargeError, see _reply) instead of the memory.
            options: dict[str, Any] = {
                "event_hooks": {"response": [limit_hook(MAX_REPLY, f"the reply of {self.name}")]}
            }
            if is_loopback(urlsplit(self.base_url).hostname or ""):
                # A local server (Ollama, vLLM, serve-local) is reached directly, not
                # through the HTTP_PROXY of the environment, which httpx applies to
                # loopback too.
                options["mounts"] = direct_to_loopback([self.base_url])
            extra["http_client"] = self._http_client(**options)
        return self._sdk_client(
            api_key=self._api_key,
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=0,
            **extra,
        )

    @property
    def _where(self) -> str:
        return f"{self.name} at {self.base_url}"

    async def _reply(self, call: Awaitable[object], body: Mapping[str, Any]) -> object:
        """The reply of an SDK call, its failures turned into the LLM layer's errors.

        Backends call the client's generic ``post(path, body=..., cast_to=object)``: it
        skips the SDK's per-request parameter transformation and model construction,
        which cost more CPU than everything else per call, while errors and
        authentication are handled exactly as in the typed methods. ``body`` is what
        ``call`` sends, so that a refusal can name the field it refused."""
        errs = self.sdk_errors
        try:
            return await call
        except BodyTooLargeError as exc:
            raise self._too_large(exc) from None
        except errs.status as exc:
            raise self._status_error(cast("StatusError", exc), body) from exc
        except errs.connection as exc:
            cause: BaseException | None = exc  # the Anthropic SDK wraps it
            while cause is not None and not isinstance(cause, BodyTooLargeError):
                cause = cause.__cause__ or cause.__context__
            if cause is not None:
                raise self._too_large(cause) from None
            # Includes timeouts. Nothing listening, or no such host, will not get better
            # by waiting: say so at once instead of retrying.
            why = unreachable(exc)
            if why:
                refused = errors.LLMCallError(
                    f"{self.name}: cannot connect to {self.base_url}: {why}. Check "
                    "--base-url and that the server is running."
                )
                refused.sent = False  # no connection: nothing reached the endpoint
                raise refused from exc
            raise TransientLLMError(self._redactor.text(f"{self._where}: {exc}")) from exc
        except (errs.validation, ValueError) as exc:
            # A 200 reply whose body is not JSON: retried, then reported.
            raise TransientLLMError(f"{self._where}: malformed reply (not JSON: {exc})") from exc
        except errs.base as exc:
            raise errors.LLMCallError(
                self._redactor.text(
                    f"{self._where}: unexpected reply ({exc}). Check that --base-url points "
                    f"at {self.speaks}."
                )
            ) from exc

    def _too_large(self, exc: BaseException) -> errors.LLMCallError:
        """A reply past the bound: not retried, the endpoint would send as much again."""
        return errors.LLMCallError(self._redactor.text(f"{self._where}: {exc}. Check --base-url."))

    def _status_message(self, exc: StatusError) -> str:
        """The error's own text in an error reply, without the SDK's ``Error code: N -``
        in front (the error says ``HTTP N`` already)."""
        return _SDK_STATUS.sub("", exc.message, count=1)

    def _status_error(self, exc: StatusError, body: Mapping[str, Any]) -> Exception:
        return self._refusal(
            exc.status_code, self._status_message(exc), dict(exc.response.headers), body
        )

    def _error_in_reply(self, data: Mapping[str, Any], body: Mapping[str, Any]) -> Exception:
        """A 200 reply holding an error instead of an answer (``{"error": {"message",
        "code"}}``: gateways such as OpenRouter pass a provider's failure on so), told as
        an error status of its ``code`` would be (a failing upstream when it has none);
        a reply without one is malformed."""
        error = data.get("error")
        message = error.get("message") if isinstance(error, Mapping) else error
        if not isinstance(message, str) or not message.strip():
            return self._malformed("no answer in it" if error is None else "an unreadable error")
        code = error.get("code") if isinstance(error, Mapping) else None
        status = code if isinstance(code, int) and 400 <= code < 600 else 502
        said = f"error {code}" if status == code else "an error"
        return self._refusal(status, message.strip()[:500], {}, body, f"a 200 reply held {said}")

    def _refusal(
        self,
        status: int,
        message: str,
        headers: Mapping[str, str],
        body: Mapping[str, Any],
        what: str | None = None,
    ) -> Exception:
        """The error for an endpoint's refusal: transient (retried) or not, with what to
        check. ``what`` names it ("HTTP 429" by default)."""
        what = what or f"HTTP {status}"
        # Its own closing full stop goes: a hint or a retry's note follows.
        message = message.strip().rstrip(".").rstrip()
        where = f"{self._where}: {what}: {message}" if message else f"{self._where}: {what}"
        if status in TRANSIENT_STATUSES or status >= 500:
            retry_after = parse_retry_after(headers)
            return TransientLLMError(self._redactor.text(where), retry_after)
        overflow = context_overflow_hint(message)
        if overflow is not None:
            # What to do first: the one-line summaries (``judging.why``) keep a line's start.
            text = f"{self._where}: {overflow} ({what}: {message})"
            return errors.LLMCallError(self._redactor.text(text))
        hint = self._status_hint(status)
        for field, (mentions, unsupported) in UNSUPPORTED_HINTS.items():
            if status in (400, 422) and field in body and mentions.search(message):
                hint = unsupported
        refused = errors.EndpointSetupError if status in SETUP_STATUSES else errors.LLMCallError
        return refused(self._redactor.text(f"{where}. {hint}"))

    def _status_hint(self, status: int) -> str:
        hint = self.status_hints.get(status)
        if hint is not None:
            return hint.format(model=self.model)
        if status == 401:
            return f"Check the API key ({self.key_env}, or the variable named by --api-key-env)."
        if status == 413:
            return (
                "The prompt is too large for the endpoint; lower the method's context budget "
                "(--set context_budget=N)."
            )
        return (
            "The endpoint rejected the request; check that this model supports the "
            f"parameters used ({self.parameters}) and that the prompt fits its context window."
        )

    def _malformed(self, what: str) -> TransientLLMError:
        """A reply of the wrong shape: retried, then reported; never a traceback."""
        return TransientLLMError(
            f"{self._where}: malformed reply ({what}). Check that the endpoint implements "
            f"{self.implements}."
        )
