"""DoVer's prompts, written from the descriptions in DoVer Section 4 and Appendix B.

The paper's prompt figures (5-11) are images its text does not reproduce; each prompt
below restates what Appendix B says the stage asks for and what it outputs. Bump
PROMPT_VERSION whenever a prompt changes.
"""

from __future__ import annotations

from typing import Any

PROMPT_VERSION = "dover-v2"

SEGMENT = """You are analysing the execution log of a multi-agent system that worked on a task.
Such systems work in trials: a trial starts at a planning step (the initial plan, or a plan
update after a reflection or re-planning) and continues through the steps that execute that
plan.

Task: {task}

Execution log (Step N - agent: message):
{log}

Identify the planning steps: the step holding the initial plan, and every step where the
plan is updated (a new or revised plan, typically after a failure or a reflection). Report
only their step indices, with the criterion you used for each.
Answer with JSON only:
{{"planning_steps": [
  {{"step": <step index>, "type": "initial" or "update",
    "criterion": "<why this is a planning step>"}}
]}}"""

INTERVENE = """You are debugging a failed run of a multi-agent system by intervening at the
message-passing layer: you rewrite one message of {orchestrator}, the agent that plans and
instructs the others. The system is then re-run from that message on, with everything
before it unchanged, to test a failure hypothesis.

Task: {task}
{reference}
Failure hypothesis for this trial:
- responsible agent: {agent}
- failure step: {step}
- reason: {reason}

Context (the two steps before the failure step, and the failure step):
{context}

The message to rewrite is step {target}, by {orchestrator}:
<<<
{original}
>>>
{calls}
Intervention categories:
- "modified_instruction": adjust {orchestrator}'s instruction to a sub-agent to clarify
  intent, correct arguments, or supply missing context;
- "plan_update": revise {orchestrator}'s plan (reorder, decompose or replace steps) to
  route around the identified failure.

Write the smallest change that fixes the hypothesised failure. {replaces}
Answer with JSON only:
{{"category": "modified_instruction" or "plan_update",
 "replacement": "<the full new text of step {target}>",
 "rationale": "<one sentence>"{redirect_field}}}"""

REPLACES_MESSAGE = """The replacement takes the
place of the whole message, so keep its format exactly (same prefixes and line structure)
for the system to parse it. Do not write the task's final answer into it: the agents must
still do the work."""
"""What the replacement is, for a message without tool calls (DoVer's own wording)."""

REPLACES_TEXT = """The replacement is the new
TEXT of the message only: its tool calls above are kept and still made with it (a handoff
still hands off), so write what the agents should read next. Do not write the task's final
answer into it: the agents must still do the work."""
"""What the replacement is, for a message that makes tool calls."""

TOOL_CALLS = """Besides its text{empty}, the message makes these tool calls (a handoff to another
agent is one), which are kept:
{calls}
"""

REDIRECTS = """If the hypothesis is that the wrong agent or tool was chosen, "redirect" makes one of
these calls to another tool offered at this step, taking the same arguments; otherwise
it is null:
{choices}
"""

REDIRECT_FIELD = """,
 "redirect": null or {"call": <call number>, "to": "<tool name>"}"""

MILESTONES = """Turn the reference solution of a task into at most {limit} milestones: ordered,
tool-agnostic checkpoints that a run must reach to solve the task.

Task: {task}
Reference answer: {answer}
Reference solution:
{steps}

Answer with JSON only:
{{"milestones": [
  {{"order": 1, "title": "<short title>", "action": "<what is done>",
    "result": "<what it yields>"}}
]}}"""

EVALUATE_MILESTONES = """Compare the execution log of a multi-agent run with the milestones of
the task's reference solution. For each milestone say whether the run achieved it
("achieved"), reached part of it ("partial"), or did not reach it ("missed"). Also say
whether the run explored a new path that is not among the milestones, whether that path is
feasible, and what it contributed.

Task: {task}
Milestones:
{milestones}

Execution log (Step N - agent: message):
{log}

Answer with JSON only:
{{"milestones": [
  {{"order": 1, "status": "achieved" or "partial" or "missed", "evidence": "<short>"}}
 ],
 "new_path": {{"explored": true or false, "feasible": true or false,
              "contribution": "<short>"}}}}"""

