"""Edits of every kind of step, and the edit-file schema of ``faultfinder replay --edit-file``.

A step is one model call: a request (messages, tool results the program sends back) and a
reply (text, tool calls). An edit at step K changes one of them:

- ``message``: the reply becomes the given text (no tool calls: the recorded ones are
  dropped, :func:`dropped_tool_calls`);
- ``reply``: the reply is replaced whole (text and tool calls);
- ``tool_call``: one tool call of the recorded reply gets a new name and/or arguments, the
  rest of the reply kept (an orchestrator whose plan or delegation is a tool call is
  edited this way);
- ``tool_result``: the result the program sends back for one tool call carries new
  content, in every request from step K on (the model sees the edited result from then
  on; the program's own history still holds the real one);
- ``input``: the instruction in step K's request is replaced (or a user message added),
  and the upstream answers the changed request.

The first three are served at step K instead of the recorded reply; the last two change
requests, which then go to the upstream. The file format is :data:`EditFile` (JSON, one
object with a ``kind``), documented in docs/replay.md.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from faultfinder.errors import ConfigError
from faultfinder.llm import json_text
from faultfinder.replay.canonical import RecordedCall, adapter_of, canonical_reply

ArgumentsValue = dict[str, Any] | str


class ToolCallSpec(BaseModel):
    """A tool call of a replacement reply."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    """Function name."""
    arguments: ArgumentsValue = Field(default_factory=dict)
    """Arguments: a JSON object, or the raw JSON string as the API carries it."""
    id: str | None = None
    """Call id (default: ``call_edit_<n>``)."""


class ToolCallChange(BaseModel):
    """A change to one tool call of the recorded reply."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(default=0, ge=0)
    """Which tool call of the reply (0-based)."""
    name: str | None = None
    """New function name (default: unchanged)."""
    arguments: ArgumentsValue | None = None
    """New arguments, complete (default: unchanged)."""
    set_arguments: dict[str, Any] | None = None
    """Arguments to set in the recorded JSON arguments, the others kept."""

    @model_validator(mode="after")
    def _changes_something(self) -> ToolCallChange:
        if self.name is None and self.arguments is None and self.set_arguments is None:
            raise ValueError("a tool_call edit needs name, arguments or set_arguments")
        if self.arguments is not None and self.set_arguments is not None:
            raise ValueError("give arguments (complete) or set_arguments (a patch), not both")
        return self


class ToolResultChange(BaseModel):
    """A new result for one tool call, as the model will see it."""

    model_config = ConfigDict(extra="forbid")

    content: str
    """The result text the model sees instead of the program's."""
    tool_call_id: str | None = None
    """The call whose result is edited (default: tool call ``index`` of step K's reply)."""
    index: int = Field(default=0, ge=0)
    """Which tool call of step K's reply, when ``tool_call_id`` is not given."""


class Edit(BaseModel):
    """A change applied at the replayed step (see the module docstring for the kinds)."""

    model_config = ConfigDict(extra="forbid")

    output: str | None = None
    """Replacement text of the step's reply (the assistant message's content)."""
    tool_calls: list[dict[str, Any]] | None = None
    """Tool calls of the replacement reply (OpenAI format, or ``{name, arguments}``)."""
    tool_call_changes: list[ToolCallChange] | None = None
    """Changes to the recorded reply's tool calls (its text and other calls kept)."""
    tool_result: ToolResultChange | None = None
    """A new result for one tool call, in every request from the step on."""
    input: str | None = None
    """Replacement instruction in the step's request; the upstream then answers it live."""
    input_mode: Literal["replace-last-user", "append-user"] = "replace-last-user"
    """How ``input`` changes the request: replace the last user message's text, or add a
    new user message after the existing ones."""

    @model_validator(mode="after")
    def _one_kind(self) -> Edit:
        kinds = [
            self.output is not None or bool(self.tool_calls),
            bool(self.tool_call_changes),
            self.tool_result is not None,
            self.input is not None,
        ]
        if sum(kinds) > 1:
            raise ValueError(
                "an edit changes one thing: the reply (output/tool_calls), its tool calls "
                "(tool_call_changes), a tool result, or the request's input"
            )
        return self

    @property
    def kind(self) -> Literal["output", "tool_call", "tool_result", "input"]:
        if self.input is not None:
            return "input"
        if self.tool_result is not None:
            return "tool_result"
        if self.tool_call_changes:
            return "tool_call"
        return "output"

    def describe(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)

    @classmethod
    def from_file(cls, spec: Any) -> Edit:
        """The edit an edit-file object (:data:`EditFile`) describes."""
        if isinstance(spec, MessageEditFile):
            return cls(output=spec.text)
        if isinstance(spec, ReplyEditFile):
            calls = [c.model_dump(exclude_none=True) for c in spec.tool_calls]
            return cls(output=spec.content or "", tool_calls=calls or None)
        if isinstance(spec, ToolCallEditFile):
            return cls(tool_call_changes=[ToolCallChange(**spec.model_dump(exclude={"kind"}))])
        if isinstance(spec, ToolResultEditFile):
            return cls(tool_result=ToolResultChange(**spec.model_dump(exclude={"kind"})))
        if isinstance(spec, InputEditFile):
            return cls(input=spec.text, input_mode=spec.mode)
        raise TypeError(f"not an edit-file object: {spec!r}")


