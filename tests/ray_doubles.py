"""A method and a model that Ray workers can import (tests/ is on their PYTHONPATH).

The model answers by the request's content alone, so a case gets the same reply in any
process, in any order: what a comparison of local and Ray results needs.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from typing import Any, ClassVar

from pydantic import Field

from faultfinder.judging.method import MethodBase, MethodConfig, Verdict
from faultfinder.llm import LLM, ChatRequest
from faultfinder.traces.schema import Trace


def content_model(request: ChatRequest) -> dict[str, Any]:
    """A step number chosen by hashing the prompt; slow when FF_TEST_MODEL_DELAY is set."""
    delay = float(os.environ.get("FF_TEST_MODEL_DELAY", "0") or 0)
    if delay:
        time.sleep(delay)
    prompt = str(request.messages[-1]["content"])
    digest = int(hashlib.sha256(prompt.encode()).hexdigest(), 16)
    steps = int(prompt.rsplit("steps=", 1)[1])
    return {"text": str(digest % steps), "usage": {"prompt_tokens": 10, "completion_tokens": 2}}


class PickConfig(MethodConfig):
    run: int = Field(default=0, ge=0)
    """Repeat index, set by the harness."""
    calls: int = Field(default=1, ge=1)
    """Model calls per case."""
    delay: float = 0.0
    """Seconds each case waits before its first call (keeps cases in flight)."""


class PickMethod(MethodBase):
    """Asks the model for a step ``calls`` times and keeps the last answer."""

    name: ClassVar[str] = "ray-test-pick"
    summary: ClassVar[str] = "test double for the Ray executor"
    prompt_version: ClassVar[str] = "test-1"
    Config: ClassVar[type[MethodConfig]] = PickConfig
    presets: ClassVar[dict[str, dict[str, Any]]] = {}

    def __init__(self, config: PickConfig) -> None:
        self.config = config

    async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
        assert isinstance(self.config, PickConfig)
        reply = None
        if self.config.delay:
            await asyncio.sleep(self.config.delay)
        for call in range(self.config.calls):
            prompt = f"trace={trace.id} run={self.config.run} call={call} steps={len(trace.steps)}"
            reply = await llm.chat(prompt, parse=int, purpose="pick", max_tokens=5)
        assert reply is not None
        if reply.parsed is None:
            return Verdict(status="unparsed")
        return Verdict(agent=trace.steps[reply.parsed].agent, step=reply.parsed)


def first_speaker_model(request: ChatRequest) -> dict[str, Any]:
    """Answers a Who&When-style question with step 0 and its speaker (the eval fixtures'
    logs open with a Planner or an Orchestrator); slow when FF_TEST_MODEL_DELAY is set."""
    delay = float(os.environ.get("FF_TEST_MODEL_DELAY", "0") or 0)
    if delay:
        time.sleep(delay)
    prompt = str(request.messages[-1]["content"])
    agent = "Planner" if "Planner" in prompt else "Orchestrator"
    return {
        "text": f"Agent Name: {agent}\nStep Number: 0\nReason for Mistake: it planned badly.",
        "usage": {"prompt_tokens": 50, "completion_tokens": 12},
    }
