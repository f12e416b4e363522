"""Labelled answer fields: the value after ``Label:`` on a line of a reply, or under a key
of its JSON object, cleaned of markdown and quotes. The readers of agent names, step
numbers and yes/no (:mod:`faultfinder.judging.answers`) take their fields from here.
"""

from __future__ import annotations

import bisect
import re
from typing import Any

from faultfinder.judging.answer_json import answer_object, extract_json
from faultfinder.llm.client import ParseError


def comparable(text: str) -> str:
    """``text`` as names, labels and keys are compared: case, blanks, underscores and
    punctuation ignored."""
    return re.sub(r"[\W_]+", "", text).casefold()


_MARKUP = "*_`'\"“”‘’"
# Blanks after a bullet, number or '#' belong to that branch only (not to a second run of
# blanks after it, which would split a long run of spaces every way: quadratic).
_LINE_START = r"^[ \t>]*(?:[-*•+][ \t]+|\d+[.)][ \t]*|#+[ \t]*)?"


def clean_value(value: str) -> str:
    """A field value without surrounding markdown, quotes, brackets or trailing commas.

    Worked on the bounds of the value, copied once at the end: a copy per layer removed
    made a value nested in thousands of brackets quadratic."""
    start, end = _strip(value, 0, len(value))
    previous = None
    while (start, end) != previous:
        previous = start, end
        start, end = _strip(value, start, end)
        start, end = _strip(value, start, end, ",;", left=False)
        start, end = _strip(value, start, end)
        start, end = _strip(value, start, end, _MARKUP)
        start, end = _strip(value, start, end)
        if end - start > 1 and value[start] + value[end - 1] in ("[]", "<>"):
            start, end = start + 1, end - 1
    return value[start:end]


def _strip(
    text: str, start: int, end: int, chars: str | None = None, *, left: bool = True
) -> tuple[int, int]:
    """The bounds of ``text[start:end].strip(chars)`` (``rstrip`` when not ``left``)."""
    if chars is None:
        while left and start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
    else:
        while left and start < end and text[start] in chars:
            start += 1
        while end > start and text[end - 1] in chars:
            end -= 1
    return start, end


def _field_pattern(label: str) -> re.Pattern[str]:
    words = r"[ \t_]+".join(re.escape(w) for w in label.split())
    return re.compile(
        rf"{_LINE_START}[{re.escape(_MARKUP)}]*{words}[{re.escape(_MARKUP)}]*[ \t]*"
        rf"(?:[:：][{re.escape(_MARKUP)}]*[ \t]*(?P<value>[^\n]*)|(?P<bare>)$)",
        re.IGNORECASE | re.MULTILINE,
    )


def _is_placeholder(value: str) -> bool:
    return bool(re.fullmatch(r"\(?\s*your\s+(prediction|reason|answer)\s*\)?\.?", value, re.I))


_NON_BLANK = re.compile(r"\S")
_LINE_BREAK = re.compile("[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]")
"""What ``str.splitlines`` splits at."""


def _next_line(text: str, end: int) -> str:
    """The first line with text from ``end`` on (its rest, when ``end`` is mid-line). Only
    the blank lines before it and that line are read: splitting the whole rest of the text
    for each empty field made a reply of many empty fields quadratic."""
    found = _NON_BLANK.search(text, end)
    if found is None:
        return ""
    stop = _LINE_BREAK.search(text, found.start())
    return text[end : stop.start() if stop else len(text)].splitlines()[-1]


def field_values(text: str, label: str) -> list[str]:
    """Every value written after ``Label:`` at the start of a line (markdown bullets, bold,
    numbering and headings tolerated, ':' or '：'). A label alone on its line (a heading)
    takes the next non-empty line. Placeholders echoed from the prompt are skipped."""
    values: list[str] = []
    for m in _field_pattern(label).finditer(text):
        raw = m.group("value")
        value = clean_value(raw) if raw is not None else ""
        if not value:
            value = clean_value(_next_line(text, m.end()))
            if re.match(rf"{_LINE_START}[\w ]{{1,30}}[:：]", value):
                value = ""  # the next line is another field, not this one's value
        if value and not _is_placeholder(value):
            values.append(value)
    return values


def field_text(text: str, label: str, stop_labels: tuple[str, ...] = ()) -> str | None:
    """The whole text of the first ``Label:`` field (see :func:`field_values`): the value on
    its line and the lines after it, up to the next line that opens ``label`` again or one
    of ``stop_labels``, or the end of ``text``; cleaned like a value. (A reason often runs
    over several lines, or sits under a heading.) None when the field is absent or holds
    only an echoed placeholder."""
    fields = list(_field_pattern(label).finditer(text))
    # Every line that opens a field, found once (a scan per field would be quadratic).
    opens = sorted(
        {m.start() for m in fields}
        | {m.start() for stop in stop_labels for m in _field_pattern(stop).finditer(text)}
    )
    for m in fields:
        start = m.start("value") if m.group("value") is not None else m.end()
        after = bisect.bisect_right(opens, m.start())
        end = opens[after] if after < len(opens) else len(text)
        value = clean_value(text[start:end])
        if value and not _is_placeholder(value):
            return value
    return None


def find_field(text: str, *labels: str) -> str | None:
    """The value of the first of ``labels`` present. Repeats must agree: two different
    values for one field are ambiguous (ParseError); an absent field gives None."""
    for label in labels:
        values = field_values(text, label)
        distinct = list(dict.fromkeys(comparable(v) for v in values))
        if len(distinct) > 1:
            raise ParseError(
                f"'{label}' is answered twice, differently: {values[0]!r} / {values[1]!r}"
            )
        if values:
            return values[0]
    return None


def json_field(data: Any, *keys: str) -> Any:
    """``data[key]`` for the first of ``keys`` matching a key of the dict (case, spaces and
    underscores ignored), or None."""
    if not isinstance(data, dict):
        return None
    by_norm = {comparable(str(k)): v for k, v in data.items()}
    for key in keys:
        if comparable(key) in by_norm:
            return by_norm[comparable(key)]
    return None


def object_problem(text: str) -> str:
    """Why the object ``text`` holds could not be read ('; the object on line 2 is neither
    valid JSON nor a Python literal (...)'), to add to a missing field's error; '' when it
    holds none, or a readable one."""
    if "{" not in text:
        return ""
    try:
        extract_json(text)
    except ParseError as exc:
        return "" if str(exc) == "no valid JSON object in the answer" else f"; {exc}"
    return ""


def json_answer(text: str) -> dict[str, Any] | None:
    """The reply's JSON object when it has one, else None."""
    if "{" not in text:
        return None
    try:
        data = extract_json(text)
    except ParseError:
        return None
    return data if isinstance(data, dict) else None


def stated_json(text: str) -> dict[str, Any] | None:
    """The reply's JSON object when the reply is written as it (the whole reply, a
    ``<json>`` block, a fence, an object on lines of its own), else None: an object inside
    a sentence may be quoted from a step, and must not outrank the reply's own fields."""
    if "{" not in text:
        return None
    try:
        data, stated = answer_object(text)
    except ParseError:
        return None
    return data if stated and isinstance(data, dict) else None
