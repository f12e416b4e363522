"""Reading model answers: agent names, step numbers, yes/no, JSON. (The grammars that
make a constrained model answer in a readable form are in ``methods.grammars``.)

Every parser is anchored to the answer field its prompt asks for and raises
:class:`faultfinder.llm.ParseError` for anything else; the LLM layer then re-samples and
finally records the reply as unparsed. Nothing here guesses. The rules, with examples,
are in ``docs/eval.md`` ("Reading answers"); ``tests/parser_tables/`` holds the replies
each parser is tested on.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

from pydantic import BaseModel

from faultfinder.llm.client import ParseError
from faultfinder.traces.schema import Trace

# --- agents ------------------------------------------------------------------------


class Roster(Sequence[str]):
    """The agent names a method may answer with, plus aliases that resolve to them.

    An alias is a qualified speaker as the log shows it (Magentic-One's
    ``Orchestrator (-> WebSurfer)`` is the Orchestrator speaking): an answer naming it
    names its agent, not the agent inside the parentheses. Behaves as the list of names.
    """

    def __init__(self, names: Iterable[str], aliases: Mapping[str, str] | None = None) -> None:
        self.names: tuple[str, ...] = tuple(dict.fromkeys(names))
        self.aliases: dict[str, str] = {
            alias: agent
            for alias, agent in (aliases or {}).items()
            if agent in self.names and alias not in self.names
        }

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self.names[index]

    def __len__(self) -> int:
        return len(self.names)

    def __repr__(self) -> str:
        return f"Roster({list(self.names)!r}, aliases={self.aliases!r})"

    def forms(self) -> Iterator[tuple[str, str]]:
        """(surface form, agent) for every name and alias."""
        for name in self.names:
            yield name, name
        yield from self.aliases.items()


def roster_of(trace: Trace, names: Sequence[str] | None = None) -> Roster:
    """``names`` (default: the trace's speakers) with the trace's qualified speakers as
    aliases, so 'Orchestrator (thought)' in an answer reads as 'Orchestrator'."""
    aliases = {s.speaker: s.agent for s in trace.steps if s.speaker != s.agent}
    return Roster(trace.agent_names() if names is None else names, aliases)


def _norm(name: str) -> str:
    return re.sub(r"[\W_]+", "", name).casefold()


_WORD = r"[^\W_]"
_SEPARATORS = re.compile(r"[\s_\-.]+")
_SEPARATOR_RUN = r"[\s_\-.]*"


@functools.lru_cache(maxsize=4096)
def _form_pattern(form: str) -> re.Pattern[str] | None:
    """A pattern finding ``form`` in prose: case and the spelling of separators ('_', ' ',
    '-', none) are free; punctuation inside the form (parentheses, arrows) must be there."""
    parts: list[str] = []
    for token in re.findall(rf"{_WORD}+|[^\w]+|_+", form.strip()):
        if re.fullmatch(rf"{_WORD}+", token):
            # 'WebSurfer' also matches 'Web Surfer'.
            parts.append(re.sub(r"(?<=[a-z])(?=[A-Z])", r"[\\s_\\-]?", re.escape(token)))
        elif _SEPARATORS.fullmatch(token):
            parts.append(_SEPARATOR_RUN)
        else:
            chars = [re.escape(c) for c in token if not c.isspace()]
            parts.append(r"\s*" + r"\s*".join(chars) + r"\s*")
    while parts and not re.search(r"\w", parts[-1].replace("\\s", "")):
        parts.pop()  # a trailing ')' is optional
    while parts and (
        parts[0] == _SEPARATOR_RUN or not re.search(r"\w", parts[0].replace("\\s", ""))
    ):
        # Leading separators ('_Agent') are optional anyway: without them the name is
        # found at the same places, and a run of blanks is not rescanned from every start.
        parts.pop(0)
    if not parts:
        return None
    return re.compile(rf"(?<!{_WORD}){_join_runs(parts)}(?!{_WORD})", re.IGNORECASE)


def _join_runs(parts: list[str]) -> str:
    """``parts`` joined, two optional runs in a row ('_' beside '-' or '(' in 'a_-b', 'a_(b')
    made one: the same text matches, and a long run of blanks is not split every way."""
    joined = ""
    for part in parts:
        if joined.endswith(_SEPARATOR_RUN):
            part = part.removeprefix(_SEPARATOR_RUN).removeprefix(r"\s*")
        elif part == _SEPARATOR_RUN:
            joined = joined.removesuffix(r"\s*")
        joined += part
    return joined


def agents_mentioned(text: str, agents: Sequence[str]) -> list[str]:
    """Roster agents named in ``text``, in order of first mention, each once.

    Longer surface forms are matched first and hide what they contain, so an alias
    ('Orchestrator (-> WebSurfer)') counts as its own agent only.
    """
    roster = agents if isinstance(agents, Roster) else Roster(agents)
    forms = sorted(roster.forms(), key=lambda fa: len(_norm(fa[0])), reverse=True)
    taken = [False] * len(text)
    found: list[tuple[int, str]] = []
    for form, agent in forms:
        pattern = _form_pattern(form)
        if pattern is None:
            continue
        for m in pattern.finditer(text):
            if any(taken[m.start() : m.end()]):
                continue
            taken[m.start() : m.end()] = [True] * (m.end() - m.start())
            found.append((m.start(), agent))
    return list(dict.fromkeys(agent for _, agent in sorted(found)))


_PLACEHOLDER = re.compile(
    r"^\(?\s*(your\s+(prediction|reason|answer)|agent name|n/?a)\s*\)?$", re.I
)


def match_agent(answer: str, agents: Sequence[str]) -> str:
    """The one roster agent ``answer`` names.

    An exact name or alias (case, spaces, underscores and markdown ignored) wins; otherwise
    the answer must mention exactly one agent. Two different agents ('WebSurfer, then
    Orchestrator') are ambiguous and raise, as does an answer naming none. Pass a
    :class:`Roster` (``roster_of(trace)``) so qualified speakers resolve to their agent.
    """
    roster = agents if isinstance(agents, Roster) else Roster(agents)
    cleaned = clean_value(answer)
    target = _norm(cleaned)
    if not target or _PLACEHOLDER.match(cleaned):
        raise ParseError("no agent name in the answer")
    for form, agent in roster.forms():
        if _norm(form) == target:
            return agent
    named = agents_mentioned(cleaned, roster)
    if len(named) == 1:
        return named[0]
    if named:
        raise ParseError(f"the answer names several agents ({', '.join(named)}); name one")
    raise ParseError(f"agent '{cleaned[:80]}' is not one of: {', '.join(roster)}")


# --- labelled fields ------------------------------------------------------------------

_MARKUP = "*_`'\"“”‘’"
# Blanks after a bullet, number or '#' belong to that branch only (not to a second run of
# blanks after it, which would split a long run of spaces every way: quadratic).
_LINE_START = r"^[ \t>]*(?:[-*•+][ \t]+|\d+[.)][ \t]*|#+[ \t]*)?"


def clean_value(value: str) -> str:
    """A field value without surrounding markdown, quotes, brackets or trailing commas."""
    text = value.strip()
    previous = None
    while text != previous:
        previous = text
        text = text.strip().rstrip(",;").strip()
        text = text.strip(_MARKUP).strip()
        if len(text) > 1 and text[0] + text[-1] in ("[]", "<>"):
            text = text[1:-1]
    return text


def _field_pattern(label: str) -> re.Pattern[str]:
    words = r"[ \t_]+".join(re.escape(w) for w in label.split())
    return re.compile(
        rf"{_LINE_START}[{re.escape(_MARKUP)}]*{words}[{re.escape(_MARKUP)}]*[ \t]*"
        rf"(?:[:：][{re.escape(_MARKUP)}]*[ \t]*(?P<value>[^\n]*)|(?P<bare>)$)",
        re.IGNORECASE | re.MULTILINE,
    )


def _is_placeholder(value: str) -> bool:
    return bool(re.fullmatch(r"\(?\s*your\s+(prediction|reason|answer)\s*\)?\.?", value, re.I))


def _next_line(text: str, end: int) -> str:
    for line in text[end:].splitlines():
        if line.strip():
            return line
    return ""


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


def find_field(text: str, *labels: str) -> str | None:
    """The value of the first of ``labels`` present. Repeats must agree: two different
    values for one field are ambiguous (ParseError); an absent field gives None."""
    for label in labels:
        values = field_values(text, label)
        distinct = list(dict.fromkeys(_norm(v) for v in values))
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
    by_norm = {_norm(str(k)): v for k, v in data.items()}
    for key in keys:
        if _norm(key) in by_norm:
            return by_norm[_norm(key)]
    return None


def json_answer(text: str) -> dict[str, Any] | None:
    """The reply's JSON object when it has one, else None."""
    if "{" not in text:
        return None
    try:
        data = extract_json(text)
    except ParseError:
        return None
    return data if isinstance(data, dict) else None


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
    numbers = list(dict.fromkeys(int(n) for n in _NUMBER.findall(plain)))
    if len(numbers) > 1:
        listed = ", ".join(map(str, numbers[:4]))
        raise ParseError(f"several candidate steps ({listed}) in '{shown}'; give one")
    if not numbers:
        raise ParseError(f"no step number in '{shown}'")
    hedge = _STEP_HEDGES.search(plain) or _HEDGES.search(plain)
    if hedge:
        raise ParseError(f"the step is hedged ('{hedge.group(0).strip()}') in '{shown}'")
    return numbers[0]


class AgentStepAnswer(BaseModel):
    """The all-at-once answer: agent, step, reason."""

    agent: str
    step: int
    """As answered; may lie outside the trace (the caller marks it unparsed)."""
    reason: str


def parse_agent_step_reason(
    text: str, agents: Sequence[str], n_steps: int | None = None
) -> AgentStepAnswer:
    """Read 'Agent Name: ... / Step Number: ... / Reason for Mistake: ...' (Who&When's
    format), or the same fields as a JSON object. The step is range-checked only when
    ``n_steps`` is given; methods pass None so a readable agent survives a bad step."""
    data = json_answer(text)
    agent_raw: Any = json_field(data, "Agent Name", "agent", "mistake_agent")
    step_raw: Any = json_field(data, "Step Number", "step", "mistake_step")
    reason: Any = json_field(data, "Reason for Mistake", "reason", "mistake_reason")
    if agent_raw is None or step_raw is None:
        agent_raw = find_field(text, "Agent Name", "Agent")
        step_raw = find_field(text, "Step Number", "Step")
        reason = find_field(text, "Reason for Mistake", "Reason")
    if agent_raw is None:
        raise ParseError("no 'Agent Name:' line")
    if step_raw is None:
        raise ParseError("no 'Step Number:' line")
    return AgentStepAnswer(
        agent=match_agent(str(agent_raw), agents),
        step=parse_step_number(
            step_raw if isinstance(step_raw, int | float) else str(step_raw), n_steps
        ),
        reason=str(reason or ""),
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
    """
    data = json_answer(text)
    value = json_field(data, "answer", "Yes/No", "judgment", "judgement", "decision")
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        fields, first_line = [value], ""
    else:
        fields, first_line = _yes_no_fields(text)
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


# --- JSON --------------------------------------------------------------------------


_FENCE = re.compile(r"^[ \t]*```[\w-]*[ \t]*\n(.*?)\n[ \t]*```", re.MULTILINE | re.DOTALL)
"""A Markdown code fence: opening and closing on lines of their own. A JSON string cannot
hold a raw newline, so a fence quoted inside a JSON value never matches."""
# Possessive blanks: '.*?' could take them too, and retrying each split of a long run of
# blanks before a fence that never closes is quadratic.
_INLINE_FENCE = re.compile(r"```(?:json)?\s*+(.*?)```", re.DOTALL)
_JSON_TAG = re.compile(r"<json>(.*?)</json>", re.DOTALL | re.IGNORECASE)
"""The ``<json></json>`` tags ECHO's prompts ask the answer to be wrapped in."""


def json_tagged(text: str) -> str | None:
    """The content of the last complete ``<json>...</json>`` block of ``text`` (the answer,
    when prose before it quotes JSON of its own), or None when there is none."""
    blocks = _JSON_TAG.findall(text)
    return blocks[-1] if blocks else None


def extract_json(text: str) -> Any:
    """The JSON object or array ``text`` holds: the whole text when it is one; else the
    content of its last ``<json></json>`` block, when it has one; else the first in a code
    fence, then the first in the text (prose around it and trailing commas tolerated)."""
    tagged = json_tagged(text)
    if tagged is not None:  # strictly shorter than ``text``: the recursion ends
        return extract_json(tagged)
    try:
        whole = json.loads(text)
    except (json.JSONDecodeError, RecursionError):  # RecursionError: nested too deep
        whole = None
    if isinstance(whole, dict | list):
        return whole
    text_block = _first_block(text)
    candidates = [m.group(1) for m in _FENCE.finditer(text)]
    inline = None if candidates else _INLINE_FENCE.search(text)
    # '```json {...}``` on one line', unless those backticks are inside the text's first
    # bracketed block (code quoted in a string of the answer itself).
    if inline is not None and (
        text_block is None or not text_block[0] < inline.start() < text_block[1]
    ):
        candidates.append(inline.group(1))
    candidates.append(text)
    for i, candidate in enumerate(candidates):
        span = text_block if i == len(candidates) - 1 else _first_block(candidate)
        if span is None:
            continue
        blob = candidate[span[0] : span[1] + 1]
        for attempt in (blob, re.sub(r",\s*([}\]])", r"\1", blob)):
            try:
                return json.loads(attempt)
            except (json.JSONDecodeError, RecursionError):
                pass
    raise ParseError("no valid JSON object in the answer")


MAX_OPEN_BRACKETS = 64
"""Unclosed brackets :func:`_first_block` looks past before giving up (each costs a scan
to the end of the text, so the bound keeps a reply of '[[[[...' linear)."""


def _first_block(text: str) -> tuple[int, int] | None:
    """Start and end index of the first bracketed block that closes, or None."""
    tried = 0
    for start, char in enumerate(text):
        if char not in "{[":
            continue
        end = closing_bracket(text, start)
        if end is not None:
            return start, end
        tried += 1
        if tried >= MAX_OPEN_BRACKETS:
            return None
    return None


def closing_bracket(text: str, start: int) -> int | None:
    """Index of the bracket closing the one at ``start`` (strings skipped), or None."""
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i
    return None
