"""ECHO's prompts. They follow the paper's Appendix A.4–A.6 (context-aware step agent,
objective analyst, final judge); the agent- and step-level variants of the analyst prompt
and the LLM extractor prompt are ours (the paper does not print them). Steps are always
numbered from 0, as ``judging.render`` shows them.

The analyst prompt has two layouts with the same instructions in the same words:

- ``paper``: a system prompt per analyst role and pass (the role first), then a user
  message with the case and the conversation;
- ``shared-prefix`` (the default): one system prompt for every analyst call of every case
  (the instructions that do not depend on the role or pass), then a user message that
  starts with the case and the whole conversation and ends with what is particular to the
  call (the pass's task and question, the agent-level finding, the analyst's role). Every
  call of a case then shares one long prefix, which servers with prefix caching serve
  from their cache.

Bump ``PROMPT_VERSION`` whenever a prompt here changes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from faultfinder.judging.reference import ground_truth_for
from faultfinder.traces.schema import Step, Trace

PROMPT_VERSION = "echo-2"

AnalystRole = Literal[
    "conservative", "liberal", "detail_focused", "pattern_focused", "skeptical", "general"
]
ROLES: tuple[AnalystRole, ...] = (
    "conservative",
    "liberal",
    "detail_focused",
    "pattern_focused",
    "skeptical",
    "general",
)
PassKind = Literal["unified", "agent", "step"]
PromptLayout = Literal["shared-prefix", "paper"]

ROLE_INSTRUCTIONS: dict[AnalystRole, str] = {
    "conservative": (
        "You are a conservative analyst with high confidence thresholds. Only attribute errors "
        "when you have strong, clear evidence. Prefer single-agent attributions over "
        "multi-agent ones. Be cautious about making attributions without definitive proof."
    ),
    "liberal": (
        "You are a liberal analyst, more willing to make attributions based on reasonable "
        "evidence. Consider multi-agent scenarios and subtle errors that might be overlooked. "
        "Be open to making attributions even with moderate confidence."
    ),
    "detail_focused": (
        "You are detail-oriented and focus on specific evidence, exact wording and "
        "fine-grained analysis. Look for subtle inconsistencies, minor logical gaps and precise "
        "factual inaccuracies. Prioritize concrete evidence over general patterns."
    ),
    "pattern_focused": (
        "You focus on recognizing broader patterns and systemic issues in reasoning chains. "
        "Look for recurring themes, logical flow problems, and how errors propagate through "
        "the conversation. Consider the overall reasoning structure."
    ),
    "skeptical": (
        "You are highly skeptical and question all assumptions. Look for alternative "
        "explanations, consider whether apparent errors might be valid reasoning, and examine "
        "whether the ground truth itself could be questioned. Challenge conventional "
        "attributions."
    ),
    "general": (
        "You are a balanced general analyst with no specific specialization. Approach the "
        "analysis with a broad perspective, considering all types of evidence equally. Look "
        "for the most obvious and impactful mistakes based on objective evaluation."
    ),
}

_JSON_FORMAT = """<json>
{
  "analysis_summary": "Brief overview of your investigation approach and findings",
  "agent_evaluations": [
    {
      "agent_name": "agent_name",
      "step_index": 1,
      "error_likelihood": 0.0-1.0,
      "reasoning": "Why this agent may or may not have caused the error",
      "evidence": "Specific evidence supporting your assessment"
    }
  ],
  "primary_conclusion": {
    "type": "single_agent" | "multi_agent",
    "attribution": ["agent_name(s)"] or null,
    "mistake_step": 1,
    "confidence": 0.0-1.0,
    "reasoning": "Detailed explanation of your primary conclusion including which step the \
error occurred"
  },
  "alternative_hypotheses": [
    {
      "type": "conclusion_type",
      "attribution": ["agent_name(s)"] or null,
      "mistake_step": 1,
      "confidence": 0.0-1.0,
      "reasoning": "Alternative explanation"
    }
  ]
}
</json>"""

_TASKS: dict[PassKind, str] = {
    "unified": """Your task:
1. Analyze ALL agents in the conversation objectively (not just one specific agent)
2. Determine which agent(s) most likely caused the final wrong answer
3. Determine which step/turn in the conversation the mistake occurred
4. Provide confidence scores and reasoning for your conclusions""",
    "agent": """Your task (agent-level attribution):
1. Analyze ALL agents in the conversation objectively (not just one specific agent)
2. Determine which agent(s) most likely caused the final wrong answer
3. Give your best estimate of the step of the mistake, or null; a separate step-level \
analysis will pinpoint it
4. Provide confidence scores and reasoning for your conclusions""",
    "step": """Your task (step-level attribution):
