"""Shared pieces of the Who&When baselines (Zhang et al., ICML 2025).

The prompt templates follow the paper's Appendix G word for word (placeholders filled,
typographic quotes made plain). DoVer (Section 3, Appendix A) adds two refinements, both
on by default and both switchable: explicit step indices in the rendered log, and a short
reminder of the annotators' guidance. With both off the prompts are the paper's own.

The methods in ``all_at_once``, ``step_by_step``, ``binary_search`` and ``hybrid`` are
compositions of the builders, parsers and grammars below; none holds a prompt of its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import ClassVar, Literal

from pydantic import BaseModel

from faultfinder.judging import reference
from faultfinder.judging.answers import (
    answer_part,
    find_hedge,
    parse_yes_no,
    stated_json,
    stated_reason,
)
from faultfinder.judging.fitting import fit_steps
from faultfinder.judging.grammars import REASON_GBNF, choice_grammar, gbnf_choice
from faultfinder.judging.method import MethodConfig
from faultfinder.judging.render import RenderOptions, context_budget, render_metadata
from faultfinder.llm.base import OutputConstraint
from faultfinder.llm.client import LLM, ParseError
from faultfinder.traces.schema import Step, Trace

PROMPT_FAMILY = "whowhen-v1"
"""Bump when any template below changes."""


class WhoWhenConfig(MethodConfig):
    """Options shared by the four Who&When baselines."""

    PROMPT_VERSION: ClassVar[str] = PROMPT_FAMILY

    step_indices: bool = True
    """DoVer refinement 1: prefix every step with 'Step N -' (0-based) in the log.
    Off: the paper's 'name: content' lines."""
    guidance_reminder: bool = True
    """DoVer refinement 2: add a short reminder of the annotation guidance (what a
    decisive error is) to every prompt. Off: the paper's prompts unchanged."""

    def prompt_version(self) -> str:
        """'whowhen-v1', plus '+idx', '+guide' or '+dover' (both of DoVer's refinements:
        the prompts did not change when the preset was renamed 'refined')."""
        if self.step_indices and self.guidance_reminder:
            return f"{PROMPT_FAMILY}+dover"
        if self.step_indices:
            return f"{PROMPT_FAMILY}+idx"
        if self.guidance_reminder:
            return f"{PROMPT_FAMILY}+guide"
        return PROMPT_FAMILY


PAPER_SAMPLING: dict[str, object] = {"temperature": 1.0, "top_p": 1.0, "max_output_tokens": 1024}
"""What the paper's runs sent: Who&When states no sampling settings (Section 4.2), and the
public ``Automated_FA`` code of its baselines (``Lib/utils.py``) passes only ``max_tokens``
(1024, the ``inference.py`` default), so the OpenAI defaults applied: temperature 1, top_p 1."""

PRESETS: dict[str, dict[str, object]] = {
    "paper": {"step_indices": False, "guidance_reminder": False, **PAPER_SAMPLING},
    "step-index": {"step_indices": True, "guidance_reminder": False},
    "refined": {"step_indices": True, "guidance_reminder": True},
}
"""Presets shared by all four baselines: ``paper`` (Appendix G prompts, the paper's
sampling), ``step-index`` (DoVer's '+Step Index' row) and ``refined`` (the default: both
DoVer refinements, temperature 0, replies bounded per answer field)."""


# Reply bounds: each question's max output tokens is the sum of what its answer fields
# need (``MethodConfig.max_output_tokens`` overrides them all). A reason is a few sentences;
# under a grammar it is also held to ``grammars.REASON_MAX_CHARS`` characters.
AGENT_FIELD_TOKENS = 32
"""'Agent Name: ' and a roster name."""
STEP_FIELD_TOKENS = 16
"""'Step Number: ' and an index."""
REASON_FIELD_TOKENS = 256
"""'Reason for Mistake: ' and a few sentences."""
CHOICE_FIELD_TOKENS = 16
"""A one-word or two-word choice: '1. Yes.' or 'upper half'."""
ALL_AT_ONCE_REPLY_TOKENS = AGENT_FIELD_TOKENS + STEP_FIELD_TOKENS + REASON_FIELD_TOKENS
JUDGEMENT_REPLY_TOKENS = CHOICE_FIELD_TOKENS + REASON_FIELD_TOKENS
HALF_REPLY_TOKENS = 2 * CHOICE_FIELD_TOKENS
EXPLAIN_REPLY_TOKENS = REASON_FIELD_TOKENS


