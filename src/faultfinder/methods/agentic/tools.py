"""The navigator's tools over one trace, honouring observability.

Every tool returns text for the model. Long results are paged, never cut silently: a
marker says what was left out and which arguments read the rest. Bad arguments come back
as an error text the model can correct; they never raise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from faultfinder.judging.agent_names import match_agent, roster_of
from faultfinder.judging.method import Observability
from faultfinder.judging.reference import ground_truth_for
from faultfinder.judging.render import (
    CompactInput,
    compact_inputs,
    full_input_text,
    render_metadata,
    shows_inputs,
    shows_metadata,
    step_output_text,
    visible_agents,
)
from faultfinder.llm import json_text
from faultfinder.llm.base import approx_token_count
from faultfinder.llm.client import ParseError
from faultfinder.traces.schema import Trace

TokenCounter = Callable[[str], int]


class Submission(BaseModel):
    """A verdict the navigator submitted."""

    agent: str
    """Responsible agent (a roster name)."""
    step: int
    """Decisive error step, canonical 0-based."""
    reason: str = ""
    """The navigator's explanation."""
    confidence: float | None = None
    """Its confidence in [0, 1], when given."""


@dataclass
class ToolOutcome:
    """What one tool call produced."""

    text: str
    """The result as the model sees it."""
    ok: bool = True
    """False when the call was refused (bad arguments, unknown or unavailable tool)."""
    submission: Submission | None = None
    """Set by a valid submit."""


