"""Source experts, a candidate change to the shortlist (issue 26), pre-registered.

Written down, with its rule, before any of its rows was read (2026-11-27).

**Why.** Hand-Crafted (Magentic-One's long web-browsing logs) is the one goal of issue 26
still missed: 12.1% top-1 cross-validated against the 20% asked for. The rows already
printed say where the loss comes from. Trained on half of its own traces alone (bench
README, "Trained on your own traces"), the same configuration gets 19.0% on the other
half; trained with Who&When's other subset and the generated sources (which outweigh it
about five to one), it gets 12.1%. The shared model fits the many short structured runs
and gives up the long prose ones. The idea came from those rows, so this is not a test of
a fresh hypothesis on Hand-Crafted: it is a change shaped by what Hand-Crafted showed,
scored by the criterion that weighs the training sources alike, and then tested on a
program nothing has ranked.

**Mechanism.** The deploy model stays as it is for a trace unlike every training source.
For a trace like one of them, a model leaning on that source ranks it instead:

* an *expert* for each training source ``S`` with at least ``shift.MIN_PER_SOURCE``
  traces: the deploy fit (mean of five fold fits, same groups, λ and folds) with the
  weights of ``train.source_weights`` except that ``S``'s traces are scaled up until
  ``S`` weighs as much as all the other traces together;
* *routing* by the shift reference the shipped weights already hold (no label, no model
  call): the trace is compared with each source's traces alone (``ShiftReference.score``
  with ``source=S``, the distance to its K-th nearest trace of ``S`` over the shape
  descriptors); of the sources whose own threshold it is within, the nearest picks the
  expert; if it is within none, the deploy model ranks it.

A trace that names its source is routed by the same distance; the name is not read.

**Columns of the table.** The criterion (``_criterion.score``: top-1 on Algorithm-Generated
and Hand-Crafted cross-validated, and the mean of top-1 on each generated training source
left out in turn; the deploy fit as the inner fit, the experts and the reference trained on
the inner training traces only) for the shipped configuration and for the same with
experts. Then, deciding nothing, the spent sources (each trained on every shipped source),
and how many test traces each expert ranked.

**Rule.** Adopt only if (1) the criterion leads the shipped configuration's by at least
``MARGIN`` (1.0) point, and then (2) on the expense desk (``--program expense-desk``,
generated for this test and never ranked before it), both deploy configurations trained
on the shipped sources rank it once (``--blind``): the traces whose top-1 step only the
experts get right must not be fewer than those only the shipped model gets right, and
top-1 agent must not fall by more than 1.0 point. If (1) fails, the expense desk is not
ranked and stays blind for the next change. Either way the rows are printed in
bench/README.md with what they say about Hand-Crafted's 20%.

**Result** (2026-11-27): **not adopted.** Criterion 34.5 against the shipped 35.1.
Hand-Crafted rose from 17.2 to 20.7% (two traces), the Agents SDK from 48.0 to 53.0% and
CrewAI from 50.7 to 54.8%; Algorithm-Generated fell from 40.5 to 37.3%, AG2 from 43.5 to
33.9% and LangGraph from 48.0 to 40.0%. Left out, a generated source's traces mostly went
to another generated source's expert (the generated sources are alike in shape), and
Algorithm-Generated's own expert ranked it worse than the deploy model. After the
criterion, deciding nothing: the demo team fell from 56.2 to 32.8%, the support desk and
the warehouse team rose a little, the software team stayed level. The expense desk was not
ranked: it stays blind for the next change.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import _blind
from _criterion import header, score
from _deploy_choice import MARGIN, WHO_AND_WHEN, criterion_parts, mean_of_folds, row

from faultfinder.eval.datasets import subset_of
from faultfinder.shortlist.model import ShortlistModel, averaged
from faultfinder.shortlist.shift import ShiftReference, build_reference
from faultfinder.shortlist.train import (
    LAMBDA,
    Table,
    _listwise,
    _standardisation,
    assign_folds,
    build_table,
    source_weights,
)
from faultfinder.traces.schema import Trace

BLIND = "generated:expense-desk"
SPENT = (
    "generated:demo-team",
    "generated:swe-team",
    "generated:support-desk",
    "generated:warehouse",
)
"""Sources ranked before and never trained on: printed after the criterion, deciding
nothing."""


def expert_weights(traces: Sequence[Trace], source: str) -> list[float]:
    """``train.source_weights`` with ``source``'s traces scaled so that it weighs as much
    as every other trace together (unchanged if either side is empty)."""
    base = source_weights(traces)
    own = sum(w for w, t in zip(base, traces, strict=True) if subset_of(t) == source)
    rest = sum(base) - own
    if not own or not rest:
        return base
    return [
        w * rest / own if subset_of(t) == source else w for w, t in zip(base, traces, strict=True)
    ]


def _fit(
    table: Table, groups: Sequence[str], indices: list[int], weights: list[float]
) -> ShortlistModel:
    """``train.fit`` (listwise, λ = ``LAMBDA``) with the traces' weights given."""
    import numpy as np

    picks = [r for i in indices for r in range(*table.spans[i])]
    x = np.asarray([table.rows[r] for r in picks], dtype=float)
    mean, scale = _standardisation(x)
    sizes = [table.spans[i][1] - table.spans[i][0] for i in indices]
    gold = np.asarray([table.targets[r] for r in picks], dtype=bool)
    coef = _listwise((x - mean) / scale, gold, sizes, np.repeat(weights, sizes), LAMBDA)
    return ShortlistModel(
        groups=list(groups), mean=mean.tolist(), scale=scale.tolist(), coef=coef, intercept=0.0
    )


