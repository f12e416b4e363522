"""How an AG2 log's tool runs reach the steps that asked for them (helper of ``ag2.py``).

A ``function_calls`` record is attached to the step whose reply asked for it: by the call
id the executing agent's ``received_message`` event lists, else by function name and
arguments, else by position (``metadata.function_call_matches`` says which). A call that
raised has no such record; its ``Error: ...`` response is taken from the chat events'
``tool_responses`` (``_ag2_responses.py``, ``metadata.tool_responses``). A tool run no step
asked for (its model call is not in the log) becomes a ``tool`` step of its own, with the
call id and function name the log shows.
"""

from __future__ import annotations

from bisect import bisect_right
from datetime import datetime
from pathlib import Path
from typing import Any

from faultfinder.traces.importers._ag2_logs import Session
from faultfinder.traces.importers._ag2_responses import add_responses
from faultfinder.traces.importers._ag2_steps import (
    Answers,
    Asked,
    Timeline,
    asked_calls,
    who,
)
from faultfinder.traces.importers._common import text_of
from faultfinder.traces.importers._spans import keep_raw, maybe_json, parse_time
from faultfinder.traces.schema import Step, ToolCall, ToolResult


def attach_tool_runs(session: Session, steps: list[Step], path: Path) -> None:
    """Every tool run of ``session`` on the step that asked for it: the function call
    records in time order, then the responses only the chat events hold."""
    asked = asked_calls(session, path)
    answers = Answers()
    timeline = Timeline(steps)
    for step in steps:
        timeline.answered(step, answers.pending(step))
    by_agent = _ByAgent(asked)
    for call in sorted(session.calls, key=lambda c: str(c.get("timestamp") or "")):
        _attach(call, timeline, path, by_agent, answers)
    add_responses(session, timeline, path, asked, answers)
    steps[:] = timeline.ordered()


class _ByAgent:
    """The requests of :func:`asked_calls` (in time order, those of unknown time last) by
    the agent asked, with the times of those whose time is known."""

    def __init__(self, asked: list[Asked]) -> None:
        self.requests: dict[str, list[Asked]] = {}
        self.times: dict[str, list[datetime]] = {}
        for request in asked:
            self.requests.setdefault(request.agent, []).append(request)
            if request.moment is not None:
                self.times.setdefault(request.agent, []).append(request.moment)

    def last(self, agent: str, moment: datetime | None) -> Asked | None:
        """The last request ``agent`` received at or before ``moment`` (the last of all
        when a time is unknown: every request of unknown time counts as before)."""
        requests = self.requests.get(agent, [])
        times = self.times.get(agent, [])
        if moment is None:
            return requests[-1] if requests else None
        before = bisect_right(times, moment)
        if before == len(times):
            return requests[-1] if requests else None
        return requests[before - 1] if before else None


def _asked_call(
    record: dict[str, Any], moment: datetime | None, by_agent: _ByAgent
) -> tuple[dict[str, Any], str] | None:
    """The tool call a function call record ran, as the message that asked the executing
    agent to run it wrote it (its id, when it has one, and its function's name), and where
    it was read: among the calls the agent last received before running it, the first not
    yet matched whose arguments (and name, when logged) are the record's. None when the log
    does not show it."""
    name = record.get("function_name")
    args = maybe_json(record.get("args", record.get("input_args")))
    latest = by_agent.last(who(record), moment)
    if latest is None:
        return None
    for position, call in enumerate(latest.calls):
        function = call.get("function") if isinstance(call, dict) else None
        if position in latest.claimed or not isinstance(function, dict):
            continue
        if name and function.get("name") != name:
            continue
        if maybe_json(function.get("arguments")) == args:
            latest.claimed.add(position)
            return call, (
                f"received_message event at {latest.timestamp}: the tool calls "
                f"'{record.get('source_name')}' was asked to run, the first not yet matched "
                f"with the arguments{' and name' if name else ''} this function call logged"
            )
    return None


def _by_name_and_arguments(
    step: Step, name: str, args: Any, answers: Answers
) -> tuple[int, ToolCall, str] | None:
    """The step's first unanswered call to ``name`` (any name when unknown) with the
    arguments an execution logged, else its first unanswered call to ``name``, and the
    rule that chose it."""
    pending = [(n, c) for n, c in answers.pending(step) if not name or c.name == name]
    if not pending:
        return None
    same = next(((n, c) for n, c in pending if maybe_json(c.arguments) == args), None)
    if same is not None:
        return *same, "function name and arguments" if name else "arguments"
    return *pending[0], "function name" if name else "position"


def _attach(
    record: dict[str, Any], timeline: Timeline, path: Path, by_agent: _ByAgent, answers: Answers
) -> None:
    """Attach one function execution to the step that asked for it: by the call id of the
    tool call the executing agent was asked to run, when the log shows it (AG2 logs no id
    with the execution itself); else to the latest earlier step with a call still
    unanswered, the one with the execution's arguments first (matched by name when the log
    has it: the file logger does not write it, but the message that asked names it).
    ``metadata.function_call_matches`` on the step says which."""
    args = maybe_json(record.get("args", record.get("input_args")))
    result = maybe_json(record.get("returns"))
    moment = parse_time(record.get("timestamp"), path=path, where="function_calls.timestamp")
    found = _asked_call(record, moment, by_agent)
    asked_id = found[0].get("id") if found is not None else None
    asked_id = asked_id if isinstance(asked_id, str) else None
    asked_name = found[0]["function"].get("name") if found is not None else None
    name = str(record.get("function_name") or asked_name or "")
    target: Step | None = None
    chosen: tuple[int, ToolCall] | None = None
    match: dict[str, Any] = {}
    if found is not None and asked_id is not None:
        for step in timeline.latest(("id", asked_id), moment):
            chosen = next(((n, c) for n, c in answers.pending(step) if c.id == asked_id), None)
            if chosen is not None:
                target = step
                match = {"matched_by": "call id", "call_id": asked_id, "call_id_from": found[1]}
                break
    if target is None:
        for step in timeline.latest(("function", name) if name else ("any",), moment):
            picked = _by_name_and_arguments(step, name, args, answers)
            if picked is not None:
                target, chosen = step, picked[:2]
                match = {"matched_by": f"{picked[2]}: the latest earlier unanswered call"}
                if found is not None and name and not record.get("function_name"):
                    match["function_name_from"] = found[1]
                break
    if target is None or chosen is None:
        # The id and name the executing agent was asked to run it under, when the log
        # shows them: kept, so that the call's response in the chat events finds this step.
        inferred: dict[str, Any] = {"attached": "no earlier step asked for this function"}
        if found is not None:
            inferred["call_id_from" if asked_id else "call_from"] = found[1]
        timeline.insert(
            Step(
                index=len(timeline.steps()),
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
    place, call = chosen
    answers.add(
        target,
        place,
        ToolResult(
            call_id=call.id, name=name or call.name, content=text_of(result), status="success"
        ),
    )
    timeline.answered(target, answers.pending(target))
    target.metadata.setdefault("executed_by", []).append(record.get("source_name"))
    target.metadata.setdefault("function_calls", []).append(keep_raw(record))
    target.metadata.setdefault("function_call_matches", []).append(match)
