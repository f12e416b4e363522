"""Reading model answers: agent names, step numbers, yes/no, JSON. (The grammars that
make a constrained model answer in a readable form are in ``judging.grammars``.)

Every parser is anchored to the answer field its prompt asks for and raises
:class:`faultfinder.llm.ParseError` for anything else; the LLM layer then re-samples and
finally records the reply as unparsed. Nothing here guesses. The rules, with examples,
are in ``docs/eval.md`` ("Reading answers"); ``tests/parser_tables/`` holds the replies
each parser is tested on.

This module reads step numbers and yes/no answers, and the agent/step/reason answer that
combines them. It is also where every reader is imported from (``docs/plugins.md``): agent
names live in :mod:`~faultfinder.judging.agent_names`, labelled fields in
:mod:`~faultfinder.judging.answer_fields`, JSON in :mod:`~faultfinder.judging.answer_json`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from faultfinder.judging.agent_names import Roster, agents_mentioned, match_agent, roster_of
from faultfinder.judging.answer_fields import (
    clean_value,
    field_text,
    field_values,
    find_field,
    json_answer,
    json_field,
    object_problem,
    stated_json,
)
from faultfinder.judging.answer_json import (
    MAX_OPEN_BRACKETS,
    closing_bracket,
    extract_json,
    json_tagged,
)
from faultfinder.judging.reasoning import answer_part
from faultfinder.llm.client import ParseError

__all__ = [
    "MAX_OPEN_BRACKETS",
    "AgentStepAnswer",
    "Roster",
    "agents_mentioned",
    "answer_part",
    "clean_value",
    "closing_bracket",
    "extract_json",
    "field_text",
    "field_values",
    "find_field",
    "find_hedge",
    "json_answer",
    "json_field",
    "json_tagged",
    "match_agent",
    "parse_agent_step_reason",
    "parse_step_number",
    "parse_yes_no",
    "roster_of",
    "stated_json",
    "stated_reason",
]


# --- step numbers ------------------------------------------------------------------

# 'step12', 'step_7', 'Step Number 7' -> 'step 7' (possessive: a long run of blanks is read
# once), so the number stands on its own like any other.
_STEP_WORD = re.compile(r"\bstep[\s_]*+(?:(?:number|no\.?|index)[\s_]*+)?(?=[#\-]?\d)", re.I)
# A note on the numbering ('0-based', 'counting from 1') names no step.
_NUMBERING_NOTE = re.compile(
    r"\b[01][ \t]*+-?[ \t]*+(?:based|indexed)\b|"
    r"\b(?:counting|numbered|indexed|starting|start|starts|begin|begins|beginning)"
    r"[ \t]++(?:from|at)[ \t]++[01]\b",
    re.I,
)
# A whole number standing on its own: not inside a word or code ('4th', 'Agent_2', 'gpt4',
# '0x7'), not part of a decimal ('3.5'); a sentence's full stop may follow ('step 12.').
# ASCII classes, so '7或8' is two numbers.
_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])-?\d+(?![A-Za-z0-9_]|\.\d)")
_DECIMAL = re.compile(r"(?<![A-Za-z0-9_.])\d+\.\d+")
_HEX = re.compile(r"\b0x[0-9a-f]+\b", re.I)
# Hedges a step field can carry beyond those of a Yes/No (``_HEDGES``): a number given as
# approximate, open-ended, negated or questioned. 'Most likely' and 'my best guess' are
# not hedges: the prompts ask for one best answer. Possessive blanks keep long runs linear.
_STEP_HEDGES = re.compile(
    r"\b(?:around|about|approx(?:imately|\.)?|roughly|circa|near(?:ly)?)[ \t]++"
    r"(?:step[ \t]*+)?#?-?\d++|"
    r"(?:\bnot|n't)[ \t]++(?:(?:at|in)[ \t]++)?(?:step[ \t]*+)?#?-?\d++|"
    r"\bor[ \t]++(?:so|thereabouts|later|earlier|before|after|around)\b|"
    r"\bat[ \t]++(?:the[ \t]++)?(?:latest|earliest|least|most)\b|"
    r"~[ \t]*+-?\d++|(?<!\d)\d++[ \t]*+\?",
    re.I,
)


def parse_step_number(value: str | int | float, n_steps: int | None = None) -> int:
    """One integer step from an answer field: '7', 'Step 7', '**7**', '#7', '7.', '7 (the
    search)', 'The mistake is at step 7.', a JSON 7 (or 7.0).

    The field must hold exactly one step number. Unreadable (ParseError, with the reason):
    two different numbers ('7 or 8', '7-8', '2|3', '7 vs 8', '7 (possibly 8)', 'Step 7;
    also step 8'), a decimal ('3.5'), a hex literal ('0x7'), a hedge ('maybe 7', 'about 7',
    '7?', '7 or later'), or no number. Ordinals ('its 4th message') and numbering notes
    ('0-based') are not step numbers; the same number repeated is one step.

    With ``n_steps`` a step outside [0, n_steps) raises; without it the caller decides
    (methods keep the step and :func:`faultfinder.judging.pairing.check_step` marks it).
    """
    if isinstance(value, bool):
        raise ParseError(f"no step number in '{value}'")
    if isinstance(value, int):
        step = value
    elif isinstance(value, float):
        if not value.is_integer():
            raise ParseError(f"'{value}' is not a whole step number")
        step = int(value)
    else:
        step = _step_in_text(clean_value(str(value)))
    if n_steps is not None and not 0 <= step < n_steps:
        raise ParseError(f"step {step} is outside the trace (0..{n_steps - 1})")
    return step


def _step_in_text(text: str) -> int:
    """The one step number ``text`` holds (see :func:`parse_step_number`)."""
    shown = text[:80]
    plain = _NUMBERING_NOTE.sub(" ", _STEP_WORD.sub("step ", text))
    for pattern, what in ((_HEX, "a decimal"), (_DECIMAL, "a whole")):
        odd = pattern.search(plain)
        if odd:
            raise ParseError(f"'{odd.group(0)}' is not {what} step number in '{shown}'")
    try:
        numbers = list(dict.fromkeys(int(n) for n in _NUMBER.findall(plain)))
    except ValueError:  # over the 4,300 digits Python converts: no step number either
        raise ParseError(f"a number too long to be a step number in '{shown}'") from None
    if len(numbers) > 1:
        listed = ", ".join(map(str, numbers[:4]))
        raise ParseError(f"several candidate steps ({listed}) in '{shown}'; give one")
    if not numbers:
        raise ParseError(f"no step number in '{shown}'")
    hedge = _STEP_HEDGES.search(plain) or _HEDGES.search(plain)
    if hedge:
        raise ParseError(f"the step is hedged ('{hedge.group(0).strip()}') in '{shown}'")
    return numbers[0]


# --- reasons -----------------------------------------------------------------------

REASON_LABELS = ("Reason for Mistake", "Reason", "Explanation")
"""The labels (and JSON keys) a reason is written under, most specific first."""
_REASON_KEYS = ("Reason for Mistake", "reason", "mistake_reason", "explanation")
_AGENT_STEP_LABELS = ("Agent Name", "Agent", "Step Number", "Step")


def stated_reason(text: str, data: Any = None, unlabelled: str = "") -> str:
    """The reason an answer states: the reason value of its JSON object ``data``, else the
    text of its labelled reason field (``Reason for Mistake:``, ``Reason:``,
    ``Explanation:``; every line of it, up to the next answer field), else ``unlabelled``
    (where the prompt's own format puts the reason: step-by-step's item ``2.``), else the
    whole answer ``text``. Never a piece cut out of the answer by position."""
    value = json_field(data, *_REASON_KEYS)
    if isinstance(value, str) and value.strip():
        return value.strip()
    stops = (*REASON_LABELS, *_AGENT_STEP_LABELS, *_ANSWER_LABELS)
    for label in REASON_LABELS:
        found = field_text(text, label, stops)
        if found:
            return found
    return unlabelled.strip() or text.strip()


class AgentStepAnswer(BaseModel):
    """The all-at-once answer: agent, step, reason."""

    agent: str
    step: int
    """As answered; may lie outside the trace (the caller marks it unparsed)."""
    reason: str


def _agent_and_step(data: Any) -> tuple[Any, Any]:
    """The agent and step values of a JSON answer (None for each one it lacks)."""
    return (
        json_field(data, "Agent Name", "agent", "mistake_agent"),
        json_field(data, "Step Number", "step", "mistake_step"),
    )


def parse_agent_step_reason(
    text: str, agents: Sequence[str], n_steps: int | None = None
) -> AgentStepAnswer:
    """Read 'Agent Name: ... / Step Number: ... / Reason for Mistake: ...' (Who&When's
    format), or the same fields as a JSON object (one inside a sentence only when the reply
    has neither field of its own: :func:`stated_json`). The step is range-checked only when
    ``n_steps`` is given; methods pass None so a readable agent survives a bad step. A
    reasoning model's ``<think>`` block is not the answer (:func:`answer_part`)."""
    text = answer_part(text)
    data = stated_json(text)
    agent_raw, step_raw = _agent_and_step(data)
    if agent_raw is None or step_raw is None:
        data = None
        agent_raw = find_field(text, "Agent Name", "Agent")
        step_raw = find_field(text, "Step Number", "Step")
        find_field(text, "Reason for Mistake", "Reason")  # two different reasons: ambiguous
    if agent_raw is None and step_raw is None:
        # No fields of its own: an object inside a sentence is the answer after all.
        quoted = json_answer(text)
        if None not in _agent_and_step(quoted):
            data = quoted
            agent_raw, step_raw = _agent_and_step(quoted)
    if agent_raw is None:
        raise ParseError("no 'Agent Name:' line" + object_problem(text))
    if step_raw is None:
        raise ParseError("no 'Step Number:' line" + object_problem(text))
    return AgentStepAnswer(
        agent=match_agent(str(agent_raw), agents),
        step=parse_step_number(
            step_raw if isinstance(step_raw, int | float) else str(step_raw), n_steps
        ),
        reason=stated_reason(text, data),
    )