def expert(
    table: Table, groups: Sequence[str], indices: list[int], source: str | None, k: int = 5
) -> ShortlistModel:
    """The deploy fit (``train.deploy_fit``: the mean of ``k`` fold fits, folds by content)
    leaning on ``source`` (None: the deploy fit itself), each fold's weights computed on
    its own training traces as ``train.fit`` does."""
    import numpy as np

    folds = assign_folds([table.traces[i] for i in indices], k)
    members = []
    for fold in sorted(set(folds)):
        inside = [i for i, f in zip(indices, folds, strict=True) if f != fold]
        chosen = [table.traces[i] for i in inside]
        weights = source_weights(chosen) if source is None else expert_weights(chosen, source)
        members.append(_fit(table, groups, inside, weights))
    x = np.asarray([table.rows[r] for i in indices for r in range(*table.spans[i])], dtype=float)
    mean, scale = _standardisation(x)
    return averaged(members, mean.tolist(), scale.tolist())


@dataclass
class Routed:
    """The deploy model, and an expert per source for traces within that source's reach."""

    general: ShortlistModel
    experts: dict[str, ShortlistModel]
    reference: ShiftReference
    routes: Counter[str] = field(default_factory=Counter)
    """How many traces each model ranked ("deploy model" or the source's name)."""

    def route(self, trace: Trace) -> str | None:
        """The nearest source whose own threshold ``trace`` is within, if any."""
        best: tuple[float, str] | None = None
        for source, limit in sorted(self.reference.by_source.items()):
            if source not in self.experts:
                continue
            distance = self.reference.score(trace, source=source)
            if distance <= limit and (best is None or distance < best[0]):
                best = (distance, source)
        return best[1] if best else None

    def logits_of(self, table: Table, i: int) -> list[float]:
        source = self.route(table.traces[i])
        self.routes[source or "deploy model"] += 1
        model = self.experts[source] if source else self.general
        return model.logits(table.rows[slice(*table.spans[i])])


def routed_fit(table: Table, groups: Sequence[str], train: list[int], k: int) -> Routed:
    """The candidate fitted on the traces at ``train``: the deploy fit, an expert per
    source of at least ``MIN_PER_SOURCE`` traces, and the shift reference over them."""
    traces = [table.traces[i] for i in train]
    reference = build_reference(traces, assign_folds(traces, k))
    experts = {s: expert(table, groups, train, s, k) for s in reference.by_source}
    return Routed(mean_of_folds(table, groups, train, k), experts, reference)


_LAST: list[Routed] = []


