"""The navigator loop: the model reads the trace through tools until it submits a verdict.

Two transports, one loop: OpenAI-style tool calls (``tools=`` on the request, replies'
``tool_calls``, ``tool`` role results) and the plain-text action format (``ACTION: tool
{json}`` lines, OBSERVATION messages, a GBNF grammar for constrained models).

Bounds: a turn budget (model calls), a token budget (tokens spent by this navigator run)
and the context budget (prompt size per call). Old tool results are elided, then old turns
dropped, to stay inside the context; when a budget runs out the model is asked once for its
final verdict (marked forced); an unreadable final answer is recorded as unparsed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from faultfinder.judging.reference import ground_truth_for
from faultfinder.judging.render import context_budget
from faultfinder.llm.base import messages_text
from faultfinder.llm.client import LLM, ParseError, Reply
from faultfinder.methods.agentic import prompts
from faultfinder.methods.agentic.actions import (
    Action,
    action_grammar,
    parse_action,
    parse_submission_text,
)
from faultfinder.methods.agentic.config import REPLY_TOKENS, AgenticConfig
from faultfinder.methods.agentic.tools import Submission, ToolOutcome, TraceTools
from faultfinder.traces.schema import ToolCall, Trace

Mode = Literal["tools", "text"]
ForcedBy = Literal["turns", "tokens", "context"]

ELIDED = "[This result was elided to save context space; call {tool} again to re-read it.]"
DROPPED = "[{n} earlier turn(s) were removed to save context space.]"
_FORCED_WHAT: dict[ForcedBy, str] = {
    "turns": "turns",
    "tokens": "token budget",
    "context": "context space",
}


@dataclass
class NavigatorResult:
    """What one navigator run produced."""

    submission: Submission | None
    """The verdict, or None when no readable verdict was given."""
    mode: Mode
    """Transport used."""
    turns: int = 0
    """Model calls in the loop (the forced final call not included)."""
    tokens: int = 0
    """Tokens spent by this run, all calls included."""
    forced_by: ForcedBy | None = None
    """Which budget ran out, when the verdict was forced."""
    transcript: list[dict[str, Any]] = field(default_factory=list)
    """Every prompt, reply, tool call and result, in order, unelided."""
    elided: int = 0
    """Tool results elided from the conversation to fit the context budget."""
    dropped_turns: int = 0
    """Turns removed from the conversation to fit the context budget."""
    context_budget: int | None = None
    """Prompt-token limit per call used."""


@dataclass
class _Turn:
    """Positions in ``messages`` of one turn: the reply and its results."""

    start: int
    results: list[tuple[int, str]] = field(default_factory=list)
    """(message position, tool name) of each tool result in this turn."""


def choose_mode(config: AgenticConfig, llm: LLM) -> Mode:
    if config.action_format == "auto":
        return "tools" if llm.supports_tools else "text"
    return config.action_format


class Navigator:
    """Runs the loop for one trace."""

    def __init__(self, trace: Trace, llm: LLM, config: AgenticConfig) -> None:
        self.trace = trace
        self.llm = llm
        self.config = config
        self.mode = choose_mode(config, llm)
        self.budget = context_budget(config, llm, reply_tokens=config.reply_tokens(REPLY_TOKENS))
        result_tokens = config.max_tool_result_tokens
        if self.budget is not None:
            result_tokens = min(result_tokens, max(self.budget // 4, 100))
        self.tools = TraceTools(
            trace,
            observability=config.observability,
            with_ground_truth=config.with_ground_truth,
            max_result_tokens=result_tokens,
            count_tokens=llm.count_tokens,
            preview_chars=config.preview_chars,
            search_max_hits=config.search_max_hits,
        )
        self.messages: list[dict[str, Any]] = []
        self.turns: list[_Turn] = []
        self._drop_note = False
        self.result = NavigatorResult(submission=None, mode=self.mode, context_budget=self.budget)
        self._tool_tokens = (
            llm.count_tokens(json.dumps(self.tools.openai_tools())) if self.mode == "tools" else 0
        )

    # --- prompts -------------------------------------------------------------------

    def system_prompt(self) -> str:
        text_format = self.mode == "text"
        lines = "\n".join(s.line(text_format) for s in self.tools.specs())
        text = prompts.SYSTEM.format(tool_lines=lines, max_turns=self.config.max_turns)
        if text_format:
            example = self.tools.agents[0] if self.tools.agents else "Agent"
            text += prompts.TEXT_FORMAT.format(example_agent=example.replace('"', "'"))
        return text

    def instance_prompt(self) -> str:
        t = self.trace
        ground_truth = ""
        reference = ground_truth_for(t, self.config.with_ground_truth)
        if reference:
            ground_truth = prompts.GROUND_TRUTH.format(ground_truth=reference)
        overview = ""
        if self.config.overview_in_prompt:
            listing = self.tools.list_steps({}).text
            overview = prompts.OVERVIEW.format(listing=listing)
        return prompts.INSTANCE.format(
            task=t.task,
            ground_truth=ground_truth,
            n_steps=len(t.steps),
            last_step=len(t.steps) - 1,
            agents=", ".join(self.tools.agents),
            visibility=prompts.visibility_text(self.config.observability),
            overview=overview,
        )

    # --- loop ----------------------------------------------------------------------

    async def run(self) -> NavigatorResult:
        cfg = self.config
        self._add({"role": "system", "content": self.system_prompt()}, note="prompt")
        self._add({"role": "user", "content": self.instance_prompt()}, note="prompt")
        forced_by: ForcedBy | None = None
        while self.result.submission is None:
            if self.result.turns >= cfg.max_turns:
                forced_by = "turns"
                break
            if not self._fit_context():
                forced_by = "context"
                break
            if cfg.token_budget is not None:
                # Room for the next turn and for the forced final call, each with its parse
                # retries in the text format, so the budget holds whatever happens next.
                attempts = 1 if self.mode == "tools" else self.llm.parse_retries + 1
                next_call = self._prompt_tokens(self.messages) + cfg.reply_tokens(REPLY_TOKENS)
                if self.result.tokens + 2 * attempts * next_call > cfg.token_budget:
                    forced_by = "tokens"
                    break
            self.result.turns += 1
            if self.mode == "tools":
                await self._tools_turn()
            else:
                await self._text_turn()
        if forced_by is not None:
            self.result.forced_by = forced_by
            await self._forced_submit(forced_by)
        return self.result

    async def _tools_turn(self) -> None:
        n = self.result.turns
        reply: Reply[Any] = await self.llm.chat(
            self.messages,
            purpose=f"navigator turn {n}",
            **self.config.chat_options(REPLY_TOKENS),
            tools=self.tools.openai_tools(),
        )
        self.result.tokens += reply.usage.total_tokens
        calls = [
            ToolCall(id=c.id or f"call_{n}_{i}", name=c.name, arguments=c.arguments)
            for i, c in enumerate(reply.tool_calls)
        ]
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in calls
            ]
        self._start_turn()
        self._add(message, note="reply", turn=n, attempts=reply.attempts)
        if not calls:
            # A model may still write an action as text; accept it rather than waste a turn.
            try:
                action = parse_action(reply.text, self.tools.names)
            except ParseError:
                nudge = prompts.NO_TOOL_CALL.format(tools=", ".join(self.tools.names))
                self._add({"role": "user", "content": nudge}, note="nudge", turn=n)
                return
            self._run_text_action(action, n)
            return
        for call in calls:
            outcome = self.tools.call(call.name, call.arguments)
            content = outcome.text + self._turns_left_note()
            self._add_result(
                {"role": "tool", "tool_call_id": call.id, "content": content},
                call.name,
                call.arguments,
                outcome,
                n,
            )
            if outcome.submission is not None:
                self.result.submission = outcome.submission
                return

    async def _text_turn(self) -> None:
        n = self.result.turns
        names = self.tools.names
        grammar = None
        if self.config.grammar:
            grammar = action_grammar(names, self.tools.agents, len(self.trace.steps))
        reply: Reply[Action] = await self.llm.chat(
            self.messages,
            parse=lambda text: parse_action(text, names),
            purpose=f"navigator turn {n}",
            **self.config.chat_options(REPLY_TOKENS),
            stop=["\nOBSERVATION"],
            constraint=grammar,
        )
        self.result.tokens += reply.usage.total_tokens
        self._start_turn()
        self._add(
            {"role": "assistant", "content": reply.text},
            note="reply",
            turn=n,
            attempts=reply.attempts,
            parse_error=reply.parse_error,
        )
        if reply.parsed is None:
            error = prompts.FORMAT_ERROR.format(
                error=reply.parse_error or "unreadable", tools=", ".join(names)
            )
            self._add({"role": "user", "content": error}, note="format-error", turn=n)
            return
        self._run_text_action(reply.parsed, n)

    def _run_text_action(self, action: Action, turn: int) -> None:
        outcome = self.tools.call(action.name, action.arguments)
        content = prompts.OBSERVATION.format(tool=action.name, result=outcome.text)
        content += self._turns_left_note()
        self._add_result(
            {"role": "user", "content": content}, action.name, action.arguments, outcome, turn
        )
        if outcome.submission is not None:
            self.result.submission = outcome.submission

    async def _forced_submit(self, forced_by: ForcedBy) -> None:
        instruction = prompts.FORCED_SUBMIT.format(what=_FORCED_WHAT[forced_by])
        instruction += prompts.FORCED_TOOLS if self.mode == "tools" else prompts.FORCED_TEXT
        if not self._fit_context(extra=instruction):
            self._drop_all_turns()
        self._add({"role": "user", "content": instruction}, note="forced-submit")
        purpose = f"navigator forced submit ({forced_by})"
        if self.mode == "tools":
            reply: Reply[Any] = await self.llm.chat(
                self.messages,
                purpose=purpose,
                **self.config.chat_options(REPLY_TOKENS),
                tools=self.tools.openai_tools(only=["submit"]),
                tool_choice={"type": "function", "function": {"name": "submit"}},
            )
            self.result.tokens += reply.usage.total_tokens
            self._add(
                {"role": "assistant", "content": reply.text or None},
                note="reply",
                forced=True,
                tool_calls=[c.model_dump() for c in reply.tool_calls],
            )
            self._accept_forced(reply.text, [(c.name, c.arguments) for c in reply.tool_calls])
            return
        n_steps = len(self.trace.steps)

        def parse(text: str) -> Submission:
            outcome = self.tools.call("submit", parse_submission_text(text))
            if outcome.submission is None:
                raise ParseError(outcome.text)
            return outcome.submission

        grammar = None
        if self.config.grammar:
            grammar = action_grammar(["submit"], self.tools.agents, n_steps, thought=False)
        text_reply: Reply[Submission] = await self.llm.chat(
            self.messages,
            parse=parse,
            purpose=purpose,
            **self.config.chat_options(REPLY_TOKENS),
            constraint=grammar,
        )
        self.result.tokens += text_reply.usage.total_tokens
        self._add(
            {"role": "assistant", "content": text_reply.text},
            note="reply",
            forced=True,
            attempts=text_reply.attempts,
            parse_error=text_reply.parse_error,
        )
        self.result.submission = text_reply.parsed

    def _accept_forced(self, text: str, calls: list[tuple[str, str]]) -> None:
        errors: list[str] = []
        for name, arguments in calls:
            if name != "submit":
                errors.append(f"called {name}, not submit")
                continue
            outcome = self.tools.call("submit", arguments)
            if outcome.submission is not None:
                self.result.submission = outcome.submission
                return
            errors.append(outcome.text)
        if text.strip():
            try:
                parsed = parse_submission_text(text)
            except ParseError as exc:
                errors.append(str(exc))
            else:
                outcome = self.tools.call("submit", parsed)
                if outcome.submission is not None:
                    self.result.submission = outcome.submission
                    return
                errors.append(outcome.text)
        self.result.transcript.append(
            {"type": "note", "note": "forced verdict unreadable", "errors": errors or ["empty"]}
        )

    # --- conversation bookkeeping --------------------------------------------------

    def _add(self, message: dict[str, Any], *, note: str, **extra: Any) -> None:
        self.messages.append(message)
        entry: dict[str, Any] = {"type": note, "role": message["role"]}
        if message.get("content") is not None:
            entry["content"] = message["content"]
        if message.get("tool_calls"):
            entry["tool_calls"] = [
                {
                    "id": c["id"],
                    "name": c["function"]["name"],
                    "arguments": c["function"]["arguments"],
                }
                for c in message["tool_calls"]
            ]
        entry.update({k: v for k, v in extra.items() if v is not None and v != []})
        self.result.transcript.append(entry)

    def _add_result(
        self,
        message: dict[str, Any],
        tool: str,
        arguments: dict[str, Any] | str,
        outcome: ToolOutcome,
        turn: int,
    ) -> None:
        if self.turns:
            self.turns[-1].results.append((len(self.messages), tool))
        self.messages.append(message)
        self.result.transcript.append(
            {
                "type": "tool",
                "turn": turn,
                "tool": tool,
                "arguments": arguments,
                "ok": outcome.ok,
                "result": outcome.text,
            }
        )

    def _start_turn(self) -> None:
        self.turns.append(_Turn(start=len(self.messages)))

    def _turns_left_note(self) -> str:
        left = self.config.max_turns - self.result.turns
        if 0 < left <= self.config.warn_turns_left:
            return "\n" + prompts.TURNS_LEFT.format(left=left)
        return ""

    # --- context budget ------------------------------------------------------------

    def _prompt_tokens(self, messages: list[dict[str, Any]], extra: str = "") -> int:
        text = messages_text(messages) + ("\n" + extra if extra else "")
        return self.llm.count_tokens(text) + self._tool_tokens

    def _fits(self, extra: str = "") -> bool:
        return self.budget is None or self._prompt_tokens(self.messages, extra) <= self.budget

    def _fit_context(self, extra: str = "") -> bool:
        """Elide old tool results, then drop old turns, until the next prompt fits."""
        if self._fits(extra):
            return True
        latest = self.turns[-1] if self.turns else None
        for turn in self.turns:
            if turn is latest:
                continue
            for position, tool in turn.results:
                message = self.messages[position]
                placeholder = ELIDED.format(tool=tool)
                if message["role"] == "user":
                    placeholder = prompts.OBSERVATION.format(tool=tool, result=placeholder)
                if message["content"] == placeholder:
                    continue
                message["content"] = placeholder
                self.result.elided += 1
                if self._fits(extra):
                    return True
        while len(self.turns) > 1:
            self._drop_oldest_turn()
            if self._fits(extra):
                return True
        return self._fits(extra)

    def _drop_oldest_turn(self) -> None:
        first = self.turns.pop(0)
        end = self.turns[0].start if self.turns else len(self.messages)
        removed = end - first.start
        del self.messages[first.start : end]
        for turn in self.turns:
            turn.start -= removed
            turn.results = [(p - removed, t) for p, t in turn.results]
        self.result.dropped_turns += 1
        note = {"role": "user", "content": DROPPED.format(n=self.result.dropped_turns)}
        # One note right after the instance prompt says how many turns are gone.
        if self._drop_note:
            self.messages[2] = note
        else:
            self._drop_note = True
            self.messages.insert(2, note)
            for turn in self.turns:
                turn.start += 1
                turn.results = [(p + 1, t) for p, t in turn.results]

    def _drop_all_turns(self) -> None:
        while self.turns:
            self._drop_oldest_turn()
