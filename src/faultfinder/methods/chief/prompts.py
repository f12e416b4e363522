# ruff: noqa: E501  (prompt text keeps its natural lines)
"""CHIEF's prompts (paper Appendices A–F), with JSON answer formats.

The task descriptions follow the paper's figures; the answer formats are JSON (read with
``answer_json.extract_json``) instead of the paper's plain-text blocks, except the M1-only
direct answer, which keeps the paper's 'Agent Name / Step Number / Reason for Mistake'.
``stage_of`` tells which stage a prompt belongs to (tests and scripted models route on it).

Each template is the stage's opening sentence, then the ``{header}`` slot (the shared
opening: problem, optional answer, system description, conversation), then the stage's
instructions: the paper's order. ``arrange`` gives the 'shared-prefix' layout, the same
text with the opening sentence moved after the header, so that every call of a run starts
with the same long text and a server's prefix cache serves it (docs/methods/chief.md,
"Prompt layout"). The module ``instructions`` builds the 'instructions-first' layout
from the same templates: every stage's instructions together in one system message that
every call of every run shares, and per call the header, the graph as far as it is built
(the ``*_SECTION`` texts below), the stage's own views and a short request.
"""

from __future__ import annotations

from typing import Literal

PROMPT_VERSION = "chief-5"

Layout = Literal["instructions-first", "shared-prefix", "paper"]

HEADER_SLOT = "{header}\n"

# Each stage's prompt contains its marker exactly once; ``stage_of`` relies on it.
MARKERS: dict[str, str] = {
    "decompose-refine": "breaks these structural rules",
    "decompose": "please decompose the reasoning into semantic subtasks",
    "otar": "Summarize each agent's behavior into Action / Observation / Thought / Result",
    "edges": "Construct causal edges ONLY for consecutive subtask pairs",
    "step-edges": "Identify step-level edges (meaningful data passing between steps)",
    "oracle": "synthesizing the Subtask Virtual Oracle for ONE subtask",
    "oracles": "synthesizing a complete set of Subtask Virtual Oracles",
    "backtrack": "performing hierarchical failure backtracking",
    "attribution": "performing counterfactual failure attribution",
    "direct": "using the causal graph as a map of the run",
}


STAGE_TITLES: dict[str, str] = {
    "decompose": "Decomposition",
    "otar": "OTAR parsing",
    "edges": "Subtask and agent edges",
    "step-edges": "Step edges",
    "oracles": "Virtual oracles, all subtasks",
    "oracle": "Virtual oracle, one subtask",
    "backtrack": "Hierarchical backtracking",
    "attribution": "Counterfactual attribution",
    "direct": "Direct answer over the graph",
}
"""'instructions-first' layout: each stage's title, in pipeline order. The system message
heads each stage's instructions with it, and a request names its stage by it."""
STAGE_LINE = "Stage: {title}."
"""The first line of an 'instructions-first' request."""


def stage_of(prompt: str) -> str:
    """The stage a prompt (or its last user message) belongs to; '' if none."""
    for stage, marker in MARKERS.items():
        if marker in prompt:
            return stage
    for stage, title in STAGE_TITLES.items():
        if STAGE_LINE.format(title=title) in prompt:
            return stage
    return ""


GRAPH_VIEW = "Here is the causal graph describing the hierarchical reasoning structure:\n{graph}\n"
"""How backtracking introduces the graph view (paper Fig. 11)."""
SUBTASKS_VIEW = "Below are the subtasks:\n{subtasks}\n"
"""How step-edge construction introduces the subtask list (paper Fig. 9)."""
SHARED_VIEWS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # The attribution prompt (Fig. 13) shows the same graph view as backtracking.
    (GRAPH_VIEW, (GRAPH_VIEW, "Here is the graph:\n{graph}\n")),
    # The OTAR and oracle prompts (Figs. 7, 10) show the same subtask list as step edges.
    (
        SUBTASKS_VIEW,
        (
            SUBTASKS_VIEW,
            "Below are the subtasks (with the agents that speak within each step range):\n"
            "{subtasks}\n",
            "Given subtask plan produced by the decomposition stage:\n{subtasks}\n",
        ),
    ),
)
"""'shared-prefix' layout: views that several stages show, each with the introduction
the stages then share (first) and the introductions it replaces."""