def _recording(table: Table, groups: Sequence[str], train: list[int], k: int) -> Routed:
    model = routed_fit(table, groups, train, k)
    _LAST.append(model)
    return model


def table(
    traces: list[Trace], trained: Sequence[str], groups: Sequence[str], folds: int = 5
) -> list[str]:
    """Shipped against shipped + experts under the criterion, the spent sources after it."""
    present = {subset_of(t) for t in traces}
    names = [s for s in WHO_AND_WHEN if s in present]
    generated = [s for s in trained if s not in WHO_AND_WHEN]
    spent = [s for s in SPENT if s in present]
    base = build_table(traces, groups)
    tried = " + ".join(groups)
    out = [
        "",
        "Source experts (`bench/_experts.py`: for a trace within a training source's own "
        "shift threshold, the nearest such source's expert ranks it, a deploy fit in which "
        "that source weighs as much as all the others; any other trace gets the deploy "
        "model; the spent sources are shown after the criterion and decide nothing). "
        "Top-1 %:",
        "",
        *header(["features"], names, generated)[:1],
    ]
    out[-1] = out[-1].removesuffix(" |") + "".join(f" | {s}" for s in spent) + " |"
    out.append("|---|" + "---:|" * (len(names) + len(generated) + 1 + len(spent)))
    criteria = []
    candidates = ((tried + " (shipped)", mean_of_folds), (tried + " + experts", _recording))
    for label, fitter in candidates:
        _LAST.clear()
        cv, loso = criterion_parts(traces, base, groups, fitter, generated, spent, folds)
        others = "".join(f" {v:.1f} |" for v in loso[len(generated) :])
        out.append(row(label, cv, loso[: len(generated)]) + others)
        criteria.append(round(score(cv, loso[: len(generated)]), 1))
    routes: Counter[str] = Counter()
    for model in _LAST:
        routes.update(model.routes)
    out += [
        "",
        "Test traces each model of the candidate ranked, over every fold and left-out "
        "source above: "
        + ", ".join(f"{k} {v}" for k, v in sorted(routes.items(), key=lambda kv: -kv[1]))
        + ".",
    ]
    lead = criteria[1] - criteria[0]
    verdict = (
        "go on to the blind test."
        if lead >= MARGIN
        else "not adopted; the blind source stays unranked."
    )
    out.append(f"Rule (1): criterion lead {lead:+.1f} (needs at least {MARGIN:.1f}): {verdict}")
    return out


def blind(traces: list[Trace], trained: Sequence[str], groups: Sequence[str]) -> list[str]:
    """Rule (2): both deploy configurations, trained on the shipped sources, rank the
    blind source once; paired tests."""
    base = build_table(traces, groups)
    train = [i for i, t in enumerate(traces) if subset_of(t) in trained]
    test = [i for i, t in enumerate(traces) if subset_of(t) == BLIND]
    candidate = routed_fit(base, groups, train, 5)
    shipped = candidate.general
    chosen = [traces[i] for i in test]
    old = _blind.score(chosen, lambda n: shipped.logits(base.rows[slice(*base.spans[test[n]])]))
    new = _blind.score(chosen, lambda n: candidate.logits_of(base, test[n]))
    n = len(test)
    out = [
        "",
        f"Rule (2): the expense desk ({BLIND}, {n} traces, generated for this test and "
        "first ranked by this table), ranked once by each configuration (deploy fit, trained "
        "on the shipped sources). Routed: "
        + ", ".join(f"{k} {v}" for k, v in sorted(candidate.routes.items()))
        + ". Brackets: 95% Wilson interval; paired exact McNemar (+ only the experts right / "
        "− only the shipped model right):",
        "",
        *_blind.table("configuration", ("shipped", old), ("+ experts", new)),
    ]
    out.append(_blind.rule_two(old, new))
    return out


SECTION = _blind.section("experts", "Source experts", "_experts.py", "five to seven minutes")
"""The markers and heading of this candidate's section of bench/README.md."""


def main(argv: Sequence[str] | None = None) -> int:
    return _blind.candidate_main(argv, __doc__ or "", BLIND, table, blind, SECTION)


if __name__ == "__main__":
    sys.exit(main())
