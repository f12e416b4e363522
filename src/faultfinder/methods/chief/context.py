"""What every CHIEF stage needs: the trace, the configuration, the model, and helpers to
build prompts that honour observability and the context budget the same way."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from faultfinder.judging.agent_names import Roster, roster_of
from faultfinder.judging.answer_json import extract_json
from faultfinder.judging.fitting import fit_steps
from faultfinder.judging.reasoning import answer_part
from faultfinder.judging.reference import ground_truth_for
from faultfinder.judging.render import RenderOptions, context_budget, render_metadata
from faultfinder.llm.base import OutputConstraint
from faultfinder.llm.client import LLM, ParseError, Reply
from faultfinder.methods.chief import instructions, prompts
from faultfinder.methods.chief.config import ChiefConfig
from faultfinder.traces.schema import Step, Trace

T = TypeVar("T")

# A generic JSON grammar: the embedded llama.cpp model then always answers with
# syntactically valid JSON (other backends ignore GBNF). Whitespace is bounded so a
# small model cannot loop on it.
JSON_GBNF = r"""root ::= object
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( string ":" ws value ( "," ws string ":" ws value )* )? "}"
array ::= "[" ws ( value ( "," ws value )* )? "]"
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" hex hex hex hex ) )* "\"" ws
hex ::= [0-9a-fA-F]
number ::= "-"? [0-9]+ ( "." [0-9]+ )? ws
ws ::= [ \n]?"""


@dataclass(frozen=True)
class _Form:
    """A stage's prompt in one layout, with the conversation still to be filled in."""

    shown: list[Step]
    """The steps the conversation shows."""
    build: Callable[[str], str]
    """The user message around a rendering of the conversation."""
    messages: Callable[[str], list[dict[str, Any]]]
    """The call's messages around a user message."""
    size: Callable[[str], int]
    """Prompt tokens of a user message and what comes before it."""