# DoVer's Figure 3 (the exact reminder) and Who&When's Figure 10 (the guideline) are
# images the text does not reproduce; this wording restates the decisive-error
# definition of Who&When Section 2, which is what the guideline encodes.
GUIDANCE_REMINDER = (
    "Reminder of the annotation guidance: the mistake to find is the decisive error. "
    "A step is the decisive error when the action of the agent at that step is a mistake "
    "(for example wrong reasoning, wrong or unverified information, a wrong instruction or "
    "a wrong use of a tool) and correcting that single action would have let the agents "
    "solve the problem. If there are several such mistakes, the earliest one counts. The "
    "responsible agent is the agent who acted at that step."
)


# --- inputs common to every prompt --------------------------------------------------


def ground_truth_for(trace: Trace, config: MethodConfig) -> str | None:
    """The reference answer when the config asks for it and the trace has one."""
    return reference.ground_truth_for(trace, config.with_ground_truth)


def metadata_for(trace: Trace, config: MethodConfig) -> str:
    """Agent roster / configuration text, '' when observability hides it or there is none."""
    return render_metadata(trace, config.observability)


def fill_log(
    trace: Trace,
    steps: Sequence[Step],
    config: WhoWhenConfig,
    llm: LLM,
    template: Callable[[str], str],
    *,
    reply_tokens: int,
    judged: Sequence[int] = (),
) -> tuple[str, bool]:
    """``template(log)`` with ``steps`` rendered into it, within the context budget
    (less ``reply_tokens`` kept for the answer).

    The template's own tokens are reserved first, so only the log is cut (with visible
    markers, never the ``judged`` steps or their neighbours). Returns (prompt, truncated?).
    """
    options = RenderOptions.from_config(config, step_indices=config.step_indices)
    reserved = llm.count_tokens(template(""))
    log, truncated = fit_steps(
        trace,
        steps,
        options,
        context_budget(config, llm, config.reply_tokens(reply_tokens)),
        llm.count_tokens,
        reserved,
        judged=judged,
    )
    return template(log), truncated


def _sentence(text: str) -> str:
    """``text`` closed with the template's full stop, unless it already ends a sentence."""
    stripped = text.rstrip()
    return stripped if stripped.endswith((".", "?", "!")) else f"{stripped}."


def _gt_line(ground_truth: str | None) -> str | None:
    if ground_truth is None:
        return None
    return f"The Answer for the problem is: {_sentence(ground_truth)}"


def _optional(line: str | None) -> str:
    return f"{line}\n" if line else ""


def _metadata_block(metadata: str) -> str:
    return f"Information about the system and its agents:\n{metadata}\n" if metadata else ""


def _reminder(enabled: bool) -> str:
    return f"{GUIDANCE_REMINDER}\n" if enabled else ""


# --- Appendix G.1: all-at-once -------------------------------------------------------


