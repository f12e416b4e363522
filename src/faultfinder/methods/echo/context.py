"""Hierarchical context (paper §3.1, Algorithm 1 lines 6–15, Appendix A.3).

Around a target step, every other step is shown at a detail level set by its distance:

====================  ========  ====================================================
distance              level     content
====================  ========  ====================================================
0 (the target), 1     L1 full   the step as rendered by ``judging.render`` (inputs
                                shown when observability allows)
2–3                   L2        its key decision (≤ 50 words)
4–6                   L3        a brief summary (≤ 20 words)
> 6                   L4        its milestone (≤ 15 words)
====================  ========  ====================================================

The fixed-window ablation (I1) keeps only distance ≤ 1.

Compression is pattern-based by default: for each level there are patterns for four
context types (handoff, decision quality, error propagation, general); the first sentence
matching the first pattern that matches anywhere is kept. Fallbacks: the general patterns,
then the first substantive sentence (three words or more, not a heading such as 'Plan:'),
then the first words; empty content says so. An LLM extractor is
the alternative (one call per non-empty step, all three levels at once).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic import BaseModel

from faultfinder.judging.fitting import Piece, PieceRole, fit_pieces, fit_text, min_cap
from faultfinder.judging.render import RenderOptions, render_step, step_output_text, truncate
from faultfinder.llm.base import approx_token_count
from faultfinder.llm.client import LLM
from faultfinder.methods.echo import prompts
from faultfinder.methods.echo.schema import compressed_json_schema, constraint, parse_compressed
from faultfinder.traces.schema import Step, Trace

ContextType = Literal["handoff", "decision_quality", "error_propagation", "general"]
ContextKind = Literal["window", "hierarchical"]
ContextTypeMode = Literal["paper", "auto"]
Level = Literal["full", "key_decision", "summary", "milestone"]
Compression = Literal["key_decision", "summary", "milestone"]

# Tokens kept free for message framing when a prompt is fitted to the context budget.
_SLACK = 64
KEY_DECISION_WORDS = 50
SUMMARY_WORDS = 20
MILESTONE_WORDS = 15
NO_CONTENT = "No content available"
NO_MILESTONES = "No milestones available"

# Per level, the context type the paper's code uses when none is chosen.
PAPER_TYPES: dict[Compression, ContextType] = {
    "key_decision": "decision_quality",
    "summary": "general",
    "milestone": "general",
}


def _compile(*patterns: str) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, re.IGNORECASE) for p in patterns)


def _then(first: str, second: str) -> str:
    """A word of ``first``, then a word of ``second`` later on the same line (the paper's
    ``first.*second`` between word boundaries).

    Only a line's first ``first`` is tried (the atomic group keeps it): the plain ``.*`` form
    scans to the end of the line from every ``first``, quadratic on a long line repeating
    it. Any ``first`` followed by ``second`` means the line's first one is, so the same lines
    match."""
    return rf"(?m)^(?>.*?\b(?:{first})\b).*\b(?:{second})\b"


_PATTERNS: dict[Compression, dict[ContextType, tuple[re.Pattern[str], ...]]] = {
    "key_decision": {
        "handoff": _compile(
            r"\b(?:received|got|obtained)\s+(?:from|the|your|their|this)\b",
            r"\b(?:passing|providing|sending|handing|forwarding)\b",
            r"\b(?:based on|using)\s+(?:the|your|their|this|these)\b",
            _then("will|need to|should", "next|continue|proceed"),
        ),
        "decision_quality": _compile(
            r"\bI\s+(?:conclude|determine|decide|decided|believe|think)\b",
            r"^(?:therefore|thus|so|hence|consequently)\b",
            r"\bthe\s+(?:final\s+)?(?:answer|solution|result)\s+(?:is|appears|seems|should be)\b",
            r"^(?:based on|given)\b.*,",
        ),
        "error_propagation": _compile(
            r"\b(?:error|exception|traceback|mistake|wrong|incorrect|failed|failure)\b",
            r"\b(?:cannot|can't|couldn't|unable to|not able to)\b",
            r"^(?:however|but|unfortunately)\b",
        ),
        "general": _compile(
            r"\bI\s+(?:will|should|need to|decided to|conclude|believe|think|determine)\b",
            r"^(?:therefore|thus|so|hence)\b",
            r"\bthe\s+(?:answer|result|solution)\s+(?:is|appears to be|seems to be)\b",
            r"\blet(?: me|'s| us)\b",
            r"\bmy\s+(?:approach|strategy|plan)\s+(?:is|will be)\b",
        ),
    },
    "summary": {
        "handoff": _compile(
            r"\b(?:received|got|obtained)\b",
            r"\b(?:providing|sending|passing|handing)\b",
        ),
        "decision_quality": _compile(
            r"\b(?:conclude[sd]?|determine[sd]?|decide[sd]?)\b",
            r"^(?:therefore|thus|so)\b",
        ),
        "error_propagation": _compile(
            r"\b(?:error|exception|mistake|failed|failure)\b",
            r"\b(?:cannot|unable to)\b",
            r"\bexit\s*code:?\s*[1-9]",
        ),
        "general": _compile(
            r"^(?:in conclusion|to conclude|therefore|thus|so|hence|finally)\b",
            r"\bthe\s+(?:final\s+)?(?:answer|result|solution|output)\s+(?:is|was|appears|seems)\b",
            r"\bI\s+(?:found|determined|concluded|calculated|verified)\b",
            r"\b(?:code output|result)\s*:",
        ),
    },
    "milestone": {
        "handoff": _compile(
            _then("received|obtained|got", "from|data|information|results?"),
            _then("provided|sent|passed", "to|data|information"),
            _then("completed|finished", "handoff|transfer"),
        ),
        "decision_quality": _compile(
            r"\b(?:decided|determined|concluded)\b",
            r"\b(?:evaluated|assessed|analy[sz]ed)\b",
            r"\bfinal\s+(?:decision|answer|choice)\b",
        ),
        "error_propagation": _compile(
            _then("error|mistake|failure|exception", "occurred|detected|raised"),
            _then("identified|found", "error|issue|problem|bug"),
            r"\b(?:corrected|fixed|resolved)\b",
        ),
        "general": _compile(
            r"\b(?:completed|finished|achieved|accomplished)\b",
            r"\b(?:created|generated|produced|built)\b",
            r"\b(?:step|phase|stage)\s+\d+",
            r"\b(?:successfully|finally)\b",
        ),
    },
}

_WORD_LIMITS: dict[Compression, int] = {
    "key_decision": KEY_DECISION_WORDS,
    "summary": SUMMARY_WORDS,
    "milestone": MILESTONE_WORDS,
}

_ERROR_SIGNAL = re.compile(
    r"\b(?:error|exception|traceback|failed|failure|mistake|incorrect|unable to|cannot|"
    r"can't|couldn't)\b|\bexit\s*code:?\s*[1-9]",
    re.IGNORECASE,
)
_HANDOFF_SIGNAL = re.compile(
    r"\b(?:received|passing|handing|forwarding|delegat\w*|hand(?:ed)? (?:over|off)|"
    r"next speaker|please (?:proceed|continue))\b|->",
    re.IGNORECASE,
)
_DECISION_SIGNAL = re.compile(
    r"\b(?:conclude|therefore|thus|decide|determine|the answer is|final answer)\b", re.IGNORECASE
)


def sentences(text: str) -> list[str]:
    """Split text into sentences and lines (code output lines count as sentences)."""
    parts = re.split(r"(?<=[.!?])\s+|\n+", text)
    return [p.strip() for p in parts if p.strip()]


def clip_words(text: str, max_words: int) -> str:
    """The first ``max_words`` words, with '...' when cut."""
    words = text.split()
    return " ".join(words[:max_words]) + ("..." if len(words) > max_words else "")


def classify(text: str, kind: str = "llm") -> ContextType:
    """The context type a step's content calls for (used when ``context_types='auto'``):
    error signals first, then handoffs (and tool/human/system steps), then decisions."""
    if _ERROR_SIGNAL.search(text):
        return "error_propagation"
    if kind in ("tool", "human", "system") or _HANDOFF_SIGNAL.search(text):
        return "handoff"
    if _DECISION_SIGNAL.search(text):
        return "decision_quality"
    return "general"


def _substantive(sentence: str) -> bool:
    """A sentence worth showing on its own: three words or more, not a heading ('Plan:')."""
    return len(re.findall(r"[^\W\d_]{2,}", sentence)) >= 3 and not sentence.endswith(":")


def compress(text: str, level: Compression, context_type: ContextType | None = None) -> str:
    """One step's content at a compressed level, by patterns, with graceful fallbacks."""
    if not text.strip():
        return NO_MILESTONES if level == "milestone" else NO_CONTENT
    limit = _WORD_LIMITS[level]
    chosen = context_type or PAPER_TYPES[level]
    chain = list(_PATTERNS[level][chosen])
    if chosen != "general":
        chain += _PATTERNS[level]["general"]
    units = sentences(text)
    for pattern in chain:
        for sentence in units:
            if pattern.search(sentence):
                return clip_words(sentence, limit)
    lead = next((s for s in units if _substantive(s)), units[0] if units else "")
    first = clip_words(lead, limit)
    if first:
        return first
    return clip_words(text, limit) or (NO_MILESTONES if level == "milestone" else NO_CONTENT)


