"""Tool calls written as ReAct text, and their results, on the steps that asked (helper of
``_semconv.py``).

An agent whose model takes no ``tools`` (CrewAI with ``supports_function_calling()``
False, say) writes its tool call as text ending in ``Action: NAME`` and ``Action Input:
ARGS``; the framework runs the tool and sends the reply back in the agent's next model call
with ``Observation: RESULT`` appended. No tool span records it (OpenInference's CrewAI
instrumentation writes none on this path), so the call and its result are read from that
text: the step whose reply names the action gets the call (its arguments as written) and,
when the same agent's next model call echoes that reply followed by ``Observation:``, the
result. An agent step (an agent span with no model call under it) gets the actions and
observations of the conversation it carries. A step that already has tool calls (from the
model's tool calls or tool spans) is left alone. ``metadata.react`` says where each came
from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from faultfinder.traces.schema import Step, ToolCall, ToolResult

ACTION = "Action:"
ACTION_INPUT = "Action Input:"
OBSERVATION = "Observation:"
CREWAI_REMINDER = (
    "\n\n\nYou ONLY have access to the following tools, and should NEVER make up tools "
    "that are not listed here:\n"
)
"""How CrewAI's reminder of the tools and the ReAct format opens: it appends it to the
tool's result every few uses (``ToolUsage._remember_format``); the result ends there."""


@dataclass
class Action:
    """One ReAct action as written: the tool's name, its arguments, and the observation
    that follows it in the same text (None when none does)."""

    name: str
    arguments: str
    observation: str | None


def _line_start(text: str, word: str, start: int = 0) -> int | None:
    """Where ``word`` first opens a line of ``text`` at or after ``start``."""
    at = text.find(word, start)
    while at > 0 and text[at - 1] != "\n":
        at = text.find(word, at + 1)
    return at if at >= 0 else None


def react_action(text: str) -> Action | None:
    """The first ``Action:`` line of ``text`` followed by an ``Action Input:`` line (as
    CrewAI's parser reads a reply), with the ``Observation:`` after it; else None."""
    at = _line_start(text, ACTION)
    if at is None:
        return None
    name, _, rest = text[at + len(ACTION) :].partition("\n")
    rest = rest.lstrip("\n")
    if not name.strip() or not rest.startswith(ACTION_INPUT):
        return None
    rest = rest[len(ACTION_INPUT) :]
    cut = _line_start(rest, OBSERVATION)
    if cut is None:
        return Action(name.strip(), rest.strip(), None)
    return Action(name.strip(), rest[:cut].strip(), rest[cut + len(OBSERVATION) :])


def observation_after(echo: Any, reply: str) -> str | None:
    """The observation appended to ``reply`` in ``echo`` (an assistant message's content),
    when ``echo`` is ``reply`` followed by ``Observation:``; else None."""
    head = reply.rstrip()
    if not isinstance(echo, str) or not head or not echo.startswith(head):
        return None
    rest = echo[len(head) :].lstrip()
    return rest[len(OBSERVATION) :] if rest.startswith(OBSERVATION) else None


def _result(observation: str, note: dict[str, Any]) -> str:
    """The tool's result in an observation: without CrewAI's reminder (noted in ``note``;
    the message that carried it keeps it)."""
    cut = observation.find(CREWAI_REMINDER)
    if cut >= 0:
        observation = observation[:cut]
        note["crewai_reminder_removed"] = True
    return observation.strip()


def attach_react(steps: list[Step], agent_steps: set[int]) -> None:
    """Put the ReAct tool calls and results of ``steps`` (canonically indexed) on the steps
    that asked; ``agent_steps``: ``id()`` of the steps made of agent spans."""
    next_of_agent: dict[str, int] = {}
    following: dict[int, int] = {}
    for position in range(len(steps) - 1, -1, -1):
        agent = steps[position].agent
        if agent in next_of_agent:
            following[position] = next_of_agent[agent]
        next_of_agent[agent] = position
    for position, step in enumerate(steps):
        if step.kind != "llm" or step.tool_calls or step.tool_results:
            continue
        if id(step) in agent_steps:
            _from_conversation(step)
            continue
        action = react_action(step.content)
        if action is None:
            continue
        note: dict[str, Any] = {"action_from": "the step's reply ('Action:', 'Action Input:')"}
        step.tool_calls.append(ToolCall(name=action.name, arguments=action.arguments))
        later = steps[following[position]] if position in following else None
        found = _echoed(step, later) if later is not None else None
        if later is not None and found is not None:
            step.tool_results.append(ToolResult(name=action.name, content=_result(found, note)))
            note["observation_from"] = (
                f"input of step {later.index} (span {later.metadata.get('span_id')}): this "
                "reply echoed with 'Observation:' appended"
            )
        step.metadata["react"] = note


def _echoed(step: Step, later: Step) -> str | None:
    for message in later.input_messages or []:
        if message.get("role") == "assistant":
            found = observation_after(message.get("content"), step.content)
            if found is not None:
                return found
    return None


def _from_conversation(step: Step) -> None:
    """An agent step's own actions and their observations, from the conversation it
    carries (each in one assistant message: the reply, then ``Observation:``)."""
    note: dict[str, Any] = {
        "action_from": "assistant messages of the agent's conversation ('Action:', "
        "'Action Input:', then 'Observation:' with the tool's result)"
    }
    for message in step.input_messages or []:
        content = message.get("content")
        if message.get("role") != "assistant" or not isinstance(content, str):
            continue
        action = react_action(content)
        if action is None or action.observation is None:
            continue
        step.tool_calls.append(ToolCall(name=action.name, arguments=action.arguments))
        result = _result(action.observation, note)
        step.tool_results.append(ToolResult(name=action.name, content=result))
    if step.tool_calls:
        step.metadata["react"] = note