@dataclass
class StageContext:
    """Shared inputs of the stages of one run."""

    trace: Trace
    config: ChiefConfig
    llm: LLM
    truncated: set[str] = field(default_factory=set)
    """Stages whose conversation had to be truncated to fit the context budget."""
    own_instructions: set[str] = field(default_factory=set)
    """'instructions-first' layout: stages whose prompt with every stage's instructions
    did not fit the context budget, so they were sent in the 'shared-prefix' form (their
    own instructions only)."""
    shared_history: tuple[str, bool] | None = None
    """'shared-prefix' and 'instructions-first' layouts: the conversation as the stages
    show it, and whether it was cut."""

    @property
    def n_steps(self) -> int:
        return len(self.trace.steps)

    @property
    def roster(self) -> Roster:
        names = self.trace.agent_names()
        for agent in self.trace.agents:
            if agent.name not in names:
                names.append(agent.name)
        return roster_of(self.trace, names)

    def render(
        self,
        stage: str,
        template: str,
        fields: dict[str, Any],
        *,
        sections: Sequence[str] = (),
        steps: Sequence[Step] | None = None,
        partial_from: int | None = None,
    ) -> list[dict[str, Any]]:
        """The messages of a call of ``template`` (which has a ``{header}`` slot) in the
        configured layout, with the conversation rendered to fit ``context_budget`` after
        everything else in the prompt.

        'paper' layout: one user message; each stage fits the conversation on its own, and
        ``steps`` / ``partial_from`` show only part of it. 'shared-prefix': one user
        message; every stage shows the same rendering of the whole conversation (a
        remaining part is named after the header instead), and the fitted rendering is
        reused while the stage's prompt still fits, so all calls of a run share the header
        as their prompt prefix; a stage that no longer fits cuts the conversation further,
        and later stages reuse that. 'instructions-first': as 'shared-prefix', but every
        stage's instructions come first, in a system message shared by all calls, and the
        user message shows ``sections`` (the graph as far as the stage knows it) in place
        of the template's subtask list and graph view, then the stage's own views and its
        request. When that prompt does not fit the context budget with the conversation as
        the run shows it (whole, or as cut for an earlier stage), the stage is sent in the
        'shared-prefix' form instead, with its own instructions only, before any further
        cut of the conversation (recorded in ``own_instructions``)."""
        cfg = self.config
        budget = context_budget(cfg, self.llm, cfg.reply_tokens(REPLY_CAP_TOKENS))
        layout_name = cfg.prompt_layout
        form = self._compose(layout_name, template, fields, sections, steps, partial_from)
        if layout_name == "instructions-first" and budget is not None:
            history = (
                self.shared_history[0]
                if self.shared_history is not None
                else fit_steps(self.trace, form.shown, RenderOptions.from_config(cfg), None)[0]
            )
            if form.size(form.build(history)) > budget:
                layout_name = "shared-prefix"
                self.own_instructions.add(stage)
                form = self._compose(layout_name, template, fields, sections, steps, partial_from)
        shared = layout_name != "paper"
        if shared and self.shared_history is not None:
            history, cut = self.shared_history
            prompt = form.build(history)
            if budget is None or form.size(prompt) <= budget:
                if cut:
                    self.truncated.add(stage)
                return form.messages(prompt)
        reserved = form.size(form.build(""))
        options = RenderOptions.from_config(cfg)
        history, cut = fit_steps(
            self.trace, form.shown, options, budget, self.llm.count_tokens, reserved
        )
        if shared:
            self.shared_history = (history, cut)
        if cut:
            self.truncated.add(stage)
        return form.messages(form.build(history))

    def _compose(
        self,
        layout_name: prompts.Layout,
        template: str,
        fields: dict[str, Any],
        sections: Sequence[str],
        steps: Sequence[Step] | None,
        partial_from: int | None,
    ) -> _Form:
        """How a prompt of ``template`` is put together in one layout, the conversation
        left open."""
        cfg = self.config
        shared = layout_name != "paper"
        note = ""
        if shared:
            if partial_from is not None:
                note = "\n" + prompts.PARTIAL_TRAJECTORY.format(
                    first=partial_from, last=self.n_steps - 1
                )
            steps, partial_from = None, None
        shown = list(self.trace.steps) if steps is None else list(steps)
        ground_truth = ground_truth_for(self.trace, cfg.with_ground_truth)
        metadata = render_metadata(self.trace, cfg.observability)
        system = ""
        if layout_name == "instructions-first":
            system = instructions.instructions()
            own = (
                "".join(sections)
                + instructions.own_views(template, fields)
                + instructions.request(template, fields)
            )

            def fill(head: str) -> str:
                return head + note + "\n" + own

        else:
            layout = prompts.arrange(template, layout_name)

            def fill(head: str) -> str:
                return layout.format(header=head + note, **fields)

        def build(history: str) -> str:
            head = prompts.header(
                self.trace.task,
                ground_truth,
                history,
                self.n_steps,
                metadata,
                partial_from=partial_from,
            )
            return fill(head)

        def messages(user: str) -> list[dict[str, Any]]:
            first = [{"role": "system", "content": system}] if system else []
            return [*first, {"role": "user", "content": user}]

        def size(user: str) -> int:
            return self.llm.count_tokens(system + "\n" + user if system else user)

        return _Form(shown=shown, build=build, messages=messages, size=size)

    def constraint(self) -> OutputConstraint | None:
        return OutputConstraint(gbnf=JSON_GBNF) if self.config.json_grammar else None

    async def ask_json(
        self,
        messages: list[dict[str, Any]],
        parse: Callable[[Any], T],
        *,
        purpose: str,
        items: int,
    ) -> Reply[T]:
        """Ask for a JSON answer; ``parse`` receives the decoded JSON value. ``items``: how
        many entries the answer lists (subtasks, nodes, steps...), which bounds its length:
        ``REPLY_BASE_TOKENS + REPLY_TOKENS_PER_ITEM * items``, at most ``REPLY_CAP_TOKENS``
        (``max_output_tokens`` overrides)."""

        def read(text: str) -> T:
            data = extract_json(answer_part(text))
            try:
                return parse(data)
            except (TypeError, KeyError, AttributeError, IndexError) as exc:
                # A reply of an unexpected shape is unparsed, like any other bad reply.
                raise ParseError(f"unexpected answer structure: {exc}") from None

        return await self.llm.chat(
            messages,
            parse=read,
            purpose=purpose,
            constraint=self.constraint(),
            **self.config.chat_options(reply_bound(items)),
        )


REPLY_BASE_TOKENS = 192
"""Tokens of a JSON answer's frame and its free-text fields (reasoning, notes)."""
REPLY_TOKENS_PER_ITEM = 96
"""Tokens per listed entry (an id, a few short fields, a sentence)."""
REPLY_CAP_TOKENS = 4096
"""The longest reply any stage may need (and what the context budget keeps free)."""


def reply_bound(items: int) -> int:
    """Max output tokens of a stage whose answer lists ``items`` entries."""
    return min(REPLY_BASE_TOKENS + REPLY_TOKENS_PER_ITEM * max(items, 1), REPLY_CAP_TOKENS)


def as_list(data: Any, key: str) -> list[Any]:
    """``data[key]`` when data is an object, ``data`` itself when it is a list."""
    if isinstance(data, dict):
        for k, v in data.items():
            if k.lower() == key.lower() and isinstance(v, list):
                return v
        raise ParseError(f"no '{key}' list in the JSON answer")
    if isinstance(data, list):
        return data
    raise ParseError("expected a JSON object or list")


def get_field(item: dict[str, Any], *names: str) -> Any:
    """The first of ``names`` present in ``item`` (case-insensitive, spaces or underscores)."""
    norm = {k.lower().replace(" ", "_").replace("-", "_"): v for k, v in item.items()}
    for name in names:
        key = name.lower().replace(" ", "_").replace("-", "_")
        if key in norm:
            return norm[key]
    return None


def as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list):
        return "; ".join(as_text(v) for v in value)
    return json.dumps(value, ensure_ascii=False)


def as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        digits = value.strip().lower().removeprefix("step").strip()
        if digits.lstrip("-").isdigit():
            return int(digits)
    return None


def as_str_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [as_text(v) for v in value if as_text(v)]
    text = as_text(value)
    return [text] if text else []
