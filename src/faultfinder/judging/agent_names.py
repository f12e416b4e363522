"""Agent names in a model's answer, read against the trace's roster: its agents, plus each
qualified speaker ('Orchestrator (-> WebSurfer)') as an alias of its agent. An answer
names one roster agent or is unreadable (:class:`faultfinder.llm.ParseError`); the rules
are in ``docs/eval.md`` ("Reading answers").
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import overload

from faultfinder.judging.answer_fields import clean_value, comparable
from faultfinder.llm.client import ParseError
from faultfinder.shown import clip_name
from faultfinder.traces.schema import Trace


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
    forms = sorted(roster.forms(), key=lambda fa: len(comparable(fa[0])), reverse=True)
    taken = [False] * len(text)
    found: list[tuple[int, str]] = []
    for form, agent in forms:
        pattern = _form_pattern(form)
        if pattern is None:
            continue
        for m in pattern.finditer(text):
            if any(taken[m.start() : m.end()]) or _glued(text, m.start(), m.end()):
                continue
            taken[m.start() : m.end()] = [True] * (m.end() - m.start())
            found.append((m.start(), agent))
    return list(dict.fromkeys(agent for _, agent in sorted(found)))


_GLUE = "_-"


def _glued(text: str, start: int, end: int) -> bool:
    """Whether the match ``text[start:end]`` is part of a longer name: joined to a word by
    '_' or '-' ('Coder_Expert', 'Senior-Coder'). Such a name is another agent, not this
    one with a part dropped; a word after a space ('the Coder agent') is prose."""
    before = start
    while before > 0 and text[before - 1] in _GLUE:
        before -= 1
    if before < start and before > 0 and _is_word(text[before - 1]):
        return True
    after = end
    while after < len(text) and text[after] in _GLUE:
        after += 1
    return after > end and after < len(text) and _is_word(text[after])


def _is_word(char: str) -> bool:
    return re.fullmatch(_WORD, char) is not None


_PLACEHOLDER = re.compile(
    r"^\(?\s*(your\s+(prediction|reason|answer)|agent name|n/?a)\s*\)?$", re.I
)


def match_agent(answer: str, agents: Sequence[str]) -> str:
    """The one roster agent ``answer`` names.

    An exact name or alias (case, spaces, underscores and markdown ignored) wins; otherwise
    the answer must mention exactly one agent. Two different agents ('WebSurfer, then
    Orchestrator') are ambiguous and raise, as does an answer naming none; a longer name
    holding an agent's ('Coder_Expert' against 'Coder') names no roster agent. Pass a
    :class:`Roster` (``roster_of(trace)``) so qualified speakers resolve to their agent.
    """
    roster = agents if isinstance(agents, Roster) else Roster(agents)
    cleaned = clean_value(answer)
    target = comparable(cleaned)
    if not target or _PLACEHOLDER.match(cleaned):
        raise ParseError("no agent name in the answer")
    for form, agent in roster.forms():
        if comparable(form) == target:
            return agent
    named = agents_mentioned(cleaned, roster)
    if len(named) == 1:
        return named[0]
    if named:
        several = ", ".join(map(clip_name, named))
        raise ParseError(f"the answer names several agents ({several}); name one")
    known = ", ".join(map(clip_name, roster))
    raise ParseError(f"agent '{clip_name(cleaned)}' is not one of: {known}")
