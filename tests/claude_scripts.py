"""Scripted upstream model for the Anthropic SDK program in tests/fixtures/frameworks/.

The fake upstream hands a reply callable the Messages request in canonical chat form
(system message, ``tool`` messages for ``tool_result`` blocks), so this reads like the
scripts of frameworks_scripts, and makes the same deliberate mistake (the wrong year) for
an edit to fix. The LangGraph program on ChatAnthropic is the supervisor team of
langgraph_team.py and is played by ``frameworks_scripts.langgraph`` itself.
"""

from __future__ import annotations

import json
import re
from typing import Any

from frameworks_scripts import _call_id, _system


def anthropic_sdk(body: dict[str, Any]) -> Any:
    """The Researcher looks up 2019 (the mistake) and reports what it found; the Writer
    states the number in its notes."""
    system, last = _system(body), body["messages"][-1]
    if "Researcher" in system:
        if last.get("role") == "tool":
            return f"Found: {last.get('content')}"
        query = {"query": "population of Avalon in 2019"}
        return {
            "tool_calls": [{"id": "toolu_" + _call_id(body), "name": "lookup", "arguments": query}]
        }
    notes = str(last.get("content") or "").split("Notes:")[-1]
    found = re.findall(r"(\d[\d,]*) inhabitants", notes)
    return found[0] if found else "unknown"


NOTE = "Looking the population up for the year the task asks about."
"""The text DoVer's debugger gives the Researcher's tool-use step."""


def debugger(request: Any) -> str:
    """DoVer's debugging model for the Anthropic SDK program (``--model
    function:claude_scripts:debugger``): it blames the Researcher's first step, the one
    that makes the ``lookup`` call, and gives it new text (the call kept); the demo's
    scripted debugger answers DoVer's other prompts."""
    from faultfinder.demo_team import mock_debugger

    last = request.messages[-1].get("content") if request.messages else ""
    prompt = last if isinstance(last, str) else ""
    if "Agent Name: (Your prediction)" in prompt:
        return "Agent Name: Researcher\nStep Number: 0\nReason for Mistake: wrong year."
    if "Intervention categories:" in prompt:
        return json.dumps(
            {"category": "modified_instruction", "replacement": NOTE, "rationale": "year"}
        )
    return mock_debugger.answer(prompt)
