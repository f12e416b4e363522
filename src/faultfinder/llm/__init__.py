"""The LLM layer: one interface, several backends, and the bookkeeping methods rely on."""

from faultfinder.llm.base import (
    Backend,
    ChatRequest,
    Completion,
    OutputConstraint,
    TransientLLMError,
)
from faultfinder.llm.client import LLM, ParseError, Reply
from faultfinder.llm.doubles import FunctionBackend, ScriptedBackend
from faultfinder.llm.registry import make_backend
from faultfinder.llm.scopes import CallRecord, UsageScope, run_index, track_usage

__all__ = [
    "LLM",
    "Backend",
    "CallRecord",
    "ChatRequest",
    "Completion",
    "FunctionBackend",
    "OutputConstraint",
    "ParseError",
    "Reply",
    "ScriptedBackend",
    "TransientLLMError",
    "UsageScope",
    "make_backend",
    "run_index",
    "track_usage",
]
