"""Per-step evidence computed offline: no API call, plain Python.

Every step of a trace gets one vector of numbers, grouped so that an ablation can switch
a whole kind of evidence off:

* ``position``: where the step is (relative and absolute position, first/second/last,
  trace length);
* ``agent``: who speaks (planner-like name, the first speaker's agent, the agent's
  first turn, its share of the steps, a tool/terminal or human speaker);
* ``errors``: failure signals in the step's own text (tracebacks, tool errors, 'unable',
  'failed'...), in the steps it feeds (the next two), repeated actions and near-duplicate
  outputs, changes of plan, code, the step's length;
* ``structure``: who speaks, without reading names (the first speaker's agent, the
  agent's first turn, its share of the steps, the order agents appear in, a tool or human
  step by its kind, the same speaker twice in a row);
* ``cause``: cause-before-symptom evidence, relative to the trace: where the step stands
  against the first failure signal, whether the failing step reuses this step's words
  (word-trigram overlap) or numbers it introduced, whether its tool call led to an error,
  and ranks and z-scores of its failure signals and length within the trace;
* ``arguments``: where the values a step passes to its tools come from: arguments with
  no source earlier in the run, or contradicting an earlier value for the same key, and
  the first step with either (``shortlist/arguments.py``; zero on a step with no tool call);
* ``surprisal``: the embedded model's token surprisal over the step's output given the
  preceding log (``shortlist/surprisal.py``); absent unless a scorer supplied it.

Features are functions of the trace alone (never of its label), so the same code serves
training and inference.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from faultfinder.shortlist.arguments import COLUMNS as ARGUMENT_COLUMNS
from faultfinder.shortlist.arguments import argument_columns
from faultfinder.traces.schema import Step, Trace

GROUPS: tuple[str, ...] = (
    "position",
    "agent",
    "structure",
    "errors",
    "cause",
    "arguments",
    "surprisal",
)
"""Feature groups, in the order their columns appear."""

_PLANNER = re.compile(r"orchestrat|planner|manager|captain|coordinat|lead|supervis", re.I)
_TOOL_SPEAKER = re.compile(r"terminal|executor|computer|tool|code_?exec|python", re.I)
_HUMAN = re.compile(r"^(human|user|admin|user_?proxy)$", re.I)
_TRACEBACK = re.compile(
    r"traceback \(most recent call last\)|\bexitcode: [1-9]|exit code [1-9]", re.I
)
_ERROR_WORD = re.compile(
    r"\b(error|exception|failed|failure|fails|invalid|not found|no such|denied|timed? ?out)\b",
    re.I,
)
_UNABLE = re.compile(
    r"\b(unable to|could not|couldn't|can ?not|can't|cannot|no (?:results?|information|data)|"
    r"unfortunately|apologi[sz]e|sorry|not (?:able|possible|available))\b",
    re.I,
)
_RETRY = re.compile(r"\b(retry|try again|again|re-?run|another attempt|once more)\b", re.I)
_PLAN = re.compile(
    r"\b(plan|instead|new approach|alternative|let's try|let us try|revise|update the|"
    r"next step|step \d+:)\b",
    re.I,
)
_CLAIM = re.compile(r"\b(final answer|the answer is|terminate|verified|confirmed|correct)\b", re.I)
_NUMBER = re.compile(r"\d")
_WORD = re.compile(r"[a-z0-9_]+")


@dataclass(frozen=True)
class FeatureSpec:
    """Which feature groups to compute."""

    groups: tuple[str, ...] = ("position", "agent", "errors", "cause", "arguments")
    """Feature groups in use, a subset of ``GROUPS``: the shipped weights'. Issue 26 added
    ``structure``, ``cause`` and ``arguments``; ``cause`` (evidence relative to the trace's
    first failure signal) joined the shipped groups once generated failures trained the
    ranker beside Who&When; ``arguments`` joined them on a program no table had ranked
    (the warehouse team); ``structure`` without ``position`` and ``agent`` transferred
    worse (bench/README.md, "Transfer and paired tests")."""


def feature_names(groups: Sequence[str]) -> list[str]:
    """Column names for ``groups`` in canonical order."""
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        raise ValueError(f"unknown feature group(s) {unknown}; available: {', '.join(GROUPS)}")
    return [f"{g}.{n}" for g in GROUPS if g in groups for n in _NAMES[g]]


_NAMES: dict[str, tuple[str, ...]] = {
    "position": (
        "rel",
        "log_index",
        "is_first",
        "is_second",
        "is_third",
        "is_last",
        "log_length",
        "rel_x_log_length",
    ),
    "agent": (
        "planner",
        "tool_speaker",
        "human",
        "first_speaker_agent",
        "agent_first_turn",
        "agent_share",
        "agent_turn_rel",
        "speaker_changes",
        "first_turn_of_non_planner",
    ),
    "errors": (
        "traceback",
        "error_words",
        "unable",
        "retry",
        "plan_change",
        "claim",
        "has_code",
        "has_number",
        "log_chars",
        "chars_z",
        "next_traceback",
        "next_error",
        "next_unable",
        "prev_error",
        "near_duplicate",
        "later_errors_share",
        "first_error_after",
    ),
    "structure": (
        "tool_step",
        "human_step",
        "first_speaker_agent",
        "agent_first_turn",
        "agent_share",
        "agent_turn_rel",
        "speaker_changes",
        "same_speaker_as_previous",
        "agent_order",
    ),
    "cause": (
        "before_first_signal",
        "is_first_signal",
        "steps_to_first_signal",
        "just_before_first_signal",
        "source_of_first_signal",
        "reused_by_first_signal",
        "reused_later",
        "new_numbers",
        "new_numbers_reused",
        "tool_call_then_error",
        "signal_rank",
        "signal_z",
        "length_rank",
    ),
    "arguments": ARGUMENT_COLUMNS,
    "surprisal": ("mean", "max", "z_mean", "rank_rel"),
}


def _count(pattern: re.Pattern[str], text: str) -> float:
    return math.log1p(len(pattern.findall(text)))


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


_DUPLICATE_WINDOW = 500
"""How many earlier steps ``near_duplicate`` compares a step with: more than any training
trace has (130 steps at most), so the shipped weights' columns are those of every earlier
step, while a trace of thousands of steps costs time in proportion to its length."""


def nearest_earlier(sets: Sequence[set[str]], window: int = _DUPLICATE_WINDOW) -> list[float]:
    """For each set, its largest Jaccard similarity (shared words over all words) to one
    of the ``window`` sets before it; 0.0 for the first set and where either set is empty.

    Each set is a bitmask over the trace's vocabulary, so an intersection is one ``&`` and
    one ``bit_count``."""
    bit: dict[str, int] = {}
    masks: list[int] = []
    for words in sets:
        mask = 0
        for word in words:
            mask |= 1 << bit.setdefault(word, len(bit))
        masks.append(mask)
    sizes = [len(s) for s in sets]
    out: list[float] = []
    for i, mask in enumerate(masks):
        best = 0.0
        size = sizes[i]
        if size:
            start = max(0, i - window)
            for other, other_size in zip(masks[start:i], sizes[start:i], strict=True):
                if other_size:
                    shared = (mask & other).bit_count()
                    value = shared / (size + other_size - shared)
                    if value > best:
                        best = value
        out.append(best)
    return out


def step_text(step: Step) -> str:
    """The text the features read: the output plus any tool results and tool calls."""
    parts = [step.content]
    parts += [f"{c.name}({c.arguments})" for c in step.tool_calls]
    parts += [r.content for r in step.tool_results]
    return "\n".join(p for p in parts if p)


def _position(n: int, i: int) -> list[float]:
    rel = i / (n - 1) if n > 1 else 0.0
    log_n = math.log(n)
    return [
        rel,
        math.log1p(i),
        float(i == 0),
        float(i == 1),
        float(i == 2),
        float(i == n - 1),
        log_n,
        rel * log_n,
    ]


def _agent(trace: Trace) -> list[list[float]]:
    steps = trace.steps
    n = len(steps)
    counts: dict[str, int] = {}
    for s in steps:
        counts[s.agent] = counts.get(s.agent, 0) + 1
    first_agent = steps[0].agent if steps else ""
    seen: dict[str, int] = {}
    rows: list[list[float]] = []
    changes = 0
    for i, s in enumerate(steps):
        turn = seen.get(s.agent, 0)
        seen[s.agent] = turn + 1
        if i and steps[i - 1].agent != s.agent:
            changes += 1
        planner = bool(_PLANNER.search(s.agent))
        tool = s.kind == "tool" or bool(_TOOL_SPEAKER.search(s.agent))
        human = s.kind == "human" or bool(_HUMAN.match(s.agent))
        rows.append(
            [
                float(planner),
                float(tool),
                float(human),
                float(s.agent == first_agent),
                float(turn == 0),
                counts[s.agent] / n,
                turn / max(counts[s.agent] - 1, 1),
                changes / max(n - 1, 1),
                float(turn == 0 and not planner and not tool and not human),
            ]
        )
    return rows


def _errors(trace: Trace) -> list[list[float]]:
    texts = [step_text(s) for s in trace.steps]
    n = len(texts)
    tb = [bool(_TRACEBACK.search(t)) for t in texts]
    err = [_count(_ERROR_WORD, t) for t in texts]
    unable = [_count(_UNABLE, t) for t in texts]
    lengths = [math.log1p(len(t)) for t in texts]
    mean = sum(lengths) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in lengths) / n) or 1.0
    dups = nearest_earlier([_words(t) for t in texts])
    signal = [tb[i] or err[i] > 0 or unable[i] > 0 for i in range(n)]
    first_error = next((i for i in range(n) if signal[i]), None)
    rows: list[list[float]] = []
    for i, t in enumerate(texts):
        nxt = range(i + 1, min(i + 3, n))
        later = [signal[j] for j in range(i + 1, n)]
        rows.append(
            [
                float(tb[i]),
                err[i],
                unable[i],
                _count(_RETRY, t),
                _count(_PLAN, t),
                _count(_CLAIM, t),
                float("```" in t or "def " in t or "import " in t),
                float(bool(_NUMBER.search(t))),
                lengths[i],
                (lengths[i] - mean) / std,
                float(any(tb[j] for j in nxt)),
                max((err[j] for j in nxt), default=0.0),
                max((unable[j] for j in nxt), default=0.0),
                err[i - 1] if i else 0.0,
                dups[i],
                sum(later) / len(later) if later else 0.0,
                float(first_error is not None and i <= first_error and first_error - i <= 2),
            ]
        )
    return rows


def _structure(trace: Trace) -> list[list[float]]:
    """Speaker evidence that reads no agent name (transfers across frameworks' roles)."""
    steps = trace.steps
    n = len(steps)
    counts: dict[str, int] = {}
    order: dict[str, int] = {}
    for s in steps:
        counts[s.agent] = counts.get(s.agent, 0) + 1
        order.setdefault(s.agent, len(order))
    seen: dict[str, int] = {}
    rows: list[list[float]] = []
    changes = 0
    for i, s in enumerate(steps):
        turn = seen.get(s.agent, 0)
        seen[s.agent] = turn + 1
        same = i > 0 and steps[i - 1].agent == s.agent
        if i and not same:
            changes += 1
        rows.append(
            [
                float(s.kind == "tool" or bool(s.tool_results)),
                float(s.kind == "human"),
                float(s.agent == steps[0].agent),
                float(turn == 0),
                counts[s.agent] / n,
                turn / max(counts[s.agent] - 1, 1),
                changes / max(n - 1, 1),
                float(same),
                order[s.agent] / max(len(order) - 1, 1),
            ]
        )
    return rows


_NUM = re.compile(r"\d+(?:[.,]\d+)*")
_TRIGRAM = 3
_REUSE_WINDOW = 30
"""How many later steps the reuse evidence looks at (bounds the cost on long traces)."""


def _trigrams(text: str) -> set[tuple[str, ...]]:
    toks = _WORD.findall(text.lower())
    return {tuple(toks[i : i + _TRIGRAM]) for i in range(len(toks) - _TRIGRAM + 1)}


def _rank_rel(values: Sequence[float]) -> list[float]:
    """Each value's rank within the trace: share of the other steps strictly below it."""
    n = len(values)
    if n < 2:
        return [1.0] * n
    ordered = sorted(values)
    return [bisect.bisect_left(ordered, v) / (n - 1) for v in values]


def _zscores(values: Sequence[float]) -> list[float]:
    n = len(values)
    mu = sum(values) / n
    sd = math.sqrt(sum((v - mu) ** 2 for v in values) / n)
    return [(v - mu) / sd if sd else 0.0 for v in values]


def _overlap(part: set[tuple[str, ...]], whole: set[tuple[str, ...]]) -> float:
    """Share of ``part``'s trigrams found in ``whole``."""
    return len(part & whole) / len(part) if part else 0.0


def _cause(trace: Trace) -> list[list[float]]:
    """Cause-before-symptom evidence, every column relative to the trace."""
    steps = trace.steps
    texts = [step_text(s) for s in steps]
    n = len(texts)
    strength = [
        float(bool(_TRACEBACK.search(t))) + _count(_ERROR_WORD, t) + _count(_UNABLE, t)
        for t in texts
    ]
    first = next((i for i in range(n) if strength[i] > 0), n)
    grams = [_trigrams(t) for t in texts]
    numbers = [{m for m in _NUM.findall(t) if len(m) > 1} for t in texts]
    seen: set[str] = set()
    introduced: list[set[str]] = []
    for nums in numbers:
        introduced.append(nums - seen)
        seen |= nums
    # The earlier step whose words the first failing step reuses most: its likely source.
    source, best = -1, 0.0
    if first < n:
        for j in range(max(0, first - _REUSE_WINDOW), first):
            share = _overlap(grams[j], grams[first])
            if share > best:
                source, best = j, share
    strength_rank = _rank_rel(strength)
    strength_z = _zscores(strength)
    length_rank = _rank_rel([math.log1p(len(t)) for t in texts])
    rows: list[list[float]] = []
    for i in range(n):
        later = range(i + 1, min(n, i + 1 + _REUSE_WINDOW))
        reused = sum(1 for m in introduced[i] if any(m in numbers[j] for j in later))
        rows.append(
            [
                float(i < first),
                float(i == first),
                math.log1p(first - i) if i < first else 0.0,
                float(i == first - 1),
                float(i == source),
                _overlap(grams[i], grams[first]) if i < first < n else 0.0,
                max((_overlap(grams[i], grams[j]) for j in later), default=0.0),
                math.log1p(len(introduced[i])),
                math.log1p(reused),
                float(bool(steps[i].tool_calls) and any(strength[j] > 0 for j in later[:1])),
                strength_rank[i],
                strength_z[i],
                length_rank[i],
            ]
        )
    return rows


def _surprisal(values: Sequence[tuple[float, float]]) -> list[list[float]]:
    """Columns from per-step (mean, max) token surprisal in nats."""
    n = len(values)
    means = [v[0] for v in values]
    mu = sum(means) / n
    sd = math.sqrt(sum((x - mu) ** 2 for x in means) / n) or 1.0
    order = sorted(range(n), key=lambda j: -means[j])
    rank = {j: r for r, j in enumerate(order)}
    return [[m, mx, (m - mu) / sd, rank[i] / max(n - 1, 1)] for i, (m, mx) in enumerate(values)]


def trace_features(
    trace: Trace,
    groups: Sequence[str],
    surprisal: Sequence[tuple[float, float]] | None = None,
) -> list[list[float]]:
    """One row per step with the columns of :func:`feature_names` (``groups``).

    ``surprisal`` is per-step (mean, max) token surprisal, required when the
    'surprisal' group is asked for.
    """
    n = len(trace.steps)
    if n == 0:
        return []
    names = feature_names(groups)  # validates the groups
    blocks: list[list[list[float]]] = []
    if "position" in groups:
        blocks.append([_position(n, i) for i in range(n)])
    if "agent" in groups:
        blocks.append(_agent(trace))
    if "structure" in groups:
        blocks.append(_structure(trace))
    if "errors" in groups:
        blocks.append(_errors(trace))
    if "cause" in groups:
        blocks.append(_cause(trace))
    if "arguments" in groups:
        blocks.append(argument_columns(trace))
    if "surprisal" in groups:
        if surprisal is None or len(surprisal) != n:
            raise ValueError("the 'surprisal' feature group needs one (mean, max) pair per step")
        blocks.append(_surprisal(surprisal))
    rows = [[v for block in blocks for v in block[i]] for i in range(n)]
    assert all(len(r) == len(names) for r in rows)
    return rows
