"""Keep credentials out of everything faultfinder writes.

A :class:`Redactor` learns the secret values of a run as they pass by (credential
headers, cookies, keys in query strings, secret-named environment variables and
command-line arguments, secret-named fields anywhere in a request body) and replaces
them, and every key-shaped token, by ``[REDACTED]`` in whatever is about to be written:
recorded requests and replies, error texts, ``meta.json``, the program's captured output,
imported traces. Headers themselves are never written.

:func:`is_secret_name`, the one place that decides which names hold secrets, and the
tables it reads are in :mod:`faultfinder.secret_names` (the trace importers use it too);
they are re-exported here, so ``faultfinder.redact.is_secret_name`` keeps working. This
module holds what deals with secret *values*: key-shaped tokens, learning and scrubbing.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, unquote, unquote_plus

from faultfinder.secret_names import (
    KEY_HEADERS,
    LOOSE_SECRET_NAMES,
    NOT_SECRET_BEFORE_TOKEN,
    SECRET_KEYS,
    SECRET_NAMES,
    SECRET_PARTS,
    SECRET_SUFFIXES,
    is_secret_field,
    is_secret_name,
    name_words,
)

__all__ = [
    "KEY_HEADERS",
    "KEY_PATTERNS",
    "LOOSE_SECRET_NAMES",
    "MEMO_CHARS",
    "MIN_SECRET_LENGTH",
    "NOT_SECRET_BEFORE_TOKEN",
    "REDACTED",
    "SECRET_KEYS",
    "SECRET_NAMES",
    "SECRET_PARTS",
    "SECRET_SUFFIXES",
    "Redactor",
    "is_secret_field",
    "is_secret_name",
    "name_words",
    "redact_argv",
]

REDACTED = "[REDACTED]"

KEY_PATTERNS = (
    re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"),
    re.compile(r"\b(?:Bearer|Basic)\s+[A-Za-z0-9_\-\.=+/]{12,}"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"),
    re.compile(r"\bxox[abpsr]-[A-Za-z0-9\-]{10,}"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}"),
    re.compile(r"\bhf_[A-Za-z0-9]{30,}"),
)
"""Token shapes that look like credentials wherever they appear."""

_ANY_KEY_SHAPE = re.compile("|".join(f"(?:{p.pattern})" for p in KEY_PATTERNS))
"""Matches where any of :data:`KEY_PATTERNS` would: a string it does not match holds no
key-shaped token, so the patterns need not run one by one."""

MEMO_CHARS = 8_000_000
"""Characters of text a :class:`Redactor` remembers having scrubbed (and learned from), so
a string repeated across a trace (a conversation's history, resent with every model call)
is scrubbed once. Forgotten when full, and whenever a new secret is learned."""

MIN_SECRET_LENGTH = 6
"""Shorter 'secrets' are not scrubbed from text (they would erase ordinary words)."""

_FLAG = re.compile(r"^--?([A-Za-z][A-Za-z0-9_\-]*)(?:=(.*))?$", re.S)
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>\\`]+")
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://)([^/?#@\s]+)@")
_PARAM = re.compile(r"([?&;#])([^=&;#?]+)=([^&;#]*)")
_URL_TAIL = ".,;:!?)]}"


def _secret_pair(value: Mapping[Any, Any]) -> bool:
    """An attribute written as a name/value pair whose name is a secret's: OTLP's
    ``{"key": "OPENAI_API_KEY", "value": {"stringValue": ...}}``, a HAR header
    ``{"name": "Authorization", "value": ...}``."""
    if "value" not in value or len(value) > 3:
        return False
    return any(isinstance(value.get(k), str) and is_secret_name(value[k]) for k in ("key", "name"))


def _authorization_secrets(value: str) -> list[str]:
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if not token:
        return [value.strip()]
    found = [token]
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(token, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            decoded = ""
        password = decoded.partition(":")[2]
        found.extend(v for v in (decoded, password) if v)
    return found


class Redactor:
    """Scrubs known secret values and key-shaped tokens from JSON-like data."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        self.secrets: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._generation = 0  # bumped by every new secret
        self._learned: set[str] = set()  # strings already learned from
        self._texts: dict[str, str] = {}  # text() of strings, with the secrets known
        self._memo_chars = 0
        for secret in secrets:
            self.add(secret)

    @property
    def generation(self) -> int:
        """Changes whenever a new secret is learned: what was scrubbed before may hold it."""
        return self._generation

    def add(self, secret: str | None) -> None:
        """Remember a value that must never be written."""
        if not secret or len(secret) < MIN_SECRET_LENGTH or secret == REDACTED:
            return
        if secret not in self.secrets:
            self.secrets.add(secret)
            self._pattern = None
            self._generation += 1
            self._texts.clear()

    def _memo(self, value: str) -> bool:
        """May ``value`` be remembered? Forgets everything past :data:`MEMO_CHARS`."""
        self._memo_chars += len(value)
        if self._memo_chars > MEMO_CHARS:
            self._learned.clear()
            self._texts.clear()
            self._memo_chars = len(value)
        return len(value) <= MEMO_CHARS

    # --- learning ----------------------------------------------------------------------

    def learn_headers(self, headers: Iterable[tuple[str, str]]) -> None:
        """Credentials in request headers: Authorization (Bearer and Basic), api keys,
        cookies."""
        for name, value in headers:
            lowered = name.lower()
            if lowered in ("authorization", "proxy-authorization"):
                for secret in _authorization_secrets(value):
                    self.add(secret)
            elif lowered in ("cookie", "set-cookie"):
                for part in value.split(";"):
                    self.add(part.partition("=")[2].strip())
                self.add(value.strip())
            elif lowered in KEY_HEADERS or is_secret_name(lowered):
                self.add(value.strip())

    def learn_query(self, query: str) -> None:
        """Secret-named parameters of a URL query string (``?key=...``)."""
        for name, value in parse_qsl(query, keep_blank_values=False):
            if is_secret_name(name, loose=True):
                self.add(value)

    def learn_env(self, env: Mapping[str, str]) -> None:
        """Values of secret-named environment variables (OPENAI_API_KEY, *_TOKEN...)."""
        for name, value in env.items():
            if is_secret_name(name):
                self.add(value)

    def learn_argv(self, argv: Sequence[str]) -> None:
        """Values of secret-named options (``--api-key X``, ``--token=X``) and
        assignments (``OPENAI_API_KEY=X``) in a command line."""
        redact_argv(argv, self)

    def learn_data(self, value: Any) -> None:
        """Secrets held by JSON-like data: values of secret-named fields and name/value
        pairs (at any depth, JSON inside strings included) and credentials in URLs."""
        if isinstance(value, str):
            if value in self._learned:  # what a string teaches depends on it alone
                return
            parsed = _json_container(value)
            if parsed is not None:
                self.learn_data(parsed)
            elif "://" in value:
                _URL.sub(lambda m: self._scrub_url(m.group(0)), value)
            if self._memo(value):
                self._learned.add(value)
        elif isinstance(value, dict):
            pair = _secret_pair(value)
            for key, item in value.items():
                if _hides(value, key, item, pair):
                    self._learn_all(item)
                else:
                    self.learn_data(item)
        elif isinstance(value, list | tuple):
            for item in value:
                self.learn_data(item)

    def _learn_all(self, value: Any) -> None:
        if isinstance(value, str):
            self.add(value)
        elif isinstance(value, dict):
            for item in value.values():
                self._learn_all(item)
        elif isinstance(value, list | tuple):
            for item in value:
                self._learn_all(item)

    # --- scrubbing ---------------------------------------------------------------------

    def _compiled(self) -> re.Pattern[str] | None:
        if self._pattern is None and self.secrets:
            ordered = sorted(self.secrets, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(s) for s in ordered))
        return self._pattern

    def text(self, value: str) -> str:
        """``value`` with credentials in URLs (user info, secret-named query and fragment
        parameters), every known secret and key-shaped token replaced."""
        done = self._texts.get(value)
        if done is not None:
            return done
        generation, original = self._generation, value
        if "://" in value:
            value = _URL.sub(lambda m: self._scrub_url(m.group(0)), value)
        pattern = self._compiled()
        if pattern is not None:
            value = pattern.sub(REDACTED, value)
        if _ANY_KEY_SHAPE.search(value):
            for shape in KEY_PATTERNS:
                value = shape.sub(REDACTED, value)
        if generation == self._generation and self._memo(original):
            self._texts[original] = value
        return value

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where in ``text`` :meth:`text` would replace something (a known secret, a
        key-shaped token, a URL that may hold credentials), as (start, end): a text cut
        inside one of them and scrubbed in two parts would keep both halves."""
        patterns = [_URL, _ANY_KEY_SHAPE, self._compiled()]
        return [m.span() for p in patterns if p is not None for m in p.finditer(text)]

    def data(self, value: Any) -> Any:
        """A copy of ``value`` with every string scrubbed (mapping keys too) and the values
        of secret-named fields and name/value pairs (OTLP attributes) replaced, JSON objects
        inside strings (tool-call arguments, header dumps) included. The secrets are learned
        first, so a secret is scrubbed wherever else it appears."""
        self.learn_data(value)
        return self._scrub(value)

    def _scrub(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._string(value)
        if isinstance(value, dict):
            pair = _secret_pair(value)
            out: dict[Any, Any] = {}
            for key, item in value.items():
                kept = _blanked(item) if _hides(value, key, item, pair) else self._scrub(item)
                out[self._key(key, out)] = kept
            return out
        if isinstance(value, list | tuple):
            return [self._scrub(v) for v in value]
        return value

    def _key(self, key: Any, taken: dict[Any, Any]) -> Any:
        """A mapping's ``key`` scrubbed as any text is (a map keyed by a URL or by what a
        program wrote can hold a secret in its keys); a key that scrubs to one already
        taken gets a ``#2``, ``#3``... suffix, so no entry is lost."""
        if not isinstance(key, str):
            return key
        clean = candidate = self.text(key)
        n = 2
        while candidate in taken:
            candidate, n = f"{clean} #{n}", n + 1
        return candidate

    def _string(self, value: str) -> str:
        parsed = _json_container(value)
        if parsed is not None:
            cleaned = self._scrub(parsed)
            if cleaned != parsed:
                return json.dumps(cleaned, ensure_ascii=False)
        return self.text(value)

    def request(self, body: dict[str, Any]) -> dict[str, Any]:
        """A request body fit to write: credential keys dropped, secrets scrubbed."""
        kept = {k: v for k, v in body.items() if k.lower() not in SECRET_KEYS}
        return dict(self.data(kept))

    def url(self, url: str | None) -> str | None:
        """``url`` without user info and with secret-named query values redacted."""
        if not url:
            return url
        return self.text(self._scrub_url(url))

    def _scrub_url(self, url: str) -> str:
        """One URL with its user info and secret-named query or fragment parameters
        (``?key=``, ``&sig=``, ``#access_token=``) replaced, their values learned."""
        body = url
        while body and body[-1] in _URL_TAIL and not body.endswith(REDACTED):
            body = body[:-1]  # a sentence's full stop or closing bracket
        tail = url[len(body) :]
        userinfo = _USERINFO.match(body)
        if userinfo and userinfo.group(2) != REDACTED:
            secret = unquote(userinfo.group(2))
            self.add(secret.partition(":")[2] or secret)
            body = f"{userinfo.group(1)}{REDACTED}@{body[userinfo.end() :]}"

        def param(match: re.Match[str]) -> str:
            sep, name, value = match.groups()
            if not value or value == REDACTED or not is_secret_name(unquote_plus(name), True):
                return match.group(0)
            self.add(value)
            self.add(unquote_plus(value))
            return f"{sep}{name}={REDACTED}"

        return _PARAM.sub(param, body) + tail


