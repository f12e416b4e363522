"""Rendering a trace into prompt text, honouring observability and a context budget.

Step indices shown to models are always the canonical 0-based ones and are never
renumbered. Every cut is visible (a marker says how much was cut, or which steps were left
out), and the steps a question is about are never cut (see ``fitting.fit_pieces``).

Observability decides what a rendering may contain:

============  ============  =========================================
setting       step inputs   metadata (agent configs, architecture)
============  ============  =========================================
full          yes           yes
no-metadata   yes           no
no-inputs     no            yes
outputs       no            no   (the Who&When setting)
============  ============  =========================================

Step outputs (content, tool calls, tool results), the task, the step speakers and the
system's final answer are visible in every setting; the reference answer only with
``with_ground_truth``; the gold label never.

Long traces: recorded inputs repeat the whole history at every call, so inputs are shown
compactly (:func:`compact_input`: only what is new since the agent's previous call, and
pointers instead of messages already shown elsewhere). When a rendered log is still over
the context budget, ``fitting.fit_steps`` (the one fitter, ``fitting.fit_pieces``) cuts it outside
the judged steps and their neighbours (short steps stay whole; long ones are cut head +
tail with a marker; a step's output is kept in preference to its input; far steps are
left out with a marker), and raises :class:`ContextBudgetError` when the judged steps do
not fit: never a silent cut, never a prompt over the budget.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from faultfinder.errors import FaultfinderError
from faultfinder.judging.method import MethodConfig, Observability
from faultfinder.traces.schema import Step, Trace

TokenCounter = Callable[[str], int]

DEFAULT_REPLY_TOKENS = 1024
"""Tokens kept free for the model's reply when a budget is derived from a context window."""

MIN_STEP_CHARS = 40
"""The smallest per-step cap ``fitting.fit_steps`` tries before giving up."""

POINTER_MIN_CHARS = 120
"""Input messages at least this long are replaced by a pointer when already shown elsewhere;
shorter ones cost less than the pointer itself."""


class ContextBudgetError(FaultfinderError):
    """A log cannot be made to fit the context budget even with every step cut to a stub."""


class RenderOptions(BaseModel):
    """How steps are written into a prompt."""

    step_indices: bool = True
    """Prefix each step with 'Step N' (DoVer's refinement); off: the paper's 'name: content'."""
    observability: Observability = "outputs"
    """What of each step to show; see ``faultfinder.judging.method.Observability``."""
    max_step_chars: int | None = None
    """Truncate each step's text beyond this many characters (with a marker)."""
    compact_inputs: bool = True
    """Show only the new part of each step's input (see :func:`compact_input`); off: all of it."""

    @classmethod
    def from_config(cls, config: MethodConfig, **extra: Any) -> RenderOptions:
        return cls(observability=config.observability, **extra)


def shows_inputs(observability: Observability) -> bool:
    """True when per-step input context may be shown."""
    return observability in ("full", "no-metadata")


def shows_metadata(observability: Observability) -> bool:
    """True when agent configurations and architecture notes may be shown."""
    return observability in ("full", "no-inputs")


def visible_agents(trace: Trace, observability: Observability) -> list[str]:
    """Agents a method may name: the step speakers, plus the configured roster when metadata
    is visible (a roster agent may be responsible without having spoken)."""
    names = trace.agent_names()
    if shows_metadata(observability):
        names += [a.name for a in trace.agents if a.name not in names]
    return names


# --- context budget --------------------------------------------------------------