class Compressed(BaseModel):
    """A step's three compressed forms."""

    key_decision: str
    """L2 text."""
    summary: str
    """L3 text."""
    milestone: str
    """L4 text."""
    source: Literal["patterns", "llm", "patterns-fallback"] = "patterns"
    """How it was made; 'patterns-fallback' when the LLM extractor's reply was unusable."""

    def at(self, level: Compression) -> str:
        value: str = getattr(self, level)
        return value


def compress_with_patterns(step: Step, mode: ContextTypeMode = "paper") -> Compressed:
    """All three levels for one step by patterns."""
    text = step_output_text(step)
    kind = classify(text, step.kind) if mode == "auto" else None
    return Compressed(
        key_decision=compress(text, "key_decision", kind),
        summary=compress(text, "summary", kind),
        milestone=compress(text, "milestone", kind),
    )


class Extractor(Protocol):
    """Makes the compressed forms of a trace's steps."""

    name: str
    """'patterns' or 'llm'."""

    async def compress_trace(self, trace: Trace, llm: LLM) -> dict[int, Compressed]:
        """Compressed forms of every step, by index."""
        ...


@dataclass
class PatternExtractor:
    """Regex extraction (the paper's default): no model calls."""

    mode: ContextTypeMode = "paper"
    name: str = "patterns"

    async def compress_trace(self, trace: Trace, llm: LLM) -> dict[int, Compressed]:
        return {s.index: compress_with_patterns(s, self.mode) for s in trace.steps}