# --- the edit file ----------------------------------------------------------------------


class MessageEditFile(BaseModel):
    """``{"kind": "message", "text": "..."}``: the reply becomes this text."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["message"]
    text: str
    """Replacement reply text."""


class ReplyEditFile(BaseModel):
    """``{"kind": "reply", "content": "...", "tool_calls": [...]}``: a whole new reply."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["reply"]
    content: str | None = None
    """Reply text (may be empty next to tool calls)."""
    tool_calls: list[ToolCallSpec] = Field(default_factory=list)
    """The reply's tool calls."""


class ToolCallEditFile(ToolCallChange):
    """``{"kind": "tool_call", "index": 0, "name": ..., "arguments"|"set_arguments": ...}``."""

    kind: Literal["tool_call"]


class ToolResultEditFile(ToolResultChange):
    """``{"kind": "tool_result", "content": "...", "tool_call_id"|"index": ...}``."""

    kind: Literal["tool_result"]


class InputEditFile(BaseModel):
    """``{"kind": "input", "text": "...", "mode": "replace-last-user"|"append-user"}``."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["input"]
    text: str
    """Replacement instruction."""
    mode: Literal["replace-last-user", "append-user"] = "replace-last-user"
    """Replace the last user message's text, or add a user message."""


EditFile = Annotated[
    MessageEditFile | ReplyEditFile | ToolCallEditFile | ToolResultEditFile | InputEditFile,
    Field(discriminator="kind"),
]
"""The JSON object of an edit file, told apart by ``kind``."""

_EDIT_FILE: TypeAdapter[Any] = TypeAdapter(EditFile)
EDIT_KINDS = ("message", "reply", "tool_call", "tool_result", "input")


def parse_edit_file(data: Any, source: str = "edit file") -> Any:
    """The edit-file object validated (a clear one-line error naming the field)."""
    if not isinstance(data, dict) or data.get("kind") not in EDIT_KINDS:
        raise ConfigError(
            f"{source}: an edit is a JSON object whose 'kind' is one of {', '.join(EDIT_KINDS)}"
        )
    try:
        return _EDIT_FILE.validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"][1:]) or "(root)"
        raise ConfigError(f"{source}: field {where}: {first['msg']}") from None


def read_edit_file(path: str | Path) -> Edit:
    """The edit an edit file describes (validated; errors name the file and field)."""
    target = Path(path)
    try:
        data = json_text.loads(target.read_text(encoding="utf-8"))
    except json_text.JSONTextError as exc:
        raise ConfigError(f"{target}: not an edit: {exc}") from None
    return Edit.from_file(parse_edit_file(data, str(target)))


# --- applying edits -----------------------------------------------------------------------


