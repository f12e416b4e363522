"""How the shipped shortlist configuration was chosen, and what choosing costs.

The record ``bench/transfer.py`` prints after its transfer tables: the criterion's grid
of feature groups, penalties and generated-source weights (:func:`criterion`), the grid
trained on every other source with the choice made nested (:func:`selection`), and each
source tested by a model trained on every other source, generated ones included
(:func:`every_other_source`).
"""

from __future__ import annotations

from collections.abc import Sequence

from _criterion import header, score
from _deploy_choice import WHO_AND_WHEN
from _stats import cell, paired
from shortlist import hits, prior_from, ranked_of

from faultfinder.eval.datasets import subset_of
from faultfinder.shortlist import conformal
from faultfinder.shortlist.model import softmax
from faultfinder.shortlist.train import (
    LAMBDA,
    OTHER_SHARE,
    Objective,
    Table,
    assign_folds,
    build_table,
    fit,
)
from faultfinder.traces.schema import Trace

SINGLE_HOLDOUT = 0
"""The fold that one fit left out (it calibrated the deploy model shipped before)."""

SELECTION_GROUPS: dict[str, tuple[str, ...]] = {
    "position + agent + errors": ("position", "agent", "errors"),
    "position + agent + errors + cause": ("position", "agent", "errors", "cause"),
    "position + agent + errors + cause + arguments": (
        "position",
        "agent",
        "errors",
        "cause",
        "arguments",
    ),
    "structure + errors + cause": ("structure", "errors", "cause"),
    "position + agent + structure + errors + cause": (
        "position",
        "agent",
        "structure",
        "errors",
        "cause",
    ),
}
SELECTION_PENALTIES = (10.0, 30.0, 100.0, 300.0)
Config = tuple[str, str, float]
"""(feature groups' name, objective, listwise penalty)."""
CHOSEN: Config = ("position + agent + errors + cause", "listwise", LAMBDA)
"""The criterion's choice, before ``arguments`` existed."""
SHIPPED: Config = ("position + agent + errors + cause + arguments", "listwise", LAMBDA)
"""The choice with ``arguments``, which a second rule adopted (``_arguments``)."""


CRITERION_SHARES = (0.0, 0.3, 1.0)
"""The generated sources' total training weight, as a multiple of Who&When's, tried."""


def criterion(traces: list[Trace], trained: Sequence[str], folds: int = 5) -> list[str]:
    """The record of how the shipped configuration was chosen: for every configuration of
    feature groups, penalty and generated-source weight, top-1 on Who&When's subsets
    cross-validated (5 folds over Who&When, every trained generated trace added to each
    fold's training) and on each trained generated source left out in turn (trained on
    Who&When's traces outside fold ``SINGLE_HOLDOUT``, as the deploy model of the time
    was, and the other generated sources); the criterion is the mean of the two subsets
    and of the generated sources' mean. No other source is read."""
    ww = [i for i, t in enumerate(traces) if subset_of(t) in WHO_AND_WHEN]
    generated = [s for s in trained if s not in WHO_AND_WHEN]
    members = {s: [i for i, t in enumerate(traces) if subset_of(t) == s] for s in generated}
    ww_folds = dict(zip(ww, assign_folds([traces[i] for i in ww], folds), strict=True))
    deploy = [i for i in ww if ww_folds[i] != SINGLE_HOLDOUT]
    names = [s for s in WHO_AND_WHEN if any(subset_of(traces[i]) == s for i in ww)]
    out = [
        "",
        "### How the shipped configuration was chosen",
        "",
        "Criterion (fixed before any of its results were read; no source outside the "
        "shipped training data is in it): the mean of top-1 on "
        + " and ".join(names)
        + " cross-validated (the generated sources in every fold's training) and of the "
        "mean top-1 on each generated training source left out in turn. Weight: the "
        "generated sources' total training weight as a multiple of Who&When's "
        "(`train.source_weights`; 0: not trained on). Top-1 %:",
        "",
        *header(["features", "λ", "weight"], names, generated),
    ]
    tables = {name: build_table(traces, gs) for name, gs in SELECTION_GROUPS.items()}
    rows: list[tuple[float, str]] = []
    for name, gs in SELECTION_GROUPS.items():
        if ("structure" in gs and "agent" not in gs) or "arguments" in gs:
            continue  # the grid is the record of a choice made before `arguments` existed
        table = tables[name]
        for penalty in SELECTION_PENALTIES:
            for share in CRITERION_SHARES:
                extra = [i for s in generated for i in members[s]] if share else []
                cv = []
                for subset in names:
                    right = 0.0
                    for f in range(folds):
                        train = [i for i in ww if ww_folds[i] != f] + extra
                        test = [
                            i for i in ww if ww_folds[i] == f and subset_of(traces[i]) == subset
                        ]
                        if test:
                            right += (
                                _top1(traces, table, gs, train, test, penalty, share)
                                * len(test)
                                / 100
                            )
                    cv.append(100 * right / sum(subset_of(traces[i]) == subset for i in ww))
                loso = []
                for s in generated:
                    others = [i for o in generated if o != s for i in members[o]] if share else []
                    loso.append(
                        _top1(traces, table, gs, deploy + others, members[s], penalty, share)
                    )
                value = score(cv, loso)
                rows.append(
                    (
                        value,
                        f"| {name} | {penalty:g} | {share:g} | "
                        + " | ".join(f"{v:.1f}" for v in [*cv, *loso])
                        + f" | {value:.1f} |",
                    )
                )
    best = max(rows)[0]
    out += [r if s != best else r.replace(f" | {s:.1f} |", f" | **{s:.1f}** |") for s, r in rows]
    shipped = next(
        s for s, r in rows if r.startswith(f"| {CHOSEN[0]} | {CHOSEN[2]:g} | {OTHER_SHARE:g} |")
    )
    out += [
        "",
        f"Chosen: {label_of(CHOSEN)}, weight {OTHER_SHARE:g}: "
        + (
            "the criterion's best."
            if shipped == best
            else f"criterion {shipped:.1f}, NOT the best."
        )
        + " Most rows are within a few traces of each other on these sources: the criterion "
        "picks one, it does not show that one is better. The shipped ranker adds the "
        "`arguments` group to it, adopted by a second rule on the warehouse team "
        '("Changes tried", argument provenance).',
    ]
    return out


