"""Oracle judges: test models that know a trace's gold label.

:class:`OracleJudge` is a reply function for :class:`faultfinder.llm.FunctionBackend`. It
reads the question each Who&When baseline and the agentic navigator ask, and answers it
in that method's format:

============== ===================================================================
question       answer
============== ===================================================================
all-at-once    'Agent Name: A\\nStep Number: S\\nReason for Mistake: ...'
step-by-step   '1. Yes. 2. ...' when the judged (last shown) step is S, else '1. No. 2. ...'
binary search  the half ('upper half' / 'lower half') whose range holds S
explain        'Reason for Mistake: ...' (binary search's optional follow-up)
agentic        reads step S once, then submits A and S (tool call, or the text ACTION line)
ECHO analyst   the analysis JSON (its schema is sent with the request): A and S as the
               primary conclusion, A's evaluation at S
ECHO argument  the context-aware step agent's sections; 'Errors' says whether the
               argued step is S
ECHO judge     the judge's JSON naming A and S
ECHO extractor the LLM context extractor's three compressions of a step
CHIEF stages   a graph of one subtask over the whole run (every speaker's OTAR entry, no
               edges, one oracle); backtracking names S as the one discrepant step;
               counterfactual attribution and the direct answer name A and S
============== ===================================================================

The *perfect* judge answers with the gold agent A and step S. The *wrong* judge
(``wrong=True``) answers with another agent and one of its steps outside the acceptable
steps, so every field it can influence is wrong (in a trace with one speaker a method
that derives the agent from the step can still be right about the agent: there is no
other to name). A question it does not recognise raises, so a prompt change that breaks
the oracle fails loudly. Step-by-step needs the step indices in the log (the default,
``step_indices=True``).

With the perfect judge, a method that reads answers correctly scores 100% agent and step
on every trace whose labelled agent speaks at the labelled step; on the others the
agent/step rule (``judging/pairing.py``) decides which field a method can recover.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from faultfinder.errors import FaultfinderError
from faultfinder.llm.base import ChatRequest
from faultfinder.llm.doubles import FunctionBackend
from faultfinder.methods.chief.prompts import stage_of as chief_stage_of
from faultfinder.traces.schema import Trace

QuestionKind = Literal[
    "all-at-once",
    "step",
    "half",
    "explain",
    "agentic",
    "echo-analysis",
    "echo-argument",
    "echo-judge",
    "echo-compress",
    "chief",
]


@dataclass(frozen=True)
class Question:
    """What a request asks, as far as an oracle needs to know."""

    kind: QuestionKind
    step: int | None = None
    """Step-by-step: the step being judged."""
    stage: str = ""
    """CHIEF: the stage asked (``methods.chief.prompts.stage_of``)."""
    upper: tuple[int, int] | None = None
    """Binary search: the upper half's inclusive range."""
    lower: tuple[int, int] | None = None
    """Binary search: the lower half's inclusive range."""
    answered_tools: bool = False
    """Agentic: the conversation already holds a tool result."""


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return str(content or "")


_HALVES = re.compile(
    r"lower half is defined as the range from step (\d+) to step (\d+) and upper half is "
    r"defined as the range from step (\d+) to step (\d+)"
)


def question_of(request: ChatRequest, trace: Trace) -> Question:
    """Classify ``request`` (raises FaultfinderError for a question no oracle knows)."""
    texts = [_text(m.get("content")) for m in request.messages]
    system = next(
        (t for m, t in zip(request.messages, texts, strict=True) if m.get("role") == "system"), ""
    )
    last = texts[-1] if texts else ""
    schema = request.constraint.json_schema if request.constraint else None
    fields = (schema or {}).get("properties") or {}
    if "primary_conclusion" in fields:
        return Question("echo-analysis")
    if "mistake_agent" in fields:
        return Question("echo-judge")
    if "key_decision" in fields:
        return Question("echo-compress")
    chief_stage = chief_stage_of(last) or chief_stage_of("\n".join(texts))
    if chief_stage:
        return Question("chief", stage=chief_stage)
    argued = _ARGUED.search(last)
    if "Context-Aware Step Agent" in system and argued:
        return Question("echo-argument", step=int(argued.group(1)))
    if "expert debugger of LLM-based multi-agent systems" in system:
        answered = any(m.get("role") == "tool" for m in request.messages) or any(
            t.startswith("OBSERVATION") for t in texts[1:]
        )
        return Question("agentic", answered_tools=answered)
    if "Agent Name: (Your prediction)" in last:
        return Question("all-at-once")
    halves = _HALVES.search(last)
    if halves:
        lo_a, lo_b, up_a, up_b = (int(g) for g in halves.groups())
        return Question("half", upper=(up_a, up_b), lower=(lo_a, lo_b))
    if "whether the most recent agent's action contains an error" in last:
        return Question("step", step=_last_step_shown(last, trace))
    if "explain what the mistake in that step is" in last:
        return Question("explain")
    raise FaultfinderError(f"oracle judge: unrecognised question: {last[:120]!r}")


