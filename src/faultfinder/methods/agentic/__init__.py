"""The ``agentic`` method: a tool-using LLM agent navigates the trace and submits a verdict.

Modules: ``tools`` (what the agent can read, honouring observability), ``actions`` (the
plain-text action format and its grammar), ``prompts``, ``loop`` (the bounded agent loop),
``config`` and ``method`` (registration).
"""

from faultfinder.methods.agentic.config import AgenticConfig
from faultfinder.methods.agentic.method import AgenticMethod

__all__ = ["AgenticConfig", "AgenticMethod"]
