"""Scripted upstream models for the framework programs in tests/fixtures/frameworks/.

Each plays every agent of one program by rule, reading only the request (system prompt,
last message, tools offered), and makes one deliberate mistake that an edit fixes: the
research looks up the wrong year (2019 instead of 2020). Shared by the framework tests
and bench/replay_frameworks.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

TASK = "What was the population of Avalon in 2020?"
ANSWER = "144,630"
WRONG = "140,210"
TWO_CITIES = "What was the combined population of Avalon and Brigadoon in 2020?"


def _system(body: dict[str, Any]) -> str:
    return "\n".join(
        str(m.get("content") or "") for m in body["messages"] if m.get("role") == "system"
    )


def _tools(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]


def _first_number(text: str) -> str:
    found = re.findall(r"\d[\d,]*", text)
    return found[0] if found else "unknown"


def _call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": json.dumps(arguments)}


def _call_id(body: dict[str, Any], suffix: str = "") -> str:
    # Unique per request, as the API's ids are, and a function of the request only.
    return f"call_{len(body['messages'])}_{len(_system(body))}{suffix}"


def _last_call(body: dict[str, Any]) -> str:
    """The name of the tool the last assistant message called ('' if none)."""
    for message in reversed(body["messages"]):
        if message.get("role") == "assistant":
            calls = message.get("tool_calls") or [{}]
            return str((calls[-1].get("function") or {}).get("name", ""))
    return ""


def _text(content: Any) -> str:
    """A message's text, whether a string or a list of parts."""
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return str(content or "")


def _instruction(body: dict[str, Any]) -> str | None:
    """What an earlier agent's message asked to look up ("Look up: ..."), if any."""
    for message in reversed(body["messages"]):
        text = _text(message.get("content")) if message.get("role") == "assistant" else ""
        if "Look up:" in text:
            return text.split("Look up:")[-1].strip().splitlines()[0]
    return None


def agents_sdk(body: dict[str, Any]) -> Any:
    """Triage hands off (no text); the Researcher looks up 2019 (the mistake), or what
    Triage's message said to look up when it says so, and reports the number."""
    system, last = _system(body), body["messages"][-1]
    if "Triage" in system:
        handoff = next(n for n in _tools(body) if n.startswith("transfer_to"))
        return {"tool_calls": [_call(handoff, {}, _call_id(body))]}
    if last.get("role") == "tool" and _last_call(body) == "lookup":
        return _first_number(str(last.get("content")))
    query = _instruction(body) or "population of Avalon in 2019"
    return {"tool_calls": [_call("lookup", {"query": query}, _call_id(body))]}


def langgraph(body: dict[str, Any]) -> Any:
    """The Supervisor delegates research, then the sum, then answers; the Researcher looks
    both cities up in parallel (Brigadoon in 2019: the mistake); the Calculator adds."""
    system, messages = _system(body), body["messages"]
    last = messages[-1]
    text = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") != "system")
    if "Supervisor" in system:
        tools = _tools(body)
        if "Sum:" in text:
            return _first_number(text.split("Sum:")[-1])
        if "inhabitants" in text:
            handoff = next(n for n in tools if "calculator" in n)
        else:
            handoff = next(n for n in tools if "researcher" in n)
        return {"tool_calls": [_call(handoff, {}, _call_id(body))]}
    if "Researcher" in system:
        if last.get("role") == "tool" and _last_call(body) == "lookup":
            results = [
                str(m["content"]) for m in messages[-2:] if "inhabitants" in str(m["content"])
            ]
            return " ".join(results)
        return {
            "tool_calls": [
                _call("lookup", {"query": "population of Avalon in 2020"}, _call_id(body, "a")),
                _call("lookup", {"query": "population of Brigadoon in 2019"}, _call_id(body, "b")),
            ]
        }
    # Calculator
    if last.get("role") == "tool" and _last_call(body) == "add":
        return f"Sum: {last.get('content')}"
    numbers = [float(n.replace(",", "")) for n in re.findall(r"(\d[\d,]*) inhabitants", text)]
    return {"tool_calls": [_call("add", {"numbers": numbers}, _call_id(body))]}