def top1_hits(
    traces: list[Trace],
    table: Table,
    groups: Sequence[str],
    train: Sequence[int],
    test: Sequence[int],
    objective: Objective = "listwise",
    penalty: float = 0.0,
    share: float = OTHER_SHARE,
) -> list[bool]:
    """Per trace at ``test``: the top step of a model trained on those at ``train`` is
    decisive."""
    model = fit(table, groups, train, objective, penalty, share)
    out = []
    for i in test:
        probs = softmax(model.logits(table.rows[slice(*table.spans[i])]))
        out.append(conformal.ranking(probs)[0] in traces[i].label.acceptable_steps)  # type: ignore[union-attr]
    return out


def _top1(
    traces: list[Trace],
    table: Table,
    groups: Sequence[str],
    train: list[int],
    test: Sequence[int],
    penalty: float,
    share: float,
) -> float:
    """Top-1 % on the traces at ``test`` of a listwise model trained on those at ``train``."""
    hits = top1_hits(traces, table, groups, train, test, "listwise", penalty, share)
    return 100 * sum(hits) / len(hits)


def label_of(config: Config) -> str:
    name, objective, penalty = config
    return f"{name}, pointwise" if objective == "pointwise" else f"{name}, λ = {penalty:g}"


def selection(traces: list[Trace], trained: Sequence[str]) -> list[str]:
    """How the shipped configuration was chosen, and what choosing costs: every configuration
    of the grid under leave one source out (the shipped one is the best mean top-1), then the
    same choice made *nested* — for each source, the configuration is chosen on the other
    sources alone (leave one of them out in turn) and only then tested on it."""
    sources = sorted({subset_of(t) for t in traces})
    never = [s for s in sources if s not in trained]
    members = {s: [i for i, t in enumerate(traces) if subset_of(t) == s] for s in sources}
    tables = {name: build_table(traces, gs) for name, gs in SELECTION_GROUPS.items()}
    configs: list[Config] = [("position + agent + errors", "pointwise", 0.0)]
    configs += [(n, "listwise", p) for n in SELECTION_GROUPS for p in SELECTION_PENALTIES]

    def top1(config: Config, train: Sequence[int], test: Sequence[int]) -> list[bool]:
        name, objective, penalty = config
        groups = SELECTION_GROUPS[name]
        return top1_hits(traces, tables[name], groups, train, test, objective, penalty)  # type: ignore[arg-type]

    label = label_of

    def rest(excluded: Sequence[str]) -> list[int]:
        return [i for s in sources if s not in excluded for i in members[s]]

    out = [
        "",
        "### Other configurations (trained on every other source, top-1 step %)",
        "",
        "| configuration | " + " | ".join(sources) + " | mean |",
        "|---|" + "---:|" * (len(sources) + 1),
    ]
    means: dict[Config, float] = {}
    for config in configs:
        rates = [
            100 * sum(h) / len(h) for s in sources for h in [top1(config, rest([s]), members[s])]
        ]
        means[config] = sum(rates) / len(rates)
        out.append(
            f"| {label(config)} | "
            + " | ".join(f"{r:.1f}" for r in rates)
            + f" | {means[config]:.1f} |"
        )
    prior_rates = []
    for s in sources:
        prior = prior_from([traces[i] for i in rest([s])], False)
        prior_rates.append(
            100
            * sum(hits([traces[i] for i in members[s]], [prior(traces[i]) for i in members[s]], 1))
            / len(members[s])
        )
    out.append(
        "| position prior (floor) | "
        + " | ".join(f"{r:.1f}" for r in prior_rates)
        + f" | {sum(prior_rates) / len(prior_rates):.1f} |"
    )
    best = max(configs, key=lambda c: means[c])
    out += [
        "",
        f"Best mean: **{label(best)}**. A row chosen on these very columns overstates "
        "what the choice transfers; the nested estimate below does not. The shipped ranker "
        f"is {label(SHIPPED)}, trained on {', '.join(trained)}; it was chosen by the "
        "criterion above, which reads no other source, and its `arguments` group by the "
        'second rule of "Changes tried", which read the warehouse team once; '
        + (", ".join(never) or "no other source")
        + " never trained or calibrated it.",
        "",
        "Nested: for each source, the configuration with the best mean top-1 over the other "
        "sources (each left out in turn, training on the rest) is trained on all other "
        "sources and tested on this one.",
        "",
        "| source | chosen without it | top-1 % | position prior % | paired vs position prior |",
        "|---|---|---:|---:|---:|",
    ]
    nested_rates = []
    for s in sources:
        others = [o for o in sources if o != s]

        def inner(config: Config, others: list[str] = others, s: str = s) -> float:
            rates = [
                sum(h) / len(h) for v in others for h in [top1(config, rest([s, v]), members[v])]
            ]
            return sum(rates) / len(rates)

        chosen = max(configs, key=inner)
        mine = top1(chosen, rest([s]), members[s])
        test = [traces[i] for i in members[s]]
        prior = prior_from([traces[i] for i in rest([s])], False)
        floor = hits(test, [prior(t) for t in test], 1)
        nested_rates.append(100 * sum(mine) / len(mine))
        out.append(
            f"| {s} | {label(chosen)} | {cell(sum(mine), len(mine))} | "
            f"{cell(sum(floor), len(floor))} | {paired(mine, floor).text()} |"
        )
    out += [
        "",
        f"Mean nested top-1 over the {len(sources)} sources: "
        f"{sum(nested_rates) / len(nested_rates):.1f}% (position prior "
        f"{sum(prior_rates) / len(prior_rates):.1f}%).",
    ]
    return out


