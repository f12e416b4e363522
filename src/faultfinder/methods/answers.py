"""Reading model answers: agent names, step numbers, yes/no, JSON; and grammars that
make a constrained model (the embedded one) always answer in a readable form.

Parsers raise :class:`faultfinder.llm.ParseError`; the LLM layer then re-samples and
finally records the reply as unparsed. Nothing here guesses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel

from faultfinder.llm.base import OutputConstraint
from faultfinder.llm.client import ParseError


def _norm(name: str) -> str:
    return re.sub(r"[\s_\-\"'`*.:]+", "", name).lower()


def match_agent(answer: str, agents: Sequence[str]) -> str:
    """The roster name ``answer`` refers to.

    Exact match after normalising case, spaces, underscores and quotes; otherwise the
    single roster name contained in the answer (longest wins when names nest).
    """
    target = _norm(answer)
    if not target:
        raise ParseError("empty agent name")
    for agent in agents:
        if _norm(agent) == target:
            return agent
    contained = [a for a in agents if _norm(a) and _norm(a) in target]
    if contained:
        return max(contained, key=lambda a: len(_norm(a)))
    raise ParseError(f"agent '{answer.strip()[:80]}' is not one of: {', '.join(agents)}")


_FIELD = r"(?:\*\*)?\s*{label}\s*(?:\*\*)?\s*[:：]\s*(?:\*\*)?\s*(.*)"


def find_field(text: str, *labels: str) -> str | None:
    """The value after 'Label:' on its line (markdown bold tolerated), first label found."""
    for label in labels:
        m = re.search(_FIELD.format(label=label), text, flags=re.IGNORECASE)
        if m:
            return m.group(1).strip().strip("*").strip()
    return None


def parse_step_number(value: str, n_steps: int) -> int:
    """An integer step in [0, n_steps) from text such as '7', 'Step 7', '**7**'."""
    m = re.search(r"-?\d+", value)
    if not m:
        raise ParseError(f"no step number in '{value[:80]}'")
    step = int(m.group(0))
    if not 0 <= step < n_steps:
        raise ParseError(f"step {step} is outside the trace (0..{n_steps - 1})")
    return step


class AgentStepAnswer(BaseModel):
    """The all-at-once answer: agent, step, reason."""

    agent: str
    step: int
    reason: str


def parse_agent_step_reason(text: str, agents: Sequence[str], n_steps: int) -> AgentStepAnswer:
    """Parse 'Agent Name: ... / Step Number: ... / Reason for Mistake: ...'."""
    agent_raw = find_field(text, "Agent Name", "Agent")
    step_raw = find_field(text, "Step Number", "Step")
    if agent_raw is None:
        raise ParseError("no 'Agent Name:' line")
    if step_raw is None:
        raise ParseError("no 'Step Number:' line")
    reason = find_field(text, "Reason for Mistake", "Reason") or ""
    return AgentStepAnswer(
        agent=match_agent(agent_raw, agents),
        step=parse_step_number(step_raw, n_steps),
        reason=reason,
    )


def parse_yes_no(text: str) -> bool:
    """'1. Yes. 2. ...' → True. The first yes/no word decides."""
    m = re.search(r"\b(yes|no)\b", text, flags=re.IGNORECASE)
    if not m:
        raise ParseError("no Yes/No in the answer")
    return m.group(1).lower() == "yes"


def extract_json(text: str) -> Any:
    """The first JSON object or array in ``text`` (code fences, prose around it and
    trailing commas tolerated)."""
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, flags=re.DOTALL)
    candidates = [fenced.group(1)] if fenced else []
    candidates.append(text)
    for candidate in candidates:
        for start, char in enumerate(candidate):
            if char not in "{[":
                continue
            end = closing_bracket(candidate, start)
            if end is None:
                continue
            blob = candidate[start : end + 1]
            for attempt in (blob, re.sub(r",\s*([}\]])", r"\1", blob)):
                try:
                    return json.loads(attempt)
                except json.JSONDecodeError:
                    pass
            break
    raise ParseError("no valid JSON object in the answer")


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


# --- grammars -----------------------------------------------------------------


REASON_MAX_CHARS = 400
"""Longest reason a grammar allows (about 100 tokens): a few sentences."""
REASON_GBNF = f"[A-Za-z] [^\\n]{{0,{REASON_MAX_CHARS - 1}}}"
"""A one-line reason: starts with a letter (a small model otherwise tends to emit endless
digits) and ends within ``REASON_MAX_CHARS`` characters, so a reply's length is bounded by
what the question needs, not by the reply limit."""


def gbnf_literal(text: str) -> str:
    """A GBNF string literal for ``text``."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def gbnf_choice(options: Iterable[str]) -> str:
    return " | ".join(gbnf_literal(o) for o in options)


def agent_step_grammar(agents: Sequence[str], steps: Iterable[int]) -> OutputConstraint:
    """Grammar for the agent/step/reason answer, limited to real agents and steps."""
    grammar = "\n".join(
        [
            'root ::= "Agent Name: " agent "\\nStep Number: " step '
            '"\\nReason for Mistake: " reason',
            f"agent ::= {gbnf_choice(agents)}",
            f"step ::= {gbnf_choice(str(s) for s in steps)}",
            f"reason ::= {REASON_GBNF}",
        ]
    )
    return OutputConstraint(gbnf=grammar)


def choice_grammar(options: Sequence[str], *, then_reason: bool = False) -> OutputConstraint:
    """Grammar for one of ``options`` (optionally followed by a one-line reason)."""
    tail = f' ". " {REASON_GBNF}' if then_reason else ""
    return OutputConstraint(gbnf=f"root ::= ({gbnf_choice(options)}){tail}")
