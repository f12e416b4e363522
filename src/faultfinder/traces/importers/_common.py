"""Helpers shared by the importers: errors that name file and field, options, labels."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError

from faultfinder.errors import ConfigError, TraceFormatError
from faultfinder.redact import Redactor
from faultfinder.secret_names import is_secret_field, is_secret_name
from faultfinder.traces.io import check_value, field_at, trace_error_from_validation
from faultfinder.traces.schema import Agent, Step, Trace


def fail(path: str | Path, field: str, reason: str) -> NoReturn:
    """Raise the TraceFormatError every importer uses for malformed input."""
    raise TraceFormatError(str(path), field, reason)


def text_of(value: Any) -> str:
    """``value`` as text: strings unchanged, None as '', anything else as compact JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def optional_str(
    data: Mapping[str, Any], key: str, path: str | Path, where: str = ""
) -> str | None:
    """``data[key]`` when it is a string, None when absent or null; any other type is an
    error (a number or list is never silently turned into text)."""
    value = data.get(key)
    if value is None or isinstance(value, str):
        return value
    fail(path, field_at(where, key), f"expected a string, got {_json_type(value)}")


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def json_in_text(text: str, *, path: str | Path, where: str) -> Any:
    """The JSON value a string field holds, or None when the text is not JSON.

    Parsed with the same limits as files (no NaN, no huge numbers, bounded nesting); a
    value that breaks them is an error naming ``where``.
    """
    try:
        value = json.loads(text, parse_constant=_not_json)
    except (ValueError, RecursionError):
        return None
    check_value(value, str(path), where)
    return value


def _not_json(name: str) -> Any:
    raise ValueError(name)


def check_options(importer: str, options: Mapping[str, Any], allowed: Mapping[str, str]) -> None:
    """Reject options the importer does not know, listing the ones it does."""
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        known = "; ".join(f"{k}: {v}" for k, v in allowed.items()) or "none"
        raise ConfigError(
            f"The {importer} importer has no option {', '.join(map(repr, unknown))}. "
            f"Its options: {known}."
        )


def make_trace(path: str | Path, **fields: Any) -> Trace:
    """Build a Trace, turning schema violations into TraceFormatError for ``path``."""
    try:
        return Trace(**fields)
    except ValidationError as exc:
        raise trace_error_from_validation(path, exc) from None


def parse_label_step(
    value: Any, *, path: str | Path, field: str, n_steps: int, base: int
) -> int | None:
    """A label's step as a canonical 0-based index.

    ``base`` is the source's numbering (0 or 1). None, '' and 'none' mean "no step".
    Out-of-range or non-numeric steps are errors: a label must point inside the trace.
    """
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    if isinstance(value, bool):
        fail(path, field, f"expected a step number, got {value!r}")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"\s*-?\d{1,19}\s*", value):
        number = int(value)
    else:
        fail(path, field, f"expected a step number, got {value!r}")
    index = number - base
    if not 0 <= index < n_steps:
        shown = f"{base}..{n_steps - 1 + base}" if n_steps else "none: the trace is empty"
        fail(
            path,
            field,
            f"step {number} ({base}-based) is outside the trace (valid steps: {shown})",
        )
    return index


def is_credential_key(key: str) -> bool:
    """True for keys that hold secrets (api_key, Authorization, OPENAI_API_KEY, HF_TOKEN,
    *secret*, *password*...), not usage such as 'max_tokens' or 'token_count': the one
    definition, :func:`faultfinder.secret_names.is_secret_name`."""
    return is_secret_name(key)


def without_credentials(value: Any) -> Any:
    """A copy of ``value`` fit to keep in a trace: credential entries removed from every
    nested dict, and the rest scrubbed by :class:`faultfinder.redact.Redactor` (secret
    values of OTLP ``{key, value}`` attributes, of secret-named fields in JSON held in
    strings, credentials in URLs, key-shaped tokens, and every value so found wherever else
    it appears)."""
    redactor = Redactor()
    redactor.learn_data(value)
    return redactor.data(_dropped(value))


def _dropped(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _dropped(v)
            for k, v in value.items()
            if not (isinstance(k, str) and is_secret_field(k, value))
        }
    if isinstance(value, list):
        return [_dropped(v) for v in value]
    return value


def scrubbed(step: Step, redactor: Redactor) -> Step:
    """``step`` with credentials removed from what it says and was asked: its content, input
    messages, request, tool-call arguments and tool results (key-shaped tokens, credentials
    in URLs, secret-named fields of JSON held in strings, secrets ``redactor`` learned)."""
    return step.model_copy(
        update={
            "content": redactor.text(step.content),
            "input_messages": redactor.data(step.input_messages),
            "request": redactor.data(step.request),
            "tool_calls": [
                c.model_copy(update={"arguments": redactor.data(c.arguments)})
                for c in step.tool_calls
            ],
            "tool_results": [
                r.model_copy(update={"content": redactor.text(r.content)})
                for r in step.tool_results
            ],
            "metadata": redactor.data(step.metadata),
        }
    )


def scrubbed_agent(agent: Agent, redactor: Redactor) -> Agent:
    """``agent`` with credentials removed, as :func:`scrubbed` removes them from a step:
    from its description, system prompt and config (its name, which steps refer to, is
    kept)."""
    return agent.model_copy(
        update={
            "description": _text_or_none(agent.description, redactor),
            "system_prompt": _text_or_none(agent.system_prompt, redactor),
            "config": redactor.data(agent.config),
        }
    )


def _text_or_none(value: str | None, redactor: Redactor) -> str | None:
    return None if value is None else redactor.text(value)