# --- yes / no ----------------------------------------------------------------------

# 'Partially' (or 'partly') hedges an answer ('Yes, partially'), but 'partially wrong',
# 'partly in error' assert an error: only its extent is qualified, so it is read as written.
_ERROR_WORDS = (
    r"wrong|incorrect|inaccurate|erroneous|flawed|mistaken|faulty|at[ \t]++fault|in[ \t]++error"
)
_HEDGES = re.compile(
    r"\b(maybe|perhaps|possibly|probably|"
    rf"part(?:ial(?:ly)?|ly)(?![ \t-]++(?:{_ERROR_WORDS})\b)|"
    r"unclear|uncertain|unsure|not sure|"
    r"(hard|impossible) to (say|tell|determine)|(can(no|')t|can not|unable to) (be )?"
    r"(determined?|tell|say|know)|debatable|ambiguous|depends)\b",
    re.I,
)


def find_hedge(text: str) -> str | None:
    """The first hedge in ``text`` ('maybe', 'probably', 'not sure', 'cannot determine'…),
    or None. A field carrying one is unreadable, in every parser that uses it."""
    m = _HEDGES.search(text)
    return m.group(0) if m else None


_BOTH = re.compile(r"\b(yes|no)\b\s*(and|or|/|&)\s*\b(yes|no)\b", re.I)
_ANSWER_LABELS = (
    "Yes/No", "Yes or No", "Answer", "Final Answer", "Judgment", "Judgement", "Decision",
    "Verdict",
)  # fmt: skip
_WORDS = {"yes": True, "no": False, "是": True, "否": False, "不是": False}


