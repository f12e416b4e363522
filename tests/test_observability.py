"""Every registered method honours observability, ground truth and label secrecy.

Each method runs on a small trace whose step inputs, agent system prompts, architecture
notes, reference answer and gold label carry unique marker strings. A function model
records every prompt and answers generically (in the formats the methods ask for); then:

* 'outputs' (the Who&When setting): no input text, system prompt or metadata in any prompt;
* 'full': step inputs, system prompts and metadata all reach the model;
* 'no-inputs' / 'no-metadata': exactly one of the two is hidden;
* the reference answer only with ``with_ground_truth``; the gold label never.

The test is parametric over ``methods.registry.methods()``, so a newly registered method
is checked without touching this file.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from faultfinder.judging.method import run_method
from faultfinder.llm.base import ChatRequest, messages_text
from faultfinder.llm.client import LLM
from faultfinder.llm.doubles import FunctionBackend
from faultfinder.registry import create_method, methods
from faultfinder.traces.schema import Agent, GoldLabel, Step, Trace
from faultfinder.usage import Budget

INPUT = "INPUT-CONTEXT-5530"
SYSTEM = "SYSPROMPT-4411"
META = "ARCH-NOTE-9921"
GROUND_TRUTH = "GT-ANSWER-7788"
LABEL = "LABEL-REASON-3344"
AGENTS = ["Alice", "Bob"]


def marked_trace() -> Trace:
    prompts = {a: f"You are {a}, a careful analyst. {SYSTEM}-{a}" for a in AGENTS}
    steps: list[Step] = []
    history: list[dict[str, Any]] = []
    for i in range(4):
        agent = AGENTS[i % 2]
        output = f"Step output {i}: the value is {10 + i}, computed by {agent}."
        messages = [
            {"role": "system", "content": prompts[agent]},
            {"role": "user", "content": "Compute the value."},
            *history,
            {"role": "user", "content": f"Private instruction {INPUT}-{i} for this call."},
        ]
        steps.append(Step(index=i, agent=agent, content=output, input_messages=messages))
        history.append({"role": "user", "content": f"{agent}: {output}"})
    return Trace(
        id="observability-probe",
        task="Compute the value.",
        ground_truth=GROUND_TRUTH,
        system="probe-team",
        architecture=f"Alice and Bob take turns. {META}",
        agents=[
            Agent(name=a, system_prompt=prompts[a], description=f"Analyst {META}-{a}")
            for a in AGENTS
        ],
        steps=steps,
        label=GoldLabel(agent="Bob", step=1, reason=f"Bob was wrong. {LABEL}"),
    )


GENERIC_TEXT = (
    "1. Yes. 2. This step contains the error.\n"
    "Agent Name: Bob\nStep Number: 1\nReason for Mistake: the value is wrong.\n"
    + json.dumps(
        {
            "agent_name": "Bob",
            "agent": "Bob",
            "step_number": 1,
            "step": 1,
            "reason": "the value is wrong",
            "confidence": 0.5,
        }
    )
)


def _agentic_plan(names: list[str]) -> list[tuple[str, dict[str, Any]]]:
    plan: list[tuple[str, dict[str, Any]]] = [("read_metadata", {})]
    if "read_step_input" in names:
        plan += [("read_step_input", {"step": i}) for i in range(4)]
    return plan


SUBMIT_ARGS = {"agent": "Bob", "step": 1, "reason": "the value is wrong", "confidence": 0.5}


def generic_answer(request: ChatRequest) -> str | dict[str, Any]:
    """Answers any method: the navigator's tool calls or actions, else a text holding the
    Who&When formats and a JSON object with the usual keys."""
    if request.tools:
        names = [t["function"]["name"] for t in request.tools]
        done = sum(1 for m in request.messages if m["role"] == "tool")
        plan = _agentic_plan(names)
        if request.tool_choice is None and done < len(plan):
            name, arguments = plan[done]
        else:
            name, arguments = "submit", SUBMIT_ARGS
        return {"tool_calls": [{"name": name, "arguments": arguments}]}
    system = str(request.messages[0].get("content", ""))
    if "ACTION: <tool name>" in system:
        names = re.findall(r"^- (\w+) ", system, flags=re.MULTILINE)
        done = sum(
            1 for m in request.messages if str(m.get("content", "")).startswith("OBSERVATION")
        )
        plan = _agentic_plan(names)
        name, arguments = plan[done] if done < len(plan) else ("submit", SUBMIT_ARGS)
        return f"THOUGHT: next.\nACTION: {name} {json.dumps(arguments)}"
    return GENERIC_TEXT


# The project's methods (test modules may register doubles of their own), each with a model
# that offers tool calling; the navigator also without it: (method name, tools?).
PROJECT_METHODS = [
    name for name, cls in methods().items() if cls.__module__.startswith("faultfinder.")
]
CASES = [(name, True) for name in PROJECT_METHODS] + [("agentic", False)]


def run_all(name: str, tools: bool, **settings: Any) -> tuple[str, int]:
    """All prompt text the method sent, and how many calls it made."""
    backend = FunctionBackend(generic_answer)
    backend.supports_tools = tools  # type: ignore[misc]
    method = create_method(name, **settings)
    llm = LLM(backend, budget=Budget(max_calls=150))
    asyncio.run(run_method(method, marked_trace(), llm))
    return "\n".join(messages_text(r.messages) for r in backend.requests), len(backend.requests)


def case_id(case: tuple[str, bool]) -> str:
    return case[0] if case[1] else f"{case[0]}[text]"


@pytest.fixture(params=CASES, ids=[case_id(c) for c in CASES])
def case(request: pytest.FixtureRequest) -> tuple[str, bool]:
    value: tuple[str, bool] = request.param
    return value


def prompts_or_skip(case: tuple[str, bool], **settings: Any) -> str:
    text, calls = run_all(*case, **settings)
    if calls == 0:
        pytest.skip(f"{case[0]} makes no model call")
    return text


def test_registry_covers_the_navigator_and_baselines() -> None:
    assert {"agentic", "random"} <= set(PROJECT_METHODS)


def test_outputs_only_hides_inputs_system_prompts_and_metadata(case: tuple[str, bool]) -> None:
    text = prompts_or_skip(case, observability="outputs")
    assert "Step output 0" in text  # the log itself is shown
    assert INPUT not in text
    assert SYSTEM not in text
    assert META not in text


def test_full_shows_inputs_system_prompts_and_metadata(case: tuple[str, bool]) -> None:
    text = prompts_or_skip(case, observability="full")
    assert INPUT in text
    assert SYSTEM in text
    assert META in text


def test_no_inputs_hides_only_inputs(case: tuple[str, bool]) -> None:
    text = prompts_or_skip(case, observability="no-inputs")
    assert INPUT not in text
    assert META in text


def test_no_metadata_hides_only_metadata(case: tuple[str, bool]) -> None:
    text = prompts_or_skip(case, observability="no-metadata")
    assert INPUT in text
    assert META not in text


@pytest.mark.parametrize("observability", ["full", "outputs"])
def test_ground_truth_only_when_asked_and_label_never(
    case: tuple[str, bool], observability: str
) -> None:
    hidden = prompts_or_skip(case, observability=observability)
    assert GROUND_TRUTH not in hidden
    assert LABEL not in hidden
    shown = prompts_or_skip(case, observability=observability, with_ground_truth=True)
    assert GROUND_TRUTH in shown
    assert LABEL not in shown