@dataclass(frozen=True)
class ToolSpec:
    """One tool as offered to the model."""

    name: str
    summary: str
    parameters: dict[str, Any]
    example: str

    def openai(self) -> dict[str, Any]:
        """The OpenAI function-tool definition."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.summary,
                "parameters": self.parameters,
            },
        }

    def line(self, text_format: bool) -> str:
        """One line for the system prompt."""
        if text_format:
            return f"- {self.name} {self.example}: {self.summary}"
        return f"- {self.name}: {self.summary}"


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


_STEP = {"type": "integer", "description": "Step number (0-based)."}
_OFFSET = {
    "type": "integer",
    "description": "Character offset to continue a long result from (default 0).",
}

SPECS: dict[str, ToolSpec] = {
    s.name: s
    for s in [
        ToolSpec(
            "list_steps",
            "List steps with their agent and a short preview of each output (optionally "
            'only steps start..end; "full": true shows the whole outputs).',
            _schema(
                {
                    "start": {"type": "integer", "description": "First step to list."},
                    "end": {"type": "integer", "description": "Last step to list."},
                    "full": {"type": "boolean", "description": "Whole outputs, not previews."},
                },
                [],
            ),
            '{"start": 0, "end": 20}',
        ),
        ToolSpec(
            "read_step_output",
            "Read the full output of one step (its message, tool calls and tool results).",
            _schema({"step": _STEP, "offset": _OFFSET}, ["step"]),
            '{"step": 3}',
        ),
        ToolSpec(
            "read_step_input",
            "Read what one step's agent was given as input: by default only what is new "
            'since that agent\'s previous call; "full": true shows the whole input.',
            _schema(
                {
                    "step": _STEP,
                    "full": {"type": "boolean", "description": "Show the whole input."},
                    "offset": _OFFSET,
                },
                ["step"],
            ),
            '{"step": 3, "full": false}',
        ),
        ToolSpec(
            "read_metadata",
            "Read the trace metadata: the task, the agents and what is known about their "
            "configuration and the system's architecture.",
            _schema({"offset": _OFFSET}, []),
            "{}",
        ),
        ToolSpec(
            "search",
            "Find the steps whose text contains a string (case-insensitive).",
            _schema({"query": {"type": "string", "description": "Text to find."}}, ["query"]),
            '{"query": "error"}',
        ),
        ToolSpec(
            "submit",
            "Submit the final verdict: the responsible agent, the decisive error step, "
            "why, and your confidence (0 to 1). This ends the investigation.",
            _schema(
                {
                    "agent": {"type": "string", "description": "Responsible agent's name."},
                    "step": _STEP,
                    "reason": {"type": "string", "description": "Why this step failed."},
                    "confidence": {"type": "number", "description": "Confidence, 0 to 1."},
                },
                ["agent", "step", "reason"],
            ),
            '{"agent": "...", "step": 3, "reason": "...", "confidence": 0.7}',
        ),
    ]
}


class _ArgumentError(ValueError):
    pass


def _int(args: dict[str, Any], name: str, default: int | None = None) -> int:
    value = args.get(name, default)
    if value is None:
        raise _ArgumentError(f"missing argument '{name}'")
    if isinstance(value, bool):
        raise _ArgumentError(f"'{name}' must be an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    match = re.fullmatch(r"\s*(?:step\s*)?(-?\d+)\s*", str(value), flags=re.IGNORECASE)
    if not match:
        raise _ArgumentError(f"'{name}' must be an integer, got {value!r}")
    return int(match.group(1))


def _confidence(value: Any) -> float | None:
    """A submitted confidence as written: a number from 0 to 1, or a percentage ('85%')."""
    if value is None:
        return None
    text = str(value).strip()
    scale = 1.0
    if isinstance(value, str) and text.endswith("%"):
        text, scale = text[:-1].strip(), 100.0
    if isinstance(value, bool):
        text = ""
    try:
        confidence = float(text) / scale
    except ValueError:
        raise _ArgumentError("'confidence' must be a number from 0 to 1") from None
    if not 0.0 <= confidence <= 1.0:
        raise _ArgumentError("'confidence' must be a number from 0 to 1")
    return confidence


def _bool(args: dict[str, Any], name: str) -> bool:
    value = args.get(name, False)
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return bool(value)


class TraceTools:
    """The navigator's tools over ``trace`` as ``observability`` allows."""

    def __init__(
        self,
        trace: Trace,
        *,
        observability: Observability,
        with_ground_truth: bool,
        max_result_tokens: int,
        count_tokens: TokenCounter = approx_token_count,
        preview_chars: int = 100,
        search_max_hits: int = 20,
    ) -> None:
        self.trace = trace
        self.observability = observability
        self.with_ground_truth = with_ground_truth
        self.max_result_tokens = max_result_tokens
        self.count_tokens = count_tokens
        self.preview_chars = preview_chars
        self.search_max_hits = search_max_hits
        self.agents = roster_of(trace, visible_agents(trace, observability))
        self.inputs_visible = shows_inputs(observability)
        self._compacts: list[CompactInput | None] = (
            compact_inputs(trace) if self.inputs_visible and trace.has_inputs else []
        )
        # Tokens → characters at this tokenizer's rate, measured on a sample of the trace.
        sample = " ".join(s.content for s in trace.steps[:20])[:4000] or "x" * 400
        ratio = len(sample) / max(count_tokens(sample), 1)
        self.max_result_chars = max(int(max_result_tokens * ratio), 200)
        """Longest tool result, in characters; longer ones are paged or cut with a marker."""

    # --- what is offered -----------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """Tools available under this observability, in prompt order."""
        return [n for n in SPECS if n != "read_step_input" or self.inputs_visible]

    def specs(self) -> list[ToolSpec]:
        return [SPECS[n] for n in self.names]

    def openai_tools(self, only: list[str] | None = None) -> list[dict[str, Any]]:
        return [s.openai() for s in self.specs() if only is None or s.name in only]

    # --- dispatch ------------------------------------------------------------------

    def call(self, name: str, arguments: dict[str, Any] | str | None) -> ToolOutcome:
        """Run tool ``name``; refusals come back as ``ok=False`` text, never raise."""
        if isinstance(arguments, str):
            try:
                arguments = json_text.loads(arguments) if arguments.strip() else {}
            except json_text.JSONTextError as exc:
                return ToolOutcome(f"Error: the arguments are unreadable ({exc}).", ok=False)
        args = arguments or {}
        if not isinstance(args, dict):
            return ToolOutcome("Error: the arguments must be a JSON object.", ok=False)
        if name == "read_step_input" and not self.inputs_visible:
            return ToolOutcome(
                "Error: read_step_input is not available: step inputs are hidden in this "
                f"setting (observability '{self.observability}'). Use read_step_output.",
                ok=False,
            )
        handler = {
            "list_steps": self.list_steps,
            "read_step_output": self.read_step_output,
            "read_step_input": self.read_step_input,
            "read_metadata": self.read_metadata,
            "search": self.search,
            "submit": self.submit,
        }.get(name)
        if handler is None:
            return ToolOutcome(
                f"Error: unknown tool '{name}'. Available tools: {', '.join(self.names)}.",
                ok=False,
            )
        try:
            return handler(args)
        except _ArgumentError as exc:
            example = SPECS[name].example
            return ToolOutcome(f"Error: {exc}. Example: {name} {example}", ok=False)

    # --- tools ---------------------------------------------------------------------

    def list_steps(self, args: dict[str, Any]) -> ToolOutcome:
        n = len(self.trace.steps)
        start = max(_int(args, "start", 0), 0)
        end = min(_int(args, "end", n - 1), n - 1)
        full = _bool(args, "full")
        if start > end:
            return ToolOutcome(f"Error: no steps in {start}..{end} (steps are 0..{n - 1}).", False)
        lines: list[str] = []
        budget = self.max_result_chars
        used = 0
        for step in self.trace.steps[start : end + 1]:
            line = self._full_entry(step.index, budget) if full else self.preview(step.index)
            if used + len(line) > budget and lines:
                following: dict[str, Any] = {"start": step.index, "end": end}
                if full:
                    following["full"] = True
                lines.append(
                    f"[... steps {step.index}..{end} not listed to keep this result short: "
                    f"call list_steps {json.dumps(following)} for them ...]"
                )
                break
            lines.append(line)
            used += len(line) + 1
        return ToolOutcome("\n".join(lines))

    def _full_entry(self, index: int, budget: int) -> str:
        step = self.trace.steps[index]
        output = step_output_text(step) or "(empty)"
        if len(output) > budget:
            output = (
                f"{output[:budget]}\n[... {len(output) - budget} more characters: call "
                f'read_step_output {{"step": {index}, "offset": {budget}}} to read on ...]'
            )
        return f"Step {index} - {step.speaker}:\n{output}"

    def preview(self, index: int) -> str:
        """One list line: 'Step i - agent: preview (N chars)'."""
        step = self.trace.steps[index]
        output = step_output_text(step)
        flat = re.sub(r"\s+", " ", output).strip()
        text = flat[: self.preview_chars] + ("…" if len(flat) > self.preview_chars else "")
        kind = "" if step.kind == "llm" else f" [{step.kind}]"
        has_input = " [input recorded]" if self.inputs_visible and step.input_messages else ""
        return f"Step {index} - {step.speaker}{kind}: {text or '(empty)'} ({len(output)} chars)" + (
            has_input
        )

    def read_step_output(self, args: dict[str, Any]) -> ToolOutcome:
        index = self._step(args)
        step = self.trace.steps[index]
        head = f"Step {index} - {step.speaker} output:"
        return ToolOutcome(
            self._page(head, step_output_text(step) or "(empty)", args, "read_step_output", index)
        )

    def read_step_input(self, args: dict[str, Any]) -> ToolOutcome:
        index = self._step(args)
        step = self.trace.steps[index]
        if not step.input_messages:
            return ToolOutcome(f"Step {index} has no recorded input (only its output is known).")
        full = _bool(args, "full")
        compact = self._compacts[index] if self._compacts else None
        if full or compact is None:
            head = f"Step {index} - {step.speaker} input ({len(step.input_messages)} messages):"
            body = full_input_text(step)
        else:
            shown = len(compact.messages)
            head = (
                f"Step {index} - {step.speaker} input: {shown} new of {compact.total} messages "
                '(pass "full": true for all of them):'
            )
            body = compact.render()
        name = "read_step_input"
        return ToolOutcome(self._page(head, body, args, name, index, full=full))

    def read_metadata(self, args: dict[str, Any]) -> ToolOutcome:
        t = self.trace
        counts = {a: len(t.steps_of(a)) for a in t.agent_names()}
        speakers = ", ".join(f"{a} ({n} step{'' if n == 1 else 's'})" for a, n in counts.items())
        lines = [f"Task: {t.task}"]
        reference = ground_truth_for(t, self.with_ground_truth)
        if reference:
            lines.append(f"Correct answer (reference): {reference}")
        if t.final_answer:
            lines.append(f"The system's final answer: {t.final_answer}")
        lines.append(f"Steps: {len(t.steps)} (Step 0 to Step {len(t.steps) - 1})")
        lines.append(f"Agents that acted: {speakers}")
        if shows_metadata(self.observability):
            meta = render_metadata(t, self.observability)
            lines.append(meta or "No agent configuration or architecture notes were recorded.")
        else:
            lines.append(
                "Agent configurations and architecture notes are hidden in this setting "
                f"(observability '{self.observability}')."
            )
        return ToolOutcome(self._page("Trace metadata:", "\n".join(lines), args, "read_metadata"))

    def search(self, args: dict[str, Any]) -> ToolOutcome:
        query = str(args.get("query", "")).strip()
        if not query:
            raise _ArgumentError("missing argument 'query'")
        needle = query.lower()
        hits: list[str] = []
        total = 0
        for step in self.trace.steps:
            sources = [("output", step_output_text(step))]
            compact = self._compacts[step.index] if self._compacts else None
            if compact is not None:
                # Search what is new in each input; repeated messages are found where they
                # first appear.
                new_text = "\n".join(m.render() for m in compact.messages if m.pointer_step is None)
                sources.append(("input", new_text))
            for where, text in sources:
                position = text.lower().find(needle)
                if position < 0:
                    continue
                total += 1
                if len(hits) < self.search_max_hits:
                    lo, hi = max(position - 80, 0), position + len(query) + 80
                    snippet = re.sub(r"\s+", " ", text[lo:hi]).strip()
                    hits.append(f"Step {step.index} - {step.speaker} ({where}): …{snippet}…")
        if not total:
            return ToolOutcome(f"No step contains '{query}'.")
        more = f" (first {len(hits)} shown)" if total > len(hits) else ""
        body = "\n".join(hits)
        return ToolOutcome(self._truncate(f"'{query}' found in {total} places{more}:\n{body}"))

    def submit(self, args: dict[str, Any]) -> ToolOutcome:
        agent_raw = str(args.get("agent", "")).strip()
        if not agent_raw:
            raise _ArgumentError("missing argument 'agent'")
        try:
            agent = match_agent(agent_raw, self.agents)
        except ParseError as exc:
            return ToolOutcome(f"Error: {exc}. Submit again with one of these names.", ok=False)
        index = self._step(args)
        confidence = _confidence(args.get("confidence"))
        submission = Submission(
            agent=agent, step=index, reason=str(args.get("reason", "")), confidence=confidence
        )
        return ToolOutcome(f"Verdict recorded: {agent}, Step {index}.", submission=submission)

    # --- helpers -------------------------------------------------------------------

    def _step(self, args: dict[str, Any]) -> int:
        index = _int(args, "step")
        n = len(self.trace.steps)
        if not 0 <= index < n:
            raise _ArgumentError(f"step {index} is outside the trace (steps are 0..{n - 1})")
        return index

    def _truncate(self, text: str) -> str:
        budget = self.max_result_chars
        if len(text) <= budget:
            return text
        cut = len(text) - budget
        return f"{text[:budget]}\n[... {cut} more characters not shown ...]"

    def _page(
        self,
        head: str,
        body: str,
        args: dict[str, Any],
        tool: str,
        step: int | None = None,
        *,
        full: bool = False,
    ) -> str:
        offset = max(_int(args, "offset", 0), 0)
        if offset and offset >= len(body):
            raise _ArgumentError(f"offset {offset} is past the end ({len(body)} characters)")
        budget = self.max_result_chars
        if offset == 0 and len(body) <= budget:
            return f"{head}\n{body}"
        end = min(offset + budget, len(body))
        text = f"{head}\n[characters {offset}..{end} of {len(body)}]\n{body[offset:end]}"
        if end < len(body):
            following: dict[str, Any] = {} if step is None else {"step": step}
            if full:
                following["full"] = True
            following["offset"] = end
            text += (
                f"\n[... {len(body) - end} more characters: call {tool} "
                f"{json.dumps(following)} to read on ...]"
            )
        return text