def _yes_no_fields(text: str) -> tuple[list[str], str]:
    """The answer fields of a Yes/No reply (items '1.' and labelled lines, in the order
    they are tried) and its first line, the fallback when there is none."""
    items = re.finditer(r"(?:^|\n)[ \t*#>]*1\s*[.)][ \t*]*(?P<v>.*?)(?=\s2\s*[.)]|\n|$)", text)
    fields = [m.group("v") for m in items]
    for label in _ANSWER_LABELS:
        fields += field_values(text, label)
    # The first line, after a preface that announces the answer ('My judgment:').
    lines = [line for line in text.strip().splitlines() if line.strip()]
    while len(lines) > 1 and lines[0].rstrip().endswith((":", "：")):
        lines.pop(0)
    return fields, lines[0] if lines else ""


def _strip_echo(field: str) -> str:
    # An echo of the prompt's 'Yes/No' before (or instead of) the actual answer.
    field = clean_value(field)
    field = re.sub(r"^(yes\s*/\s*no|yes or no)\s*[:：.\-]?\s*", "", field, flags=re.I)
    return clean_value(field)


_YES_NO_START = re.compile(r"(yes|no|不是|是|否)(?![\w])", re.I)


def _read_yes_no(field: str) -> bool:
    """A field that starts with Yes or No, neither hedged nor saying both."""
    if _BOTH.search(field):
        raise ParseError(f"the answer says both yes and no: '{field[:80]}'")
    m = _YES_NO_START.match(field)
    if not m:
        raise ParseError(f"the answer does not start with Yes or No: '{field[:80]}'")
    sentence = re.split(r"(?<=[.!?。])\s|\n", field, maxsplit=1)[0]
    if _HEDGES.search(sentence):
        raise ParseError(f"the answer hedges: '{sentence[:80]}'")
    return _WORDS[m.group(1).lower()]


