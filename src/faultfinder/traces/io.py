"""Reading and writing canonical trace files, with errors that name file and field."""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import json
import re
import warnings
import zlib
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from faultfinder.errors import TraceFormatError, TraceFormatWarning
from faultfinder.traces.schema import Trace


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders '2' before '10' (numbers compare as numbers)."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part.lower())
        for part in re.split(r"(\d+)", text)
        if part
    )


def field_at(where: str, *parts: int | str) -> str:
    """The field path ``where`` ('' for the top) extended by keys and list positions:
    ``field_at("", "steps", 3, "agent") == "steps[3].agent"``, ``field_at("[0]", "x") ==
    "[0].x"``. The one way a field path in an error or warning is built."""
    out = where
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def field_path(loc: tuple[int | str, ...]) -> str:
    """Render a pydantic error location as ``steps[3].agent``."""
    return field_at("", *loc) or "(root)"


def trace_error_from_validation(path: str | Path, exc: ValidationError) -> TraceFormatError:
    """The first validation problem as a TraceFormatError (the rest are summarised)."""
    errors = exc.errors()
    first = errors[0]
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return TraceFormatError(str(path), field_path(tuple(first["loc"])), first["msg"] + more)


SQLITE_MAGIC = b"SQLite format 3\x00"
"""How every SQLite database file begins (an AG2 log, faultfinder's response cache)."""

MAX_NESTING = 100
"""Deepest nesting of arrays and objects a trace file may have. Real traces stay far below
(an OpenAI request with tool schemas is about 10 deep); deeper input is rejected instead of
exhausting the Python stack later."""
MAX_INT_DIGITS = 19
"""Longest integer (in digits) a trace file may hold: anything beyond a 64-bit count is
rejected rather than converted (Python would refuse over 4,300 digits with a ValueError)."""

_SURROGATE = re.compile("[\ud800-\udfff]")