1. An agent-level analysis has already named the agent(s) most likely responsible; it is \
given below
2. Examine the steps of those agent(s) closely, in the context of the whole conversation
3. Determine the step/turn at which the decisive mistake occurred (the earliest step that \
set the failure in motion)
4. Provide confidence scores and reasoning; if the evidence shows that another agent's \
step was decisive, attribute that agent instead""",
}

_VIEWS: dict[PassKind, str] = {
    "unified": """You have access to hierarchical context showing:
- Immediate agents: Full details
- Nearby agents: Key decisions
- Distant agents: Brief summaries""",
    "agent": """You have access to hierarchical context showing:
- Immediate agents: Full details
- Nearby agents: Key decisions
- Distant agents: Brief summaries""",
    "step": """You see the conversation as a focused hierarchical view:
- [full]: the steps of the named agent(s) and their direct neighbours, in full
- [key decision]: steps 2-3 away from them
- [summary]: steps 4-6 away
- [milestone]: steps further away""",
}

_CLOSINGS: dict[PassKind, str] = {
    "unified": "Pay special attention to identifying the specific step/turn where the error "
    "occurred.",
    "agent": "Pay special attention to identifying which agent(s) caused the error.",
    "step": "Pay special attention to identifying the specific step/turn where the error occurred.",
}


_OPENING = """You are an Objective Analysis Agent conducting an impartial investigation to \
determine error attribution in a multi-agent conversation."""

_NUMBERING = """Steps are numbered from 0 in conversation order ("Step 0", "Step 1", ...). Always \
give steps (step_index, mistake_step) as these numbers, and agents by their exact names."""

_CONCLUSIONS = """Possible conclusions:
- Single agent error: One specific agent caused the mistake at a specific step
- Multi-agent error: Multiple agents contributed to the mistake across specific steps"""

_OUTPUT = f"""Output your response as valid JSON wrapped in <json></json> tags:
{_JSON_FORMAT}"""

_THOROUGH = """Be thorough, objective, and consider all possibilities including that no single \
agent may be clearly at fault."""


def _specialization(role: AnalystRole) -> str:
    return f"ANALYST SPECIALIZATION: {ROLE_INSTRUCTIONS[role]}"


def analyst_system_prompt(role: AnalystRole, kind: PassKind) -> str:
    """The objective analyst's system prompt (paper A.5), specialised by role and pass
    (the ``paper`` layout)."""
    return (
        f"{_OPENING}\n\n{_specialization(role)}\n\n{_TASKS[kind]}\n\n{_VIEWS[kind]}\n\n"
        f"{_NUMBERING}\n\n{_CONCLUSIONS}\n\n{_OUTPUT}\n\n{_THOROUGH}\n{_CLOSINGS[kind]}"
    )


SHARED_ANALYST_SYSTEM_PROMPT = (
    f"{_OPENING}\n\n{_VIEWS['agent']}\n\n{_NUMBERING}\n\n{_CONCLUSIONS}\n\n{_OUTPUT}\n\n"
    f"{_THOROUGH}\nYour specialization and your task are given after the conversation."
)
"""The analyst's system prompt in the ``shared-prefix`` layout: paper A.5 less the
role, the pass's task and the closing sentence, which go to the end of the user message
(:func:`analyst_question`). The same text in every analyst call."""


def header(trace: Trace, with_ground_truth: bool) -> str:
    """Query, ground truth (only when allowed and known) and final answer."""
    lines = [f"Original Query: {trace.task}"]
    reference = ground_truth_for(trace, with_ground_truth)
    if reference is not None:
        lines.append(f"Ground Truth: {reference}")
    final = trace.final_answer
    lines.append(
        f"Final Answer: {final}"
        if final
        else "Final Answer: (not recorded separately; see the last steps of the conversation)"
    )
    return "\n".join(lines)


def _metadata_block(metadata: str) -> str:
    return f"System details:\n{metadata}\n\n" if metadata else ""


_ASKS: dict[PassKind, str] = {
    "unified": "Please conduct an objective analysis of this conversation to determine error "
    "attribution.\nFocus on identifying which specific agent(s) caused the error that led to "
    "the incorrect final answer.",
    "agent": "Please conduct an objective analysis of this conversation to determine error "
    "attribution.\nFocus on identifying which specific agent(s) caused the error that led to "
    "the incorrect final answer.",
    "step": "Please conduct an objective analysis to determine at which step the decisive "
    "mistake occurred.",
}
_ANSWER = "Output your analysis in the JSON format specified in your instructions."