def arrange(template: str, layout: Layout) -> str:
    """``template`` in ``layout``. 'paper': unchanged (opening sentence, header, the stage's
    part). 'shared-prefix': the header first; then a view that other stages show too (the
    graph view of backtracking and attribution; the subtask list of OTAR, step edges and
    oracles), with one introduction for all of them, so those prompts share their prefix
    up to the end of it; then the opening sentence and the rest of the stage's part, in the
    paper's order."""
    if layout == "paper":
        return template
    if layout != "shared-prefix":
        raise ValueError(f"arrange: no template arrangement for the {layout!r} layout")
    opening, rest = template.split("\n", 1)
    if not rest.startswith(HEADER_SLOT):
        raise ValueError("a CHIEF stage template must have the {header} slot on its second line")
    rest = rest.removeprefix(HEADER_SLOT)
    shared = HEADER_SLOT
    for introduction, variants in SHARED_VIEWS:
        found = next((v for v in variants if v in rest), None)
        if found is not None:
            rest = rest.replace(found, "", 1)
            shared += introduction
            break
    return shared + opening + "\n" + rest


SUBTASKS_SECTION = "Below are the subtasks:\n{body}\n"
NODES_SECTION = (
    "Below are the agents of each subtask, with their Observation/Thought/Action/Result:\n{body}\n"
)
LINKS_SECTION = (
    "Below are the graph's subtask, agent and step edges, its loop groups and, when made, "
    "the subtask oracles:\n{body}\n"
)
"""'instructions-first' layout: the causal graph in the order it is built (subtasks after
decomposition, agent nodes after OTAR parsing, the rest after the edge and oracle stages),
so each stage's prompt extends what an earlier stage's prompt showed."""


def header(
    question: str,
    ground_truth: str | None,
    history: str,
    n_steps: int,
    metadata: str = "",
    *,
    partial_from: int | None = None,
) -> str:
    """The shared opening: problem, optional answer, system description, conversation."""
    lines = [f"The problem is: {question}"]
    if ground_truth is not None:
        lines.append(f"The correct answer for the problem is: {ground_truth}")
    if metadata:
        lines.append(f"Here is how the multi-agent system is configured:\n{metadata}")
    if partial_from is None:
        lines.append(f"Here is the conversation, one entry per step:\n{history}")
        lines.append(
            f"There are total {n_steps} steps (numbered 0 to {n_steps - 1}), each entry "
            "provides the output of the agent and its role."
        )
    else:
        lines.append(
            f"Here is the subsequent unprocessed trajectory (steps {partial_from} to "
            f"{n_steps - 1} of {n_steps}), one entry per step:\n{history}"
        )
    return "\n".join(lines)


PARTIAL_TRAJECTORY = (
    "The subsequent unprocessed trajectory for this subtask is steps {first} to {last} "
    "of the conversation above."
)
"""'shared-prefix' layout, sequential oracles: the conversation stays whole in the shared
header, and this line (after it) names the part the paper's Eq. 2 gives the call."""


DECOMPOSE = """You are an AI assistant tasked with analyzing a multi-agent conversation history when solving a real-world problem.
{header}
{rag}
Based on this conversation and {rag_ref}, please decompose the reasoning into semantic subtasks.
You must perform a self-reflection process to optimize your decomposition:
1. Draft Optimization: propose an initial set of subtasks.
2. Evidence Alignment: ensure each subtask's step range aligns with the dialogue.
3. Final Optimization: ensure step ranges are continuous, cover all steps, and do NOT overlap.
Answer with the final decomposition only, as JSON:
{{"subtasks": [{{"id": "S1", "name": "<short name>", "description": "<what this phase does>", "step_range": [<first step>, <last step>]}}, ...]}}
Step ranges are inclusive and use the step numbers shown above (0 to {last})."""

RAG_EXEMPLARS = "Here are the retrieved reference examples:\n{exemplars}"
RAG_NONE = "No reference example is available for this task."

