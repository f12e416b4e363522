"""The one prompt fitter: fitting a rendered log (or any text) to a token budget.

Every method's logs go through ``fit_pieces`` (``fit_steps`` for
plain step logs, ``fit_text`` for a single cuttable text). Cuts happen in this order,
each tried only when the previous is not enough:
  1. 'other' pieces (outside the judged steps and their neighbours) are cut head + tail
     to a shared character cap, lowered until the prompt fits (short ones stay whole);
  2. 'other' pieces are left out, farthest from the judged steps first (no judged
     steps: from the middle of the log outwards), each run of left-out steps replaced
     by one marker line naming the steps and their speakers;
  3. 'context' pieces (the judged steps' immediate neighbours) are cut to a shared cap;
  4. then left out, later ones first.
'judged' pieces are never cut. When even step 4 does not fit, ContextBudgetError:
a prompt over the budget is never returned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from faultfinder.judging.render import (
    MIN_STEP_CHARS,
    ContextBudgetError,
    RenderOptions,
    StepParts,
    TokenCounter,
    all_parts,
)
from faultfinder.llm.base import approx_token_count
from faultfinder.traces.schema import Step, Trace

PieceRole = Literal["judged", "context", "other"]


@dataclass
class Piece:
    """One part of a prompt that :func:`fit_pieces` may cut."""

    step: int
    """Canonical index of the step it shows (markers name it)."""
    agent: str
    """Speaker of that step (markers name it)."""
    role: PieceRole
    """'judged' (never cut), 'context' (cut and left out last) or 'other'."""
    render: Callable[[int | None], str]
    """The piece's text with its long parts cut to this many characters (None: whole)."""
    size: int
    """Characters of the whole piece (upper bound of the cap search)."""
    group: str | None = None
    """Heading printed before the first piece of each group (None: no heading)."""
    omittable: bool = True
    """Whether it may be left out (never a 'judged' piece)."""


def min_cap(a: int | None, b: int | None) -> int | None:
    """The tighter of two character caps (None: no cap)."""
    if a is None:
        return b
    return a if b is None else min(a, b)


def omission_marker(left_out: Sequence[Piece]) -> str:
    """One line standing for a run of left-out steps."""
    first, last = left_out[0].step, left_out[-1].step
    where = f"Step {first}" if first == last else f"Steps {first}-{last}"
    agents = list(dict.fromkeys(p.agent for p in left_out if p.agent))
    who = ", ".join(agents[:3]) + (f" +{len(agents) - 3} more" if len(agents) > 3 else "")
    by = f" by {who}" if who else ""
    return f"[{where}{by}: left out by faultfinder to fit the context budget]"


def _compose(pieces: Sequence[Piece], caps: dict[PieceRole, int | None], left_out: set[int]) -> str:
    lines: list[str] = []
    group: str | None = None
    run: list[Piece] = []
    for i, piece in enumerate(pieces):
        if piece.group is not None and piece.group != group:
            if run:
                lines.append(omission_marker(run))
                run = []
            if lines:
                lines.append("")
            lines.append(piece.group)
            group = piece.group
        if i in left_out:
            run.append(piece)
            continue
        if run:
            lines.append(omission_marker(run))
            run = []
        lines.append(piece.render(caps[piece.role]))
    if run:
        lines.append(omission_marker(run))
    return "\n".join(lines)


def _largest_cap(
    render: Callable[[int], str], fits: Callable[[str], bool], high: int
) -> str | None:
    """The rendering at the largest cap in [MIN_STEP_CHARS, high] that fits, or None."""
    best = render(MIN_STEP_CHARS)
    if not fits(best):
        return None
    low, high = MIN_STEP_CHARS, max(high, MIN_STEP_CHARS + 1)
    while low < high:
        mid = (low + high + 1) // 2
        candidate = render(mid)
        if fits(candidate):
            best, low = candidate, mid
        else:
            high = mid - 1
    return best


def _omission_order(pieces: Sequence[Piece]) -> list[int]:
    anchors = [p.step for p in pieces if p.role != "other"]
    if not anchors and pieces:
        anchors = [pieces[0].step, pieces[-1].step]
    candidates = [i for i, p in enumerate(pieces) if p.role == "other" and p.omittable]

    def distance(i: int) -> int:
        return min(abs(pieces[i].step - a) for a in anchors)

    return sorted(candidates, key=lambda i: (-distance(i), -pieces[i].step))