@dataclass
class LLMExtractor:
    """One model call per non-empty step for all three levels (the paper's ablation:
    more accurate, about three times the tokens). A reply that stays unparseable after
    the LLM layer's retries falls back to the patterns for that step, marked as such."""

    mode: ContextTypeMode = "paper"
    max_step_chars: int = 12000
    max_tokens: int = 512
    context_budget: int | None = None
    name: str = "llm"

    async def compress_trace(self, trace: Trace, llm: LLM) -> dict[int, Compressed]:
        async def one(step: Step) -> Compressed:
            text = step_output_text(step)
            if not text.strip():
                return compress_with_patterns(step, self.mode)

            def build(cap: int | None) -> str:
                return truncate(text, min(cap or self.max_step_chars, self.max_step_chars))

            available = None
            if self.context_budget is not None:
                frame = prompts.extractor_messages(step, "")
                used = sum(llm.count_tokens(m["content"]) for m in frame)
                available = self.context_budget - used - _SLACK
            shown, _ = fit_text(
                build,
                available,
                llm.count_tokens,
                size=len(text),
                what=f"Trace '{trace.id}': step {step.index} for context extraction",
            )
            reply = await llm.chat(
                prompts.extractor_messages(step, shown),
                parse=parse_compressed,
                purpose=f"echo context extraction: step {step.index}",
                temperature=0.0,
                max_tokens=self.max_tokens,
                constraint=constraint(compressed_json_schema()),
            )
            if reply.parsed is None:
                fallback = compress_with_patterns(step, self.mode)
                return fallback.model_copy(update={"source": "patterns-fallback"})
            answer = reply.parsed
            return Compressed(
                key_decision=clip_words(answer.key_decision, KEY_DECISION_WORDS),
                summary=clip_words(answer.summary, SUMMARY_WORDS),
                milestone=clip_words(answer.milestone, MILESTONE_WORDS),
                source="llm",
            )

        results = await asyncio.gather(*(one(s) for s in trace.steps))
        return {s.index: c for s, c in zip(trace.steps, results, strict=True)}


def make_extractor(
    name: str, mode: ContextTypeMode, context_budget: int | None = None
) -> Extractor:
    if name == "llm":
        return LLMExtractor(mode=mode, context_budget=context_budget)
    return PatternExtractor(mode=mode)


