"""The plain-text action format, for backends without tool calling.

A reply holds a THOUGHT line and one action line: ``ACTION: read_step_output {"step": 3}``.
For a constrained model (the embedded one) :func:`action_grammar` makes every reply match
this form, with only real tools, agents and step numbers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from faultfinder.judging.answer_fields import find_field
from faultfinder.judging.answer_json import closing_bracket
from faultfinder.judging.answers import answer_part, parse_step_number, stated_reason
from faultfinder.judging.grammars import gbnf_choice, gbnf_literal
from faultfinder.llm import json_text
from faultfinder.llm.base import OutputConstraint
from faultfinder.llm.client import ParseError
from faultfinder.methods.agentic.tools import SPECS

# The leading run stays on the ACTION line (blank lines above it are not part of the match):
# from every line start of a long run of blank lines it would scan to the end of the run.
_ACTION = re.compile(
    r"^(?:[^\S\n]|[*`>#-])*+action[\s*`]*[:：][\s*`]*([A-Za-z_]+)[`*]*(.*)$",
    flags=re.IGNORECASE | re.MULTILINE,
)
_ARGUMENTS_HEAD = re.compile(r"[\s`*]*+(?:[:(][\s`]*+)?")
"""What may stand between a tool's name and its JSON arguments on the action line:
blanks, Markdown marks, and a colon or an opening parenthesis (``tool({...})``)."""
_CLOSERS = " \t`*.);"
"""What may end an action line that names a tool and no arguments (``ACTION: `tool`.``)."""
_ARGUMENTS_BELOW = re.compile(r"[^\S\n]*\n\s*+(?:```[\w-]*[^\S\n]*\n\s*+)?\{")
"""Arguments written below an action line that holds only the tool's name: the next line
that is not blank starts them, inside a code fence or not."""


class Action(BaseModel):
    """One action read from a reply."""

    name: str
    """Tool name."""
    arguments: dict[str, Any]
    """Its arguments."""


def parse_action(text: str, tools: Sequence[str]) -> Action:
    """The first ``ACTION: tool {json}`` in ``text``.

    Only the first action counts: anything after it (a model imagining the observation,
    a second action, a JSON block of its own) is ignored. The tool must be one of
    ``tools``. Its arguments are the JSON object written right after the name, as in
    ``tool {...}``, ``tool({...})`` or ``tool: {...}``, or, when nothing else is on the
    action line, on the lines below it (a code fence around it allowed). Other text
    after the name is not a JSON object and is refused, never dropped.
    """
    text = answer_part(text)
    match = _ACTION.search(text)
    if match is None:
        raise ParseError("no line of the form 'ACTION: tool {json arguments}'")
    name = match.group(1)
    known = {t.lower(): t for t in tools}
    if name.lower() not in known:
        raise ParseError(f"unknown tool '{name}'; use one of: {', '.join(tools)}")
    tool = known[name.lower()]
    line = match.group(2)
    head = _ARGUMENTS_HEAD.match(line)
    assert head is not None  # every part of the pattern may be empty
    if line[head.end() :].startswith("{"):
        start = match.start(2) + head.end()
    elif line[head.end() :].strip(_CLOSERS):
        example = SPECS[tool].example if tool in SPECS else "{}"
        got = line[head.end() :].strip()[:60]
        raise ParseError(
            f"the arguments of '{name}' must be a JSON object, e.g. {tool} {example}; got {got!r}"
        )
    else:
        below = _ARGUMENTS_BELOW.match(text, match.end())
        if below is None:
            return Action(name=tool, arguments={})
        start = below.end() - 1
    return Action(name=tool, arguments=_object_at(text, start, name))


def _object_at(text: str, start: int, name: str) -> dict[str, Any]:
    """The JSON object whose opening brace is ``text[start]`` (a trailing comma allowed)."""
    end = closing_bracket(text, start)
    if end is None:
        raise ParseError(f"the arguments of '{name}' are not a valid JSON object")
    blob = text[start : end + 1]
    why = ""
    for attempt in (blob, re.sub(r",\s*([}\]])", r"\1", blob)):
        try:
            arguments = json_text.loads(attempt)
        except json_text.JSONTextError as exc:
            why = why or f" ({exc})"
            continue
        if isinstance(arguments, dict):
            return arguments
    raise ParseError(f"the arguments of '{name}' are not a valid JSON object{why}")


def parse_submission_text(text: str) -> dict[str, Any]:
    """Submit arguments from a forced final reply: an ``ACTION: submit {...}`` line, or the
    papers' 'Agent Name: / Step Number: / Reason for Mistake:' answer. The answer part is
    read once (:func:`answer_part` on a text it returned would take a quoted ``</think>``
    in the answer for the end of the reasoning): ``parse_action`` reads it itself."""
    try:
        action = parse_action(text, ["submit"])
        return action.arguments
    except ParseError as first_error:
        text = answer_part(text)
        agent = find_field(text, "Agent Name")
        step = find_field(text, "Step Number")
        if agent is None or step is None:
            raise first_error from None
        return {
            "agent": agent,
            "step": parse_step_number(step),
            "reason": stated_reason(text),
        }


def _json_literal(value: str) -> str:
    return gbnf_literal(json.dumps(value, ensure_ascii=False))


def action_grammar(
    tools: Sequence[str], agents: Sequence[str], n_steps: int, *, thought: bool = True
) -> OutputConstraint:
    """A GBNF grammar admitting exactly the actions of ``tools`` with valid arguments.

    Free text (thought, reason, query) is one line without quotes or backslashes, so the
    JSON always parses. ``thought=False`` admits only the action line (forced submit).
    """
    steps = gbnf_choice(str(i) for i in range(n_steps))
    forms: dict[str, str] = {
        "list_steps": '"list_steps {}" | "list_steps {\\"start\\": " num "}"',
        "read_step_output": '"read_step_output {\\"step\\": " step "}"',
        "read_step_input": '"read_step_input {\\"step\\": " step ("}" | ", \\"full\\": true}")',
        "read_metadata": '"read_metadata {}"',
        "search": '"search {\\"query\\": " str "}"',
        "submit": '"submit {\\"agent\\": " agent ", \\"step\\": " step '
        '", \\"reason\\": " str ", \\"confidence\\": " conf "}"',
    }
    chosen = [t for t in tools if t in forms]
    rules = [
        (
            'root ::= "THOUGHT: " line "\\nACTION: " action'
            if thought
            else 'root ::= "ACTION: " action'
        ),
        "line ::= [^\\n]{0,400}",
        "action ::= " + " | ".join(f"a-{t.replace('_', '-')}" for t in chosen),
    ]
    rules += [f"a-{t.replace('_', '-')} ::= {forms[t]}" for t in chosen]
    rules += [
        f"agent ::= {' | '.join(_json_literal(a) for a in agents)}",
        f"step ::= {steps}",
        "num ::= [0-9]{1,4}",
        'str ::= "\\"" [^"\\\\\\n]{1,200} "\\""',
        'conf ::= "0." [0-9] | "1.0"',
    ]
    return OutputConstraint(gbnf="\n".join(rules))
