"""A scripted stand-in for DoVer's debugging model on the demo team's logs.

A test double, like :mod:`faultfinder.demo_team.mock_model`: it answers DoVer's prompts
(segmentation, the all-at-once hypothesis, interventions, milestones, fulfilment) by rule,
so ``faultfinder debug`` runs end to end offline and tests know what to expect. Its
rules know the demo's three kinds of slip (a missing year, 'percent', a subtraction
where the task counts forward); on anything else it blames the first instruction and
proposes no change, which a replay then refutes. It is not a model and proves nothing
about DoVer's effectiveness; the embedded model or a real endpoint does that.

    faultfinder debug runs/RUN --model function:faultfinder.demo_team.mock_debugger:respond
"""

from __future__ import annotations

import json
import re
from typing import Any

from faultfinder.llm.base import ChatRequest

_STEP = re.compile(r"^Step (\d+) - ([^:]+): ?(.*)$")
_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})\b")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _log(prompt: str) -> list[tuple[int, str, str]]:
    """(step, agent, output) of each rendered step; an output runs until the next step
    or a blank line."""
    out: list[tuple[int, str, str]] = []
    current: list[str] | None = None
    for line in prompt.splitlines():
        match = _STEP.match(line)
        if match:
            current = [match.group(3)]
            out.append((int(match.group(1)), match.group(2).strip(), ""))
        elif current is not None and line.strip():
            current.append(line)
        else:
            current = None
        if current is not None and out:
            step, agent, _ = out[-1]
            out[-1] = (step, agent, "\n".join(current))
    return out


def _field(prompt: str, label: str) -> str:
    match = re.search(rf"^{label}:\s*(.*)$", prompt, re.MULTILINE)
    return match.group(1).strip() if match else ""


def fix_instruction(task: str, text: str) -> str:
    """The demo's slips corrected in one instruction or plan line (unchanged if none)."""
    year = _YEAR.search(task)
    lowered = text.lower()
    if "researcher" in lowered and "look up" in lowered and year and year.group(1) not in text:
        return text.rstrip(". ") + f" in {year.group(1)}"
    if "calculator" in lowered and "percent" in lowered:
        numbers = _NUMBER.findall(text.split("|")[-1].split(":")[-1])
        refs = re.findall(r"\[result of step \d+\]", text)
        operands = numbers + refs
        if len(operands) >= 2:
            head = text[: text.lower().index("compute")]
            return f"{head}Compute {operands[1]} * {operands[0]} / 100"
    if "calculator" in lowered and " - " in text and re.search(r"\bsince\b|\bafter\b", task, re.I):
        return text.replace(" - ", " + ")
    return text


def _fix_message(task: str, text: str) -> str:
    return "\n".join(fix_instruction(task, line) for line in text.split("\n"))


def _task(prompt: str) -> str:
    return _field(prompt, "Task") or _field(prompt, "The problem is")


def segmentation(prompt: str) -> str:
    steps = [
        {
            "step": step,
            "type": "initial" if i == 0 else "update",
            "criterion": "the orchestrator writes a plan",
        }
        for i, (step, _agent, text) in enumerate(
            [s for s in _log(prompt) if s[2].startswith("PLAN")]
        )
    ]
    return json.dumps({"planning_steps": steps})


def all_at_once(prompt: str) -> str:
    task = _task(prompt)
    log = _log(prompt)
    instructions = [s for s in log if s[2].startswith(("NEXT", "PLAN"))]
    blamed = next(
        (
            s
            for s in instructions
            if s[2].startswith("NEXT") and fix_instruction(task, s[2]) != s[2]
        ),
        None,
    )
    if blamed is None:
        blamed = next((s for s in instructions if s[2].startswith("NEXT")), log[0] if log else None)
    if blamed is None:
        return "Agent Name: unknown\nStep Number: 0\nReason for Mistake: empty log"
    return (
        f"Agent Name: {blamed[1]}\nStep Number: {blamed[0]}\n"
        "Reason for Mistake: this instruction does not ask for what the task needs."
    )


def intervention(prompt: str) -> str:
    task = _task(prompt)
    original = prompt.split("<<<\n", 1)[1].split("\n>>>", 1)[0]
    replacement = _fix_message(task, original)
    category = "plan_update" if original.startswith("PLAN") else "modified_instruction"
    return json.dumps(
        {
            "category": category,
            "replacement": replacement,
            "rationale": "ask for exactly what the task needs",
        }
    )


def milestones(prompt: str) -> str:
    body = prompt.split("Reference solution:\n", 1)[-1].split("\n\nAnswer with JSON", 1)[0]
    items = []
    for line in body.splitlines():
        match = re.match(r"^(\d+)\.\s*(.+)$", line.strip())
        if match:
            numbers = _NUMBER.findall(match.group(2).replace(",", ""))
            items.append(
                {
                    "order": int(match.group(1)),
                    "title": match.group(2).split(":")[0][:60],
                    "action": match.group(2),
                    "result": numbers[-1] if numbers else "",
                }
            )
    return json.dumps({"milestones": items[:5]})