_ARGUED = re.compile(r"Please analyze this agent \(Step (\d+) - ")
"""The step a context-aware ECHO step agent argues about."""


def _last_step_shown(prompt: str, trace: Trace) -> int:
    log = prompt.split("Your task is to determine whether", 1)[0]
    shown = [
        int(m.group(1))
        for m in re.finditer(r"^Step (\d+) - (.+?): ", log, flags=re.MULTILINE)
        if int(m.group(1)) < len(trace.steps) and trace.steps[int(m.group(1))].speaker == m.group(2)
    ]
    if shown:
        return shown[-1]
    # The paper's prompts show 'name: content' lines without indices: the judge, who
    # knows the trace, finds its steps in the log in order; the last one found is the
    # step asked about (steps later in the trace are not shown yet).
    return _last_step_found(log, trace)


def _last_step_found(log: str, trace: Trace) -> int:
    """The last step of ``trace`` whose 'speaker: content' line is in ``log``, its steps
    looked for in order, each after the one before (so a repeated text is not taken for a
    later step)."""
    found, at = None, 0
    for step in trace.steps:
        head = f"{step.speaker}: {step.content.strip()[:80]}"
        where = log.find(head, at)
        if where < 0:
            break
        found, at = step.index, where + len(head)
    if found is None:
        raise FaultfinderError("oracle judge: no step of the trace is in the step-by-step log")
    return found


def oracle_target(trace: Trace, *, wrong: bool = False) -> tuple[str, int]:
    """(agent, step) the judge steers toward: the gold label, or for the wrong judge
    another agent and one of its steps that is not an acceptable step."""
    if trace.label is None or trace.label.agent is None or trace.label.step is None:
        raise FaultfinderError(f"oracle judge: trace '{trace.id}' has no complete gold label")
    gold = trace.label
    if not wrong:
        return gold.agent, gold.step  # type: ignore[return-value]
    bad = [s for s in trace.steps if s.index not in gold.acceptable_steps]
    others = [s for s in bad if s.agent != gold.agent]
    candidates = others or bad
    if not candidates:
        raise FaultfinderError(f"oracle judge: trace '{trace.id}' has no wrong step to name")
    return candidates[0].agent, candidates[0].index