def _hides(obj: Mapping[Any, Any], key: Any, item: Any, pair: bool) -> bool:
    """Is ``obj[key]`` (``item``) a secret? The value of a secret name/value ``pair``, or
    the scalar value(s) of a secret-named field (an object under a secret name is
    scrubbed field by field)."""
    if pair and key == "value":
        return True
    return isinstance(key, str) and is_secret_field(key, obj) and _scalars(item)


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def _scalars(value: Any) -> bool:
    """A scalar, or a non-empty list of scalars (a header's values, say)."""
    if isinstance(value, list | tuple):
        return bool(value) and all(_scalar(v) for v in value)
    return _scalar(value)


def _blanked(value: Any) -> Any:
    """``value`` with every scalar in it replaced by REDACTED, its shape kept."""
    if _scalar(value):
        return REDACTED
    if isinstance(value, dict):
        return {k: _blanked(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_blanked(v) for v in value]
    return value


MAX_JSON_DEPTH = 100
"""The deepest JSON inside a string that is scrubbed as JSON; deeper JSON (untrusted
text: a trace's attribute, a prompt) is scrubbed as text, since walking it would exhaust
the Python stack. Trace files may nest no deeper (``traces.io.MAX_NESTING``)."""


def _json_container(value: str) -> dict[str, Any] | list[Any] | None:
    """The JSON object or array a string holds, else None (also when it nests deeper than
    :data:`MAX_JSON_DEPTH`)."""
    stripped = value.lstrip()
    if not stripped.startswith(("{", "[")) or len(value) >= 1_000_000:
        return None
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        return None
    if not isinstance(parsed, dict | list) or _deeper_than(parsed, MAX_JSON_DEPTH):
        return None
    return parsed


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists and dicts more than ``limit`` deep (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def redact_argv(argv: Sequence[str], redactor: Redactor | None = None) -> list[str]:
    """``argv`` with the values of secret-named options and assignments replaced (the
    values are taught to ``redactor``, which also scrubs the other arguments)."""
    redactor = redactor if redactor is not None else Redactor()
    out: list[str] = []
    secret_next = False
    for arg in argv:
        if secret_next:
            redactor.add(arg)
            out.append(REDACTED)
            secret_next = False
            continue
        flag = _FLAG.match(arg)
        assign = _ASSIGN.match(arg)
        if flag and is_secret_name(flag.group(1), loose=True):
            if flag.group(2) is None:
                secret_next = True
                out.append(arg)
            else:
                redactor.add(flag.group(2))
                out.append(f"{arg.split('=', 1)[0]}={REDACTED}")
        elif assign and is_secret_name(assign.group(1)):
            redactor.add(assign.group(2))
            out.append(f"{assign.group(1)}={REDACTED}")
        else:
            out.append(arg)
    return [redactor.text(a) if a != REDACTED else a for a in out]