class _Rejected(ValueError):
    """A JSON token faultfinder refuses (NaN, Infinity, a huge number, a duplicate key)."""

    def __init__(self, reason: str, token: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.token = token


def _reject_constant(name: str) -> Any:
    raise _Rejected(f"{name} is not a JSON number (write null or a string instead)", name)


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Rejected(
            f"integer with {len(text.lstrip('-'))} digits is too large "
            f"(at most {MAX_INT_DIGITS} digits)",
            text[:20],
        )
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _Rejected(f"number {text[:30]} is out of range", text[:20])
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Rejected(f"duplicate key {key!r} in one object", f'"{key}"')
        out[key] = value
    return out


def _line_of(text: str, token: str | None) -> int | None:
    if not token:
        return None
    at = text.find(token)
    return None if at < 0 else text.count("\n", 0, at) + 1


def parse_json(text: str, path: str | Path, *, line: int | None = None) -> Any:
    """Parse JSON text strictly, or raise one TraceFormatError naming file and line.

    Refused (each a clear error, never a crash or a silent change): invalid JSON, NaN and
    Infinity, numbers out of range, integers over ``MAX_INT_DIGITS`` digits, duplicate keys,
    nesting deeper than ``MAX_NESTING``, and lone surrogates (text that cannot be written
    back as UTF-8). ``line`` is the line number when ``text`` is one line of a JSONL file.
    """
    where = f"{path}:{line}" if line is not None else str(path)
    if not text.strip():
        raise TraceFormatError(where, "(json)", "empty: no JSON value here")
    try:
        value = json.loads(
            text,
            parse_constant=_reject_constant,
            parse_int=_parse_int,
            parse_float=_parse_float,
            object_pairs_hook=_object,
        )
    except _Rejected as exc:
        at = None if line is not None else _line_of(text, exc.token)
        reason = exc.reason if at is None else f"{exc.reason} (line {at})"
        raise TraceFormatError(where, "(json)", reason) from None
    except json.JSONDecodeError as exc:
        place = "" if line is not None else f"line {exc.lineno} "
        raise TraceFormatError(
            where, "(json)", f"invalid JSON at {place}column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise TraceFormatError(
            where, "(json)", f"nested deeper than {MAX_NESTING} levels"
        ) from None
    check_value(value, where)
    return value


def check_value(value: Any, where: str, field: str = "") -> None:
    """Reject nesting deeper than ``MAX_NESTING`` and strings with lone surrogates.

    ``where`` names the file (and line); ``field`` the place of ``value`` in it.
    """
    stack: list[tuple[Any, int, str]] = [(value, 0, field)]
    while stack:
        item, depth, at = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise TraceFormatError(
                    where, at or "(root)", "text holds a lone UTF-16 surrogate (not Unicode text)"
                )
        elif isinstance(item, dict | list):
            if depth >= MAX_NESTING:
                raise TraceFormatError(
                    where, at or "(root)", f"nested deeper than {MAX_NESTING} levels"
                )
            if isinstance(item, dict):
                for key, child in item.items():
                    if _SURROGATE.search(key):
                        raise TraceFormatError(where, at or "(root)", "key holds a lone surrogate")
                    stack.append((child, depth + 1, field_at(at, key)))
            else:
                stack.extend((child, depth + 1, field_at(at, i)) for i, child in enumerate(item))


GZIP_MAGIC = b"\x1f\x8b"
"""How every gzip file begins: a file is gzip by its content, whatever its name."""
MAX_DECOMPRESSED = 512 * 1024 * 1024
"""The most a gzip file is decompressed to: a gzip bomb stops here instead of filling
memory."""
_CHUNK = 1 << 20


def is_gzip(path: str | Path) -> bool:
    """True when the file begins as gzip does (False when it cannot be read)."""
    try:
        with Path(path).open("rb") as handle:
            return handle.read(2) == GZIP_MAGIC
    except OSError:
        return False


def data_suffix(path: str | Path) -> str:
    """The suffix of what the file holds: ``run.jsonl.gz`` holds ``.jsonl``."""
    p = Path(path)
    return Path(p.name.removesuffix(".gz")).suffix if p.suffix == ".gz" else p.suffix


def data_stem(path: str | Path) -> str:
    """The file's name without the suffix of what it holds: ``run.jsonl.gz`` is ``run``,
    so a trace read through gzip keeps the id the plain file gives it."""
    p = Path(path)
    return Path(p.name.removesuffix(".gz")).stem if p.suffix == ".gz" else p.stem


def read_chunks(path: str | Path, limit: int = MAX_DECOMPRESSED) -> Iterator[bytes]:
    """The file's bytes in chunks, gunzipped when it is gzip (by content, not by name):
    the one place every trace reader decompresses. Each member of a gzip file written in
    several (concatenated files) is read; data cut off before its end marker, damaged
    data and more than ``limit`` bytes decompressed are each a TraceFormatError naming
    the file."""
    p = Path(path)
    try:
        handle = p.open("rb")
    except FileNotFoundError:
        raise TraceFormatError(str(p), "(file)", "no such file") from None
    except IsADirectoryError:
        raise TraceFormatError(str(p), "(file)", "is a directory, expected a file") from None
    except OSError as exc:
        raise TraceFormatError(str(p), "(file)", f"cannot read: {exc.strerror or exc}") from None
    with handle:
        first = handle.read(_CHUNK)
        if first[:2] != GZIP_MAGIC:
            while first:
                yield first
                first = handle.read(_CHUNK)
            return
        yield from _gunzip(p, first, handle, limit)


def _gunzip(p: Path, data: bytes, handle: Any, limit: int) -> Iterator[bytes]:
    decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = 0
    while True:
        data = data or handle.read(_CHUNK)
        if decoder.eof:
            if not data.strip(b"\x00"):  # the end, or the zero padding some writers add
                if not data:
                    return
                data = b""
                continue
            decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)  # the next member
        try:
            piece = decoder.decompress(data, _CHUNK)
        except zlib.error as exc:
            raise TraceFormatError(str(p), "(gzip)", f"damaged gzip data: {exc}") from None
        if not data and not piece:
            raise TraceFormatError(
                str(p),
                "(gzip)",
                "cut off: the gzip data ends before its end marker (a download or copy "
                "that stopped part way leaves such a file: export or copy it again)",
            )
        data = decoder.unused_data if decoder.eof else decoder.unconsumed_tail
        out += len(piece)
        if out > limit:
            raise TraceFormatError(str(p), "(gzip)", f"decompresses to more than {limit} bytes")
        if piece:
            yield piece


def read_bytes(path: str | Path, limit: int = MAX_DECOMPRESSED) -> bytes:
    """The file's bytes, gunzipped when it is gzip (see :func:`read_chunks`)."""
    return b"".join(read_chunks(path, limit))


def head_bytes(path: str | Path, size: int) -> bytes:
    """The first ``size`` bytes of what the file holds (decompressed when gzip), for
    detection, which only looks: b'' when it cannot be read, what came before damage."""
    head = b""
    try:
        for chunk in read_chunks(path):
            head += chunk[: size - len(head)]
            if len(head) >= size:
                break
    except TraceFormatError:
        pass
    return head


def read_text(path: str | Path) -> str:
    """A text file's content as UTF-8 (a leading byte-order mark is dropped), gunzipped
    when it is gzip.

    Bytes that are not UTF-8 are a TraceFormatError naming the line and column.
    """
    p = Path(path)
    data = read_bytes(p)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise TraceFormatError(
            f"{p}:{line}",
            "(file)",
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} at column {column}",
        ) from None


