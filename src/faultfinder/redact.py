"""Keep credentials out of everything faultfinder writes.

A :class:`Redactor` learns the secret values of a run as they pass by (credential
headers, cookies, keys in query strings, secret-named environment variables and
command-line arguments, secret-named fields anywhere in a request body) and replaces
them, and every key-shaped token, by ``[REDACTED]`` in whatever is about to be written:
recorded requests and replies, error texts, ``meta.json``, the program's captured output.
Headers themselves are never written.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

REDACTED = "[REDACTED]"

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

SECRET_SUFFIXES = ("_api_key", "_apikey", "_token", "_secret", "_password", "_passwd")
"""Name endings that mark a secret too (OPENAI_API_KEY, github_token, db_password)."""

KEY_HEADERS = ("authorization", "proxy-authorization", "api-key", "x-api-key", "x-goog-api-key")
"""Request headers that carry a credential."""

KEY_PATTERNS = (
    re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"),
    re.compile(r"\b(?:Bearer|Basic)\s+[A-Za-z0-9_\-\.=+/]{12,}"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"),
    re.compile(r"\bxox[abpsr]-[A-Za-z0-9\-]{10,}"),
)
"""Token shapes that look like credentials wherever they appear."""

MIN_SECRET_LENGTH = 6
"""Shorter 'secrets' are not scrubbed from text (they would erase ordinary words)."""

_FLAG = re.compile(r"^--?([A-Za-z][A-Za-z0-9_\-]*)(?:=(.*))?$", re.S)
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)


def is_secret_name(name: str, loose: bool = False) -> bool:
    """Does a field/header/variable (``loose``: a query parameter or an option) of this
    name hold a secret?"""
    lowered = name.strip().lower().replace("-", "_")
    if loose and lowered in LOOSE_SECRET_NAMES:
        return True
    return lowered in SECRET_NAMES or lowered.endswith(SECRET_SUFFIXES)


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
        for secret in secrets:
            self.add(secret)

    def add(self, secret: str | None) -> None:
        """Remember a value that must never be written."""
        if not secret or len(secret) < MIN_SECRET_LENGTH or secret == REDACTED:
            return
        if secret not in self.secrets:
            self.secrets.add(secret)
            self._pattern = None

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

    # --- scrubbing ---------------------------------------------------------------------

    def _compiled(self) -> re.Pattern[str] | None:
        if self._pattern is None and self.secrets:
            ordered = sorted(self.secrets, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(s) for s in ordered))
        return self._pattern

    def text(self, value: str) -> str:
        """``value`` with every known secret and key-shaped token replaced."""
        pattern = self._compiled()
        if pattern is not None:
            value = pattern.sub(REDACTED, value)
        for shape in KEY_PATTERNS:
            value = shape.sub(REDACTED, value)
        return value

    def data(self, value: Any) -> Any:
        """A copy of ``value`` with every string scrubbed and every secret-named field's
        value replaced (JSON objects inside strings, such as tool-call arguments,
        included)."""
        if isinstance(value, str):
            return self._string(value)
        if isinstance(value, dict):
            out: dict[Any, Any] = {}
            for key, item in value.items():
                if isinstance(key, str) and is_secret_name(key) and _scalar(item):
                    if isinstance(item, str):
                        self.add(item)
                    out[key] = REDACTED
                else:
                    out[key] = self.data(item)
            return out
        if isinstance(value, list | tuple):
            return [self.data(v) for v in value]
        return value

    def _string(self, value: str) -> str:
        stripped = value.lstrip()
        if stripped.startswith("{") and len(value) < 1_000_000:
            try:
                parsed = json.loads(value)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict) and _has_secret_field(parsed):
                return json.dumps(self.data(parsed), ensure_ascii=False)
        return self.text(value)

    def request(self, body: dict[str, Any]) -> dict[str, Any]:
        """A request body fit to write: credential keys dropped, secrets scrubbed."""
        kept = {k: v for k, v in body.items() if k.lower() not in SECRET_KEYS}
        return dict(self.data(kept))

    def url(self, url: str | None) -> str | None:
        """``url`` without user info and with secret-named query values redacted."""
        if not url:
            return url
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, host = netloc.rpartition("@")
            self.add(userinfo.partition(":")[2] or userinfo)
            netloc = f"{REDACTED}@{host}"
        query = parts.query
        if query:
            self.learn_query(query)
            query = "&".join(
                f"{name}={REDACTED}" if is_secret_name(name, loose=True) else piece
                for piece in query.split("&")
                for name in [piece.partition("=")[0]]
            )
        return self.text(urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)))


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def _has_secret_field(value: Any) -> bool:
    if isinstance(value, dict):
        return any(
            (isinstance(k, str) and is_secret_name(k) and _scalar(v)) or _has_secret_field(v)
            for k, v in value.items()
        )
    if isinstance(value, list):
        return any(_has_secret_field(v) for v in value)
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