def ag2_groupchat(body: dict[str, Any]) -> Any:
    """Speaker selection: Planner, then Researcher, then Writer. The Planner asks for 2019
    (the mistake); the Researcher looks up what was planned; the Writer states it."""
    system, messages = _system(body), body["messages"]
    text = "\n".join(str(m.get("content") or "") for m in messages)
    last = messages[-1]
    if "select the next role" in text.lower() or "role play" in system.lower():
        said = "\n".join(str(m.get("content") or "") for m in messages[1:])
        if "Look up:" not in said:
            return "Planner"
        if "inhabitants" not in said:
            return "Researcher"
        return "Writer"
    if "Planner" in system:
        return "Look up: population of Avalon in 2019"
    if "Researcher" in system:
        if last.get("role") == "tool":
            return f"Result: {last.get('content')}"
        query = text.split("Look up:")[-1].strip().splitlines()[0]
        return {"tool_calls": [_call("lookup", {"query": query}, _call_id(body))]}
    if "Writer" in system:
        found = re.findall(r"(\d[\d,]*) inhabitants", text)
        return f"{found[-1] if found else 'unknown'} TERMINATE"
    return "TERMINATE"


def crewai(body: dict[str, Any]) -> Any:
    """The Researcher looks up 2019 (the mistake) with a native tool call and reports what
    it found; the Writer states the number in CrewAI's 'Final Answer:' format."""
    system, messages = _system(body), body["messages"]
    last = messages[-1]
    if "Researcher" in system:
        if last.get("role") == "tool":
            return f"Final Answer: {last.get('content')}"
        query = {"query": "population of Avalon in 2019"}
        return {"tool_calls": [_call("lookup", query, _call_id(body))]}
    text = "\n".join(str(m.get("content") or "") for m in messages)
    found = re.findall(r"(\d[\d,]*) inhabitants", text)
    answer = found[-1] if found else "unknown"
    return f"Thought: I now know the final answer\nFinal Answer: {answer}"


def crewai_react(body: dict[str, Any]) -> Any:
    """tests/fixtures/frameworks/crewai_react_team.py: :func:`crewai` on CrewAI's ReAct-text
    path (no ``tools`` in the request). The Researcher writes an Action looking up 2019
    (the mistake) and, once CrewAI feeds the Observation back, states it; the Writer
    states the number."""
    system, messages = _system(body), body["messages"]
    said = "\n".join(_text(m.get("content")) for m in messages if m.get("role") != "system")
    if "Researcher" in system:
        if "Observation:" in said:
            found = said.split("Observation:")[-1].strip().splitlines()[0]
            return f"Thought: I now know the final answer\nFinal Answer: {found}"
        query = json.dumps({"query": "population of Avalon in 2019"})
        return f"Thought: I should look this up\nAction: lookup\nAction Input: {query}"
    found = re.findall(r"(\d[\d,]*) inhabitants", said)
    answer = found[-1] if found else "unknown"
    return f"Thought: I now know the final answer\nFinal Answer: {answer}"


def _delegation(body: dict[str, Any]) -> dict[str, Any]:
    """The arguments of the last coworker tool call in ``body``'s history."""
    for message in reversed(body["messages"]):
        for call in reversed(message.get("tool_calls") or []):
            if "coworker" in str((call.get("function") or {}).get("name")):
                return dict(json.loads(call["function"]["arguments"]))
    return {}


def crewai_hierarchical(body: dict[str, Any]) -> Any:
    """tests/fixtures/frameworks/crewai_hierarchical_team.py: CrewAI's manager delegates
    the lookup to the Researcher asking for 2019 (the mistake), then asks the Writer to
    state what came back, then answers with it. The Researcher looks up the year its task
    names; the Writer states the number its context holds."""
    system, messages = _system(body), body["messages"]
    last = messages[-1]
    said = "\n".join(_text(m.get("content")) for m in messages if m.get("role") != "system")
    if "Crew Manager" in system:
        if last.get("role") != "tool":
            task = "Look up the population of Avalon in 2019"
            arguments = {"task": task, "context": TASK, "coworker": "Researcher"}
            return {"tool_calls": [_call("delegate_work_to_coworker", arguments, _call_id(body))]}
        if _delegation(body).get("coworker") == "Researcher":
            arguments = {
                "question": "What is the number, as digits only?",
                "context": _text(last.get("content")),
                "coworker": "Writer",
            }
            return {"tool_calls": [_call("ask_question_to_coworker", arguments, _call_id(body))]}
        return _first_number(_text(last.get("content")))
    if "Researcher" in system:
        if last.get("role") == "tool":
            return _text(last.get("content"))
        year = re.findall(r"\b(20\d\d)\b", said.split("Current Task:")[-1])
        query = {"query": f"population of Avalon in {year[0] if year else 'unknown'}"}
        return {"tool_calls": [_call("lookup", query, _call_id(body))]}
    found = re.findall(r"(\d[\d,]*) inhabitants", said)
    return found[-1] if found else "unknown"