def parse_yes_no(text: str) -> bool:
    """The answer to a Yes/No question, read from its answer field.

    The field is item '1.' (step-by-step's '1. Yes/No. 2. Reason' format), a labelled line
    ('Yes/No: No', 'Answer: **Yes**'), a JSON ``answer`` key, or else the reply's first
    line; a field that only echoes 'Yes/No' is skipped. It must start with Yes or No; a
    field that negates, hedges or says both is unreadable. Every other field of the reply
    that starts with Yes or No (another item '1.', another label, the first line) must
    give the same answer, unhedged: a reply answering twice, differently, is unreadable.
    A JSON answer inside a sentence counts only when no field starts with Yes or No
    (:func:`stated_json`). A reasoning model's ``<think>`` block is not the answer
    (:func:`answer_part`).
    """
    text = answer_part(text)
    keys = ("answer", "Yes/No", "judgment", "judgement", "decision")
    fields, first_line = _yes_no_fields(text)
    value = json_field(stated_json(text), *keys)
    if value is None and not any(
        _YES_NO_START.match(_strip_echo(field)) for field in [*fields, first_line]
    ):
        # No Yes/No of its own: an object inside a sentence is the answer after all.
        value = json_field(json_answer(text), *keys)
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        fields, first_line = [value], ""
    stripped = [f for f in map(_strip_echo, fields) if f]
    first_line = _strip_echo(first_line)
    if not stripped and first_line:
        stripped = [first_line]
    if not stripped:
        raise ParseError("no Yes/No in the answer")
    answer = _read_yes_no(stripped[0])
    # The first line counts again only when it is an answer itself ('No.' above a
    # 'Final Answer: Yes'); an item line '1. No. 2. ...' or 'Answer: No' is not.
    for other in [*stripped[1:], first_line]:
        if _YES_NO_START.match(other) and _read_yes_no(other) != answer:
            raise ParseError(
                f"the answer is given twice, differently: '{stripped[0][:40]}' / '{other[:40]}'"
            )
    return answer
