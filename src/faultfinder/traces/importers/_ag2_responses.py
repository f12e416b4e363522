"""The tool responses an AG2 log holds only in its chat events (helper of ``_ag2_tools.py``):
a call that raised, a function an agent runs from its ``function_map``, a legacy
``function_call``'s ``role: "function"`` reply, a response with no ``tool_call_id`` (a
Mistral-style call, answered by its place in the reply). Each goes on the call it answers,
or becomes a ``tool`` step of its own when no step of the log asked for it."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from faultfinder.traces.importers._ag2_logs import Session, event_time
from faultfinder.traces.importers._ag2_steps import Answers, Asked, Key, Timeline
from faultfinder.traces.importers._common import text_of
from faultfinder.traces.importers._spans import keep_raw, maybe_json
from faultfinder.traces.schema import Step, ToolCall, ToolResult

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
    """The ``tool_call_id``; None for a legacy ``role: "function"`` reply and a response
    with no id."""
    name: str | None
    """The function a legacy ``role: "function"`` reply names; None for a tool response."""
    content: Any
    moment: datetime | None
    where: str
    record: dict[str, Any]
    agent: str | None
    """The agent that ran the call: the one whose reply holds the response, or the one a
    received message names as its author (else its sender)."""
    place: int | None = None
    """For a tool response with no ``tool_call_id`` (AG2 writes none for a call with no id,
    as a Mistral model's): its place in ``tool_responses``, which AG2 fills in the order of
    the calls it was asked to run; None otherwise."""
    replies: tuple[str, ...] = ()
    """For such a response, the text of every response of its message (how a relayed copy
    of the same reply is told)."""

    @property
    def field(self) -> str:
        """Where in the message the response is."""
        if self.call_id is None and self.place is None:
            return "the function reply"
        return "tool_responses" + (f"[{self.place}]" if self.place is not None else "")

    def answers(self, call: ToolCall) -> bool:
        """Is this the response to ``call``: the call with its id, or for a legacy
        function reply, a call with no id to the function it names."""
        if self.call_id is not None:
            return call.id == self.call_id
        return call.id is None and call.name == self.name

    @property
    def key(self) -> Key:
        """What the calls this response may answer are found by (:class:`Timeline`)."""
        if self.call_id is not None:
            return ("id", self.call_id)
        if self.place is not None:
            return ("place", len(self.replies), self.place)
        return ("name", self.name)

    def asked_by(self, step: Step) -> int | None:
        """The place of the call this response answers among ``step``'s calls, or None
        when the step did not ask for it. A response with no id answers the call at its own
        place in a reply that asked for as many calls, that one with no id."""
        if self.place is None:
            return next((n for n, c in enumerate(step.tool_calls) if self.answers(c)), None)
        calls = step.tool_calls
        fits = len(calls) == len(self.replies) and calls[self.place].id is None
        return self.place if fits else None


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
        replies = tuple(text_of(r.get("content")) if isinstance(r, dict) else "" for r in responses)
        for place, response in enumerate(responses):
            if not isinstance(response, dict):
                continue
            call_id = response.get("tool_call_id")
            if call_id is not None and not isinstance(call_id, str):
                continue  # an id AG2 would not write: not matched to any call
            found.append(
                _Response(
                    call_id,
                    None,
                    response.get("content"),
                    moment,
                    where,
                    response,
                    ran_by,
                    place=None if call_id is not None else place,
                    replies=() if call_id is not None else replies,
                )
            )
    found.sort(key=lambda r: (r.moment is None, r.moment or datetime.min))
    return found


class _Given:
    """The results the steps hold, as a relayed copy of a response is told: by call id,
    or by function name and text for a result with no id."""

    def __init__(self, steps: list[Step]) -> None:
        self._ids: set[str] = set()
        self._unnamed: set[tuple[str | None, str]] = set()
        for step in steps:
            for result in step.tool_results:
                self.add(result)

    def add(self, result: ToolResult) -> None:
        if result.call_id is not None:
            self._ids.add(result.call_id)
        else:
            self._unnamed.add((result.name, result.content))

    def holds(self, response: _Response, content: str) -> bool:
        if response.call_id is not None:
            return response.call_id in self._ids
        return (response.name, content) in self._unnamed


class _Asking:
    """The requests of :func:`asked_calls` (in time order, those of unknown time last),
    each with the call a response may answer, found by the response's call id, or for a
    response with no id, by its place and the number of calls its reply answers."""

    def __init__(self, asked: list[Asked]) -> None:
        self._found: dict[Key, list[tuple[Asked, dict[str, Any]]]] = {}
        self._times: dict[Key, list[datetime]] = {}
        for request in asked:
            keys: dict[Key, dict[str, Any]] = {}
            for place, call in enumerate(request.calls):
                if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
                    continue
                keys.setdefault(("id", call.get("id")), call)
                if call.get("id") is None:
                    keys[("place", len(request.calls), place)] = call
            for key, call in keys.items():
                self._found.setdefault(key, []).append((request, call))
                if request.moment is not None:
                    self._times.setdefault(key, []).append(request.moment)

    def find(self, response: _Response) -> tuple[Asked, dict[str, Any]] | None:
        """The message that asked the agent to run the call ``response`` answers, and the
        call as it wrote it: the latest before the response holding the call's id (one of
        unknown time counts as latest), or for a response with no id, as many calls as
        its reply answers and one with no id at its place."""
        if response.place is not None:
            key: Key = ("place", len(response.replies), response.place)
        else:
            key = ("id", response.call_id)
        found = self._found.get(key, [])
        times = self._times.get(key, [])
        if response.moment is None or len(times) < len(found):
            return found[-1] if found else None
        before = bisect_right(times, response.moment)
        return found[before - 1] if before else None


def add_responses(
    session: Session, timeline: Timeline, path: Path, asked: list[Asked], answers: Answers
) -> None:
    """Attach each tool response the chat events hold that no function call record gives:
    AG2 logs a function's execution only when it returns, so a call that raised has its
    result ("Error: ...") only there. A response goes to the latest earlier step that asked
    for its call (by id; a response with no id by its place), when that call has no result
    yet (a function call record's result is never repeated); status ``error`` when AG2
    worded it as a failure (:data:`AG2_ERROR_PREFIX`). ``metadata.tool_responses`` on the
    step says where each came from."""
    unlogged = _unlogged(session)
    kept: set[tuple[tuple[str, ...], int]] = set()
    given = _Given(timeline.steps())
    asking = _Asking(asked)
    for response in _responses(session, path):
        step, place = next(
            (
                (s, n)
                for s in timeline.latest(response.key, response.moment)
                if (n := response.asked_by(s)) is not None
            ),
            (None, None),
        )
        if step is None or place is None:
            _add_unasked(response, timeline, asking, unlogged, kept, given)
            continue
        pending = dict(answers.pending(step))
        if response.place is None:
            place = next((n for n in pending if response.answers(pending[n])), None)
        call = pending.get(place) if place is not None else None
        if call is None or place is None:
            continue  # answered already: by a function call record, or an earlier event
        content = text_of(response.content)
        status, said = _judged(response, call.name, unlogged)
        result = ToolResult(call_id=call.id, name=call.name, content=content, status=status)
        answers.add(step, place, result)
        given.add(result)
        timeline.answered(step, answers.pending(step))
        note: dict[str, Any] = {"call_id": call.id}
        if response.place is not None:
            note["matched_by"] = (
                f"place: a response with no tool_call_id, at tool_responses[{place}], "
                f"answers the call at tool_calls[{place}]"
            )
        elif response.call_id is None:
            note["function"] = response.name
        note |= {
            "taken_from": f"{response.where}, {response.field}; no function_calls record "
            "gives this call's result (AG2 logs an execution only when a function it wrapped "
            "returns)",
            "record": keep_raw(response.record),
            **said,
        }
        step.metadata.setdefault("tool_responses", []).append(note)


def _add_unasked(
    response: _Response,
    timeline: Timeline,
    asking: _Asking,
    unlogged: dict[str, set[str]],
    kept: set[tuple[tuple[str, ...], int]],
    given: _Given,
) -> None:
    """Keep a tool response whose call no earlier step asked for (the model reply that
    asked is not in the log: a log cut short, a tool call an agent was sent rather than
    one a logged model call wrote) as a ``tool`` step of the agent that ran it, in time
    order, once however many events relay it. Its call's name and arguments are taken
    from the message that asked the agent to run it, when the log holds one."""
    content = text_of(response.content)
    if response.place is not None:
        if (response.replies, response.place) in kept:
            return  # a relayed copy of a reply already kept
        kept.add((response.replies, response.place))
    elif given.holds(response, content):
        return  # a relayed copy of a response already kept
    asked = asking.find(response)
    if asked is not None and response.place is not None and response.place in asked[0].claimed:
        return  # a function call record ran this call: its result is kept with it
    call: ToolCall | None = None
    if asked is not None:
        function = asked[1]["function"]
        call = ToolCall(
            id=response.call_id,
            name=str(function.get("name") or "function"),
            arguments=text_of(function.get("arguments")),
        )
    status, said = _judged(response, call.name if call else response.name, unlogged)
    if response.call_id is not None:
        asked_for = f"tool call id {response.call_id!r}"
    elif response.place is not None:
        asked_for = (
            f"{len(response.replies)} tool calls with no id (this response answering the "
            f"call at place {response.place})"
        )
    else:
        asked_for = f"function {response.name!r} (a legacy function_call)"
    unmatched = (
        f"no step of the log asked for {asked_for} before this response: kept as a tool "
        "step of the agent that ran it"
    )
    inferred: dict[str, Any] = {"attached": unmatched}
    if asked is not None:
        inferred["call_from"] = (
            f"received_message event at {asked[0].timestamp}: the tool calls the agent "
            "was asked to run"
        )
    note: dict[str, Any] = {
        "call_id": response.call_id,
        "taken_from": f"{response.where}, {response.field}",
        "record": keep_raw(response.record),
        **said,
    }
    result = ToolResult(
        call_id=response.call_id,
        name=call.name if call is not None else response.name,
        content=content,
        status=status,
    )
    given.add(result)
    timeline.insert(
        Step(
            index=len(timeline.steps()),
            agent=response.agent or "executor",
            role="tool",
            kind="tool",
            content=content,
            tool_calls=[call] if call is not None else [],
            tool_results=[result],
            started_at=response.moment,
            metadata={"inferred": inferred, "tool_responses": [note]},
        ),
    )