def all_at_once_prompt(
    problem: str,
    log: str,
    *,
    ground_truth: str | None = None,
    reminder: bool = False,
    metadata: str = "",
) -> str:
    """The all-at-once prompt (with the ground-truth line when ``ground_truth`` is given)."""
    gt = _gt_line(ground_truth)
    return (
        "You are an AI assistant tasked with analyzing a multi-agent conversation history "
        "when solving a real world problem.\n"
        f"The problem is: {_sentence(problem)}\n"
        f"{_optional(gt)}"
        f"{_metadata_block(metadata)}"
        "Identify which agent made an error, at which step, and explain the reason for the "
        "error.\n"
        f"Here's the conversation:\n{log}\n\n"
        f"{_reminder(reminder)}"
        "Based on this conversation, please predict the following:\n"
        "1. The name of the agent who made a mistake that should be directly responsible for "
        "the wrong solution to the real world problem. If there are no agents that make "
        "obvious mistakes, decide one single agent in your mind. Directly output the name of "
        "the Expert.\n"
        "2. In which step the mistake agent first made mistake. For example, in a "
        "conversation structured as follows:\n"
        "{\n"
        '"agent a": "xx",\n'
        '"agent b": "xxxx",\n'
        '"agent c": "xxxxx",\n'
        '"agent a": "xxxxxxx"\n'
        "},\n"
        "each entry represents a 'step' where an agent provides input. The 'x' symbolizes "
        "the speech of each agent. If the mistake is in agent c's speech, the step number is "
        "2. If the second speech by 'agent a' contains the mistake, the step number is 3, and "
        "so on. Please determine the step number where the first mistake occurred.\n"
        "3. The reason for your prediction. Please answer in the format:\n"
        "Agent Name: (Your prediction)\n"
        "Step Number: (Your prediction)\n"
        "Reason for Mistake: (Your reason)"
    )


# --- Appendix G.3: step-by-step ------------------------------------------------------


def step_judgement_prompt(
    problem: str,
    log: str,
    *,
    ground_truth: str | None = None,
    reminder: bool = False,
    metadata: str = "",
) -> str:
    """The step-by-step prompt: is the most recent step of ``log`` an error?"""
    gt = _gt_line(ground_truth)
    return (
        "You are an AI assistant tasked with evaluating the correctness of each step in an "
        "ongoing multi-agent conversation aimed at solving a real-world problem.\n"
        f"The problem being addressed is: {_sentence(problem)}\n"
        f"{_metadata_block(metadata)}"
        f"Here is the conversation history up to the current step:\n{_sentence(log)}\n"
        f"{_optional(gt)}"
        f"{_reminder(reminder)}"
        "Your task is to determine whether the most recent agent's action contains an error "
        "that could hinder the problem-solving process. Please respond with 'Yes' or 'No' and "
        "provide a clear explanation for your judgment.\n"
        "Note: Please avoid being overly critical in your evaluation.\n"
        "Attention: Respond in the format:\n"
        "1. Yes/No. 2. Reason for the judgment."
    )


class Judgement(BaseModel):
    """A step-by-step answer."""

    erroneous: bool
    """True when the judge answered Yes (the most recent step contains an error)."""
    reason: str
    """The judge's explanation."""


_ITEM_ONE = re.compile(r"^[ \t*#>]*+1[ \t]*+[.)]", re.MULTILINE)
# Item 2 opens a line, or follows the end of item 1's sentence ('1. Yes. 2. ...'): the
# '2.' of 'the error is in step 2. It...' is not an item.
_ITEM_TWO = re.compile(r"(?:^[ \t*#>]*+|(?<=[.!?*_])[ \t]++[*_]*+)2[ \t]*+[.)]", re.MULTILINE)
_REASON_PREFIX = re.compile(
    r"^[*_ \t]*+reason(?:[ \t]++for[ \t]++(?:the[ \t]++)?mistake)?[*_]*+[ \t]*+[:：][*_ \t]*+",
    re.IGNORECASE,
)


def _item_two(text: str) -> str:
    """The text of item '2.' after an item '1.', without a 'Reason:' label; '' if none."""
    one = _ITEM_ONE.search(text)
    two = _ITEM_TWO.search(text, one.end()) if one else None
    return _REASON_PREFIX.sub("", text[two.end() :].strip()) if two else ""


def parse_judgement(text: str) -> Judgement:
    """'1. Yes. 2. Reason...' → Judgement(erroneous=True, reason='Reason...').

    The Yes/No is read by :func:`answers.parse_yes_no` (anchored to item 1 or an answer
    label; echoes, negations, hedges and both-answers are unreadable). The reason is the
    one the answer states (:func:`answers.stated_reason`): a JSON reason, a labelled
    'Reason:' field, item 2, or else the whole answer. Each reads the answer part once
    (:func:`answer_part` on a text it returned would take a quoted ``</think>`` in the
    answer for the end of the reasoning)."""
    erroneous = parse_yes_no(text)
    text = answer_part(text)
    reason = stated_reason(text, stated_json(text), unlabelled=_item_two(text))
    return Judgement(erroneous=erroneous, reason=reason)