class OracleJudge:
    """Answers every recognised question from the gold label (see the module docstring)."""

    def __init__(self, trace: Trace, *, wrong: bool = False) -> None:
        self.trace = trace
        self.wrong = wrong
        self.agent, self.step = oracle_target(trace, wrong=wrong)
        self.questions: list[Question] = []

    def __call__(self, request: ChatRequest) -> str | dict[str, Any]:
        question = question_of(request, self.trace)
        self.questions.append(question)
        return self.answer(question, tools=bool(request.tools))

    def _agent_step_reason(self) -> str:
        return (
            f"Agent Name: {self.agent}\nStep Number: {self.step}\n"
            f"Reason for Mistake: {self.reason()}"
        )

    def reason(self) -> str:
        return f"oracle: step {self.step} by {self.agent} is the decisive error."

    def answer(self, question: Question, *, tools: bool = False) -> str | dict[str, Any]:
        """The reply to ``question`` in its method's format."""
        if question.kind == "all-at-once":
            return self._agent_step_reason()
        if question.kind == "step":
            verdict = "Yes" if question.step == self.step else "No"
            return f"1. {verdict}. 2. {self.reason()}"
        if question.kind == "half":
            assert question.upper is not None
            low, high = question.upper
            return "upper half" if low <= self.step <= high else "lower half"
        if question.kind == "explain":
            return f"Reason for Mistake: {self.reason()}"
        if question.kind.startswith("echo-"):
            return self._echo(question)
        if question.kind == "chief":
            return self._chief(question.stage)
        return self._agentic(question, tools)

    def _chief(self, stage: str) -> str:
        if stage == "direct":  # asked as all-at-once asks: agent, step and reason lines
            return self._agent_step_reason()
        last = len(self.trace.steps) - 1
        speakers = list(dict.fromkeys(s.agent for s in self.trace.steps))
        oracle = {
            "subtask": "S1",
            "goal": "the task's answer",
            "preconditions": ["the task"],
            "key_evidence": ["the steps"],
            "acceptance_criteria": ["a right answer"],
        }
        replies: dict[str, Any] = {
            "decompose": {
                "subtasks": [
                    {
                        "id": "S1",
                        "name": "The whole run",
                        "description": "every step of the run",
                        "step_range": [0, last],
                    }
                ]
            },
            "otar": {
                "subtasks": [
                    {
                        "subtask": "S1",
                        "agents": [
                            {
                                "agent": name,
                                "observation": "its input",
                                "thought": "its plan",
                                "action": "its step",
                                "result": "its output",
                            }
                            for name in speakers
                        ],
                    }
                ]
            },
            "edges": {"subtask_edges": [], "agent_edges": []},
            "step-edges": {"step_edges": []},
            "oracle": oracle,
            "oracles": {"oracles": [oracle]},
            "backtrack": {
                "subtasks": [{"id": "S1", "discrepancy": 1, "reason": self.reason()}],
                "agents": [
                    {
                        "subtask": "S1",
                        "agent": self.agent,
                        "discrepancy": 1,
                        "reason": self.reason(),
                    }
                ],
                "steps": [
                    {
                        "step": self.step,
                        "agent": self.agent,
                        "discrepancy": 1,
                        "reason": self.reason(),
                    }
                ],
            },
            "attribution": {
                "assessments": [
                    {
                        "step": self.step,
                        "agent": self.agent,
                        "local_origin": True,
                        "upstream_causes": [],
                        "loop_group": None,
                        "loop_responsibility": "none",
                        "data_flow": "none",
                        "reversible": False,
                        "irrecoverable": True,
                    }
                ],
                "agent_name": self.agent,
                "step_number": self.step,
                "reason_for_mistake": self.reason(),
                "supporting_stages": ["Final Screening"],
            },
        }
        if stage not in replies:
            raise FaultfinderError(f"oracle judge: unrecognised CHIEF stage {stage!r}")
        return json.dumps(replies[stage])

    def _echo(self, question: Question) -> str:
        if question.kind == "echo-analysis":
            conclusion = {
                "type": "single_agent",
                "attribution": [self.agent],
                "mistake_step": self.step,
                "confidence": 0.95,
                "reasoning": self.reason(),
            }
            evaluation = {
                "agent_name": self.agent,
                "step_index": self.step,
                "error_likelihood": 0.95,
                "reasoning": self.reason(),
                "evidence": self.reason(),
            }
            analysis = {
                "analysis_summary": self.reason(),
                "agent_evaluations": [evaluation],
                "primary_conclusion": conclusion,
                "alternative_hypotheses": [],
            }
            return json.dumps(analysis)
        if question.kind == "echo-judge":
            answer = {
                "mistake_agent": self.agent,
                "mistake_step": self.step,
                "mistake_reason": self.reason(),
            }
            return f"<json>{json.dumps(answer)}</json>"
        if question.kind == "echo-argument":
            errors = self.reason() if question.step == self.step else "No mistake in this step."
            return (
                "## Purpose:\nThe step's task.\n\n## Assumptions and Information:\nThe log.\n\n"
                f"## Errors:\n{errors}\n\n## Evidence:\n{errors}"
            )
        return json.dumps(
            {"key_decision": "a decision", "summary": "a summary", "milestone": "a milestone"}
        )

    def _agentic(self, question: Question, tools: bool) -> str | dict[str, Any]:
        args: dict[str, Any]
        if not question.answered_tools:
            name, args = "read_step_output", {"step": self.step}
        else:
            name = "submit"
            args = {
                "agent": self.agent,
                "step": self.step,
                "reason": self.reason(),
                "confidence": 0.9,
            }
        if tools:
            return {"text": "", "tool_calls": [{"name": name, "arguments": args}]}
        return f"THOUGHT: oracle.\nACTION: {name} {json.dumps(args)}"