DECOMPOSE_REFINE = """Your decomposition breaks these structural rules:
{violations}
The conversation has steps 0 to {last}. Step ranges must be continuous, cover every step, and not overlap: the first subtask starts at step 0, each next subtask starts right after the previous one ends, and the last one ends at step {last}. Keep the subtasks aligned with what actually happens in the conversation.
Return the corrected decomposition in the same JSON format."""

OTAR = """You are an AI assistant tasked with analyzing multi-agent execution traces.
{header}
Below are the subtasks (with the agents that speak within each step range):
{subtasks}
Your job:
1. For each subtask, identify the agents that actively perform actions within its step_range.
2. Summarize each agent's behavior into Action / Observation / Thought / Result.
Answer with JSON only, one entry per subtask and one per active agent:
{{"subtasks": [{{"subtask": "<subtask id, exactly as given>", "agents": [{{"agent": "<agent name>", "observation": "<what they saw>", "thought": "<their reasoning>", "action": "<what this agent did>", "result": "<their output>"}}]}}]}}"""

EDGES = """You are an expert in causal reasoning and multi-agent task analysis.
{header}
Below are the subtasks with their agents:
{subtasks}
Your job:
1. Construct causal edges ONLY for consecutive subtask pairs: (S1->S2), (S2->S3), ... (subtask-subtask edges)
2. For each subtask, construct causal edges BETWEEN agents inside this subtask only (no cross-subtask agent edges)
3. Use the agent-level DAG to describe how observations, reasoning, and decisions flow from one agent to another
Answer with JSON only:
{{"subtask_edges": [{{"from": "S1", "to": "S2", "type": "data_dependency | logical_prereq", "counterfactual_patterns": [<pattern>, ...]}}],
 "agent_edges": [{{"subtask": "S1", "from": "<upstream agent>", "to": "<downstream agent>", "type": "obs_dependency | reasoning_continuation | decision_dependency | environment_feedback | memory_ref | loop_control", "counterfactual_patterns": [<pattern>, ...]}}]}}
where each <pattern> is {{"scenario": "local | planning-control | data-flow | deviation-aware", "bias": "<upstream deviation>", "anomaly": "<downstream observable error>", "reversible": true | false | null}}.
Guidelines:
- You may output zero, one, or multiple counterfactual patterns for each edge.
- Output all subtask edges first, then agent edges by subtask.
Additional Guidelines for Counterfactual Pattern Construction:
1. Counterfactual patterns must correspond to 4 attribution scenarios: Local (whether the error of the current edge is caused by itself), Planning-Control (planner/executor responsibility in control flow/loops), Data-Flow (the starting point of data corruption in data streams), and Deviation-Aware (whether the deviation is reversible).
2. For Subtask/Agent edges, explicitly bind the potential bias of the upstream node (Bias) to the observable anomaly of the downstream node (Anomaly), e.g., "If the Thought of the upstream Agent has hallucinations (Bias), the Result of the downstream Agent will have data errors (Anomaly)".
3. When constructing Planning-Control counterfactuals, distinguish between planner responsibility (repeating failed strategies) and executor responsibility (execution anomalies under valid strategies).
4. When constructing Data-Flow counterfactuals, associate the consistency corruption node of specific data items.
5. When constructing Deviation-Aware counterfactuals, mark whether the deviation is reversible (whether subsequent steps self-correct) in "reversible"."""

STEP_EDGES = """You are an AI assistant tasked with analyzing multi-agent execution traces.
{header}
Below are the subtasks:
{subtasks}
Your job:
1. Identify step-level edges (meaningful data passing between steps)
2. For each step edge, identify the upstream step (data producer) and downstream step (data consumer)
Answer with JSON only:
{{"step_edges": [{{"upstream_step": <integer step id where the data is produced>, "output_data": "<short description of the data, e.g. distance=30>", "downstream_step": <integer step id where the data is used>, "input_data": "<short description of the data as used>", "data_type": "text | numeric | list | boolean"}}]}}
Guidelines:
- Step edges should capture meaningful data passing from an upstream to a later downstream step.
- You may output zero, one, or multiple step edges."""

