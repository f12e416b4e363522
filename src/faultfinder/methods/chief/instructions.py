# ruff: noqa: E501  (prompt text keeps its natural lines)
"""CHIEF's 'instructions-first' prompt layout (docs/methods/chief.md, "Prompt layout").

Every call sends the same system message: the instructions of all of CHIEF's stages, built
from the paper's templates in ``prompts`` (each stage's opening sentence and instruction
lines, with the per-run values named instead of filled in). It is the same text for every
stage of every run, so a server's prefix cache serves it to every call but the very first.
The user message then holds the shared header (problem, conversation), the causal graph as
far as it is built (``prompts.SUBTASKS_SECTION``, ``NODES_SECTION``, ``LINKS_SECTION``),
the stage's own views (exemplars, candidate set, earlier oracles) and a short request: the
stage's opening sentence and its template lines that carry per-run values or name its task.

Nothing here is new wording but the system message's first paragraph, the stage titles,
the placeholders for per-run values and the request's first and last lines.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from faultfinder.methods.chief import prompts

TEMPLATES: dict[str, str] = {
    "decompose": prompts.DECOMPOSE,
    "otar": prompts.OTAR,
    "edges": prompts.EDGES,
    "step-edges": prompts.STEP_EDGES,
    "oracles": prompts.ORACLES,
    "oracle": prompts.ORACLE_ONE,
    "backtrack": prompts.BACKTRACK,
    "attribution": prompts.ATTRIBUTION,
    "direct": prompts.DIRECT,
}
"""The stage templates in pipeline order (the order of ``prompts.STAGE_TITLES``)."""
STAGE_OF_TEMPLATE = {template: stage for stage, template in TEMPLATES.items()}

SHARED_FIELDS = ("subtasks", "graph")
"""Views the layout replaces by the graph sections (given by the stage, not the fields)."""
OWN_FIELDS = ("rag", "candidates", "previous")
"""Views a stage shows after the graph sections, with their template introductions."""
PLACEHOLDERS: dict[str, str] = {
    "last": "<the last step number, given in the request>",
    "rag_ref": "<the retrieved examples, or the problem when none are given>",
    "order": "<the order given in the request>",
    "subtask_id": "<the subtask named in the request>",
}
"""Per-run values, as the system message names them; the request fills them in."""

PREAMBLE = """You analyse the conversation of a multi-agent system that failed to solve a real-world problem, in stages. Every request gives the problem and the conversation, then the parts of the run's causal graph built so far (its subtasks; the agents of each subtask with their Observation/Thought/Action/Result; its edges, loop groups and oracles), then names ONE stage. Carry out that stage only, following its instructions below, and answer exactly in that stage's answer format."""

_FIELD = re.compile(r"(?<!\{)\{(\w+)\}(?!\})")


@dataclass(frozen=True)
class Parts:
    """A stage template split for the layout."""

    opening: str
    instructions: list[str]
    """Lines other than the header and the views, unformatted."""
    own_views: list[tuple[str, str]]
    """(introduction line or '', field) of the stage's own views, in template order."""


def _field_line(line: str) -> str | None:
    """The field a line consists of ('{subtasks}' -> 'subtasks'), else None."""
    m = re.fullmatch(r"\{(\w+)\}", line.strip())
    return m[1] if m else None


@functools.cache
def split(template: str) -> Parts:
    if template not in STAGE_OF_TEMPLATE:
        raise ValueError("not a CHIEF stage template")
    opening, rest = template.split("\n", 1)
    lines = rest.removeprefix(prompts.HEADER_SLOT).split("\n")
    instructions: list[str] = []
    own: list[tuple[str, str]] = []
    for i, line in enumerate(lines):
        field = _field_line(line)
        if field is None:
            nxt = _field_line(lines[i + 1]) if i + 1 < len(lines) else None
            if nxt is not None and line.endswith(":"):
                continue  # the introduction of the view on the next line
            instructions.append(line)
            continue
        if field in OWN_FIELDS:
            intro = lines[i - 1] if i > 0 and lines[i - 1].endswith(":") else ""
            own.append((intro, field))
        elif field not in SHARED_FIELDS:
            raise ValueError(f"CHIEF template view {{{field}}} has no place in the layout")
    return Parts(opening=opening, instructions=instructions, own_views=own)


@functools.cache
def instructions() -> str:
    """The system message: every stage's opening sentence and instructions, values named."""
    sections = [PREAMBLE]
    for stage, template in TEMPLATES.items():
        title = prompts.STAGE_TITLES[stage]
        parts = split(template)
        body = "\n".join(parts.instructions).format(**PLACEHOLDERS)
        sections.append(f"### Stage: {title}\n{parts.opening}\n{body}")
    return "\n\n".join(sections)


def request(template: str, fields: Mapping[str, Any]) -> str:
    """What a call of this stage asks: the stage's title, then the template's lines that
    carry per-run values or name the stage's task (formatted), then where its instructions
    are. The opening sentence stays in the system message."""
    stage = STAGE_OF_TEMPLATE[template]
    marker = prompts.MARKERS[stage]
    lines = [prompts.STAGE_LINE.format(title=prompts.STAGE_TITLES[stage])]
    for line in split(template).instructions:
        has_value = any(m[1] in PLACEHOLDERS for m in _FIELD.finditer(line))
        if has_value or marker in line:
            lines.append(line.format(**fields))
    lines.append(REQUEST_END)
    return "\n".join(lines)


REQUEST_END = "Carry out this stage as the system message instructs, in its answer format."


def own_views(template: str, fields: Mapping[str, Any]) -> str:
    """The stage's own views (exemplars, candidate set, earlier oracles), as its template
    introduces them."""
    out = []
    for intro, field in split(template).own_views:
        out.append((intro + "\n" if intro else "") + str(fields[field]) + "\n")
    return "".join(out)