def judgement_grammar() -> OutputConstraint:
    """'1. Yes. 2. <one-line reason>' or the same with 'No'."""
    yes_no = gbnf_choice(["Yes", "No"])
    return OutputConstraint(gbnf=f'root ::= "1. " ({yes_no}) ". 2. " {REASON_GBNF}')


# --- Appendix G.2: binary search -----------------------------------------------------

Half = Literal["upper", "lower"]


def split_range(low: int, high: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Inclusive halves of [low, high] as (upper, lower).

    'Upper' is the first half, the steps written higher up in the log: Algorithm 2's
    L' = {l_low..l_mid} with mid = floor((low + high) / 2), kept when the error is in it.
    """
    mid = (low + high) // 2
    return (low, mid), (mid + 1, high)


def describe_range(low: int, high: int) -> str:
    return f"from step {low} to step {high}"


def binary_search_prompt(
    problem: str,
    log: str,
    *,
    low: int,
    high: int,
    ground_truth: str | None = None,
    reminder: bool = False,
    metadata: str = "",
) -> str:
    """The binary-search prompt for the segment [low, high] (0-based, inclusive)."""
    (u_low, u_high), (l_low, l_high) = split_range(low, high)
    gt = _gt_line(ground_truth)
    return (
        "You are an AI assistant tasked with analyzing a segment of a multi-agent "
        "conversation. Multiple agents are collaborating to address a user query, with the "
        "goal of resolving the query through their collective dialogue.\n"
        "Your primary task is to identify location of the most critical mistake, and "
        "determine the single step in the conversation where this error occurs, ultimately "
        "leading to the failure in resolving the user's query.\n"
        f"The problem to address is as follows: {_sentence(problem)}\n"
        f"{_optional(gt)}"
        f"{_metadata_block(metadata)}"
        f"Review the following conversation range {describe_range(low, high)}:\n{_sentence(log)}\n"
        f"{_reminder(reminder)}"
        "Based on your analysis, predict whether the error is more likely to be located in "
        "the upper or lower half of the segment.\n"
        f"lower half is defined as the range {describe_range(l_low, l_high)} and upper half "
        f"is defined as the range {describe_range(u_low, u_high)}.\n"
        "Please simply output either 'upper half' or 'lower half'.\n"
        "You should not output anything else."
    )


_PLAIN_QUOTES = str.maketrans({"’": "'", "‘": "'", "“": '"', "”": '"'})
_HALF = re.compile(r"\b(upper|lower)[\s_\-]*half\b", re.I)
_HALF_ECHO = re.compile(
    r"(?:either\s+)?['\"`]?(upper|lower)(?:[\s_\-]*half)?['\"`]?\s*(?:or|/)\s*(?:the\s+)?"
    r"['\"`]?(upper|lower)[\s_\-]*half['\"`]?",
    re.I,
)
_HALF_NEGATED = re.compile(
    r"(\bnot|n't|\bcannot|\bneither|\bnor|\brather than|\binstead of)\b[^.\n]{0,20}$", re.I
)
_NEGATION_REACH = 40
"""Characters before a label that :data:`_HALF_NEGATED` can see: a negation of at most 11
characters, 20 more, and the character before it (its word boundary), with room to spare.
Searching only these keeps a reply naming the label many times linear."""
_HALF_REVISED = re.compile(
    r"\?|\b(?:no|nope)[ \t]*+[,.!;:]|\b(?:actually|wait|rather|instead|correction|sorry|"
    r"i mean|on second thought|on reflection|scratch that|make (?:that|it))\b",
    re.I,
)
"""What, between a reply's first label and the other label, takes the first one back:
'Lower half? No, upper half.', 'upper half. Actually, lower half.'."""
_SENTENCE_END = re.compile(r"(?<=[.!?。])\s|\n")
_HALF_QUESTIONED = re.compile(r"\b(?:upper|lower)[\s_\-]*half\b['\"`*_]*+\s*+\?", re.I)
"""A label asked rather than answered ('Lower half?')."""


def parse_half(text: str) -> Half:
    """'upper half' or 'lower half', the only two answers the prompt allows.

    Only those labels count (a bare 'upper', 'first half' or 'top' is unreadable).
    An echo of the question ("'upper half' or 'lower half'") is ignored. A reply that
    starts with a label is read as that label, unless it goes on to take it back ('Lower
    half. Actually, upper half.'); otherwise it must name exactly one of the two, and not
    in a negation ("not in the upper half"). A label asked ('Lower half?') or hedged in its
    sentence ('I cannot determine whether it is the upper half', 'probably the lower
    half') is unreadable.
    """
    body = _HALF_ECHO.sub(" ", answer_part(text).translate(_PLAIN_QUOTES))
    questioned = _HALF_QUESTIONED.search(body)
    if questioned:
        raise ParseError(f"the answer asks rather than answers: '{questioned.group(0)[:80]}'")
    for sentence in _SENTENCE_END.split(body):
        hedge = find_hedge(sentence) if _HALF.search(sentence) else None
        if hedge:
            raise ParseError(f"the answer hedges ('{hedge}'): '{sentence.strip()[:80]}'")
    cleaned = re.sub(
        r"^[\s'\"`*_#>.:-]*(?:(?:final\s+)?answer\s*[:：]\s*)?[\s'\"`*_]*", "", body, flags=re.I
    )
    start = _HALF.match(cleaned)
    if start:
        kind = start.group(1).lower()
        other = next((m for m in _HALF.finditer(cleaned) if m.group(1).lower() != kind), None)
        between = cleaned[start.end() : other.start()] if other else ""
        revised = _HALF_REVISED.search(between)
        if revised:
            raise ParseError(
                f"the answer takes its first half back ('{revised.group(0).strip()}'): "
                f"'{cleaned.strip()[:80]}'"
            )
        return "upper" if kind == "upper" else "lower"
    found = list(_HALF.finditer(body))
    kinds = {m.group(1).lower() for m in found}
    if not kinds:
        raise ParseError("no 'upper half' or 'lower half' in the answer")
    if len(kinds) > 1:
        raise ParseError("the answer names both 'upper half' and 'lower half'")
    if any(
        _HALF_NEGATED.search(body[max(0, m.start() - _NEGATION_REACH) : m.start()]) for m in found
    ):
        raise ParseError("the answer negates the half it names")
    return "upper" if "upper" in kinds else "lower"


def half_grammar() -> OutputConstraint:
    return choice_grammar(["upper half", "lower half"])


# Binary search has no reasoning in the paper (Appendix B.1); this optional follow-up is
# ours and only runs with `explain=True`.
def explain_step_prompt(
    problem: str,
    log: str,
    *,
    step: int,
    agent: str,
    ground_truth: str | None = None,
    metadata: str = "",
) -> str:
    """Ask why the located step is the mistake (binary search's optional reason)."""
    gt = _gt_line(ground_truth)
    return (
        "You are an AI assistant tasked with analyzing a multi-agent conversation history "
        "when solving a real world problem.\n"
        f"The problem is: {_sentence(problem)}\n"
        f"{_optional(gt)}"
        f"{_metadata_block(metadata)}"
        f"Here's the conversation:\n{log}\n\n"
        f"The most critical mistake was located at step {step}, taken by {agent}. In one or "
        "two sentences, explain what the mistake in that step is.\n"
        "Answer in the format:\n"
        "Reason for Mistake: (Your reason)"
    )


def parse_reason(text: str) -> str:
    """The reason the answer states (:func:`answers.stated_reason`: a JSON reason, the
    'Reason for Mistake:' field, or else the whole reply); a bare label is unreadable."""
    text = answer_part(text)
    reason = stated_reason(text, stated_json(text))
    if not _REASON_PREFIX.sub("", reason).strip(" \t\n*_"):
        raise ParseError("empty reason")
    return reason


def reason_grammar() -> OutputConstraint:
    return OutputConstraint(gbnf=f'root ::= "Reason for Mistake: " {REASON_GBNF}')
