"""The demo team: an Orchestrator that plans and delegates, a Researcher with a fact-book
lookup tool, and a Calculator with an arithmetic tool.

Plain OpenAI-compatible calls through the ``openai`` SDK, which reads OPENAI_BASE_URL and
OPENAI_API_KEY, so any recording proxy or endpoint can sit in between. Each agent names
itself with the ``X-Faultfinder-Agent`` header (or, with ``identity="path"``, with an
``/agent/<name>/v1`` base URL; with ``identity="none"`` the proxy falls back to the
system prompt).

Protocol: the Orchestrator first writes a ``PLAN:``; then, each round, answers
``NEXT: <Worker> | <instruction>`` or ``FINAL: <answer>``. A worker reporting NOT FOUND or
ERROR, or two unreadable Orchestrator replies in a row, makes the Orchestrator re-plan
(a new trial, opened by "We are working to address the following user request").
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Literal

from faultfinder.demo_team.tools import NOT_FOUND, TOOL_SPECS, run_tool
from faultfinder.llm import json_text

AGENT_HEADER = "X-Faultfinder-Agent"
WORKERS = ("Researcher", "Calculator")
REPLAN_MARKER = "We are working to address the following user request"

ORCHESTRATOR_SYSTEM = (
    "You are the Orchestrator. You lead a team of two workers:\n"
    "- Researcher: looks facts up in the team's fact book with its lookup tool.\n"
    "- Calculator: evaluates arithmetic with its calculate tool.\n"
    "You never look anything up or compute anything yourself: you plan and delegate."
)
RESEARCHER_SYSTEM = (
    "You are the Researcher. You answer questions about places only from the team's "
    "fact book: call the lookup tool with a short query, then state the fact you found "
    "(number included). If the fact book has nothing, say NOT FOUND."
)
CALCULATOR_SYSTEM = (
    "You are the Calculator. Turn the instruction into one arithmetic expression, call "
    "the calculate tool with it, then state the result."
)

PLAN_PROMPT = (
    "Task: {task}\n\n"
    "Write a short plan for the team as a numbered list, one worker action per line, in "
    "the form '<n>. <Worker>: <instruction>'. Start your reply with 'PLAN:'."
)
REPLAN_PROMPT = (
    REPLAN_MARKER + ":\n{task}\n\n"
    "The previous plan did not work: {reason}\n"
    "What the team found so far:\n{ledger}\n\n"
    "Write a new plan in the same form ('<n>. <Worker>: <instruction>' lines). "
    "Start your reply with 'PLAN:'."
)
ROUND_PROMPT = (
    "Task: {task}\n\n"
    "Progress so far:\n{ledger}\n\n"
    "Decide the next action. Reply with exactly one line, either\n"
    "NEXT: <Researcher|Calculator> | <instruction for that worker>\n"
    "or, when the task is solved,\n"
    "FINAL: <answer>"
)

_NEXT = re.compile(r"NEXT\s*:\s*(Researcher|Calculator)\s*[|:\-]\s*(.+)", re.IGNORECASE)
_FINAL = re.compile(r"FINAL\s*:\s*(.+)", re.IGNORECASE)
_TEXT_TOOL = re.compile(r"\b(lookup|calculate)\s*[:(]\s*[\"']?([^\"')\n]+)", re.IGNORECASE)

Identity = Literal["header", "path", "none"]


@dataclass
class TeamConfig:
    """How the team runs."""

    model: str = field(default_factory=lambda: os.environ.get("FAULTFINDER_DEMO_MODEL", "demo"))
    temperature: float = 0.0
    max_tokens: int = 256
    stream: bool = False
    max_rounds: int = 8
    max_replans: int = 1
    max_tool_rounds: int = 3
    identity: Identity = "header"
    verbose: bool = True


@dataclass
class Outcome:
    answer: str | None
    rounds: int
    replans: int
    ledger: list[str]


class ModelClient:
    """One OpenAI client per agent (so each can carry its identity)."""

    def __init__(self, agent: str, config: TeamConfig) -> None:
        import openai

        self.agent = agent
        self.config = config
        base_url = os.environ.get("OPENAI_BASE_URL")
        headers: dict[str, str] = {}
        if config.identity == "header":
            headers[AGENT_HEADER] = agent
        elif config.identity == "path" and base_url:
            root, _, tail = base_url.rstrip("/").rpartition("/v1")
            base_url = f"{root}/agent/{agent}/v1{tail}"
        self.client = openai.OpenAI(base_url=base_url, default_headers=headers, max_retries=0)

    def chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """The assistant message (as a dict) for ``messages``."""
        params: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
        }
        if tools:
            params["tools"] = tools
        if not self.config.stream:
            reply = self.client.chat.completions.create(**params)
            message = reply.choices[0].message
            out: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
            if message.tool_calls:
                out["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": c.function.arguments},
                    }
                    for c in message.tool_calls
                ]
            return out
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        for chunk in self.client.chat.completions.create(**params, stream=True):
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            if delta.content:
                text.append(delta.content)
            for part in delta.tool_calls or []:
                call = calls.setdefault(
                    part.index,
                    {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
                )
                if part.id:
                    call["id"] = part.id
                if part.function and part.function.name:
                    call["function"]["name"] += part.function.name
                if part.function and part.function.arguments:
                    call["function"]["arguments"] += part.function.arguments
        out = {"role": "assistant", "content": "".join(text)}
        if calls:
            out["tool_calls"] = [calls[i] for i in sorted(calls)]
        return out


class Team:
    """Runs one task to a final answer (or to the round limit)."""

    def __init__(self, config: TeamConfig | None = None) -> None:
        self.config = config or TeamConfig()
        self.orchestrator = ModelClient("Orchestrator", self.config)
        self.workers = {name: ModelClient(name, self.config) for name in WORKERS}

    def log(self, text: str) -> None:
        if self.config.verbose:
            print(text, flush=True)

    def run(self, task: str) -> Outcome:
        history: list[dict[str, Any]] = [{"role": "system", "content": ORCHESTRATOR_SYSTEM}]
        ledger: list[str] = []
        self._plan(history, PLAN_PROMPT.format(task=task))
        replans = stalls = 0
        for round_number in range(1, self.config.max_rounds + 1):
            history.append(
                {"role": "user", "content": ROUND_PROMPT.format(task=task, ledger=_ledger(ledger))}
            )
            reply = self.orchestrator.chat(history)
            history.append({"role": "assistant", "content": reply["content"]})
            self.log(f"[Orchestrator] {reply['content']}")
            final = _FINAL.search(reply["content"])
            step = _NEXT.search(reply["content"])
            reason: str | None = None
            if step:
                worker = step.group(1).capitalize()
                instruction = step.group(2).strip()
                answer = self._work(worker, instruction)
                ledger.append(f"- {worker} (asked: {instruction}): {answer}")
                stalls = 0
                if NOT_FOUND in answer or answer.startswith("ERROR"):
                    reason = f"the {worker} reported: {answer}"
            elif final:
                return Outcome(final.group(1).strip(), round_number, replans, ledger)
            else:
                stalls += 1
                if stalls >= 2:
                    reason = "the Orchestrator's replies could not be read twice in a row"
                    stalls = 0
            if reason is not None:
                if replans >= self.config.max_replans:
                    self.log(f"[team] giving up: {reason}")
                    return Outcome(None, round_number, replans, ledger)
                replans += 1
                self._plan(
                    history, REPLAN_PROMPT.format(task=task, reason=reason, ledger=_ledger(ledger))
                )
        self.log("[team] round limit reached")
        return Outcome(None, self.config.max_rounds, replans, ledger)

    def _plan(self, history: list[dict[str, Any]], prompt: str) -> None:
        history.append({"role": "user", "content": prompt})
        reply = self.orchestrator.chat(history)
        history.append({"role": "assistant", "content": reply["content"]})
        self.log(f"[Orchestrator] {reply['content']}")

    def _work(self, worker: str, instruction: str) -> str:
        system = RESEARCHER_SYSTEM if worker == "Researcher" else CALCULATOR_SYSTEM
        tool = "lookup" if worker == "Researcher" else "calculate"
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": instruction},
        ]
        client = self.workers[worker]
        reply: dict[str, Any] = {"content": ""}
        wrote_tool = False
        for _ in range(self.config.max_tool_rounds + 1):
            reply = client.chat(messages, tools=[TOOL_SPECS[tool]])
            messages.append(reply)
            if reply.get("tool_calls"):
                for call in reply["tool_calls"]:
                    result = run_tool(
                        call["function"]["name"], _arguments(call["function"]["arguments"])
                    )
                    self.log(f"[{worker} tool] {call['function']['name']} -> {result}")
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
                continue
            # Models without function calling may write the call as text: 'lookup: query'.
            written = _TEXT_TOOL.search(reply["content"] or "")
            if written and written.group(1).lower() == tool and not wrote_tool:
                wrote_tool = True
                argument = "query" if tool == "lookup" else "expression"
                result = run_tool(tool, {argument: written.group(2).strip()})
                self.log(f"[{worker} tool] {tool} -> {result}")
                messages.append({"role": "user", "content": f"{tool} result: {result}"})
                continue
            break
        answer = (reply.get("content") or "").strip() or "(no answer)"
        self.log(f"[{worker}] {answer}")
        return answer


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = json_text.loads(text or "{}")
    except json_text.JSONTextError:
        return {}
    return value if isinstance(value, dict) else {}


def _ledger(entries: list[str]) -> str:
    return "\n".join(entries) if entries else "(nothing yet)"


def main_run(task: str, config: TeamConfig) -> int:
    """Run the team and print the final answer; exit status 0 when it gave one."""
    try:
        outcome = Team(config).run(task)
    except Exception as exc:
        print(f"[team] stopped: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 2
    print(
        f"FINAL ANSWER: {outcome.answer if outcome.answer is not None else 'unknown'}", flush=True
    )
    return 0 if outcome.answer is not None else 1