def mixed(body: dict[str, Any]) -> Any:
    """tests/fixtures/apis/mixed_apis.py, whatever API each agent speaks (the fake hands
    every request over in canonical chat form): the Planner names the lookup with the
    wrong year (the mistake), the Researcher looks up what it was asked with a tool and
    reports the number, the Writer states it."""
    system, last = _system(body), body["messages"][-1]
    text = str(last.get("content") or "")
    if "Planner" in system:
        return "population of Avalon in 2019"
    if "Researcher" in system:
        if last.get("role") == "tool":
            return _first_number(text)
        query = text.split("Look up:")[-1].strip()
        return {"tool_calls": [_call("lookup", {"query": query}, _call_id(body))]}
    return _first_number(text)


FIX = "Look up: population of Avalon in 2020"
"""The instruction the debugger writes into a step that hands off."""


def _prompt(request: Any) -> str:
    last = request.messages[-1].get("content") if request.messages else ""
    return last if isinstance(last, str) else ""


def debugger(request: Any) -> str:
    """DoVer's debugging model for these programs: the demo's scripted debugger, except
    that its intervention states the right answer (the demo's rules only know the demo
    team's messages), or, for a step that makes tool calls (a handoff), instructs the next
    agent to look up the right year, or, for a ReAct step ("Action Input:"), corrects the
    year its action looks up. ``--model function:frameworks_scripts:debugger``."""
    from faultfinder.demo_team import mock_debugger

    prompt = _prompt(request)
    if "Intervention categories:" in prompt:
        tool_step = "tool calls (a handoff" in prompt
        original = prompt.split("<<<\n", 1)[-1].split("\n>>>", 1)[0]
        if "Action Input:" in original:
            # A ReAct step (CrewAI without function calling): its format kept, as the
            # prompt asks, and the action's year corrected.
            replacement = original.replace("2019", "2020")
        else:
            replacement = FIX if tool_step else ANSWER
        return json.dumps(
            {
                "category": "modified_instruction",
                "replacement": replacement,
                "rationale": "ask for the 2020 figure",
            }
        )
    return mock_debugger.answer(prompt)


def redirecting_debugger(request: Any) -> str:
    """:func:`debugger`, but its intervention hands the step's first call off to another
    agent when the prompt offers one (the first it names)."""
    prompt = _prompt(request)
    found = re.search(r"- call (\d+) could call instead: ([\w-]+)", prompt)
    if "Intervention categories:" not in prompt or found is None:
        return debugger(request)
    return json.dumps(
        {
            "category": "plan_update",
            "replacement": "Over to you.",
            "rationale": "the wrong agent was chosen",
            "redirect": {"call": int(found.group(1)), "to": found.group(2)},
        }
    )


def _said(body: dict[str, Any]) -> str:
    """Everything but the system prompt, as text (tool results and calls included)."""
    parts = []
    for message in body["messages"]:
        if message.get("role") not in ("system", "developer"):
            parts.append(_text(message.get("content")))
            for call in message.get("tool_calls") or []:
                parts.append(str((call.get("function") or {}).get("arguments", "")))
    return "\n".join(parts)


def autogen_selector(body: dict[str, Any]) -> Any:
    """tests/fixtures/frameworks/autogen_selector_team.py: AutoGen AgentChat's selector
    picks the Planner, then the Researcher, then the Writer (reading the history its
    prompt quotes). The Planner asks for 2019 (the mistake); the Researcher looks up what
    the plan says; the Writer states the number and TERMINATE."""
    system, said = _system(body), _said(body)
    if "select the next role" in system:
        history = system.split("conversation.")[1] if "conversation." in system else system
        if "Look up:" not in history:
            return "Planner"
        return "Researcher" if "inhabitants" not in history else "Writer"
    if "Planner" in system:
        return "Look up: population of Avalon in 2019"
    if "Researcher" in system:
        query = said.split("Look up:")[-1].strip().splitlines()[0]
        return {"tool_calls": [_call("lookup", {"query": query}, _call_id(body))]}
    found = re.findall(r"(\d[\d,]*) inhabitants", said)
    return f"{found[-1] if found else 'unknown'} TERMINATE"


def pydantic_ai_delegation(body: dict[str, Any]) -> Any:
    """tests/fixtures/frameworks/pydantic_ai_delegation.py, on Chat Completions or
    Responses (the fake hands both over in chat form): the Coordinator asks its research
    tool for 2019 (the mistake) and answers with the number the tool returns; the
    Researcher looks up the question it was given and reports what it found."""
    system, last = _system(body), body["messages"][-1]
    if "Coordinator" in system:
        if last.get("role") == "tool":
            return _first_number(_text(last.get("content")))
        question = {"question": "population of Avalon in 2019"}
        return {"tool_calls": [_call("research", question, _call_id(body))]}
    if last.get("role") == "tool":
        return _text(last.get("content"))
    return {"tool_calls": [_call("lookup", {"query": _text(last.get("content"))}, _call_id(body))]}
