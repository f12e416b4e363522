"""How an AG2 log's tool runs reach the steps that asked for them (helper of ``ag2.py``).

A ``function_calls`` record is attached to the step whose reply asked for it: by the call
id the executing agent's ``received_message`` event lists, else by function name, else by
position (``metadata.function_call_matches`` says which). A call that raised has no such
record; its ``Error: ...`` response is taken from the chat events' ``tool_responses``
(``metadata.tool_responses``). A tool run no step asked for (its model call is not in the
log) becomes a ``tool`` step of its own, with the call id the log shows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from faultfinder.traces.importers._ag2_logs import Session, event_time
from faultfinder.traces.importers._common import text_of
from faultfinder.traces.importers._spans import keep_raw, maybe_json, parse_time
from faultfinder.traces.schema import Step, ToolCall, ToolResult


def attach_tool_runs(session: Session, steps: list[Step], path: Path) -> None:
    """Every tool run of ``session`` on the step that asked for it: the function call
    records in time order, then the responses only the chat events hold."""
    asked = _asked(session, path)
    for call in sorted(session.calls, key=lambda c: str(c.get("timestamp") or "")):
        _attach(call, steps, path, asked)
    _add_responses(session, steps, path, asked, _unlogged(session))


def _insert_in_time(steps: list[Step], step: Step) -> None:
    """Insert ``step`` before the first step that started after it (at the end when its
    time is unknown); the caller renumbers the steps."""
    if step.started_at is not None:
        for position, other in enumerate(steps):
            if other.started_at is not None and other.started_at > step.started_at:
                steps.insert(position, step)
                return
    steps.append(step)


@dataclass
class _Asked:
    """The tool calls one agent was asked to run: a ``received_message`` event whose
    message holds ``tool_calls`` with ids."""

    agent: str
    moment: datetime | None
    timestamp: str
    calls: list[dict[str, Any]]
    claimed: set[int] = field(default_factory=set)
    """Positions in ``calls`` already matched to a function call record."""


def _asked(session: Session, path: Path) -> list[_Asked]:
    """Every received message asking its receiver to run tool calls that carry ids, in time
    order."""
    found = []
    for event in session.chat_events:
        state = maybe_json(event.get("json_state"))
        message = state.get("message") if isinstance(state, dict) else None
        if event.get("event_name") != "received_message" or not isinstance(message, dict):
            continue
        calls = message.get("tool_calls")
        if not isinstance(calls, list):
            continue
        calls = [c for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str)]
        if calls:
            found.append(
                _Asked(
                    agent=_who(event),
                    moment=event_time(event, path),
                    timestamp=str(event.get("timestamp")),
                    calls=calls,
                )
            )
    found.sort(key=lambda a: (a.moment is None, a.moment or datetime.min))
    return found


def _who(record: dict[str, Any]) -> str:
    """The agent that logged a record: its ``source_id`` (the agent's Python id, which
    events and function calls share), else its name."""
    source = record.get("source_id")
    return f"id:{source}" if source is not None else f"name:{record.get('source_name')}"


def _call_id(
    record: dict[str, Any], moment: datetime | None, asked: list[_Asked]
) -> tuple[str, str] | None:
    """The id of the tool call a function call record ran, and where it was read: among
    the calls the executing agent last received before running it, the first not yet
    matched whose arguments (and name, when logged) are the record's. None when the log
    does not show it."""
    name = record.get("function_name")
    args = maybe_json(record.get("args", record.get("input_args")))
    who = _who(record)
    latest = None
    for request in asked:
        if request.agent != who:
            continue
        if moment is not None and request.moment is not None and request.moment > moment:
            break
        latest = request
    if latest is None:
        return None
    for position, call in enumerate(latest.calls):
        function = call.get("function")
        if position in latest.claimed or not isinstance(function, dict):
            continue
        if name and function.get("name") != name:
            continue
        if maybe_json(function.get("arguments")) == args:
            latest.claimed.add(position)
            return str(call["id"]), (
                f"received_message event at {latest.timestamp}: the tool calls "
                f"'{record.get('source_name')}' was asked to run, the first not yet matched "
                f"with the arguments{' and name' if name else ''} this function call logged"
            )
    return None


def _pending(step: Step) -> list[ToolCall]:
    """The step's calls no result answers yet (a result answers the first call with its
    call id, a result without an id the first call without one)."""
    answered = Counter(r.call_id for r in step.tool_results)
    pending = []
    for call in step.tool_calls:
        if answered[call.id]:
            answered[call.id] -= 1
        else:
            pending.append(call)
    return pending


def _attach(record: dict[str, Any], steps: list[Step], path: Path, asked: list[_Asked]) -> None:
    """Attach one function execution to the step that asked for it: by the call id of the
    tool call the executing agent was asked to run, when the log shows it (AG2 logs no id
    with the execution itself); else to the latest earlier step with a call still
    unanswered (matched by name when the log has it: the file logger does not write it).
    ``metadata.function_call_matches`` on the step says which."""
    name = str(record.get("function_name") or "")
    args = maybe_json(record.get("args", record.get("input_args")))
    result = maybe_json(record.get("returns"))
    moment = parse_time(record.get("timestamp"), path=path, where="function_calls.timestamp")
    earlier = [s for s in steps if s.started_at is None or moment is None or s.started_at <= moment]
    target: Step | None = None
    call: ToolCall | None = None
    match: dict[str, Any] = {}
    found = _call_id(record, moment, asked)
    if found is not None:
        call_id, source = found
        for step in reversed(earlier):
            call = next((c for c in _pending(step) if c.id == call_id), None)
            if call is not None:
                target = step
                match = {"matched_by": "call id", "call_id": call_id, "call_id_from": source}
                break
    if target is None:
        for step in reversed(earlier):
            pending = [c for c in _pending(step) if not name or c.name == name]
            if pending:
                target, call = step, pending[0]
                rule = "function name" if name else "position"
                match = {"matched_by": f"{rule}: the latest earlier unanswered call"}
                break
    if target is None:
        # The id the executing agent was asked to run it under, when the log shows it:
        # kept, so that the call's response in the chat events finds this step.
        asked_id = found[0] if found is not None else None
        inferred: dict[str, Any] = {"attached": "no earlier step asked for this function"}
        if found is not None:
            inferred["call_id_from"] = found[1]
        _insert_in_time(
            steps,
            Step(
                index=len(steps),
                agent=str(record.get("source_name") or "executor"),
                role="tool",
                kind="tool",
                content=text_of(result),
                tool_calls=[
                    ToolCall(id=asked_id, name=name or "function", arguments=text_of(args))
                ],
                tool_results=[
                    ToolResult(
                        call_id=asked_id,
                        name=name or None,
                        content=text_of(result),
                        status="success",
                    )
                ],
                started_at=moment,
                metadata={"inferred": inferred, "source": keep_raw(record)},
            ),
        )
        return
    tool_result = ToolResult(
        call_id=call.id if call else None,
        name=name or (call.name if call else None),
        content=text_of(result),
        status="success",
    )
    target.tool_results.append(tool_result)
    target.metadata.setdefault("executed_by", []).append(record.get("source_name"))
    target.metadata.setdefault("function_calls", []).append(keep_raw(record))
    target.metadata.setdefault("function_call_matches", []).append(match)


AG2_ERROR_PREFIX = "Error: "
"""How AG2 words the response of a tool call that failed (``ConversableAgent.execute_function``
and ``a_execute_function``: ``f"Error: {e}"`` for a function that raised, arguments that
are not JSON, a function it does not know). The ``is_exec_success`` flag it sets beside it
is not logged, so these words are the log's only mark of a failure."""


