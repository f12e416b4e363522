"""The answer part of a reply: what follows a reasoning model's ``<think>`` block.

Reasoning models served without a reasoning parser (DeepSeek-R1 and its distills, Qwen3,
QwQ through vLLM or Ollama) write their reasoning into the reply's text, in
``<think>...</think>`` before the answer. That reasoning often tries out answers in the
very format the prompt asks for ('Step Number: 3... no, wait'), so a parser reading the
whole reply would take a rejected draft for the answer, or find two answers and give up.
Every parser of a model's reply first keeps what follows the block
(:func:`answer_part`), and reads an answer wrapped in ``<answer>`` tags as if the tags were
not there. The rules are in ``docs/eval.md`` ("Reading answers").
"""

from __future__ import annotations

import re

from faultfinder.llm.client import ParseError

_TAG_NAMES = r"think|thinking|reasoning"
_OPEN = re.compile(rf"<({_TAG_NAMES})>", re.IGNORECASE)
_CLOSE = re.compile(rf"</({_TAG_NAMES})>", re.IGNORECASE)


_BLANKS = re.compile(r"\s*+")
_ANSWER_TAG = re.compile(
    r"^[ \t]*+<(?:final_)?answer>|</(?:final_)?answer>[ \t]*+$", re.IGNORECASE | re.MULTILINE
)
"""An ``<answer>`` tag opening a line or a ``</answer>`` closing one: a wrapper around the
answer ('<answer>Yes</answer>'). A tag inside a line (quoted from a step) is text."""


def answer_part(text: str) -> str:
    """``text`` without the reasoning block it starts with.

    - A reply that starts (after blanks) with ``<think>`` (or ``<thinking>``,
      ``<reasoning>``): its answer is what follows the matching close tag; several blocks
      in a row are all reasoning. A block that never closes leaves no answer (ParseError:
      the reply was cut off, or never got past its reasoning).
    - A reply with a ``</think>`` and no opening tag before it (a chat template that puts
      ``<think>`` in the prompt, as the R1 distills' do): the answer follows that tag.
    - Anything else is the answer as it stands.

    Then ``<answer>``/``</answer>`` tags (and ``<final_answer>``) that open or close a line
    become line breaks: '<answer>Agent Name: X' holds the field 'Agent Name' at the start
    of a line, '<answer>Yes</answer>' is the line 'Yes'. An answer left empty is a
    ParseError. A ``<think>...</think>`` pair quoted after the
    start of an answer (from a step's output) stays part of it; a lone close tag quoted in
    an answer with no reasoning before it would be taken for the end of reasoning, and
    the answer read from what follows it (or found missing): never a guess.
    """
    position = 0
    cut = False
    while True:
        start = _BLANKS.match(text, position)
        opening = _OPEN.match(text, start.end() if start else position)
        if opening is None:
            break
        closing = _CLOSE.search(text, opening.end())
        if closing is None:
            raise ParseError(
                f"the reply's <{opening.group(1)}> block never closes: it holds reasoning "
                "and no answer (cut off at the output limit?)"
            )
        position, cut = closing.end(), True
    if not cut:
        closing = _CLOSE.search(text)
        if closing is not None and _OPEN.search(text, 0, closing.start()) is None:
            position, cut = closing.end(), True
    answer = text[position:]
    if cut and not answer.strip():
        raise ParseError("nothing follows the reply's reasoning block: no answer")
    return _ANSWER_TAG.sub("\n", answer)