def evaluate(prompt: str) -> str:
    listed = prompt.split("Milestones:\n", 1)[-1].split("\n\nExecution log", 1)[0]
    log = prompt.split("Execution log (Step N - agent: message):\n", 1)[-1]
    statuses = []
    for line in listed.splitlines():
        match = re.match(r"^(\d+)\.\s.*->\s*(\S*)\s*$", line.strip())
        if match:
            result = match.group(2)
            reached = bool(result) and re.search(rf"(?<![\d.]){re.escape(result)}(?![\d])", log)
            statuses.append(
                {
                    "order": int(match.group(1)),
                    "status": "achieved" if reached else "missed",
                    "evidence": result,
                }
            )
    return json.dumps(
        {
            "milestones": statuses,
            "new_path": {"explored": False, "feasible": False, "contribution": ""},
        }
    )


def fulfilment(prompt: str) -> str:
    blocks = prompt.split("<<<\n")
    original = blocks[1].split("\n>>>", 1)[0]
    replacement = blocks[2].split("\n>>>", 1)[0]
    new_run = prompt.split("in the NEW run:\n", 1)[-1].split("\n\nFinal answer of the original", 1)[
        0
    ]
    # Everything after the edited step itself (a step may span several lines).
    starts = [i for i, line in enumerate(new_run.splitlines()) if _STEP.match(line)]
    after_edit = "\n".join(new_run.splitlines()[starts[1] :]) if len(starts) > 1 else ""
    added = set(re.findall(r"\w+", replacement)) - set(re.findall(r"\w+", original))
    fulfilled = all(word in after_edit for word in added)
    reference = _field(prompt, "Reference answer")
    new_answer = _field(prompt, "Final answer of the new run")
    if fulfilled and reference and reference == new_answer:
        outcome = "success_after_intervention"
    elif fulfilled:
        outcome = "applied_but_insufficient"
    else:
        outcome = "instruction_not_executed"
    return json.dumps(
        {
            "is_intervention_fulfilled": fulfilled,
            "outcome": outcome,
            "evidence": f"new words: {sorted(added)}",
        }
    )


def candidates(prompt: str) -> str:
    """The static suggestion, then every instruction a demo fix would change."""
    task = _task(prompt)
    log = _log(prompt)
    found = []
    suggested = re.search(
        r"suggested: agent (.+?), step (\d+), reason: (.*)$", prompt, re.MULTILINE
    )
    if suggested:
        step = int(suggested.group(2))
        found.append(
            {
                "agent": suggested.group(1),
                "step": step,
                "reason": suggested.group(3),
                "expected_output": _fix_message(
                    task, next((t for s, _a, t in log if s == step), "")
                ),
            }
        )
    for step, agent, text in log:
        fixed = _fix_message(task, text)
        if fixed != text and all(c["step"] != step for c in found):
            found.append(
                {
                    "agent": agent,
                    "step": step,
                    "reason": "asks for the wrong thing",
                    "expected_output": fixed,
                }
            )
    return json.dumps({"candidates": found})


def observation(prompt: str) -> str:
    expected = _field(prompt, r"Expected output of step \d+")
    replayed = prompt.split("(after the correction):\n", 1)[-1].split(
        "\n\nAnswer three questions", 1
    )[0]
    original = prompt.split("Original steps from step", 1)[-1].split(":\n", 1)[-1]
    original = original.split("\n\nReplayed steps from step", 1)[0]
    satisfied = bool(expected) and expected in replayed
    # The same steps as before the correction: the failure recurs.
    recurs = _outputs(original) == _outputs(replayed)
    return json.dumps(
        {
            "satisfies_expected": satisfied,
            "failure_recurs": recurs,
            "deviates": False,
            "evidence": expected,
        }
    )


def _outputs(section: str) -> list[str]:
    return [text for _step, _agent, text in _log(section)]


def answer(prompt: str) -> str:
    """Reply to one DoVer (or all-at-once) prompt."""
    if "Propose up to" in prompt:
        return candidates(prompt)
    if "Answer three questions" in prompt:
        return observation(prompt)
    if "Identify the planning steps" in prompt:
        return segmentation(prompt)
    if "Intervention categories:" in prompt:
        return intervention(prompt)
    if "Turn the reference solution" in prompt:
        return milestones(prompt)
    if "Compare the execution log" in prompt:
        return evaluate(prompt)
    if "Decide whether the agents carried out the intervention" in prompt:
        return fulfilment(prompt)
    if "Agent Name: (Your prediction)" in prompt:
        return all_at_once(prompt)
    return "The scripted debugger only answers DoVer's prompts and all-at-once."


def respond(request: ChatRequest) -> str:
    """FunctionBackend entry point (``--model function:...:respond``)."""
    last = request.messages[-1].get("content") if request.messages else ""
    return answer(last if isinstance(last, str) else "")


def reply(body: dict[str, Any]) -> str:
    """FakeOpenAIServer entry point."""
    messages = body.get("messages") or [{}]
    content = messages[-1].get("content")
    return answer(content if isinstance(content, str) else "")
