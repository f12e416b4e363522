"""Configuration of the ``agentic`` method."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from faultfinder.judging.method import MethodConfig
from faultfinder.methods.agentic.prompts import PROMPT_VERSION

REPLY_TOKENS = 1024
"""Reply bound of every navigator call: a short thought and one action (a tool name and
its JSON arguments, or the verdict). ``max_output_tokens`` overrides it."""


class AgenticConfig(MethodConfig):
    """Options of the trace navigator (plus those every method honours)."""

    PROMPT_VERSION: ClassVar[str] = PROMPT_VERSION

    action_format: Literal["auto", "tools", "text"] = "auto"
    """'tools': OpenAI-style tool calling; 'text': 'ACTION: tool {json}' lines (with a GBNF
    grammar for constrained models); 'auto': tools when the backend supports them."""
    max_turns: int = Field(default=30, ge=1)
    """Turn budget: model calls before the verdict is forced."""
    token_budget: int | None = Field(default=200_000, ge=1000)
    """Tokens (prompt + completion, all calls) one trace may spend before the verdict is
    forced; None: no limit but the turn budget."""
    max_tool_result_tokens: int = Field(default=2000, ge=100)
    """Longest tool result; longer ones are paged with a marker saying how to read on.
    Lowered to a quarter of the context budget when that is smaller."""
    preview_chars: int = Field(default=100, ge=20)
    """Characters of each step's output shown by list_steps."""
    search_max_hits: int = Field(default=20, ge=1)
    """Matches shown by the search tool."""
    overview_in_prompt: bool = True
    """Put the list_steps overview in the first prompt (saves the model a turn)."""
    grammar: bool = True
    """In the text format, constrain replies with a GBNF grammar (backends that cannot
    apply one ignore it)."""
    warn_turns_left: int = Field(default=3, ge=0)
    """Tell the model how many turns are left once this few remain."""