def level_for_distance(distance: int, kind: ContextKind = "hierarchical") -> Level | None:
    """The detail level of a step ``distance`` steps away (None: not shown)."""
    if distance <= 1:
        return "full"
    if kind == "window":
        return None
    if distance <= 3:
        return "key_decision"
    if distance <= 6:
        return "summary"
    return "milestone"


@dataclass(frozen=True)
class Entry:
    """One step as it appears in a context."""

    index: int
    """Canonical step index."""
    distance: int
    """Distance to the target (or to the nearest focus step)."""
    level: Level
    """Detail level."""


def plan_context(n_steps: int, focus: Iterable[int], kind: ContextKind) -> list[Entry]:
    """Entries for every visible step, in trace order; each step's distance is to the
    nearest focus step (one focus step: the paper's per-step context C_i)."""
    targets = sorted(set(focus))
    entries: list[Entry] = []
    if not targets:
        return entries
    for index in range(n_steps):
        distance = min(abs(index - t) for t in targets)
        level = level_for_distance(distance, kind)
        if level is not None:
            entries.append(Entry(index, distance, level))
    return entries


_GROUPS: tuple[tuple[str, Callable[[Entry], bool]], ...] = (
    ("CURRENT STEP", lambda e: e.distance == 0),
    ("IMMEDIATE CONTEXT (distance 1: full detail)", lambda e: e.distance == 1),
    ("NEARBY CONTEXT (distance 2-3: key decisions)", lambda e: e.level == "key_decision"),
    ("DISTANT CONTEXT (distance 4-6: brief summaries)", lambda e: e.level == "summary"),
    ("MILESTONES (distance > 6)", lambda e: e.level == "milestone"),
)
_TAGS: dict[Level, str] = {
    "full": "full",
    "key_decision": "key decision",
    "summary": "summary",
    "milestone": "milestone",
}


def _entry_text(
    trace: Trace, entry: Entry, compressed: dict[int, Compressed], options: RenderOptions
) -> str:
    step = trace.steps[entry.index]
    if entry.level == "full":
        return render_step(trace, step, options)
    return f"Step {step.index} - {step.speaker}: {compressed[step.index].at(entry.level)}"


def _role(distance: int) -> PieceRole:
    # The step under judgement is never cut; its neighbours are cut last.
    return "judged" if distance == 0 else "context" if distance == 1 else "other"


def entry_piece(
    trace: Trace,
    entry: Entry,
    compressed: dict[int, Compressed],
    options: RenderOptions,
    *,
    tagged: bool = False,
    group: str | None = None,
) -> Piece:
    """One context entry as a piece for :func:`faultfinder.judging.fitting.fit_pieces`."""

    def render(cap: int | None) -> str:
        limit = min_cap(cap, options.max_step_chars)
        capped = options.model_copy(update={"max_step_chars": limit})
        text = _entry_text(trace, entry, compressed, capped)
        return f"[{_TAGS[entry.level]}] {text}" if tagged else text

    return Piece(
        step=entry.index,
        agent=trace.steps[entry.index].agent,
        role=_role(entry.distance),
        render=render,
        size=len(_entry_text(trace, entry, compressed, options)),
        group=group,
    )


def step_context_pieces(
    trace: Trace,
    target: int,
    compressed: dict[int, Compressed],
    kind: ContextKind,
    options: RenderOptions,
) -> list[Piece]:
    """The paper's per-step context C_i as pieces: grouped by level, trace order within a
    level; the target step is the judged piece."""
    entries = plan_context(len(trace.steps), [target], kind)
    pieces: list[Piece] = []
    for title, belongs in _GROUPS:
        pieces += [
            entry_piece(trace, e, compressed, options, group=f"{title}:")
            for e in entries
            if belongs(e)
        ]
    return pieces


def render_step_context(
    trace: Trace,
    target: int,
    compressed: dict[int, Compressed],
    kind: ContextKind,
    options: RenderOptions,
) -> str:
    """C_i uncut (see :func:`step_context_pieces`)."""
    pieces = step_context_pieces(trace, target, compressed, kind, options)
    return fit_pieces(pieces, None, approx_token_count, what="")[0]


def focused_pieces(
    trace: Trace,
    focus: Sequence[int],
    compressed: dict[int, Compressed],
    kind: ContextKind,
    options: RenderOptions,
) -> list[Piece]:
    """The whole trace in order, detail set by distance to the nearest focus step; each
    step tagged with its level (the step-level pass). Focus steps are the judged pieces."""
    return [
        entry_piece(trace, e, compressed, options, tagged=True)
        for e in plan_context(len(trace.steps), focus, kind)
    ]