def perfect_judge(trace: Trace) -> FunctionBackend:
    """A backend that answers every question about ``trace`` from its gold label."""
    return FunctionBackend(OracleJudge(trace), model=f"oracle:{trace.id}")


def wrong_judge(trace: Trace) -> FunctionBackend:
    """A backend that answers every question about ``trace`` wrongly (see OracleJudge)."""
    return FunctionBackend(OracleJudge(trace, wrong=True), model=f"wrong-oracle:{trace.id}")


# --- running methods against an oracle --------------------------------------------

ORACLE_METHODS = (
    "all-at-once",
    "step-by-step",
    "binary-search",
    "hybrid",
    "agentic",
    "echo",
    "echo:I1",
    "echo:I2",
    "echo:I3",
    "echo:llm-context",
    "chief",
    "chief:M1",
    "chief:M1+M2",
    "chief:M1+M3",
    "chief:paper",
)
"""Methods whose every question an oracle judge answers."""

ORACLE_PRESETS = tuple(
    f"{method}:{preset}"
    for method, presets in (
        ("all-at-once", ("paper", "step-index", "refined")),
        ("step-by-step", ("paper", "step-index", "refined")),
        ("binary-search", ("paper", "step-index", "refined")),
        ("hybrid", ("paper", "step-index", "refined")),
        ("agentic", ("tools", "text", "quick", "paper")),
        ("echo", ("paper", "I4", "panel6")),
        ("chief", ("full",)),
    )
    for preset in presets
)
"""Every other preset of those methods (``faultfinder methods``): the oracle answers them
too (tests/test_oracle.py checks each on the consistent labels, and that the list is
complete)."""


@dataclass(frozen=True)
class OracleRow:
    """One method's result on one trace with an oracle judge."""

    trace_id: str
    method: str
    consistent: bool
    """The labelled agent speaks at the labelled step."""
    agent_correct: bool
    step_correct: bool
    status: str
    step_unparsed: str | None
    step: int | None = None
    """The step the method answered."""


def label_consistent(trace: Trace) -> bool:
    """True when the gold agent is the speaker of the gold step."""
    label = trace.label
    return (
        label is not None
        and label.step is not None
        and 0 <= label.step < len(trace.steps)
        and trace.steps[label.step].agent == label.agent
    )


async def run_oracle(
    traces: list[Trace], methods: tuple[str, ...] = ORACLE_METHODS, *, wrong: bool = False
) -> list[OracleRow]:
    """Every method on every (labelled) trace with a fresh perfect (or wrong) judge, scored
    with the evaluation's metrics."""
    from faultfinder.eval.metrics import agent_correct, step_correct
    from faultfinder.judging.method import run_method
    from faultfinder.llm.client import LLM
    from faultfinder.registry import create_method

    rows: list[OracleRow] = []
    for trace in traces:
        if trace.label is None:
            continue
        for spec in methods:
            backend = wrong_judge(trace) if wrong else perfect_judge(trace)
            result = await run_method(create_method(spec), trace, LLM(backend), label=spec)
            if result.status == "error":
                raise FaultfinderError(f"oracle run of {spec} on {trace.id}: {result.error}")
            rows.append(
                OracleRow(
                    trace_id=trace.id,
                    method=spec,
                    consistent=label_consistent(trace),
                    agent_correct=agent_correct(result.agent, trace.label),
                    step_correct=step_correct(result.step, trace.label),
                    status=result.status,
                    step_unparsed=result.details.get("step_unparsed"),
                    step=result.step,
                )
            )
    return rows