ORACLES = """You are an AI assistant tasked with synthesizing a complete set of Subtask Virtual Oracles for hierarchical failure diagnosis in a multi-agent trajectory.
{header}
{rag}
Given subtask plan produced by the decomposition stage:
{subtasks}
Your goal: Generate ALL virtual oracles for ALL subtasks.
IMPORTANT thinking rule:
- You must synthesize oracles in subtask order: k = 1..K.
- While generating the oracle for the current subtask, treat all previously generated oracles as "previous oracle constraints" (internal memory). Use them to ensure consistency, avoid contradictions, and define valid preconditions.
You MUST perform a self-check process:
1) Draft All Oracles (sequential): for k=1..K, draft the oracle using the Problem, the retrieved reference example, the subsequent unprocessed trajectory, and the previously generated oracle constraints.
2) Global Consistency Check:
- No oracle contradicts the problem instruction or earlier oracles.
- Precondition must only depend on information that is available before or at the beginning of this subtask (i.e., upstream outputs, environment states, or outcomes implied by earlier oracles).
- Key Evidence must include only essential evidence that should be checked during this subtask.
- Acceptance Criteria must be checkable after execution and falsifiable.
3) Finalize All Oracles.
Answer with the final oracles only, as JSON, one entry per subtask in order:
{{"oracles": [{{"subtask": "<subtask id, exactly as in the plan>", "goal": "<what this subtask should achieve>", "preconditions": ["<each item must reference upstream outputs/environment states only>"], "key_evidence": ["<critical facts/claims/tool-return fields/intermediate quantities to verify>"], "acceptance_criteria": ["<checkable post-hoc pass/fail condition>"]}}]}}"""

ORACLE_ONE = """You are an AI assistant tasked with synthesizing the Subtask Virtual Oracle for ONE subtask of a multi-agent trajectory, for hierarchical failure diagnosis.
{header}
{rag}
Given subtask plan produced by the decomposition stage:
{subtasks}
Previous oracle constraints (oracles already synthesized for the earlier subtasks):
{previous}
Your goal: synthesize the oracle for subtask {subtask_id} only.
- It must not contradict the problem instruction or the previous oracle constraints.
- Preconditions must only depend on information available before or at the beginning of this subtask (upstream outputs, environment states, or outcomes implied by earlier oracles).
- Key Evidence must include only essential evidence that should be checked during this subtask.
- Acceptance Criteria must be checkable after execution and falsifiable.
Answer with JSON only:
{{"subtask": "{subtask_id}", "goal": "<what this subtask should achieve>", "preconditions": ["..."], "key_evidence": ["..."], "acceptance_criteria": ["..."]}}"""

BACKTRACK = """You are an AI assistant tasked with analyzing a multi-agent conversation solving a real-world problem and performing hierarchical failure backtracking.
{header}
Here is the causal graph describing the hierarchical reasoning structure:
{graph}
Traverse the subtasks in this reverse topological order: {order}
Your job:
1) Subtask-level backtracking:
- For each subtask, in the order above, determine its actual execution output from the conversation slice within its step range. Compare the actual execution output against this subtask's oracle Goal and Acceptance Criteria. Make a binary discrepancy decision (0/1). If discrepancy=1, the subtask is a candidate error subtask.
2) Agent-level backtracking:
- For each candidate subtask, evaluate each constituent agent. Compare the agent's OTAR against the oracle Preconditions and Key Evidence of that subtask. Make a binary discrepancy decision (0/1). If discrepancy=1, the agent is a candidate error agent.
3) Step-level backtracking:
- For each candidate agent within a candidate subtask, evaluate its executed steps in that subtask.
- For each step, extract concrete execution details (prioritize tool input/output, intermediate computed values, cited facts, or explicit variable references).
- Cross-check the step's execution details against: (i) the agent's OTAR summary; (ii) the full oracle checklist of this subtask (Goal, Preconditions, Key Evidence, Acceptance Criteria).
- Make a binary discrepancy decision (0/1). If discrepancy=1, the step is a candidate error step.
Answer with JSON only, listing every decision you made:
{{"subtasks": [{{"id": "<subtask id>", "discrepancy": 0 | 1, "reason": "<one sentence>"}}],
 "agents": [{{"subtask": "<candidate subtask id>", "agent": "<agent name>", "discrepancy": 0 | 1, "reason": "<one sentence>"}}],
 "steps": [{{"step": <step id>, "agent": "<agent name>", "discrepancy": 0 | 1, "reason": "<one sentence>"}}]}}"""