def backend_context_window(llm: Any) -> int | None:
    """The context window (tokens) of ``llm``'s backend (an LLM or a backend), when the
    backend tells it as ``context_window`` or ``n_ctx`` (the embedded model: 8192)."""
    backend = getattr(llm, "backend", llm)
    for attr in ("context_window", "n_ctx"):
        value = getattr(backend, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def context_budget(
    config: MethodConfig, llm: Any, reply_tokens: int = DEFAULT_REPLY_TOKENS
) -> int | None:
    """Max prompt tokens per call: the config's ``context_budget`` when set, else the
    backend's context window minus ``reply_tokens``, else None (no limit known)."""
    if config.context_budget is not None:
        return config.context_budget
    window = backend_context_window(llm)
    if window is None:
        return None
    return max(window - reply_tokens, 256)


# --- pieces ----------------------------------------------------------------------


def truncate(text: str, max_chars: int | None) -> str:
    """Cut ``text`` to ``max_chars`` keeping head and tail, with a visible marker."""
    if max_chars is None or len(text) <= max_chars:
        return text
    keep = max(max_chars - 60, 20)
    head, tail = text[: keep * 2 // 3], text[-(keep // 3) :] if keep // 3 else ""
    cut = len(text) - len(head) - len(tail)
    return f"{head}\n[... {cut} characters truncated by faultfinder ...]\n{tail}"


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def message_text(message: dict[str, Any]) -> str:
    """One OpenAI-format message as 'role: text' (tool calls included)."""
    role = str(message.get("role", "?"))
    if message.get("name"):
        role += f" ({message['name']})"
    text = f"{role}: {_content_text(message.get('content'))}"
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        text += f"\n  [tool call] {fn.get('name', '?')}({fn.get('arguments', '')})"
    return text


def _message_key(message: dict[str, Any]) -> str:
    # Compared by what a reader sees, so ids and formatting keys do not break equality.
    blob = message_text(message)
    return hashlib.sha1(blob.encode("utf-8", "replace")).hexdigest()


def step_output_text(step: Step) -> str:
    """A step's output, never its inputs: its content, tool calls and tool results, one
    per line. The one renderer of step outputs (prompts, ECHO's context levels, CHIEF's
    data flow and the agentic tools all use it)."""
    parts = [step.content]
    parts += [f"[tool call] {call.name}({call.arguments})" for call in step.tool_calls]
    for result in step.tool_results:
        name = f" {result.name}" if result.name else ""
        status = f" ({result.status})" if result.status else ""
        parts.append(f"[tool result{name}{status}] {result.content}")
    return "\n".join(p for p in parts if p)


def own_text(trace: Trace) -> str:
    """The trace's own text: its task and every step's output, as the log shows them at
    ``outputs`` observability, without any prompt's wording or step headers. What prompt
    costs are measured against ("uncached prompt tokens x trace")."""
    return "\n".join([trace.task, *(step_output_text(s) for s in trace.steps)])


# --- inputs ----------------------------------------------------------------------


def _previous_call(trace: Trace, step: Step) -> Step | None:
    return next(
        (
            s
            for s in reversed(trace.steps[: step.index])
            if s.agent == step.agent and s.input_messages
        ),
        None,
    )


def new_input_messages(trace: Trace, step: Step) -> tuple[list[dict[str, Any]], int]:
    """The part of ``step.input_messages`` not already sent in the same agent's previous call.

    Returns (new messages, number of leading messages omitted because the agent saw them
    before). Recorded inputs repeat the whole history at every call; showing only what is
    new keeps a full trace within reach of a prompt. Messages are compared by their visible
    text (role, name, content, tool calls), not by ids.
    """
    messages = step.input_messages or []
    previous = _previous_call(trace, step)
    if previous is None or not previous.input_messages:
        return list(messages), 0
    shared = 0
    for old, new in zip(previous.input_messages, messages, strict=False):
        if _message_key(old) != _message_key(new):
            break
        shared += 1
    return list(messages[shared:]), shared


@dataclass
class InputMessage:
    """One message of a compacted input."""

    message: dict[str, Any]
    """The message as recorded."""
    output_of: int | None = None
    """Step whose output this message repeats (then its text is not repeated)."""
    input_of: int | None = None
    """Earlier step whose input already held this message."""

    @property
    def pointer_step(self) -> int | None:
        return self.output_of if self.output_of is not None else self.input_of

    def render(self, visible: set[int] | None = None) -> str:
        """The message, or a pointer when the step it repeats is ``visible`` (None: any)."""
        target = self.pointer_step
        if target is None or (visible is not None and target not in visible):
            return message_text(self.message)
        if self.output_of is not None:
            where = f"the output of Step {self.output_of}"
        else:
            where = f"same message as in the input of Step {self.input_of}"
        return f"{self.message.get('role', '?')}: [{where}]"


@dataclass
class CompactInput:
    """A step's input with repetition removed; see :func:`compact_input`."""

    step: int
    """The step this input belongs to."""
    total: int
    """Messages in the full input."""
    omitted: int = 0
    """Leading messages omitted because the agent's previous call had them too."""
    omitted_from: int | None = None
    """The step of that previous call."""
    messages: list[InputMessage] = field(default_factory=list)
    """The remaining messages."""

    def render(self, visible: set[int] | None = None) -> str:
        """The input as text. ``visible``: the steps shown alongside (None: all of them);
        pointers to other steps are expanded back into the message."""
        lines: list[str] = []
        if self.omitted:
            shown = visible is None or self.omitted_from in visible
            lines.append(
                f"[{self.omitted} earlier messages omitted: the same as in this agent's "
                f"input at Step {self.omitted_from}{'' if shown else ', not shown here'}]"
            )
        lines += [m.render(visible) for m in self.messages]
        return "\n".join(lines)


def compact_inputs(trace: Trace, upto: int | None = None) -> list[CompactInput | None]:
    """:func:`compact_input` for steps ``0..upto-1`` (default: all) in one linear pass."""
    key = (id(trace), len(trace.steps) if upto is None else upto)
    cached = _COMPACT_CACHE.get(key)
    if cached is not None and cached[0] is trace:
        return cached[1]
    seen_input: dict[str, int] = {}
    seen_output: dict[str, int] = {}
    previous_by_agent: dict[str, Step] = {}
    result: list[CompactInput | None] = []
    for step in trace.steps[:upto]:
        if not step.input_messages:
            result.append(None)
        else:
            previous = previous_by_agent.get(step.agent)
            result.append(_compact(step, previous, seen_input, seen_output))
            for message in step.input_messages:
                if len(message_text(message)) >= POINTER_MIN_CHARS:
                    seen_input.setdefault(_message_key(message), step.index)
            previous_by_agent[step.agent] = step
        text = step.content.strip()
        if len(text) >= POINTER_MIN_CHARS:
            seen_output.setdefault(_text_key(text), step.index)
    # Callers render one step at a time (step-by-step prefixes); a few entries avoid
    # recomputing the pass for each. The trace itself is kept so its id stays valid.
    if len(_COMPACT_CACHE) >= 8:
        _COMPACT_CACHE.pop(next(iter(_COMPACT_CACHE)))
    _COMPACT_CACHE[key] = (trace, result)
    return result


_COMPACT_CACHE: dict[tuple[int, int], tuple[Trace, list[CompactInput | None]]] = {}


_SPEAKER_PREFIX = re.compile(r"^[\w .()>-]{1,40}:\s*")


def _output_match(content: str, seen_output: dict[str, int]) -> int | None:
    # Histories often carry an earlier output as 'Speaker: text'.
    if not content:
        return None
    found = seen_output.get(_text_key(content))
    if found is None and (prefix := _SPEAKER_PREFIX.match(content)):
        found = seen_output.get(_text_key(content[prefix.end() :].strip()))
    return found


def _text_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()


def _compact(
    step: Step,
    previous: Step | None,
    seen_input: dict[str, int],
    seen_output: dict[str, int],
) -> CompactInput:
    messages = step.input_messages or []
    shared = 0
    if previous is not None and previous.input_messages:
        for old, new in zip(previous.input_messages, messages, strict=False):
            if _message_key(old) != _message_key(new):
                break
            shared += 1
    compact = CompactInput(
        step=step.index,
        total=len(messages),
        omitted=shared,
        omitted_from=previous.index if shared and previous is not None else None,
    )
    for message in messages[shared:]:
        entry = InputMessage(message)
        if len(message_text(message)) >= POINTER_MIN_CHARS:
            out = _output_match(_content_text(message.get("content")).strip(), seen_output)
            if out is not None and not message.get("tool_calls"):
                entry.output_of = out
            else:
                entry.input_of = seen_input.get(_message_key(message))
        compact.messages.append(entry)
    return compact


def compact_input(trace: Trace, step: Step) -> CompactInput | None:
    """``step``'s input without repetition, or None when the step recorded no input.

    Leading messages identical to the same agent's previous call are counted, not shown;
    each remaining message that is long and already visible elsewhere (as an earlier step's
    output, or in an earlier step's input) is replaced by a pointer to that step.
    """
    if not step.input_messages:
        return None
    return compact_inputs(trace)[step.index]


def full_input_text(step: Step) -> str:
    """Every input message of ``step`` (and its request parameters), uncompacted."""
    lines = [message_text(m) for m in step.input_messages or []]
    if step.request:
        lines.append("[request parameters] " + json.dumps(step.request, default=str)[:2000])
    return "\n".join(lines)


# --- steps -----------------------------------------------------------------------


@dataclass
class StepParts:
    header: str
    input: str | None
    output: str

    def render(self, max_chars: int | None) -> str:
        if self.input is None:
            return f"{self.header}: {truncate(self.output, max_chars)}"
        input_text, output_text = self.input, self.output
        if max_chars is not None and len(input_text) + len(self.output) > max_chars:
            # The step's own output is what is judged: it keeps at least half of the cap.
            out_cap = max(max_chars // 2, max_chars - len(input_text))
            output_text = truncate(self.output, out_cap)
            input_text = truncate(self.input, max(max_chars - len(output_text), 20))
        return f"{self.header}: [input]\n{input_text}\n[output]\n{output_text}"


def _parts(
    step: Step, options: RenderOptions, compact: CompactInput | None, visible: set[int]
) -> StepParts:
    # The speaker as the log wrote it ('Orchestrator (thought)'): answers naming it resolve
    # to the agent through ``agent_names.roster_of``, so model and scorer name the same agents.
    header = f"Step {step.index} - {step.speaker}" if options.step_indices else step.speaker
    input_text: str | None = None
    if shows_inputs(options.observability) and step.input_messages:
        input_text = compact.render(visible) if compact is not None else full_input_text(step)
    return StepParts(header, input_text, step_output_text(step))


def render_step(trace: Trace, step: Step, options: RenderOptions) -> str:
    """One step as prompt text."""
    compact = None
    if options.compact_inputs and shows_inputs(options.observability):
        compact = compact_input(trace, step)
    # Rendered alone, the step must stand alone: pointers to other steps are expanded.
    return _parts(step, options, compact, {step.index}).render(options.max_step_chars)


def all_parts(trace: Trace, steps: Sequence[Step], options: RenderOptions) -> list[StepParts]:
    compacts: list[CompactInput | None] = [None] * len(trace.steps)
    if options.compact_inputs and shows_inputs(options.observability) and trace.has_inputs:
        compacts = compact_inputs(trace)
    visible = {s.index for s in steps}
    return [
        _parts(s, options, compacts[s.index] if s.index < len(compacts) else None, visible)
        for s in steps
    ]


def render_steps(trace: Trace, steps: Sequence[Step], options: RenderOptions) -> str:
    """Several steps, one per paragraph."""
    return "\n".join(p.render(options.max_step_chars) for p in all_parts(trace, steps, options))


def render_metadata(
    trace: Trace, observability: Observability, *, max_chars: int | None = None
) -> str:
    """Agent roster, configurations and architecture notes ('' when hidden or absent).

    ``max_chars`` caps each agent's system prompt and configuration (with a marker)."""
    if not shows_metadata(observability):
        return ""
    lines: list[str] = []
    if trace.system:
        lines.append(f"System: {trace.system}")
    if trace.architecture:
        lines.append(f"Architecture: {truncate(trace.architecture, max_chars)}")
    for agent in trace.agents:
        lines.append(f"Agent {agent.name}:")
        if agent.description:
            lines.append(f"  description: {truncate(agent.description, max_chars)}")
        if agent.system_prompt:
            lines.append(f"  system prompt: {truncate(agent.system_prompt, max_chars)}")
        if agent.model:
            lines.append(f"  model: {agent.model}")
        if agent.config:
            blob = json.dumps(agent.config, default=str, ensure_ascii=False)
            lines.append(f"  configuration: {truncate(blob, max_chars)}")
    return "\n".join(lines)