def _case(head: str, metadata: str, agents: Sequence[str]) -> str:
    return f"{head}\n\n{_metadata_block(metadata)}Agents: {', '.join(agents)}\n\n"


def _conversation(conversation: str, context_sample: str) -> str:
    sample = (
        "\n\n=== HIERARCHICAL CONTEXT EXAMPLE ===\n"
        "Context structure for Step 0 (showing hierarchical detail levels):\n"
        f"{context_sample}"
        if context_sample
        else ""
    )
    return f"Conversation Analysis:\n=== CONVERSATION AGENTS ===\n{conversation}{sample}\n\n"


def _finding(focus: str, focused_view: str | None) -> str:
    view = (
        f"Conversation (focused hierarchical view):\n{focused_view}\n\n"
        if focused_view is not None
        else ""
    )
    return f"Agent-level finding:\n{focus}\n\n{view}"


def analyst_user_prompt(
    kind: PassKind,
    *,
    head: str,
    metadata: str,
    agents: Sequence[str],
    conversation: str,
    context_sample: str = "",
    focus: str = "",
) -> str:
    """The analyst's user message for one pass in the ``paper`` layout.

    ``conversation`` is every step in full (unified and agent-level passes) or the focused
    view (step-level pass); ``context_sample`` is the hierarchical context of one step shown
    as an example, as in the paper's code; ``focus`` states the agent-level finding.
    """
    if kind == "step":
        body = _finding(focus, conversation)
    else:
        body = _conversation(conversation, context_sample)
    return f"{_case(head, metadata, agents)}{body}{_ASKS[kind]}\n{_ANSWER}"


def shared_case_prompt(
    *,
    head: str,
    metadata: str,
    agents: Sequence[str],
    conversation: str | None,
    context_sample: str = "",
) -> str:
    """The start of the analyst's user message in the ``shared-prefix`` layout: the case
    and the whole conversation, identical in every analyst call of a case
    (``conversation=None``: the case alone, for a step-level call with the focused view)."""
    case = _case(head, metadata, agents)
    if conversation is None:
        return case
    return case + _conversation(conversation, context_sample)


def analyst_question(
    kind: PassKind, role: AnalystRole, *, focus: str = "", focused_view: str | None = None
) -> str:
    """The end of the analyst's user message in the ``shared-prefix`` layout: the pass's
    task, the agent-level finding (step-level pass; with the focused view when the shared
    conversation is not shown), the question, then the analyst's role, which is the only
    part that differs between the analysts of a pass."""
    if kind != "step":
        body = ""
    elif focused_view is None:
        body = _finding(focus, None)
    else:
        body = f"{_VIEWS['step']}\n\n{_finding(focus, focused_view)}"
    return (
        f"{_TASKS[kind]}\n\n{body}{_ASKS[kind]}\n{_CLOSINGS[kind]}\n\n"
        f"{_specialization(role)}\n{_ANSWER}"
    )


# --- context-aware step agent and judge (ablations I1, I2) ---------------------------


def step_agent_system_prompt(with_ground_truth: bool) -> str:
    """The context-aware step agent (paper A.4): argue that YOUR agent caused the error."""
    evidence = (
        "using the ground truth as evidence"
        if with_ground_truth
        else "using the task and the final answer as evidence"
    )
    ground = "- Ground Truth: [GROUND_TRUTH]\n" if with_ground_truth else ""
    return f"""You are a Context-Aware Step Agent that analyzes an agent's actions in the context \
of the previous and next agents.
Your task is to argue why the error happened in YOUR agent's step.

Your task:
1. Analyze what information was received by your agent from the previous agent (if any)
2. Analyze what information was generated by your agent
3. Analyze how your agent's output affected the next agent (if any)
4. Make a strong argument for why YOUR AGENT caused the final wrong answer, {evidence}

Input:
{ground}- Final Answer: [FINAL_ANSWER]
- Agent Context: Information about the previous, current, and next agents

Output your response with the following clear section headers:

## Purpose:
Describe the purpose of this agent step - what was this agent trying to accomplish?

## Assumptions and Information:
List the assumptions and information this agent was given from the previous agent or context.

## Errors:
Describe what this agent did wrong (if anything). Be specific about any mistakes, \
misunderstandings, or incorrect reasoning.

## Evidence:
Provide evidence that supports your error attribution. Explain how this agent's actions \
directly led to the wrong final answer.

Remember: You must argue that YOUR agent caused the error. Be persuasive and use evidence."""


