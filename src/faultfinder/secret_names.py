"""Which names hold secrets: the one place that decides it.

:func:`is_secret_name` reads a field, header, query-parameter, option, variable or
attribute name (in any case and spelling) and says whether its value is a credential;
:func:`is_secret_field` does the same for an entry of an object, knowing its siblings. The
tables it reads (:data:`SECRET_NAMES`, :data:`SECRET_SUFFIXES`, ...) and the names of the
request keys and headers that carry credentials (:data:`SECRET_KEYS`,
:data:`KEY_HEADERS`) live here too.

Only names: what a secret *value* looks like (key-shaped tokens) and the scrubbing of
values are :mod:`faultfinder.redact`'s, which uses this module, as do the trace importers
(``traces.importers._common``). Every name here is importable from
:mod:`faultfinder.redact` as well.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

SECRET_KEYS = frozenset(
    {
        "api_key",
        "apikey",
        "api-key",
        "authorization",
        "x-api-key",
        "access_token",
        "client_secret",
        "password",
        "secret",
        "extra_headers",
        "default_headers",
    }
)
"""Top-level request keys (case-insensitive) dropped before anything is written: they
carry credentials and never change what the model is asked."""

SECRET_NAMES = frozenset(
    {
        "api_key",
        "apikey",
        "authorization",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "auth_token",
        "bearer",
        "secret",
        "client_secret",
        "password",
        "passwd",
        "passphrase",
        "cookie",
        "set_cookie",
        "private_key",
        "credential",
        "credentials",
        "session_token",
        "x_api_key",
        "x_goog_api_key",
        "proxy_authorization",
    }
)
"""Field, header, query-parameter, option and variable names (lower case, '-' read as
'_') whose values are secrets."""

LOOSE_SECRET_NAMES = frozenset({"key", "auth", "sig", "signature"})
"""Names that hold a secret as a URL query parameter or a command-line option
(``?key=...``, ``--key X``), though not as a field of a request body."""

SECRET_SUFFIXES = (
    "_api_key",
    "_apikey",
    "_token",
    "_secret",
    "_password",
    "_passwd",
    "_access_key",
    "_private_key",
    "_signing_key",
    "_subscription_key",
    "_authorization",
)
"""Name endings that mark a secret too (OPENAI_API_KEY, github_token, db_password,
Ocp-Apim-Subscription-Key)."""

SECRET_PARTS = ("secret", "password", "passwd", "passphrase", "credential")
"""Text that marks a secret in any word of a name (SECRET_KEY, AWS_SECRET_ACCESS_KEY,
clientSecret, db_password_plain, GOOGLE_APPLICATION_CREDENTIALS), 'secretary' excepted."""

NOT_SECRET_BEFORE_TOKEN = frozenset(
    {
        "max",
        "min",
        "num",
        "total",
        "prompt",
        "completion",
        "input",
        "output",
        "reasoning",
        "cache",
        "cached",
        "first",
        "last",
        "per",
        "bos",
        "eos",
        "pad",
        "unk",
        "sep",
        "cls",
        "mask",
        "stop",
        "special",
    }
)
"""Words that make a name ending in 'token' a count or a tokenizer setting rather than a
credential (max_token, time_to_first_token, eos_token). Names ending in 'tokens' or
'token_count' (max_tokens, gen_ai.usage.input_tokens, llm.token_count.prompt) are usage
and never secrets."""

KEY_HEADERS = ("authorization", "proxy-authorization", "api-key", "x-api-key", "x-goog-api-key")
"""Request headers that carry a credential."""

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NON_WORD = re.compile(r"[^a-z0-9]+")
_COMPACT_NAMES = frozenset(n.replace("_", "") for n in SECRET_NAMES)


def name_words(name: str) -> list[str]:
    """The lower-case words of a name's last dotted part, camelCase and separators split:
    ``http.request.header.X-Api-Key`` -> x, api, key; ``openaiApiKey`` -> openai, api, key."""
    return list(_words(name))


def _words(name: str) -> tuple[str, ...]:
    parts = [p for p in name.split(".") if p.strip()]
    last = _CAMEL.sub("_", parts[-1]) if parts else ""
    return tuple(w for w in _NON_WORD.split(last.lower()) if w)


def is_secret_name(name: str, loose: bool = False) -> bool:
    """Does a field/header/variable/attribute (``loose``: a query parameter or an option)
    of this name hold a secret?

    The name's last dotted part decides (``http.request.header.authorization``), in any
    case and spelling (``X-Api-Key``, ``apiKey``, ``OPENAI_API_KEY``): the names of
    :data:`SECRET_NAMES`, the endings of :data:`SECRET_SUFFIXES` (a bare ``*token`` only
    when not a count: :data:`NOT_SECRET_BEFORE_TOKEN`), a word containing one of
    :data:`SECRET_PARTS`. Usage names (``max_tokens``, ``token_count``) are not secrets.
    """
    return (_short_secret_name if len(name) <= 200 else _secret_name)(name, loose)


def _secret_name(name: str, loose: bool) -> bool:
    words = _words(name)
    if not words:
        return False
    joined = "_".join(words)
    compact = "".join(words)
    last = words[-1]
    if loose and (joined in LOOSE_SECRET_NAMES or last in ("sig", "signature")):
        return True
    if joined in SECRET_NAMES or compact in _COMPACT_NAMES:
        return True
    if any(p in w and not w.startswith("secretar") for w in words for p in SECRET_PARTS):
        return True
    if last.endswith("token"):  # token, id_token, HF_TOKEN, authToken; not max_token
        before = words[-2] if last == "token" and len(words) > 1 else last[: -len("token")]
        return before not in NOT_SECRET_BEFORE_TOKEN
    return compact.endswith("apikey") or joined.endswith(SECRET_SUFFIXES)


_short_secret_name = lru_cache(maxsize=8192)(_secret_name)  # names are few, and repeat


def is_secret_field(key: str, siblings: Mapping[str, Any] | None = None) -> bool:
    """Does the entry ``key`` of an object (whose other keys are ``siblings``) hold a
    secret? :func:`is_secret_name`, except that a ``token`` next to a ``logprob`` is a
    piece of model output (OpenAI's and Gemini's log-probabilities), not a credential."""
    if not is_secret_name(key):
        return False
    if siblings is not None and _words(key) == ("token",):
        return not any(
            isinstance(k, str) and _NON_WORD.sub("", k.lower()).startswith("logprob")
            for k in siblings
        )
    return True
