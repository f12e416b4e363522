"""The demo team's two tools: a fact book lookup and a calculator. Both are pure
functions of their input, so replays of the team are deterministic."""

from __future__ import annotations

import ast
import operator
import re
from typing import Any

FACTS: dict[str, str] = {
    "population of Avalon in 2020": "48210",
    "population of Avalon in 2023": "51377",
    "population of Brigadoon in 2020": "1290",
    "population of Brigadoon in 2023": "1342",
    "distance from Avalon to Brigadoon in km": "342",
    "height of Mount Ember in metres": "2875",
    "founding year of Lyonesse": "1387",
    "ferry ticket price in Lyonesse in crowns": "12",
    "number of islands in the Lyonesse archipelago": "7",
}
"""A fictional fact book, so no model can answer from memory."""

LATEST_YEAR = "2023"
"""Queries that name no year get the latest figure (the trap the demo orchestrator falls in)."""

NOT_FOUND = "NOT FOUND"

_WORD = re.compile(r"[a-z0-9]+")
_STOP = {"the", "of", "in", "a", "an", "up", "look", "find", "what", "is", "was", "to", "from"}
_OPTIONAL = {"km", "metres", "crowns", "number"}
"""Key words a query may leave out (units)."""


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def lookup(query: str) -> str:
    """The fact whose key shares the most words with ``query`` (all of the key's words but a
    year must appear); without a year, the latest year's figure."""
    asked = _words(query)
    best: tuple[int, str] | None = None
    for key, value in FACTS.items():
        key_words = _words(key)
        years = {w for w in key_words if re.fullmatch(r"\d{4}", w)}
        if not (key_words - years - _OPTIONAL) <= asked:
            continue
        asked_years = {w for w in asked if re.fullmatch(r"\d{4}", w)}
        if years and asked_years and not years & asked_years:
            continue
        if years and not asked_years and LATEST_YEAR not in years:
            continue
        score = len(key_words & asked)
        if best is None or score > best[0]:
            best = (score, f"{key}: {value}")
    return best[1] if best else f"{NOT_FOUND}: nothing in the fact book matches '{query}'"


_OPERATORS: dict[type[Any], Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        right = _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 100:
            raise ValueError("exponent too large")
        return float(_OPERATORS[type(node.op)](_evaluate(node.left), right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return float(_OPERATORS[type(node.op)](_evaluate(node.operand)))
    raise ValueError("only numbers and + - * / ** ( ) are allowed")


def format_number(value: float) -> str:
    """Integers without a decimal point; others rounded to 4 places."""
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4f}".rstrip("0").rstrip(".")


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression; errors come back as 'ERROR: ...'."""
    cleaned = expression.replace(",", "").replace("×", "*").replace("x", "*").strip()
    try:
        return format_number(_evaluate(ast.parse(cleaned, mode="eval")))
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError) as exc:
        return f"ERROR: cannot evaluate '{expression}': {exc}"


TOOL_SPECS: dict[str, dict[str, Any]] = {
    "lookup": {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a fact up in the team's fact book.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "What to look up."}},
                "required": ["query"],
            },
        },
    },
    "calculate": {
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "Evaluate an arithmetic expression such as '48210 * 3'.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "The expression."}},
                "required": ["expression"],
            },
        },
    },
}


def run_tool(name: str, arguments: dict[str, Any]) -> str:
    """Dispatch a tool call by name."""
    if name == "lookup":
        return lookup(str(arguments.get("query", "")))
    if name == "calculate":
        return calculate(str(arguments.get("expression", "")))
    return f"ERROR: no tool named '{name}'"