def step_agent_user_prompt(head: str, metadata: str, step: Step, context: str, kind: str) -> str:
    """The step agent's user message; ``kind`` is 'window' or 'hierarchical'."""
    target = f"Step {step.index} - {step.speaker}"
    if kind == "hierarchical":
        ask = (
            f"Please analyze this agent ({target}) in the hierarchical context of the entire "
            "conversation, and provide a strong argument for why THIS agent caused the final "
            "wrong answer.\nUse the section headers specified in your instructions (Purpose, "
            "Assumptions and Information, Errors, Evidence).\n\nNote: You now have access to "
            "the full conversation context at different detail levels:\n"
            "- Immediate context: Full details of adjacent agents\n"
            "- Nearby context: Key decisions from agents 2-3 steps away\n"
            "- Distant context: Brief summaries of agents 4-6 steps away\n"
            "- Milestones: Milestones of agents further away\n"
            "Consider how information and errors might have propagated across the entire "
            "conversation when making your argument."
        )
    else:
        ask = (
            f"Please analyze this agent ({target}) in the context of the previous and next "
            "agents, and provide a strong argument for why THIS agent caused the final wrong "
            "answer.\nUse the section headers specified in your instructions (Purpose, "
            "Assumptions and Information, Errors, Evidence)."
        )
    return f"{head}\n\n{_metadata_block(metadata)}Agent Context:\n{context}\n\n{ask}"


JUDGE_SYSTEM_PROMPT = """You are a Final Judge Agent that weighs competing arguments from \
multiple Context-Aware Step Agents to determine the true error attribution.

Your task: Each Context-Aware Step Agent has argued why THEIR agent caused the error. Review \
all arguments and determine which one is most convincing based on evidence and reasoning.

The arguments from each Context-Aware Step Agent are provided in a structured text format \
with these sections:
- Purpose: The purpose of the agent step
- Assumptions and Information: What the agent was given
- Errors: What the agent did wrong (if anything)
- Evidence: Evidence supporting the error attribution

Output your response as a valid JSON object wrapped in <json></json> XML tags. The JSON \
should have the following structure:
<json>
{
  "mistake_agent": "agent_name",
  "mistake_step": "step_number",
  "mistake_reason": "explanation of why this agent/step caused the wrong final answer, based \
on the most convincing argument"
}
</json>

IMPORTANT RULES:
1. Your response MUST be a valid, parsable JSON object wrapped in <json></json> tags. Do not \
include any text outside these tags.
2. Focus on the agents that are actively making decisions or providing information.
3. Steps are numbered from 0; give mistake_step as the step_id number of the argument you \
choose.

Be thorough in your analysis. Consider the strength of evidence, the logical connection \
between the error and the final wrong answer, and the causal relationship.
Work backwards to see where the logic diverged and the error happened."""


def judge_user_prompt(head: str, arguments: list[dict[str, Any]]) -> str:
    """The judge's user message with every usable argument as JSON."""
    return (
        f"{head}\n\nAll Agent Arguments: {json.dumps(arguments, indent=2, ensure_ascii=False)}"
        "\n\nPlease review all the arguments from the Context-Aware Step Agents and determine "
        "which one is most convincing.\nOutput your decision as a valid JSON object wrapped in "
        "<json></json> XML tags as specified in your instructions.\nIMPORTANT: Your response "
        "MUST be a valid, parsable JSON object wrapped in <json></json> tags. Do not include "
        "any text outside these tags."
    )


# --- LLM-based context extraction (the paper's ablation; prompt is ours) --------------

EXTRACTOR_SYSTEM_PROMPT = """You compress one step of a multi-agent conversation so that \
an error analyst can follow the conversation at a glance. Keep what matters for finding \
mistakes: decisions and conclusions, information handed from or to other agents, errors and \
failures, and results. Do not add anything that the step does not say."""


def extractor_messages(step: Step, text: str) -> list[dict[str, Any]]:
    """Ask for the three compressions of one step as JSON."""
    user = (
        f"Step {step.index} - {step.speaker}:\n{text}\n\n"
        "Return a JSON object with three fields:\n"
        '- "key_decision": the key decision or main point of this step (at most 50 words)\n'
        '- "summary": a brief summary of its outcome (at most 20 words)\n'
        '- "milestone": the milestone or state change it represents (at most 15 words)'
    )
    return [
        {"role": "system", "content": EXTRACTOR_SYSTEM_PROMPT},
        {"role": "user", "content": user},
    ]
