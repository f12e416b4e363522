"""GBNF grammars that hold a local model's answer to the form a method parses: a real
agent and step, one of a few options, a bounded one-line reason. Only the embedded
llama.cpp model applies them; other backends ignore ``OutputConstraint.gbnf``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from faultfinder.llm.base import OutputConstraint

REASON_MAX_CHARS = 400
"""Longest reason a grammar allows (about 100 tokens): a few sentences."""
REASON_GBNF = f"[A-Za-z] [^\\n]{{0,{REASON_MAX_CHARS - 1}}}"
"""A one-line reason: starts with a letter (a small model otherwise tends to emit endless
digits) and ends within ``REASON_MAX_CHARS`` characters, so a reply's length is bounded by
what the question needs, not by the reply limit."""


def gbnf_literal(text: str) -> str:
    """A GBNF string literal for ``text``."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def gbnf_choice(options: Iterable[str]) -> str:
    return " | ".join(gbnf_literal(o) for o in options)


def agent_step_grammar(agents: Sequence[str], steps: Iterable[int]) -> OutputConstraint:
    """Grammar for the agent/step/reason answer, limited to real agents and steps."""
    grammar = "\n".join(
        [
            'root ::= "Agent Name: " agent "\\nStep Number: " step '
            '"\\nReason for Mistake: " reason',
            f"agent ::= {gbnf_choice(agents)}",
            f"step ::= {gbnf_choice(str(s) for s in steps)}",
            f"reason ::= {REASON_GBNF}",
        ]
    )
    return OutputConstraint(gbnf=grammar)


def choice_grammar(options: Sequence[str], *, then_reason: bool = False) -> OutputConstraint:
    """Grammar for one of ``options`` (optionally followed by a one-line reason)."""
    tail = f' ". " {REASON_GBNF}' if then_reason else ""
    return OutputConstraint(gbnf=f"root ::= ({gbnf_choice(options)}){tail}")
