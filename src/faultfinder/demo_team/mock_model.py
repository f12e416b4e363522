"""A scripted stand-in for a model, playing the demo team's three agents by rule.

It is a test double, not a model: it reads the demo team's prompts and answers the way
the task table (:mod:`faultfinder.demo_team.tasks`) scripts, including the scripted
mistakes. It follows instructions faithfully, so an edited plan or instruction changes
what happens next, which is what makes replays of the demo meaningful offline.

Use it as:

- a reply callable for :class:`faultfinder.testing.FakeOpenAIServer` (:func:`reply`);
- a faultfinder model, e.g. ``faultfinder serve-local --model
  function:faultfinder.demo_team.mock_model:respond`` (:func:`respond`).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from faultfinder.demo_team.tasks import find_task
from faultfinder.demo_team.team import REPLAN_MARKER
from faultfinder.demo_team.tools import NOT_FOUND
from faultfinder.llm.base import ChatRequest

_PLAN_LINE = re.compile(r"^\s*\d+\s*[.)]\s*(Researcher|Calculator)\s*:\s*(.+?)\s*$", re.I | re.M)
_RESULT_REF = re.compile(r"\[result of step (\d+)\]", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_TASK_LINE = re.compile(r"^Task:\s*(.+)$", re.MULTILINE)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def _call_id(seed: str) -> str:
    return "call_" + hashlib.sha256(seed.encode()).hexdigest()[:10]


def _task_text(messages: list[dict[str, Any]]) -> str:
    for message in messages:
        if message.get("role") != "user":
            continue
        text = _text(message)
        found = _TASK_LINE.search(text)
        if found:
            return found.group(1).strip()
        if text.startswith(REPLAN_MARKER):
            return text.split("\n", 2)[1].strip()
    return ""


def _last_number(text: str) -> str | None:
    numbers = _NUMBER.findall(text.replace(",", ""))
    return numbers[-1] if numbers else None


def orchestrator(messages: list[dict[str, Any]]) -> str:
    """The Orchestrator's reply: a plan, the next plan line, or the final answer."""
    prompt = _text(messages[-1])
    expected = re.search(r"Expected output of this step:\s*(.+)", prompt, re.DOTALL)
    if expected and expected.group(1).strip() != "(unspecified)":
        # A faithful model does what a reviewer's note asks.
        return expected.group(1).strip()
    task = find_task(_task_text(messages))
    if "Write a short plan" in prompt or "Write a new plan" in prompt:
        if task is None:
            return f"PLAN:\n1. Researcher: Look up {_task_text(messages)}"
        plan = task.mock_plan
        if "Write a new plan" in prompt and task.mock_replan:
            plan = task.mock_replan
        return "PLAN:\n" + plan
    plan_at = max(
        (
            i
            for i, m in enumerate(messages)
            if m.get("role") == "assistant" and _text(m).strip().startswith("PLAN")
        ),
        default=None,
    )
    if plan_at is None:
        return "FINAL: unknown"
    lines = _PLAN_LINE.findall(_text(messages[plan_at]))
    issued = sum(
        1
        for m in messages[plan_at + 1 :]
        if m.get("role") == "assistant" and _text(m).strip().upper().startswith("NEXT")
    )
    ledger = [line for line in prompt.splitlines() if line.startswith("- ")]
    recent = ledger[len(ledger) - issued :] if issued else []
    if issued < len(lines):
        worker, instruction = lines[issued]

        def fill(match: re.Match[str]) -> str:
            n = int(match.group(1))
            if 1 <= n <= len(recent):
                return _last_number(recent[n - 1].split("):", 1)[-1]) or match.group(0)
            return match.group(0)

        return f"NEXT: {worker.capitalize()} | {_RESULT_REF.sub(fill, instruction)}"
    if not ledger:
        return "FINAL: unknown"
    last = ledger[-1].split("):", 1)[-1]
    return f"FINAL: {_last_number(last) or last.strip()}"


def _instruction(messages: list[dict[str, Any]]) -> str:
    """A worker's instruction: its first user message (later notes are not instructions
    this scripted worker understands)."""
    return next((_text(m) for m in messages if m.get("role") == "user"), "")


def _tool_result(messages: list[dict[str, Any]], tool: str) -> str | None:
    """The latest tool result in the conversation, if any."""
    for message in reversed(messages):
        if message.get("role") == "tool":
            return _text(message).strip()
        if message.get("role") == "user" and _text(message).startswith(f"{tool} result:"):
            return _text(message).removeprefix(f"{tool} result:").strip()
    return None


def researcher(messages: list[dict[str, Any]], tools: bool) -> dict[str, Any]:
    """Look the instruction up, then report what the fact book said."""
    last = _tool_result(messages, "lookup")
    if last is not None:
        if NOT_FOUND in last:
            return {"text": "NOT FOUND: the fact book has no such entry."}
        return {"text": f"The fact book says: {last}"}
    instruction = _instruction(messages)
    query = re.sub(r"^\s*(look up|find)\s+", "", instruction, flags=re.IGNORECASE).rstrip(".")
    if not tools:
        return {"text": f"lookup: {query}"}
    return {
        "tool_calls": [
            {
                "id": _call_id(instruction),
                "name": "lookup",
                "arguments": json.dumps({"query": query}),
            }
        ]
    }


def calculator(messages: list[dict[str, Any]], tools: bool) -> dict[str, Any]:
    """Turn the instruction into an expression (misreading 'percent'), then report."""
    last = _tool_result(messages, "calculate")
    if last is not None:
        return {"text": f"The result is {last}"}
    instruction = _instruction(messages)
    if "percent" in instruction.lower():
        # The scripted weakness: 'x percent of y' computed as x * y.
        numbers = _NUMBER.findall(instruction.replace(",", ""))
        expression = " * ".join(numbers[:2]) if len(numbers) >= 2 else instruction
    else:
        body = re.sub(r"^\s*(compute|calculate|evaluate)\s*:?\s*", "", instruction, flags=re.I)
        expression = "".join(ch for ch in body if ch in "0123456789.+-*/() ").strip()
    if not tools:
        return {"text": f"calculate: {expression}"}
    return {
        "tool_calls": [
            {
                "id": _call_id(instruction),
                "name": "calculate",
                "arguments": json.dumps({"expression": expression}),
            }
        ]
    }


def reply(body: dict[str, Any]) -> dict[str, Any]:
    """Answer one chat-completion request body (FakeOpenAIServer's reply callable)."""
    messages = list(body.get("messages") or [])
    system = next((_text(m) for m in messages if m.get("role") == "system"), "")
    tools = bool(body.get("tools"))
    if "You are the Orchestrator" in system:
        return {"text": orchestrator(messages)}
    if "You are the Researcher" in system:
        return researcher(messages, tools)
    if "You are the Calculator" in system:
        return calculator(messages, tools)
    return {"text": "The demo model only plays the demo team's agents."}


def respond(request: ChatRequest) -> dict[str, Any]:
    """Answer one faultfinder ChatRequest (for ``--model function:...:respond``)."""
    return reply({"messages": request.messages, "tools": request.tools})