def _arguments_text(value: ArgumentsValue) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def changed_tool_calls(
    recorded: list[dict[str, Any]], changes: list[ToolCallChange]
) -> list[dict[str, Any]]:
    """The recorded reply's tool calls with ``changes`` applied (ids kept)."""
    calls = copy.deepcopy(recorded)
    for change in changes:
        if change.index >= len(calls):
            raise ConfigError(
                f"tool_call edit: index {change.index}, but the step's reply has "
                f"{len(calls)} tool call(s)"
            )
        function = calls[change.index].setdefault("function", {})
        if change.name is not None:
            function["name"] = change.name
        if change.arguments is not None:
            function["arguments"] = _arguments_text(change.arguments)
        if change.set_arguments is not None:
            try:
                current = json_text.loads(function.get("arguments") or "{}")
            except json_text.JSONTextError:
                current = None
            if not isinstance(current, dict):
                raise ConfigError(
                    "tool_call edit: set_arguments needs recorded arguments that are a JSON "
                    "object; give the complete 'arguments' instead"
                )
            function["arguments"] = json.dumps({**current, **change.set_arguments})
    return calls


def recorded_tool_calls(message: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The tool calls of a canonical assistant message."""
    return list((message or {}).get("tool_calls") or [])


def reply_message(
    recorded: dict[str, Any] | None,
    output: str | None,
    tool_calls: list[dict[str, Any]] | None,
    changes: list[ToolCallChange] | None,
) -> dict[str, Any]:
    """The canonical assistant message served at an edited step; ``recorded`` is the
    recorded reply's canonical message."""
    if changes:
        message = copy.deepcopy(recorded or {"role": "assistant"})
        message["tool_calls"] = changed_tool_calls(recorded_tool_calls(recorded), changes)
        return message
    reply: dict[str, Any] = {"role": "assistant", "content": output or ""}
    if tool_calls:
        reply["tool_calls"] = [
            {
                "id": call.get("id") or f"call_edit_{i}",
                "type": "function",
                "function": {
                    "name": (call.get("function") or call).get("name", ""),
                    "arguments": _arguments_text(
                        (call.get("function") or call).get("arguments", "")
                    ),
                },
            }
            for i, call in enumerate(tool_calls)
        ]
    return reply


def tool_result_target(change: ToolResultChange, recorded: dict[str, Any] | None) -> str:
    """The tool call id whose result is edited (``recorded``: the step's canonical reply
    message)."""
    if change.tool_call_id:
        return change.tool_call_id
    calls = recorded_tool_calls(recorded)
    if change.index >= len(calls):
        raise ConfigError(
            f"tool_result edit: step's reply has {len(calls)} tool call(s), none at index "
            f"{change.index}; name the call with tool_call_id"
        )
    return str(calls[change.index].get("id"))


def edited_response(recorded: RecordedCall, edit: Edit) -> dict[str, Any]:
    """The recorded reply with its message replaced as the edit says, in the recorded
    call's wire format."""
    adapter = adapter_of(recorded)
    reply = canonical_reply(recorded)
    message = reply_message(
        reply.message if reply else None, edit.output, edit.tool_calls, edit.tool_call_changes
    )
    return adapter.with_reply(recorded.response or {}, message)


def dropped_tool_calls(recorded: RecordedCall, edit: Edit) -> list[str]:
    """The names of the recorded reply's tool calls that ``edit`` drops: an edit of the
    reply's text alone (``--edit``, a ``message`` edit) serves no tool call, so a handoff
    or delegation the step made is not made. Empty for every other edit."""
    if edit.kind != "output" or edit.tool_calls:
        return []
    reply = canonical_reply(recorded)
    calls = recorded_tool_calls(reply.message if reply else None)
    return [str((call.get("function") or {}).get("name") or "?") for call in calls]


def edit_problem(recorded: RecordedCall, edit: Edit) -> str | None:
    """Why ``edit`` cannot be applied to the recorded step ``recorded`` (a tool call or
    tool result it names that the step's reply does not have, arguments to patch that are
    not a JSON object...), or None when it can: checked before the program runs."""
    try:
        if edit.kind in ("output", "tool_call"):
            edited_response(recorded, edit)
        elif edit.kind == "tool_result" and edit.tool_result is not None:
            reply = canonical_reply(recorded)
            tool_result_target(edit.tool_result, reply.message if reply else None)
    except (ConfigError, ValueError) as exc:
        return str(exc)
    return None
