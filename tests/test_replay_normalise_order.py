"""Matching ignores what programs do not keep stable between runs and the model does not
depend on: the order of the tools offered, and the text of tool call ids (which result
answers which call still counts)."""

from __future__ import annotations

from typing import Any

from faultfinder.replay.matching import Matcher


def tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


def request(
    tools: list[str], ids: tuple[str, str], answers: tuple[str, str], swap: bool = False
) -> dict[str, Any]:
    calls = [
        {"id": ids[0], "type": "function", "function": {"name": "a", "arguments": "{}"}},
        {"id": ids[1], "type": "function", "function": {"name": "b", "arguments": "{}"}},
    ]
    return {
        "model": "m",
        "tools": [tool(n) for n in tools],
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "tool", "tool_call_id": ids[swap], "content": answers[0]},
            {"role": "tool", "tool_call_id": ids[not swap], "content": answers[1]},
        ],
    }


def test_tool_order_and_minted_ids_do_not_change_the_hash() -> None:
    matcher = Matcher()
    base = matcher.hash(request(["x", "y"], ("call_k3j", "call_q9z"), ("1", "2")))
    assert matcher.hash(request(["y", "x"], ("call_k3j", "call_q9z"), ("1", "2"))) == base
    assert matcher.hash(request(["x", "y"], ("fresh_1", "fresh_2"), ("1", "2"))) == base
    # Different tools, swapped results (the pairing of call and result), different
    # results: all still differ.
    assert matcher.hash(request(["x", "z"], ("call_k3j", "call_q9z"), ("1", "2"))) != base
    swapped = request(["x", "y"], ("call_k3j", "call_q9z"), ("1", "2"), swap=True)
    assert matcher.hash(swapped) != base
    assert matcher.hash(request(["x", "y"], ("call_k3j", "call_q9z"), ("1", "3"))) != base