def fit_pieces(
    pieces: Sequence[Piece],
    available_tokens: int | None,
    count_tokens: TokenCounter,
    *,
    what: str,
    budget: int | None = None,
) -> tuple[str, bool]:
    """``pieces`` joined (one per line, with group headings and markers) within
    ``available_tokens``; the order of cuts is described above. Returns (text, cut?).
    ``what`` and ``budget`` only word the error."""
    whole: dict[PieceRole, int | None] = {"judged": None, "context": None, "other": None}
    text = _compose(pieces, whole, set())
    if available_tokens is None:
        return text, False
    limit_tokens: int = available_tokens

    def fits(candidate: str) -> bool:
        return count_tokens(candidate) <= limit_tokens

    if available_tokens > 0 and fits(text):
        return text, False
    if available_tokens > 0:
        longest = {
            role: max((p.size for p in pieces if p.role == role), default=0)
            for role in ("context", "other")
        }
        found = _largest_cap(
            lambda cap: _compose(pieces, {**whole, "other": cap}, set()), fits, longest["other"]
        )
        if found is not None:
            return found, True
        order = _omission_order(pieces)
        at_min: dict[PieceRole, int | None] = {**whole, "other": MIN_STEP_CHARS}
        if order and fits(_compose(pieces, at_min, set(order))):
            low, high = 1, len(order)
            while low < high:
                mid = (low + high) // 2
                if fits(_compose(pieces, at_min, set(order[:mid]))):
                    high = mid
                else:
                    low = mid + 1
            return _compose(pieces, at_min, set(order[:low])), True
        found = _largest_cap(
            lambda cap: _compose(pieces, {**at_min, "context": cap}, set(order)),
            fits,
            longest["context"],
        )
        if found is not None:
            return found, True
        # Last, the neighbours themselves, later ones first.
        near = [i for i in reversed(range(len(pieces))) if pieces[i].role == "context"]
        near = [i for i in near if pieces[i].omittable]
        both: dict[PieceRole, int | None] = {**at_min, "context": MIN_STEP_CHARS}
        for k in range(1, len(near) + 1):
            candidate = _compose(pieces, both, set(order) | set(near[:k]))
            if fits(candidate):
                return candidate, True
    limit = f"a context budget of {budget} tokens" if budget is not None else "the context budget"
    raise ContextBudgetError(
        f"{what} do not fit {limit} ({available_tokens} tokens available) even with every "
        "step but the judged ones left out; the judged steps are never cut. Raise "
        "--set context_budget=N (with a model whose context is larger), or lower "
        "--max-output-tokens."
    )


def fit_text(
    build: Callable[[int | None], str],
    available_tokens: int | None,
    count_tokens: TokenCounter,
    *,
    size: int,
    what: str,
) -> tuple[str, bool]:
    """A single cuttable text (``build(cap)``: its long parts cut to ``cap`` characters)
    within ``available_tokens``; :func:`fit_pieces` with one piece that is never left out."""
    piece = Piece(step=0, agent="", role="other", render=build, size=size, omittable=False)
    return fit_pieces([piece], available_tokens, count_tokens, what=what)


def fit_steps(
    trace: Trace,
    steps: Sequence[Step],
    options: RenderOptions,
    budget_tokens: int | None,
    count_tokens: TokenCounter = approx_token_count,
    reserved_tokens: int = 0,
    *,
    judged: Iterable[int] = (),
) -> tuple[str, bool]:
    """Render ``steps`` so the text fits ``budget_tokens - reserved_tokens``.

    ``judged``: the steps the question is about. They are never cut; their immediate
    neighbours are cut only once everything else is gone. See :func:`fit_pieces` for the
    order of cuts. Returns (text, truncated?); raises :class:`ContextBudgetError` when
    even that does not fit.
    """
    parts = all_parts(trace, steps, options)
    cap = options.max_step_chars
    shown = {s.index for s in steps}
    focus = set(judged) & shown
    near = {i + d for i in focus for d in (-1, 1)} & shown - focus

    def piece(step: Step, part: StepParts) -> Piece:
        role: PieceRole = "judged" if step.index in focus else "context"
        if step.index not in focus and step.index not in near:
            role = "other"
        return Piece(
            step=step.index,
            agent=step.agent,
            role=role,
            render=lambda limit: part.render(min_cap(limit, cap)),
            size=len(part.input or "") + len(part.output),
        )

    pieces = [piece(s, p) for s, p in zip(steps, parts, strict=True)]
    available = None if budget_tokens is None else budget_tokens - reserved_tokens
    what = (
        f"Trace '{trace.id}': {len(steps)} steps "
        f"({reserved_tokens} tokens reserved for the rest of the prompt)"
    )
    return fit_pieces(pieces, available, count_tokens, what=what, budget=budget_tokens)