def _unlogged(session: Session) -> dict[str, set[str]]:
    """The functions each agent runs from the ``function_map`` its logged init args name:
    AG2 calls them unwrapped, so it logs none of their executions, and a text one of them
    returned reaches the log exactly as a failure's ``Error: ...`` would."""
    found: dict[str, set[str]] = {}
    for name, info in session.agents.items():
        args = maybe_json(info.get("init_args"))
        mapping = args.get("function_map") if isinstance(args, dict) else None
        if isinstance(mapping, dict):
            found[name] = {str(k) for k in mapping}
    return found


def _judged(
    response: _Response, function: str | None, unlogged: dict[str, set[str]]
) -> tuple[str | None, dict[str, str]]:
    """A response's status with what the step's note says of it. ``error`` when AG2 worded
    it as a failure (:data:`AG2_ERROR_PREFIX`), but unknown (None) when the function is
    one its agent runs from its ``function_map``: a function whose runs AG2 does not log
    may have returned those words, and AG2 counts that a success."""
    if not (isinstance(response.content, str) and response.content.startswith(AG2_ERROR_PREFIX)):
        return "success", {}
    if function is not None and function in unlogged.get(response.agent or "", set()):
        return None, {
            "status_unknown": f"the response starts with {AG2_ERROR_PREFIX!r}, as AG2 words "
            f"a failed call's, but '{response.agent}' runs '{function}' from its "
            "function_map, whose executions AG2 does not log: a text the function returned "
            "reads the same"
        }
    return "error", {
        "status_from": f"the response starts with {AG2_ERROR_PREFIX!r}, as AG2 words a "
        "failed call's"
    }


