"""Deterministic data-flow linking: a value used at a step is linked to the earliest step
that produced it.

Values are numbers, URLs, file names and quoted strings found in step outputs (message
text, tool calls, tool results). Values already in the task statement are inputs of the
problem, not products of a step, and are not linked.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from faultfinder.judging.render import message_text, new_input_messages, step_output_text
from faultfinder.methods.chief.graph import DataType, StepEdge
from faultfinder.traces.schema import Step, Trace

_URL = re.compile(r"https?://[^\s<>\"'()\[\]{}]+")
# File names match from the start of a token only (not at every hyphen inside one), so a
# long hyphenated run costs linear time, not quadratic.
_FILE = re.compile(
    r"(?<![\w\-])-*(\w[\w\-]*\.(?:csv|tsv|json|jsonl|xlsx|xls|txt|pdf|docx?|pptx?|png|"
    r"jpe?g|gif|mp3|wav|mp4|zip|py|js|ts|html?|xml|ya?ml|md|sql|ipynb|pdb))\b",
    re.IGNORECASE,
)
_QUOTED = re.compile(r"\"([^\"\n]{4,80})\"|“([^”\n]{4,80})”|(?<!\w)'([^'\n]{4,80})'(?!\w)")
_KEY_COLON = re.compile(r"\s*:")
"""A colon after a quoted string (matched in place, so no copy of the text per string)."""
_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?:-\d+)*(?![\w])")
# A path ("../2023/validation/a.png", "C:\\data\\v2") or an identifier mixing letters and
# digits across hyphens (a UUID, a hash) is one value; the numbers inside it are not data.
# Both match from the start of a token only, so a long token costs linear time.
_TOKEN_CHARS = r"[^\s\"'`()\[\]{}<>,;]"
_PATH = re.compile(rf"(?<!{_TOKEN_CHARS}){_TOKEN_CHARS}*[/\\]{_TOKEN_CHARS}*")
_HYPHENATED = re.compile(r"(?<![\w-])\w+(?:-\w+)+")


def _numbers_text(text: str) -> str:
    """``text`` with URLs, file names, paths and identifiers blanked, so only the numbers
    that stand on their own are read as numeric values."""
    text = _URL.sub(" ", text)
    text = _FILE.sub(" ", text)
    text = _PATH.sub(lambda m: " " if re.search(r"[A-Za-z_]", m.group(0)) else m.group(0), text)
    return _HYPHENATED.sub(lambda m: " " if _is_identifier(m.group(0)) else m.group(0), text)


def _is_identifier(token: str) -> bool:
    """'499b-9336-840f' or 'COVID-19': letters and digits together; '2023-05-01' is a date."""
    return re.search(r"[A-Za-z]", token) is not None and re.search(r"\d", token) is not None


@dataclass(frozen=True)
class Value:
    """A value found in a step's output."""

    text: str
    """Normalised value (what is matched)."""
    kind: DataType
    """Kind of value."""


def _norm_number(raw: str) -> str | None:
    text = raw.replace(",", "")
    digits = re.sub(r"\D", "", text)
    # One-digit numbers ("step 2", "1.") are list markers far more often than data.
    if len(digits) < 2:
        return None
    if "." in text:
        text = text.rstrip("0").rstrip(".") if re.search(r"\.\d*[1-9]", text) else text
    return text


def extract_values(text: str) -> list[Value]:
    """Numbers, URLs, file names and quoted strings in ``text``, first occurrence order."""
    found: dict[tuple[str, str], Value] = {}

    def add(value: str, kind: DataType) -> None:
        key = (kind, value.lower())
        if value and key not in found:
            found[key] = Value(value, kind)

    rest = text
    for m in _URL.finditer(text):
        add(m.group(0).rstrip(".,;:!?"), "url")
    rest = _URL.sub(" ", rest)
    for m in _FILE.finditer(rest):
        add(m.group(1), "file")
    for m in _QUOTED.finditer(rest):
        quoted = next(g for g in m.groups() if g is not None).strip()
        # A quoted word followed by ':' is a JSON key or label, not data; a single short
        # word ("answer", an agent name in a ledger) is a label far more often than data.
        if _KEY_COLON.match(rest, m.end()) or not re.search(r"[A-Za-z0-9]", quoted):
            continue
        if len(quoted.split()) < 2 and len(quoted) < 12:
            continue
        add(quoted, "text")
    for m in _NUMBER.finditer(_numbers_text(rest)):
        number = _norm_number(m.group(0))
        if number is not None:
            add(number, "numeric")
    return list(found.values())