def every_other_source(traces: list[Trace], groups: Sequence[str]) -> list[str]:
    """Each source tested by a model trained on *every* other source (generated ones
    included), against the position prior fitted on the same sources."""
    out = [
        "",
        "Trained on every other source instead (the generated sources included; top-1 and "
        "recall@3 %, paired exact McNemar against the position prior fitted on the same "
        "sources):",
        "",
        "| test source | shortlist r@1 | position prior r@1 | paired r@1 | shortlist r@3 | "
        "position prior r@3 | paired r@3 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    table = build_table(traces, groups)
    for source in sorted({subset_of(t) for t in traces}):
        train_idx = [i for i, t in enumerate(traces) if subset_of(t) != source]
        test_idx = [i for i, t in enumerate(traces) if subset_of(t) == source]
        model = fit(table, groups, train_idx)
        test = [traces[i] for i in test_idx]
        mine = [
            ranked_of(traces[i], softmax(model.logits(table.rows[slice(*table.spans[i])])))
            for i in test_idx
        ]
        prior = prior_from([traces[i] for i in train_idx], False)
        floor = [prior(t) for t in test]
        cells = []
        for k in (1, 3):
            a, b = hits(test, mine, k), hits(test, floor, k)
            cells += [cell(sum(a), len(a)), cell(sum(b), len(b)), paired(a, b).text()]
        out.append(f"| {source} | " + " | ".join(cells) + " |")
    return out