@dataclass
class _Response:
    """A tool call's response as the log shows it in a chat event (``tool_responses``)."""

    call_id: str | None
    """The ``tool_call_id``; None for a legacy ``role: "function"`` reply."""
    name: str | None
    """The function a legacy ``role: "function"`` reply names; None for a tool response."""
    content: Any
    moment: datetime | None
    where: str
    record: dict[str, Any]
    agent: str | None
    """The agent that ran the call: the one whose reply holds the response, or the one a
    received message names as its author (else its sender)."""

    @property
    def field(self) -> str:
        """Where in the message the response is."""
        return "tool_responses" if self.call_id is not None else "the function reply"

    def answers(self, call: ToolCall) -> bool:
        """Is this the response to ``call``: the call with its id, or for a legacy
        function reply, a call with no id to the function it names."""
        if self.call_id is not None:
            return call.id == self.call_id
        return call.id is None and call.name == self.name


def _responses(session: Session, path: Path) -> list[_Response]:
    """Every tool response with a call id and every legacy function reply (``role:
    "function"``, naming its function: AG2's answer to a ``function_call``) that the chat
    events hold, in time order: in a reply an agent's reply function gave
    (``reply_func_executed``: ``generate_tool_calls_reply``'s ``tool_responses``,
    ``generate_function_call_reply``'s message) and in a message an agent received
    (``received_message``: the only place an async chat, whose replies AG2 does not log,
    shows them)."""
    found = []
    for event in session.chat_events:
        state = maybe_json(event.get("json_state"))
        if not isinstance(state, dict):
            continue
        if event.get("event_name") == "reply_func_executed":
            message = state.get("reply")
            what = f"the reply of '{event.get('source_name')}' ({state.get('reply_func_name')})"
            agent = event.get("source_name")
        else:
            message = state.get("message")
            what = f"the message '{event.get('source_name')}' received"
            named = message.get("name") if isinstance(message, dict) else None
            legacy = isinstance(message, dict) and message.get("role") == "function"
            # a function reply's name is its function's
            agent = named if isinstance(named, str) and not legacy else state.get("sender")
        if not isinstance(message, dict):
            continue
        moment = event_time(event, path)
        where = f"{event.get('event_name')} event at {event.get('timestamp')}: {what}"
        ran_by = agent if isinstance(agent, str) and agent else None
        responses = message.get("tool_responses")
        if not isinstance(responses, list):
            if message.get("role") == "function" and isinstance(message.get("name"), str):
                found.append(
                    _Response(
                        None,
                        message["name"],
                        message.get("content"),
                        moment,
                        where,
                        message,
                        ran_by,
                    )
                )
            continue
        for response in responses:
            if isinstance(response, dict) and isinstance(response.get("tool_call_id"), str):
                found.append(
                    _Response(
                        response["tool_call_id"],
                        None,
                        response.get("content"),
                        moment,
                        where,
                        response,
                        ran_by,
                    )
                )
    found.sort(key=lambda r: (r.moment is None, r.moment or datetime.min))
    return found


