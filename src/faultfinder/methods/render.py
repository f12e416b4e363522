"""Rendering a trace into prompt text, honouring observability and a context budget.

Step indices shown to models are always the canonical 0-based ones. Truncation is
per step and visible (a marker says how much was cut); steps are never dropped or
renumbered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel

from faultfinder.llm.base import approx_token_count
from faultfinder.methods.base import MethodConfig, Observability
from faultfinder.traces.schema import Step, Trace

TokenCounter = Callable[[str], int]


class RenderOptions(BaseModel):
    """How steps are written into a prompt."""

    step_indices: bool = True
    """Prefix each step with 'Step N' (DoVer's refinement); off: the paper's 'name: content'."""
    observability: Observability = "outputs"
    """What of each step to show; see ``faultfinder.methods.base.Observability``."""
    max_step_chars: int | None = None
    """Truncate each step's text beyond this many characters (with a marker)."""

    @classmethod
    def from_config(cls, config: MethodConfig, **extra: Any) -> RenderOptions:
        return cls(observability=config.observability, **extra)


def shows_inputs(observability: Observability) -> bool:
    return observability in ("full", "no-metadata")


def shows_metadata(observability: Observability) -> bool:
    return observability in ("full", "no-inputs")


def truncate(text: str, max_chars: int | None) -> str:
    """Cut ``text`` to ``max_chars`` keeping head and tail, with a visible marker."""
    if max_chars is None or len(text) <= max_chars:
        return text
    keep = max(max_chars - 60, 20)
    head, tail = text[: keep * 2 // 3], text[-(keep // 3) :] if keep // 3 else ""
    cut = len(text) - len(head) - len(tail)
    return f"{head}\n[... {cut} characters truncated by faultfinder ...]\n{tail}"


def message_text(message: dict[str, Any]) -> str:
    """One OpenAI-format message as 'role: text' (tool calls included)."""
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    text = f"{message.get('role', '?')}: {content or ''}"
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        text += f"\n  [tool call] {fn.get('name', '?')}({fn.get('arguments', '')})"
    return text


def new_input_messages(trace: Trace, step: Step) -> tuple[list[dict[str, Any]], int]:
    """The part of ``step.input_messages`` not already sent in the same agent's previous call.

    Returns (new messages, number of leading messages omitted because the agent saw them
    before). Recorded inputs repeat the whole history at every call; showing only what is
    new keeps a full trace within reach of a prompt.
    """
    messages = step.input_messages or []
    previous = next(
        (
            s
            for s in reversed(trace.steps[: step.index])
            if s.agent == step.agent and s.input_messages
        ),
        None,
    )
    if previous is None or not previous.input_messages:
        return messages, 0
    shared = 0
    for old, new in zip(previous.input_messages, messages, strict=False):
        if old != new:
            break
        shared += 1
    return messages[shared:], shared


def render_step(trace: Trace, step: Step, options: RenderOptions) -> str:
    """One step as prompt text."""
    header = f"Step {step.index} - {step.agent}" if options.step_indices else step.agent
    parts: list[str] = []
    if shows_inputs(options.observability) and step.input_messages:
        new, omitted = new_input_messages(trace, step)
        lines = [message_text(m) for m in new]
        note = f" ({omitted} earlier messages as in this agent's previous call)" if omitted else ""
        parts.append(f"[input{note}]\n" + "\n".join(lines))
        parts.append("[output]")
    body = step.content
    for call in step.tool_calls:
        body += f"\n[tool call] {call.name}({call.arguments})"
    for result in step.tool_results:
        body += f"\n[tool result{' ' + result.name if result.name else ''}] {result.content}"
    parts.append(body)
    text = "\n".join(parts)
    return f"{header}: {truncate(text, options.max_step_chars)}"


def render_steps(trace: Trace, steps: Sequence[Step], options: RenderOptions) -> str:
    """Several steps, one per paragraph."""
    return "\n".join(render_step(trace, s, options) for s in steps)


def render_metadata(trace: Trace, observability: Observability) -> str:
    """Agent roster, configurations and architecture notes ('' when hidden or absent)."""
    if not shows_metadata(observability):
        return ""
    lines: list[str] = []
    if trace.system:
        lines.append(f"System: {trace.system}")
    if trace.architecture:
        lines.append(f"Architecture: {trace.architecture}")
    for agent in trace.agents:
        lines.append(f"Agent {agent.name}:")
        if agent.description:
            lines.append(f"  description: {agent.description}")
        if agent.system_prompt:
            lines.append(f"  system prompt: {agent.system_prompt}")
        if agent.model:
            lines.append(f"  model: {agent.model}")
    return "\n".join(lines)


def fit_steps(
    trace: Trace,
    steps: Sequence[Step],
    options: RenderOptions,
    budget_tokens: int | None,
    count_tokens: TokenCounter = approx_token_count,
    reserved_tokens: int = 0,
) -> tuple[str, bool]:
    """Render ``steps`` so the text fits ``budget_tokens - reserved_tokens``.

    Steps are cut per step, longest first being cut hardest (a shared per-step cap is
    lowered until the log fits). Returns (text, truncated?).
    """
    text = render_steps(trace, steps, options)
    if budget_tokens is None:
        return text, False
    available = max(budget_tokens - reserved_tokens, 64)
    if count_tokens(text) <= available:
        return text, False
    longest = max((len(render_step(trace, s, options)) for s in steps), default=0)
    low, high = 40, max(longest, 41)
    best = render_steps(trace, steps, options.model_copy(update={"max_step_chars": low}))
    while low < high:
        mid = (low + high + 1) // 2
        candidate = render_steps(trace, steps, options.model_copy(update={"max_step_chars": mid}))
        if count_tokens(candidate) <= available:
            best, low = candidate, mid
        else:
            high = mid - 1
    return best, True