def _contains(haystack: str, haystack_numbers: set[str], value: Value) -> bool:
    if value.kind == "numeric":
        return value.text in haystack_numbers
    needle = value.text.lower()
    if value.kind == "url":
        return needle in haystack
    # Whole words only: 'code' must not match inside 'coder'.
    start = haystack.find(needle)
    while start >= 0:
        end = start + len(needle)
        before = haystack[start - 1] if start else " "
        after = haystack[end] if end < len(haystack) else " "
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            return True
        start = haystack.find(needle, start + 1)
    return False


@dataclass
class _Indexed:
    text: str
    numbers: set[str]


def _index(text: str) -> _Indexed:
    lowered = text.lower()
    numbers = {
        n for n in (_norm_number(m.group(0)) for m in _NUMBER.finditer(_numbers_text(text))) if n
    }
    return _Indexed(lowered, numbers)


def link_values(
    trace: Trace,
    *,
    include_inputs: bool = False,
    max_edges: int = 400,
    max_values_per_pair: int = 3,
) -> list[StepEdge]:
    """Step edges from each value's earliest producing step to every later step using it.

    The producer is the earliest step whose *output* contains the value. A consumer is a
    later step whose output contains it, or, with ``include_inputs``, whose new input
    messages do (recorded inputs show exactly what data reached a step). One edge per
    (producer, consumer, value), at most ``max_values_per_pair`` values per step pair, at
    most ``max_edges`` edges (earliest consumers first).
    """
    task_index = _index(trace.task)
    outputs = [_index(step_output_text(s)) for s in trace.steps]
    consumers = outputs
    if include_inputs:
        consumers = [
            _index(step_output_text(s) + "\n" + _new_input_text(trace, s)) for s in trace.steps
        ]
    distinct: dict[tuple[str, str], tuple[int, Value]] = {}
    for step in trace.steps:
        for v in extract_values(step_output_text(step)):
            key = (v.kind, v.text.lower())
            if key not in distinct and not _contains(task_index.text, task_index.numbers, v):
                distinct[key] = (step.index, v)
    produced: list[tuple[int, Value]] = []
    for found_at, v in distinct.values():
        first = next(
            (i for i, out in enumerate(outputs[:found_at]) if _contains(out.text, out.numbers, v)),
            found_at,
        )
        produced.append((first, v))
    produced.sort(key=lambda item: item[0])
    edges: list[StepEdge] = []
    per_pair: dict[tuple[int, int], int] = {}
    for consumer in trace.steps[1:]:
        used = consumers[consumer.index]
        for producer, value in produced:
            if producer >= consumer.index:
                break
            if not _contains(used.text, used.numbers, value):
                continue
            pair = (producer, consumer.index)
            if per_pair.get(pair, 0) >= max_values_per_pair:
                continue
            per_pair[pair] = per_pair.get(pair, 0) + 1
            edges.append(
                StepEdge(
                    producer=producer,
                    consumer=consumer.index,
                    producer_agent=trace.steps[producer].agent,
                    consumer_agent=consumer.agent,
                    data=value.text,
                    data_type=value.kind,
                    origin="deterministic",
                )
            )
            if len(edges) >= max_edges:
                return edges
    return edges


def _new_input_text(trace: Trace, step: Step) -> str:
    if not step.input_messages:
        return ""
    new, _ = new_input_messages(trace, step)
    return "\n".join(message_text(m) for m in new)


def merge_step_edges(
    llm_edges: Sequence[StepEdge], deterministic: Sequence[StepEdge]
) -> list[StepEdge]:
    """LLM edges first; a deterministic edge on a step pair the model also linked marks that
    model edge 'both' instead of being added twice."""
    merged = [e.model_copy() for e in llm_edges]
    llm_pairs = {(e.producer, e.consumer): i for i, e in enumerate(merged)}
    for edge in deterministic:
        index = llm_pairs.get((edge.producer, edge.consumer))
        if index is not None:
            merged[index].origin = "both"
            continue
        merged.append(edge)
    return sorted(merged, key=lambda e: (e.consumer, e.producer))