def _add_responses(
    session: Session,
    steps: list[Step],
    path: Path,
    asked: list[_Asked],
    unlogged: dict[str, set[str]],
) -> None:
    """Attach each tool response the chat events hold that no function call record gives:
    AG2 logs a function's execution only when it returns, so a call that raised has its
    result ("Error: ...") only there. A response goes to the latest earlier step that asked
    for its call id, when that call has no result yet (a function call record's result is
    never repeated); status ``error`` when AG2 worded it as a failure
    (:data:`AG2_ERROR_PREFIX`). ``metadata.tool_responses`` on the step says where each
    came from."""
    for response in _responses(session, path):
        earlier = [
            s
            for s in steps
            if s.started_at is None or response.moment is None or s.started_at <= response.moment
        ]
        step = next(
            (s for s in reversed(earlier) if any(response.answers(c) for c in s.tool_calls)),
            None,
        )
        if step is None:
            _add_unasked(response, steps, asked, unlogged)
            continue
        call = next((c for c in _pending(step) if response.answers(c)), None)
        if call is None:
            continue  # answered already: by a function call record, or an earlier event
        content = text_of(response.content)
        status, said = _judged(response, call.name, unlogged)
        step.tool_results.append(
            ToolResult(call_id=call.id, name=call.name, content=content, status=status)
        )
        position = {c.id: n for n, c in reversed(list(enumerate(step.tool_calls)))}
        if all(r.call_id in position for r in step.tool_results):
            step.tool_results.sort(key=lambda r: position[r.call_id])
        note: dict[str, Any] = {
            "call_id": call.id,
            **({} if response.call_id else {"function": response.name}),
            "taken_from": f"{response.where}, {response.field}; no function_calls record "
            "gives this call's result (AG2 logs an execution only when a function it wrapped "
            "returns)",
            "record": keep_raw(response.record),
            **said,
        }
        step.metadata.setdefault("tool_responses", []).append(note)


def _add_unasked(
    response: _Response, steps: list[Step], asked: list[_Asked], unlogged: dict[str, set[str]]
) -> None:
    """Keep a tool response whose call id no earlier step asked for (the model reply that
    asked is not in the log: a log cut short, a tool call an agent was sent rather than
    one a logged model call wrote) as a ``tool`` step of the agent that ran it, in time
    order, once however many events relay it. Its call's name and arguments are taken
    from the message that asked the agent to run it, when the log holds one."""
    content = text_of(response.content)
    if any(
        r.call_id == response.call_id
        and (response.call_id is not None or (r.name, r.content) == (response.name, content))
        for s in steps
        for r in s.tool_results
    ):
        return  # a relayed copy of a response already kept
    asking = next(
        (
            (request, c)
            for request in reversed(asked)
            if response.moment is None
            or request.moment is None
            or request.moment <= response.moment
            for c in request.calls
            if c["id"] == response.call_id and isinstance(c.get("function"), dict)
        ),
        None,
    )
    call: ToolCall | None = None
    if asking is not None:
        function = asking[1]["function"]
        call = ToolCall(
            id=response.call_id,
            name=str(function.get("name") or "function"),
            arguments=text_of(function.get("arguments")),
        )
    status, said = _judged(response, call.name if call else response.name, unlogged)
    asked_for = (
        f"tool call id {response.call_id!r}"
        if response.call_id is not None
        else f"function {response.name!r} (a legacy function_call)"
    )
    unmatched = (
        f"no step of the log asked for {asked_for} before this response: kept as a tool "
        "step of the agent that ran it"
    )
    inferred: dict[str, Any] = {"attached": unmatched}
    if asking is not None:
        inferred["call_from"] = (
            f"received_message event at {asking[0].timestamp}: the tool calls the agent "
            "was asked to run"
        )
    note: dict[str, Any] = {
        "call_id": response.call_id,
        "taken_from": f"{response.where}, {response.field}",
        "record": keep_raw(response.record),
        **said,
    }
    _insert_in_time(
        steps,
        Step(
            index=len(steps),
            agent=response.agent or "executor",
            role="tool",
            kind="tool",
            content=content,
            tool_calls=[call] if call is not None else [],
            tool_results=[
                ToolResult(
                    call_id=response.call_id,
                    name=call.name if call is not None else response.name,
                    content=content,
                    status=status,
                )
            ],
            started_at=response.moment,
            metadata={"inferred": inferred, "tool_responses": [note]},
        ),
    )