def split_lines(text: str) -> list[str]:
    """JSONL lines: split on '\\n' only (a trailing '\\r' is dropped).

    ``str.splitlines`` also splits on U+2028, U+2029, U+0085 and other separators that
    JSON writers leave unescaped inside strings, which would cut a record in two.
    """
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]


def read_jsonl(path: str | Path) -> list[tuple[int, Any]]:
    """(line number, value) for every non-blank line of a JSONL file, parsed strictly."""
    text = read_text(path)
    return [
        (number, parse_json(line, path, line=number))
        for number, line in enumerate(split_lines(text), start=1)
        if line.strip()
    ]


def read_json(path: str | Path) -> Any:
    """Parse a JSON file strictly (see :func:`parse_json`); errors name file and line."""
    p = Path(path)
    text = read_text(p)
    if not text.strip():
        raise TraceFormatError(str(p), "(file)", "empty file: no JSON here")
    return parse_json(text, p)


_strict: contextvars.ContextVar[bool] = contextvars.ContextVar("faultfinder_strict", default=False)


@contextlib.contextmanager
def strict_reading(strict: bool = True) -> Iterator[None]:
    """Inside this context, keys a reader does not know are errors instead of warnings."""
    token = _strict.set(strict)
    try:
        yield
    finally:
        _strict.reset(token)


def is_strict() -> bool:
    """True inside ``strict_reading()`` (the CLI's ``--strict``)."""
    return _strict.get()


class UnknownKeys:
    """Collects keys a reader does not map, and reports them once per file.

    Readers call :meth:`check` on every object they read and :meth:`report` when done. An
    unknown key is kept (in metadata) and reported as a TraceFormatWarning that suggests
    the closest known key ('lable' → 'label'); under ``strict_reading`` it is a
    TraceFormatError naming the exact place instead.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._seen: dict[str, tuple[str, str, int, str]] = {}

    def check(
        self,
        data: dict[str, Any],
        known: Collection[str],
        where: str = "",
        path: str | Path | None = None,
    ) -> None:
        """Note keys of ``data`` not in ``known``; ``where`` is the place of ``data`` in the
        file, ``path`` the file (with a JSONL line) when it differs from the reporter's."""
        for key in data:
            if key in known:
                continue
            close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.75)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            place = field_at(where, key)
            file = str(path) if path is not None else self.path
            if is_strict():
                raise TraceFormatError(file, place, f"unknown key{hint} (--strict)")
            first_file, first, count, known_hint = self._seen.get(key, (file, place, 0, hint))
            self._seen[key] = (first_file, first, count + 1, known_hint)

    def report(self) -> None:
        for file, first, count, hint in self._seen.values():
            more = f" (and {count - 1} more places)" if count > 1 else ""
            warnings.warn(
                TraceFormatWarning(
                    f"{file}: field '{first}': unknown key{more}, kept in metadata{hint}"
                ),
                stacklevel=2,
            )
        self._seen.clear()


def trace_from_dict(data: Any, path: str | Path = "<memory>") -> Trace:
    """Validate a canonical trace dict."""
    if not isinstance(data, dict):
        raise TraceFormatError(str(path), "(root)", "expected a JSON object")
    try:
        # Strict: a canonical file is written by faultfinder, so "3" for a step index or
        # true for a number is damage, not something to convert.
        trace = Trace.model_validate_json(json.dumps(data, ensure_ascii=False), strict=True)
    except ValidationError as exc:
        raise trace_error_from_validation(path, exc) from None
    unknown = UnknownKeys(path)
    _check_model_keys(data, Trace, "", unknown)
    unknown.report()
    return trace


def _check_model_keys(data: Any, model: type[BaseModel], where: str, unknown: UnknownKeys) -> None:
    """Warn about keys of ``data`` (and its nested models) that ``model`` does not have."""
    if not isinstance(data, dict):
        return
    unknown.check(data, model.model_fields, where)
    for name, info in model.model_fields.items():
        value = data.get(name)
        nested = _nested_model(info.annotation)
        if nested is None or value is None:
            continue
        place = field_at(where, name)
        if isinstance(value, list):
            for i, item in enumerate(value):
                _check_model_keys(item, nested, field_at(place, i), unknown)
        else:
            _check_model_keys(value, nested, place, unknown)


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside ``Model``, ``Model | None`` or ``list[Model]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _nested_model(arg)
        if found is not None:
            return found
    return None


def is_canonical(data: Any) -> bool:
    """True when ``data`` looks like a canonical faultfinder trace."""
    return isinstance(data, dict) and "schema_version" in data and "steps" in data


def write_trace(trace: Trace, path: str | Path) -> None:
    """Write a trace as indented JSON (atomically, so a crash never leaves half a file)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(trace.model_dump_json(indent=2, exclude_none=True), encoding="utf-8")
    tmp.replace(p)
