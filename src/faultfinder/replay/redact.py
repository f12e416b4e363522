"""Keep credentials out of recordings.

Headers are never written. Top-level request keys that carry credentials are dropped,
and every string written (request, response, metadata) has known secret values and
key-shaped tokens replaced by ``[REDACTED]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

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
"""Request keys (top level, case-insensitive) that are dropped before anything is written."""

KEY_PATTERNS = (
    re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"),
    re.compile(r"\bBearer\s+[A-Za-z0-9_\-\.=]{16,}"),
)
"""Token shapes that look like API keys wherever they appear."""

MIN_SECRET_LENGTH = 6
"""Shorter 'secrets' are not scrubbed from text (they would erase ordinary words)."""


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer ...`` header."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class Redactor:
    """Scrubs known secret values and key-shaped tokens from JSON-like data."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        self.secrets: set[str] = set()
        for secret in secrets:
            self.add(secret)

    def add(self, secret: str | None) -> None:
        """Remember a value that must never be written."""
        if secret and len(secret) >= MIN_SECRET_LENGTH:
            self.secrets.add(secret)

    def text(self, value: str) -> str:
        for secret in sorted(self.secrets, key=len, reverse=True):
            if secret in value:
                value = value.replace(secret, REDACTED)
        for pattern in KEY_PATTERNS:
            value = pattern.sub(REDACTED, value)
        return value

    def data(self, value: Any) -> Any:
        """A copy of ``value`` with every string scrubbed."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.data(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.data(v) for v in value]
        return value

    def request(self, body: dict[str, Any]) -> dict[str, Any]:
        """A request body fit to write: credential keys dropped, strings scrubbed."""
        kept = {k: v for k, v in body.items() if k.lower() not in SECRET_KEYS}
        return dict(self.data(kept))