ATTRIBUTION = """You are an AI assistant tasked with analyzing a multi-agent conversation solving a real-world problem and performing counterfactual failure attribution.
{header}
Here is the structured candidate_set:
{candidates}
Here is the graph:
{graph}
Your job is to identify the SINGLE most responsible reasoning mistake that directly leads to the wrong final result.
You MUST follow this reasoning procedure over the candidate error steps:
Stage A Local Attribution (local vs upstream propagation):
- For each candidate step x: use the graph's predecessor relations and edge-attached counterfactual patterns to judge whether there exists any upstream step that can causally explain the anomaly at x under the oracle constraints.
- If no upstream causal trigger can explain x AND x received valid inputs yet produced an incorrect output, treat x as a strong local-origin root-cause candidate.
Stage B Planning-Control Attribution (control / loop responsibility):
- Use the loop groups of the graph (entry/internal/exit roles) to analyze whether the failure is caused by redundant cyclic behavior.
- Distinguish planner vs executor responsibility:
- Planner responsibility: despite repeated error signals, the planner repeats semantically identical thoughts/commands and fails to adapt strategy.
- Executor responsibility: the planner proposes valid strategy shifts, yet execution still yields abnormal results.
Stage C Data-Flow Attribution (data dependency responsibility):
- Use the step edges of the graph to trace how key data items are produced and consumed.
- Decide whether the candidate step fabricates data (no upstream basis), misinterprets upstream data, misuses otherwise correct data, or only propagates data corrupted upstream.
- If the error propagates via data, prefer attributing responsibility to the earliest step where valid upstream inputs are first corrupted into an abnormal result.
Stage D Final Screening (Reversibility and Irrecoverability):
- Deviation-aware filter (reversibility): check whether the deviation introduced by a candidate step is later self-corrected such that oracle constraints are re-satisfied (system returns to a valid state). If the deviation is reversible (self-corrected later), assign it minimal responsibility compared to irreversible deviations.
- Irrecoverability tie-break (first point blocking recovery): prefer the candidate step that first makes it hard or impossible to restore the correct reasoning path through conventional means, rather than the earliest deviation.
Final decision rule:
- Select ONE step that best satisfies: (1) true origin (local-origin or earliest data corruption) AND (2) passes Final Screening (irreversible and/or first irrecoverable point) AND (3) strongest downstream impact / irrecoverability.
- Determine the agent name at that step, the exact step index, and a concise explanation (2-3 sentences) that explicitly mentions which attribution stages (Local / Planning-Control / Data-Flow / Final Screening) support this choice.
Answer with JSON only:
{{"assessments": [{{"step": <candidate step id>, "agent": "<agent name>", "local_origin": true | false, "upstream_causes": [<step ids that causally explain this step's anomaly>], "loop_group": "<loop group id or null>", "loop_responsibility": "planner | executor | none", "data_flow": "fabricates | misinterprets | misuses | propagates | none", "reversible": true | false, "irrecoverable": true | false}}],
 "agent_name": "<your final prediction, a single agent name>",
 "step_number": <your final prediction, a single integer step id>,
 "reason_for_mistake": "<2-3 sentences>",
 "supporting_stages": ["Local" | "Planning-Control" | "Data-Flow" | "Final Screening", ...]}}"""

DIRECT = """You are an AI assistant tasked with analyzing a multi-agent conversation solving a real-world problem, using the causal graph as a map of the run.
{header}
Here is the causal graph describing the hierarchical reasoning structure (subtasks, agents with their Observation/Thought/Action/Result, subtask/agent/step edges and loop groups):
{graph}
Based on this conversation and the graph, identify which agent made the mistake that directly leads to the wrong final result, at which step, and why.
Answer in this exact plain text format:
Agent Name: (your prediction, a single agent name)
Step Number: (your prediction, a single integer step id)
Reason for Mistake: (your explanation, summarize in 1-2 sentences)
No special symbols, no extra commentary."""
