"""A change tried and not kept: name the agent first, then its most probable step.

The shortlist names the speaker of its top step, so its agent is right only when its step
is, or when a wrong step happens to be the right agent's. "Agent first" ranks the trace's
agents with a second listwise model, over columns read from the trace and from the step
model's probabilities, and names that agent's most probable step (step and agent stay
consistent). Written down before its rows were first read (2026-11-26), with its rule:
adopt only if the criterion computed on top-1 agent leads the shipped answer by at least
``MARGIN`` points and the criterion on top-1 step falls by less than ``MARGIN``; training
sources only. It did not reach it (bench/README.md, "Changes tried and not kept").

The agent model: a conditional logit over the trace's agents (speakers compared by
``normalise_agent``), columns standardised, L2 penalty ``train.LAMBDA``, traces weighing
as ``train.source_weights``. It trains on step probabilities each training trace got from
a fit that left its fold out (``train.bagged`` inside the training data), and ranks a test
trace with the probabilities of their mean (the deploy fit).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from _criterion import header, score
from _deploy_choice import MARGIN, WHO_AND_WHEN

from faultfinder.eval.datasets import subset_of
from faultfinder.eval.metrics import normalise_agent
from faultfinder.shortlist.features import (
    _ERROR_WORD,
    _HUMAN,
    _PLANNER,
    _TOOL_SPEAKER,
    _TRACEBACK,
    _UNABLE,
    step_text,
)
from faultfinder.shortlist.model import ShortlistModel, softmax
from faultfinder.shortlist.train import (
    LAMBDA,
    Table,
    _listwise,
    _standardisation,
    assign_folds,
    bagged,
    build_table,
    source_weights,
)
from faultfinder.traces.schema import Trace

Answer = tuple[int, str]
"""A step and the (normalised) agent named with it."""


def agent_rows(
    trace: Trace, probs: Sequence[float]
) -> tuple[list[str], dict[str, list[int]], list[list[float]]]:
    """The trace's agents, each agent's steps, and one row of columns per agent."""
    steps = trace.steps
    n = len(steps)
    names: list[str] = []
    members: dict[str, list[int]] = {}
    for i, s in enumerate(steps):
        a = normalise_agent(s.agent)
        if a not in members:
            names.append(a)
            members[a] = []
        members[a].append(i)
    signal = [
        bool(_TRACEBACK.search(t) or _ERROR_WORD.search(t) or _UNABLE.search(t))
        for t in map(step_text, steps)
    ]
    first = next((i for i in range(n) if signal[i]), None)
    signals = sum(signal)
    top = max(range(n), key=lambda i: probs[i])
    rows = []
    for a in names:
        mine = members[a]
        raw = steps[mine[0]].agent
        rows.append(
            [
                math.log(max(sum(probs[i] for i in mine), 1e-12)),
                math.log(max(max(probs[i] for i in mine), 1e-12)),
                len(mine) / n,
                float(mine[0] == 0),
                float(bool(_PLANNER.search(raw))),
                float(
                    any(steps[i].kind == "tool" for i in mine) or bool(_TOOL_SPEAKER.search(raw))
                ),
                float(any(steps[i].kind == "human" for i in mine) or bool(_HUMAN.match(raw))),
                float(first is not None and first in mine),
                float(first is not None and first - 1 in mine),
                mine[0] / max(n - 1, 1),
                sum(1 for i in mine if signal[i]) / signals if signals else 0.0,
                float(n - 1 in mine),
                float(top in mine),
            ]
        )
    return names, members, rows


class AgentFirst:
    """The step model (deploy fit) and the agent model trained on ``train``."""

    def __init__(self, table: Table, groups: Sequence[str], train: list[int], k: int) -> None:
        import numpy as np

        self.table = table
        folds = assign_folds([table.traces[i] for i in train], k)
        self.steps: ShortlistModel
        self.steps, out_of_fold = bagged(table, groups, train, folds)
        x: list[list[float]] = []
        gold: list[bool] = []
        sizes: list[int] = []
        weight: list[float] = []
        for i, w in zip(train, source_weights([table.traces[i] for i in train]), strict=True):
            trace = table.traces[i]
            names, _, rows = agent_rows(trace, out_of_fold[i])
            want = normalise_agent(trace.label.agent or "") if trace.label else ""
            x += rows
            gold += [a == want for a in names]
            sizes.append(len(rows))
            weight += [w] * len(rows)
        values = np.asarray(x, dtype=float)
        self.mean, self.scale = _standardisation(values)
        z = (values - self.mean) / self.scale
        self.coef = np.asarray(_listwise(z, np.asarray(gold), sizes, np.asarray(weight), LAMBDA))

    def answers(self, i: int) -> tuple[Answer, Answer]:
        """Trace ``i``'s answer as shipped (the top step and its speaker) and agent first."""
        import numpy as np

        trace = self.table.traces[i]
        probs = softmax(self.steps.logits(self.table.rows[slice(*self.table.spans[i])]))
        top = max(range(len(probs)), key=lambda j: probs[j])
        names, members, rows = agent_rows(trace, probs)
        scores = ((np.asarray(rows, dtype=float) - self.mean) / self.scale) @ self.coef
        agent = names[int(np.argmax(scores))]
        step = max(members[agent], key=lambda j: probs[j])
        return (top, normalise_agent(trace.steps[top].agent)), (step, agent)


