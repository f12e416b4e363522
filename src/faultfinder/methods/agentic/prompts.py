"""Prompts of the trace navigator.

The task definition follows the papers: the responsible agent and the decisive error step,
i.e. the earliest step at which the failure became inevitable (TraceElephant §2; Who&When's
"step where the mistake agent first made the mistake"). The navigation set-up follows
TraceElephant's Static Agentic method (§4.1, A.6.3): a mini-SWE-agent style loop whose
tools inspect step outputs and inputs and submit the answer. Bump PROMPT_VERSION whenever a
text here changes.
"""

from __future__ import annotations

from faultfinder.judging.method import Observability

PROMPT_VERSION = "agentic-v1"

SYSTEM = """\
You are an expert debugger of LLM-based multi-agent systems. A multi-agent system worked on \
a task and failed. Find the agent responsible for the failure and the decisive error step: \
the earliest step at which the failure became inevitable, that is, the first mistake that \
led to the wrong result and was not corrected later. If a later agent was explicitly \
responsible for catching an earlier mistake and did not, the decisive step is where that \
chance was missed.

You cannot see the whole trace at once. Navigate it with tools, reading what you need:
{tool_lines}

Steps are numbered from 0 in execution order; always use these numbers. Work the way a \
developer debugs: get an overview, read the steps that look suspicious, check what each agent \
was given against what it produced, and follow the problem back to where it started. \
You have at most {max_turns} turns. When you are confident, submit your verdict with the \
submit tool: the agent, the step, a short reason and your confidence between 0 and 1."""

TEXT_FORMAT = """

Each of your replies must be one THOUGHT line followed by exactly one ACTION line:
THOUGHT: <your reasoning, on one line>
ACTION: <tool name> <arguments as a JSON object>
For example:
THOUGHT: The search results look wrong; I will read step 3.
ACTION: read_step_output {{"step": 3}}
and, to finish:
THOUGHT: Step 3 used the wrong source and everything after relied on it.
ACTION: submit {{"agent": "{example_agent}", "step": 3, "reason": "It used the wrong \
source.", "confidence": 0.7}}
After each action you receive an OBSERVATION with the tool's result."""

INSTANCE = """\
The task given to the system: {task}
{ground_truth}The trace has {n_steps} steps (Step 0 to Step {last_step}) by these agents: \
{agents}.
What you can see: {visibility}
{overview}Begin."""

GROUND_TRUTH = "The correct answer to the task is: {ground_truth}\n"

OVERVIEW = "Overview of the steps (call list_steps or read a step for more):\n{listing}\n"

VISIBILITY: dict[Observability, str] = {
    "full": "each step's output, each step's input context (read_step_input) and the "
    "system's metadata: agent configurations and architecture notes (read_metadata).",
    "no-metadata": "each step's output and its input context (read_step_input); agent "
    "configurations and architecture notes are not available.",
    "no-inputs": "each step's output and the system's metadata (read_metadata); the inputs "
    "each step received are not available.",
    "outputs": "only each step's output (what each agent said or did); neither the inputs "
    "each step received nor the agent configurations are available.",
}

OBSERVATION = "OBSERVATION ({tool}):\n{result}"

FORMAT_ERROR = """\
Your reply could not be read ({error}). Reply with one THOUGHT line and exactly one ACTION \
line, e.g.
ACTION: read_step_output {{"step": 0}}
Available tools: {tools}."""

NO_TOOL_CALL = """\
Please continue by calling one of the tools ({tools}). When you are confident, call submit."""

TURNS_LEFT = "[{left} turn(s) left. Submit before they run out.]"

FORCED_SUBMIT = """\
You have run out of {what}. Submit your final verdict now, based on what you have read: the \
agent responsible for the failure, the decisive error step, a short reason and your \
confidence (0 to 1)."""

FORCED_TEXT = """
Reply with exactly one line:
ACTION: submit {"agent": "<agent>", "step": <step number>, "reason": "<reason>", \
"confidence": <0 to 1>}"""

FORCED_TOOLS = "\nCall the submit tool now."


def visibility_text(observability: Observability) -> str:
    return VISIBILITY[observability]
