"""JSON text a model wrote (a reply, a tool call's arguments) or a trace holds, read by
``json.loads`` with every way it can fail as one error.

``json.loads`` fails three ways: invalid text (``json.JSONDecodeError``), an integer of
more digits than Python converts (a plain ``ValueError``; 4,300 by default) and nesting
deeper than the interpreter's recursion limit (``RecursionError``). A reader that catches
only the first crashes on the other two; :func:`loads` raises :class:`JSONTextError` for
all three, with the reason in words, so a reader has one thing to catch. Bytes (a
request's body, an upstream's reply) are read as ``json.loads`` reads them, UTF-8, -16
or -32; bytes in none of these are a fourth reason.
"""

from __future__ import annotations

import json
import sys
from typing import Any


class JSONTextError(ValueError):
    """Text that is not readable JSON; the message says why."""


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``, or :class:`JSONTextError` saying why it is not readable."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise JSONTextError(
            f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except UnicodeDecodeError as exc:
        # Only bytes get here: json.loads decodes them before parsing.
        raise JSONTextError(
            f"not JSON text: byte {exc.start} is not {exc.encoding.upper()} ({exc.reason})"
        ) from None
    except ValueError as exc:
        if "integer string conversion" not in str(exc):
            raise JSONTextError(f"not readable JSON: {exc}") from None
        limit = sys.get_int_max_str_digits()
        raise JSONTextError(f"it holds an integer longer than {limit:,} digits") from None
    except RecursionError:
        raise JSONTextError("it is nested too deeply to read") from None