def _right(trace: Trace, answer: Answer) -> tuple[bool, bool]:
    assert trace.label is not None
    step, agent = answer
    return step in trace.label.acceptable_steps, agent == normalise_agent(trace.label.agent or "")


def agent_first(
    traces: list[Trace], trained: Sequence[str], groups: Sequence[str], folds: int = 5
) -> list[str]:
    """The table: the shipped answer and agent first, under the criterion's protocol, on
    top-1 step and on top-1 agent."""
    table = build_table(traces, groups)
    source = [subset_of(t) for t in traces]
    names = [s for s in WHO_AND_WHEN if s in source]
    generated = [s for s in trained if s not in WHO_AND_WHEN]
    ww = [i for i, s in enumerate(source) if s in WHO_AND_WHEN]
    ww_folds = dict(zip(ww, assign_folds([traces[i] for i in ww], folds), strict=True))
    every_generated = [i for i, s in enumerate(source) if s in generated]
    got: dict[int, tuple[Answer, Answer]] = {}
    for f in range(folds):
        model = AgentFirst(
            table, groups, [i for i in ww if ww_folds[i] != f] + every_generated, folds
        )
        got.update((i, model.answers(i)) for i in ww if ww_folds[i] == f)
    for s in generated:
        train = ww + [i for i in every_generated if source[i] != s]
        model = AgentFirst(table, groups, train, folds)
        got.update((i, model.answers(i)) for i, x in enumerate(source) if x == s)

    def parts(which: int, what: int) -> tuple[list[float], list[float]]:
        def pct(members: list[int]) -> float:
            return 100 * sum(_right(traces[i], got[i][which])[what] for i in members) / len(members)

        cv = [pct([i for i in ww if source[i] == s]) for s in names]
        loso = [pct([i for i in got if source[i] == s]) for s in generated]
        return cv, loso

    out = [
        "",
        "Agent first (a second listwise model ranks the trace's agents; the shortlist names "
        "that agent and its most probable step; `bench/_agent_first.py`). Rule: adopt only "
        f"if the criterion on top-1 agent leads by at least {MARGIN:.1f} point and the "
        f"criterion on top-1 step falls by less than {MARGIN:.1f}. Top-1 step and top-1 "
        "agent %:",
        "",
        *header(["answer", "scored on"], names, generated),
    ]
    for label, which in (("shipped then (the top step and its speaker)", 0), ("agent first", 1)):
        for what, scored in ((0, "step"), (1, "agent")):
            cv, loso = parts(which, what)
            out.append(
                f"| {label} | {scored} | "
                + " | ".join(f"{v:.1f}" for v in [*cv, *loso])
                + f" | {score(cv, loso):.1f} |"
            )
    return out
