"""A list of chat messages (JSON array, JSONL, or a wrapper object) → canonical traces.

Each message becomes one step. The field mapping is configurable (``--map key=value`` on
the command line, keyword options in Python); the defaults read OpenAI-style
``{"role": ..., "content": ..., "name": ...}`` messages:

=============  ============  ====================================================
option         default       meaning
=============  ============  ====================================================
agent_field    ``name``      field naming the speaking agent; messages without it
                             fall back to ``role_field``
role_field     ``role``      field with the chat role (kept raw in ``Step.role``)
content_field  ``content``   field with the message text (strings, or OpenAI
                             content-part lists whose text parts are joined)
messages_key   ``messages``  key of the message list in a wrapper object
task           (see below)   the task text, or the name of a wrapper key holding
                             it; default: the wrapper's ``task`` or ``question``,
                             else the first human/user message
id             (see below)   trace id, or the name of a wrapper key holding it
                             (``--map id=question_ID``); default: the wrapper's
                             ``id``, else the file stem (``stem/N`` for the N-th
                             trace of a file). Two traces with one id are an error
step_base      ``0``         numbering of a wrapper's ``mistake_step`` (0 or 1)
=============  ============  ====================================================

Field names may be dotted (``meta.agent``) to reach into nested objects.

Strictness: text fields (task, ids, labels, answers) must be strings; message content
a string, a list of content parts or null; anything else is an error naming the field.
Keys the mapping does not use are kept in metadata and warned about (errors with
``--strict``), so a misspelt ``mistake_agnet`` is never silently dropped.

Step kind: role ``system`` → 'system'; ``tool``/``function``/``ipython`` → 'tool';
``human`` → 'human'; ``user`` → 'human' unless the message also names an agent in
``agent_field`` (multi-agent frameworks send other agents' turns as 'user'); else 'llm'.

A message's ``tool_calls``, and the legacy ``function_call`` (one call, no id, as AG2's
function-style chats still write), are the step's tool calls; either one, when it has a
key no tool call field holds, is also kept whole in the step's metadata. A legacy ``role:
"function"`` message's ``name`` is the function's, not a speaker's: the step gets a tool
result of that name, and its agent is the one whose earlier step called the function
(else ``tool``).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from faultfinder.errors import TraceFormatError
from faultfinder.traces.importers._common import (
    check_options,
    fail,
    make_trace,
    optional_str,
    parse_label_step,
    without_credentials,
)
from faultfinder.traces.importers._openai import (
    content_text,
    tool_calls_from,
    tool_calls_fully_read,
)
from faultfinder.traces.io import (
    UnknownKeys,
    data_stem,
    data_suffix,
    field_at,
    is_canonical,
    parse_json,
    read_json,
    read_jsonl,
    read_text,
    split_lines,
)
from faultfinder.traces.schema import (
    Agent,
    GoldLabel,
    SourceInfo,
    Step,
    StepKind,
    ToolResult,
    Trace,
)

# Wrapper keys mapped to canonical fields; others are kept in Trace.metadata.
_WRAPPER_MAPPED = frozenset(
    {
        "id",
        "task",
        "question",
        "ground_truth",
        "final_answer",
        "system",
        "mistake_agent",
        "mistake_step",
        "mistake_reason",
    }
)
_TOOL_ROLES = frozenset({"tool", "function", "ipython"})
# OpenAI chat-message keys other than the mapped ones: kept in Step.metadata, no warning.
_MESSAGE_KEYS = frozenset(
    {"tool_calls", "tool_call_id", "function_call", "refusal", "audio", "reasoning_content"}
    | {"name", "role", "content"}
)
_FUNCTION_CALL_KEYS = frozenset({"name", "arguments"})
"""The keys of a legacy ``function_call``."""


class GenericMapping(BaseModel):
    """How message fields map onto steps (the importer's options)."""

    agent_field: str = "name"
    """Field naming the speaking agent; messages without it use ``role_field``."""
    role_field: str = "role"
    """Field holding the chat role, kept raw in ``Step.role``."""
    content_field: str = "content"
    """Field holding the message text."""
    messages_key: str = "messages"
    """Key of the message list inside a wrapper object."""
    task: str | None = None
    """Task text; default: wrapper 'task'/'question', else the first human/user message."""
    id: str | None = None
    """Trace id; default: wrapper 'id', else the file stem."""
    step_base: int = Field(default=0, ge=0, le=1)
    """Numbering of a wrapper's ``mistake_step``: 0 (canonical) or 1."""


_OPTIONS = {
    "agent_field": "speaker field (default 'name', falls back to role_field)",
    "role_field": "chat role field (default 'role')",
    "content_field": "text field (default 'content')",
    "messages_key": "message list key in a wrapper object (default 'messages')",
    "task": "task text (default: wrapper task/question, else the first human message)",
    "id": "trace id (default: wrapper id, else the file stem)",
    "step_base": "numbering of a wrapper's mistake_step, 0 or 1 (default 0)",
}


def _get(message: dict[str, Any], dotted: str) -> Any:
    value: Any = message
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _top_key(dotted: str) -> str:
    return dotted.split(".", 1)[0]


def _is_message(item: Any, mapping: GenericMapping) -> bool:
    if not isinstance(item, dict):
        return False
    has_body = _get(item, mapping.content_field) is not None or "tool_calls" in item
    speaker = _get(item, mapping.role_field) or _get(item, mapping.agent_field)
    return has_body and speaker is not None


def _is_wrapper(item: Any, mapping: GenericMapping) -> bool:
    return isinstance(item, dict) and isinstance(item.get(mapping.messages_key), list)


class GenericImporter:
    """Reads chat-message lists with a configurable field mapping."""

    name: ClassVar[str] = "generic"
    summary: ClassVar[str] = (
        "JSON list / JSONL of chat messages, or {messages: [...]} objects; fields set with "
        "--map agent_field=, content_field=, role_field=, task=, id="
    )

    def detect(self, path: Path) -> bool:
        path = Path(path)
        if not path.is_file() or data_suffix(path) not in (".json", ".jsonl"):
            return False
        mapping = GenericMapping()
        try:
            first = self._first_item(path)
        except (TraceFormatError, OSError):
            return False
        if is_canonical(first):
            return False
        return _is_message(first, mapping) or (
            _is_wrapper(first, mapping)
            and bool(first[mapping.messages_key])
            and _is_message(first[mapping.messages_key][0], mapping)
        )

    @staticmethod
    def _first_item(path: Path) -> Any:
        if data_suffix(path) == ".jsonl":
            for number, line in enumerate(split_lines(read_text(path)), start=1):
                if line.strip():
                    return parse_json(line, path, line=number)
            return None
        data = read_json(path)
        if isinstance(data, list):
            return data[0] if data else None
        return data

    def load(self, path: Path, **options: Any) -> list[Trace]:
        check_options(self.name, options, _OPTIONS)
        try:
            mapping = GenericMapping(**options)
        except ValueError as exc:
            fail(path, "(options)", str(exc).replace("\n", " "))
        path = Path(path)
        if not path.is_file():
            fail(path, "(file)", "expected a .json or .jsonl file of chat messages")
        items = self._read_items(path)
        if not items:
            fail(path, "(root)", "no messages")
        wrappers = [i for i, (_, item) in enumerate(items) if _is_wrapper(item, mapping)]
        if wrappers and len(wrappers) == len(items):
            many = len(items) > 1
            traces = [
                self._trace(
                    where_path,
                    item[mapping.messages_key],
                    item,
                    mapping,
                    default_id=f"{data_stem(path)}/{n}" if many else data_stem(path),
                    file_path=path,
                    prefix=f"{mapping.messages_key}",
                )
                for n, (where_path, item) in enumerate(items)
            ]
            _check_unique_ids(traces, [p for p, _ in items])
            return traces
        if wrappers:
            where_path, _ = items[wrappers[0]]
            fail(where_path, "(root)", "mixes wrapper objects and bare messages")
        if data_suffix(path) == ".jsonl":
            messages = [item for _, item in items]
            return [
                self._trace(
                    path,
                    messages,
                    {},
                    mapping,
                    default_id=data_stem(path),
                    file_path=path,
                    prefix="",
                    line_paths=[p for p, _ in items],
                )
            ]
        return [
            self._trace(
                path,
                [i for _, i in items],
                {},
                mapping,
                default_id=data_stem(path),
                file_path=path,
                prefix="",
            )
        ]

    @staticmethod
    def _read_items(path: Path) -> list[tuple[str, Any]]:
        """(error path, item) pairs: JSONL lines, list elements, or the one object."""
        if data_suffix(path) == ".jsonl":
            return [(f"{path}:{n}", value) for n, value in read_jsonl(path)]
        data = read_json(path)
        if isinstance(data, list):
            return [(str(path), item) for item in data]
        if isinstance(data, dict):
            return [(str(path), data)]
        fail(path, "(root)", "expected a list of messages or an object with a message list")

    def _trace(
        self,
        path: str | Path,
        messages: list[Any],
        wrapper: dict[str, Any],
        mapping: GenericMapping,
        *,
        default_id: str,
        file_path: Path,
        prefix: str,
        line_paths: list[str] | None = None,
    ) -> Trace:
        unknown = UnknownKeys(path)
        if wrapper:
            columns = {c for c in (mapping.id, mapping.task) if c is not None}
            unknown.check(wrapper, _WRAPPER_MAPPED | {mapping.messages_key} | columns)
        steps: list[Step] = []
        for i, message in enumerate(messages):
            if line_paths is not None:
                where_path, where = line_paths[i], ""
            else:
                where_path, where = str(path), f"{prefix}[{i}]"
            steps.append(self._step(i, message, mapping, where_path, where, unknown))
        unknown.report()
        _name_function_callers(steps)
        label = self._label(wrapper, mapping, path, len(steps))
        task = _option_or_column(wrapper, mapping.task, "task", path)
        if task is None:
            task = optional_str(wrapper, "task", path) or optional_str(wrapper, "question", path)
        if task is None:
            task = next((s.content for s in steps if s.kind == "human"), "")
        agents = [Agent(name=n) for n in dict.fromkeys(s.agent for s in steps if s.kind == "llm")]
        trace_id = _option_or_column(wrapper, mapping.id, "id", path)
        if trace_id is None:
            trace_id = optional_str(wrapper, "id", path) or default_id
        return make_trace(
            path,
            id=trace_id,
            task=task,
            ground_truth=optional_str(wrapper, "ground_truth", path),
            final_answer=optional_str(wrapper, "final_answer", path),
            system=optional_str(wrapper, "system", path),
            agents=agents,
            steps=steps,
            label=label,
            source=SourceInfo(format=self.name, path=str(file_path)),
            metadata={
                k: v
                for k, v in wrapper.items()
                if k not in _WRAPPER_MAPPED and k != mapping.messages_key
            },
        )

    @staticmethod
    def _step(
        index: int,
        message: Any,
        mapping: GenericMapping,
        path: str,
        where: str,
        unknown: UnknownKeys,
    ) -> Step:
        field = partial(field_at, where)  # a field of this message, by name
        if not isinstance(message, dict):
            fail(path, where or "(line)", "expected a message object")
        role_value = _get(message, mapping.role_field)
        if role_value is not None and not isinstance(role_value, str):
            fail(path, field(mapping.role_field), "expected a string")
        named = _get(message, mapping.agent_field)
        if named is not None and not isinstance(named, str):
            fail(path, field(mapping.agent_field), "expected a string")
        agent = (named or role_value or "").strip()
        if not agent:
            nested = _message_list_key(message)
            hint = (
                f"the messages seem to sit under '{nested}': pass --map messages_key={nested}"
                if nested
                else "set agent_field / role_field"
            )
            fail(
                path,
                field(mapping.agent_field),
                f"missing: neither '{mapping.agent_field}' nor '{mapping.role_field}' names "
                f"the speaker ({hint})",
            )
        content = _get(message, mapping.content_field)
        if content is not None and not isinstance(content, str | list):
            fail(path, field(mapping.content_field), "expected text, a list of parts or null")
        separate_name = bool(named) and mapping.agent_field != mapping.role_field
        kind = _kind(role_value, separate_name)
        tool_calls = tool_calls_from(
            message.get("tool_calls"), path=path, where=field("tool_calls"), unknown=unknown
        )
        used = {
            _top_key(mapping.role_field),
            _top_key(mapping.agent_field),
            _top_key(mapping.content_field),
        }
        # One with a key no ToolCall field holds ('argumnets') is kept whole in metadata.
        if tool_calls_fully_read(message.get("tool_calls")):
            used.add("tool_calls")
        legacy = message.get("function_call")
        if isinstance(legacy, dict):  # the legacy OpenAI form: one call, no id
            tool_calls += tool_calls_from([legacy], path=path, where=field("function_call"))
            # One with a key it does not have ('argmuents') is kept whole in metadata, noted.
            unknown.check(legacy, _FUNCTION_CALL_KEYS, field("function_call"), path=path)
            if legacy.keys() <= _FUNCTION_CALL_KEYS:
                used.add("function_call")
        unknown.check(message, used | _MESSAGE_KEYS, where, path=path)
        metadata = without_credentials({k: v for k, v in message.items() if k not in used})
        text = content_text(content, path=path, where=field(mapping.content_field))
        results = []
        if named and mapping.agent_field == "name" and (role_value or "").lower() == "function":
            # OpenAI's legacy function result: `name` is the function's (AG2 keeps it so);
            # the agent is its caller's, found once every step is read
            results.append(ToolResult(name=named.strip(), content=text))
            agent = _NO_CALLER
        return Step(
            index=index,
            agent=agent,
            role=role_value,
            kind=kind,
            content=text,
            tool_calls=tool_calls,
            tool_results=results,
            source_id=str(index),
            metadata=metadata,
        )

    @staticmethod
    def _label(
        wrapper: dict[str, Any], mapping: GenericMapping, path: str | Path, n_steps: int
    ) -> GoldLabel | None:
        agent, step_value = wrapper.get("mistake_agent"), wrapper.get("mistake_step")
        if agent is None and step_value is None:
            return None
        step = parse_label_step(
            step_value, path=path, field="mistake_step", n_steps=n_steps, base=mapping.step_base
        )
        return GoldLabel(
            agent=optional_str(wrapper, "mistake_agent", path),
            step=step,
            reason=optional_str(wrapper, "mistake_reason", path),
        )


_NO_CALLER = "tool"
"""The agent of a function's result when no earlier step called that function."""


def _name_function_callers(steps: list[Step]) -> None:
    """Give each legacy function result (a ``role: "function"`` message, named after its
    function) the agent of the latest earlier step that called that function, a call no
    earlier result answered; ``metadata.inferred.agent`` says which (unless the message
    has an ``inferred`` key of its own, kept as it is). One pass: per function, the steps
    whose calls are still unanswered, latest last (a file of many results is read in
    time linear in its steps)."""
    waiting: dict[str, list[tuple[Step, list[int]]]] = {}
    for step in steps:
        if step.tool_results and (step.role or "").lower() == "function":
            function = step.tool_results[0].name
            note = f"no earlier step called '{function}'"
            callers = waiting.get(function) if function is not None else None
            if callers:
                earlier, unanswered = callers[-1]
                unanswered[0] -= 1
                if not unanswered[0]:
                    callers.pop()
                step.agent = earlier.agent
                note = f"the caller: step {earlier.index} ('{earlier.agent}') called '{function}'"
            step.metadata.setdefault("inferred", {"agent": note})
        calls: dict[str, int] = {}
        for call in step.tool_calls:
            calls[call.name] = calls.get(call.name, 0) + 1
        for name, count in calls.items():
            waiting.setdefault(name, []).append((step, [count]))


def _kind(role: str | None, separate_name: bool) -> StepKind:
    lowered = (role or "").lower()
    if lowered == "system":
        return "system"
    if lowered in _TOOL_ROLES:
        return "tool"
    if lowered == "human" or (lowered == "user" and not separate_name):
        return "human"
    return "llm"


def _option_or_column(
    wrapper: dict[str, Any], option: str | None, name: str, path: str | Path
) -> str | None:
    """An option's value: the wrapper's key of that name when there is one (a column),
    else the literal text."""
    if option is None:
        return None
    if option in wrapper:
        value = wrapper[option]
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        fail(path, option, f"--map {name}={option} names this key, which holds no usable {name}")
    return option


def _check_unique_ids(traces: list[Trace], paths: list[str]) -> None:
    first: dict[str, str] = {}
    for trace, where in zip(traces, paths, strict=True):
        if trace.id in first:
            fail(
                where,
                "id",
                f"trace id {trace.id!r} already used at {first[trace.id]}; ids must be unique "
                "(map id to a column holding distinct values, e.g. --map id=question_ID)",
            )
        first[trace.id] = where


def _message_list_key(item: dict[str, Any]) -> str | None:
    """The key of a list of objects inside ``item``, when it looks like a message list."""
    for key, value in item.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            return str(key)
    return None