FULFILMENT = """An intervention was applied to a failed run of a multi-agent system: step
{step} (by {agent}) was replaced, and the system was re-run from that step on.

Task: {task}
{reference}
Original step {step}:
<<<
{original}
>>>
Intervention ({category}):
<<<
{replacement}
>>>
Rationale: {rationale}

Steps after step {step} in the ORIGINAL run:
{before}

Steps from step {step} on in the NEW run:
{after}

Final answer of the original run: {old_answer}
Final answer of the new run: {new_answer}

Decide whether the agents carried out the intervention as intended
(is_intervention_fulfilled), and classify the outcome as one of:
- "success_after_intervention": the intervention was carried out and the task now succeeds;
- "instruction_not_executed": the agents did not carry out the intervened instruction;
- "applied_but_insufficient": it was carried out, but the failure persists (the fix was
  insufficient or the failure lies elsewhere).
Answer with JSON only:
{{"is_intervention_fulfilled": true or false,
 "outcome": "success_after_intervention" or "instruction_not_executed"
            or "applied_but_insufficient",
 "evidence": "<short>"}}"""


MAX_TOKENS = {
    "segment": 384,
    "intervene": 512,
    "milestones": 384,
    "evaluate": 384,
    "fulfilment": 256,
}
"""Reply length per stage: JSON answers are short, and a small model left unbounded
rambles. (Length limits inside the JSON schemas would bound it more precisely, but
llama.cpp's grammar sampler slows down about 17-fold with them.)"""


def reference_line(answer: str | None) -> str:
    return f"Reference answer: {answer}\n" if answer is not None else ""


SCHEMAS: dict[str, dict[str, Any]] = {
    "segment": {
        "type": "object",
        "properties": {
            "planning_steps": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "step": {"type": "integer"},
                        "type": {"type": "string", "enum": ["initial", "update"]},
                        "criterion": {"type": "string"},
                    },
                    "required": ["step", "type", "criterion"],
                },
            }
        },
        "required": ["planning_steps"],
    },
    "intervene": {
        "type": "object",
        "properties": {
            "category": {"type": "string", "enum": ["modified_instruction", "plan_update"]},
            "replacement": {"type": "string"},
            "rationale": {"type": "string"},
        },
        "required": ["category", "replacement", "rationale"],
    },
    "milestones": {
        "type": "object",
        "properties": {
            "milestones": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "order": {"type": "integer"},
                        "title": {"type": "string"},
                        "action": {"type": "string"},
                        "result": {"type": "string"},
                    },
                    "required": ["order", "title", "action", "result"],
                },
            }
        },
        "required": ["milestones"],
    },
    "evaluate": {
        "type": "object",
        "properties": {
            "milestones": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "order": {"type": "integer"},
                        "status": {"type": "string", "enum": ["achieved", "partial", "missed"]},
                        "evidence": {"type": "string"},
                    },
                    "required": ["order", "status", "evidence"],
                },
            },
            "new_path": {
                "type": "object",
                "properties": {
                    "explored": {"type": "boolean"},
                    "feasible": {"type": "boolean"},
                    "contribution": {"type": "string"},
                },
                "required": ["explored", "feasible", "contribution"],
            },
        },
        "required": ["milestones", "new_path"],
    },
    "fulfilment": {
        "type": "object",
        "properties": {
            "is_intervention_fulfilled": {"type": "boolean"},
            "outcome": {
                "type": "string",
                "enum": [
                    "success_after_intervention",
                    "instruction_not_executed",
                    "applied_but_insufficient",
                ],
            },
            "evidence": {"type": "string"},
        },
        "required": ["is_intervention_fulfilled", "outcome", "evidence"],
    },
}
"""JSON schemas of the answers, for constrained decoding by the embedded model (the
parsers check the same shapes with pydantic)."""


def intervene_schema(redirects: dict[int, list[str]]) -> dict[str, Any]:
    """The intervention answer's schema; with ``redirects`` (tool call number -> the tools
    it may call instead), a ``redirect`` field: null or one of those."""
    schema = SCHEMAS["intervene"]
    if not redirects:
        return schema
    redirect = {
        "type": "object",
        "properties": {
            "call": {"type": "integer", "enum": sorted(redirects)},
            "to": {"type": "string", "enum": sorted({n for ns in redirects.values() for n in ns})},
        },
        "required": ["call", "to"],
    }
    return {
        "type": "object",
        "properties": {
            **schema["properties"],
            "redirect": {"anyOf": [{"type": "null"}, redirect]},
        },
        "required": [*schema["required"], "redirect"],
    }
