"""Does the offline shortlist hold on runs it never saw? Paired tests, beside the floors.

Four tables, all on labelled traces grouped by source (``Trace.source.subset``:
Who&When's Algorithm-Generated and Hand-Crafted, and any generated source passed with
``--also``):

1. **Cross-validated** (the protocol of ``bench/shortlist.py``): 5 folds by content
   (near-duplicate logs share a fold) over the sources the shipped weights train on,
   every Who&When trace scored by the model of the fold that did not see it; beside it
   the same on Who&When alone, the ranker shipped before (``PREVIOUS``), the pointwise
   learner of before issue 26, and the floors: the position prior fitted on the training
   folds of the same subset, the first speaker's and the majority agent's steps.
2. **Leave one source out**: for each source, the ranker and the position prior are fitted
   on the shipped training sources *other* than it and tested on it. This is the
   transfer figure. The ranker is fitted as the shipped deploy model is, which ranks
   every trace outside the training data: the mean of the fits that each leave one fold
   out (``train.deploy_fit``); for a source the shipped file never trained on, that is
   the shipped deploy model itself (checked). One fit on every fold but one (the deploy
   model shipped before), the ranker shipped before that and the pointwise learner are
   compared.

3. **Step sets on a left-out source**: weights built as shipped from the other sources,
   the 90% set of each left-out trace, its coverage and whether it was claimed.
4. **Other configurations**: a grid of feature groups and penalties, each trained on every
   other source, and what choosing by that grid would give when the choice is made
   without the test source (nested), beside the position prior.

For each test set and k in 1, 3, 5 (recall@k of the decisive step) and for the top-1 agent:
the rate with its 95% Wilson interval, and the paired exact McNemar test of the shortlist
against each other ranking on the same traces (``+b/−c``: traces only the shortlist / only
the other gets right; two-sided p). A difference is called significant at p < 0.05 only.

    python bench/transfer.py [DATA] [--also DIR ...] [--no-readme] [--no-selection]
                             [--groups G ...]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from _criterion import BEFORE
from _deploy_choice import WHO_AND_WHEN, deploy_choice
from _loso_sets import loso_sets
from _readme import write_section
from _selection import SINGLE_HOLDOUT, criterion, every_other_source, selection
from _shared import WHO_AND_WHEN_DATA
from _stats import cell, paired
from _tried import tried
from shortlist import Ranked, first_speaker, hits, majority_agent, prior_from, ranked_of

from faultfinder.eval.datasets import load_dataset, subset_of
from faultfinder.shortlist import conformal
from faultfinder.shortlist.features import FeatureSpec, trace_features
from faultfinder.shortlist.model import ShortlistModel, softmax
from faultfinder.shortlist.train import (
    CrossValidation,
    Table,
    assign_folds,
    build_table,
    cross_validate,
    deploy_fit,
    fit,
)
from faultfinder.shortlist.weights import shipped_weights
from faultfinder.traces.schema import Trace

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = WHO_AND_WHEN_DATA
README = ROOT / "bench" / "README.md"
BEGIN, END = "<!-- transfer:begin -->", "<!-- transfer:end -->"
KS = (1, 3, 5)
"""Who&When's subsets: the cross-validated tables are theirs."""


FLOORS = ("position prior", "first speaker", "majority agent")


def report(title: str, traces: Sequence[Trace], rankings: dict[str, list[Ranked]]) -> list[str]:
    """The rates table and the paired-test table of one test set."""
    n = len(traces)
    metrics: list[int | None] = [*KS, None]
    out = [
        "",
        f"**{title}** ({n} traces)",
        "",
        "| ranking | recall@1 % | recall@3 % | recall@5 % | top-1 agent % |",
        "|---|---:|---:|---:|---:|",
    ]
    table = {name: [hits(traces, r, k) for k in metrics] for name, r in rankings.items()}
    for name, cols in table.items():
        out.append(f"| {name} | " + " | ".join(cell(sum(c), n) for c in cols) + " |")
    main = next(iter(table))
    out += [
        "",
        f"Paired exact McNemar, {main} vs each other ranking (+ only the shortlist right / "
        "− only the other right, two-sided p):",
        "",
        "| against | recall@1 | recall@3 | recall@5 | top-1 agent |",
        "|---|---:|---:|---:|---:|",
    ]
    above: list[str] = []
    below: list[str] = []
    labels = [f"recall@{k}" for k in KS] + ["top-1 agent"]
    for name in table:
        if name == main:
            continue
        tests = [paired(a, b) for a, b in zip(table[main], table[name], strict=True)]
        out.append(f"| {name} | " + " | ".join(t.text() for t in tests) + " |")
        for label, t in zip(labels, tests, strict=True):
            if t.p < 0.05:
                (above if t.only_a > t.only_b else below).append(f"{name} at {label}")
    out += [
        "",
        "Significant (p < 0.05): above "
        + ("; ".join(above) or "nothing")
        + ". Below: "
        + ("; ".join(below) or "nothing")
        + ". Every other difference is within chance.",
    ]
    return out


def floors_for(
    traces: Sequence[Trace], prior: Callable[[Trace], Ranked] | list[Ranked]
) -> dict[str, list[Ranked]]:
    return {
        "position prior": prior if isinstance(prior, list) else [prior(t) for t in traces],
        "first speaker": [first_speaker(t) for t in traces],
        "majority agent": [majority_agent(t) for t in traces],
    }


NOISE_STEPS = 5


def with_noise(trace: Trace, steps: int = NOISE_STEPS) -> Trace:
    """``trace`` with ``steps`` bland steps appended, spoken in turn by its own agents."""
    agents = trace.agent_names() or ["agent"]
    extra = [
        trace.steps[-1].model_copy(
            update={
                "index": len(trace.steps) + i,
                "agent": agents[i % len(agents)],
                "content": "Noted. Nothing further to add at this point.",
                "tool_calls": [],
                "tool_results": [],
            }
        )
        for i in range(steps)
    ]
    return trace.model_copy(update={"steps": [*trace.steps, *extra]})


def noise_lines(traces: list[Trace], groups: Sequence[str], cv: CrossValidation) -> list[str]:
    """Recall@1 with bland steps appended (the gold step keeps its index), per Who&When
    subset."""
    out = [
        "",
        f"Robustness to appended noise ({NOISE_STEPS} bland steps appended to every trace, "
        "scored by the same cross-validated models, as shipped):",
        "",
        "| subset | recall@1 % | recall@1 with noise % | top step unchanged % |",
        "|---|---:|---:|---:|",
    ]
    for subset in WHO_AND_WHEN:
        idx = [i for i, t in enumerate(traces) if subset_of(t) == subset]
        if not idx:
            continue
        clean = noisy = same = 0
        for i in idx:
            model = cv.models[cv.folds[i]]
            noisy_trace = with_noise(traces[i])
            probs = softmax(model.logits(trace_features(noisy_trace, groups)))
            top = conformal.ranking(probs)[0]
            top_clean = conformal.ranking(cv.probs[i])[0]
            gold = traces[i].label.acceptable_steps  # type: ignore[union-attr]
            clean += top_clean in gold
            noisy += top in gold
            same += top == top_clean
        n = len(idx)
        out.append(f"| {subset} | {cell(clean, n)} | {cell(noisy, n)} | {cell(same, n, False)} |")
    return out


def cross_fit(
    table: Table, folds: Sequence[int], fit_on: Callable[[list[int]], ShortlistModel]
) -> CrossValidation:
    """Every trace of ``table`` scored by the model ``fit_on`` trains on the traces of the
    other folds (one model per fold)."""
    probs: list[list[float]] = [[] for _ in table.traces]
    models = []
    for fold in sorted(set(folds)):
        model = fit_on([i for i, f in enumerate(folds) if f != fold])
        models.append(model)
        for i, f in enumerate(folds):
            if f == fold:
                probs[i] = softmax(model.logits(table.rows[slice(*table.spans[i])]))
    return CrossValidation(list(folds), probs, models)


SINGLE_CV = "same, one fit per fold (how the deploy model was fitted before)"
"""The shipped configuration cross-validated with one fit per fold instead of the mean of
fold fits."""
WHO_AND_WHEN_ONLY = "same, one fit per fold, trained on Who&When alone"
"""The shipped configuration cross-validated without the generated sources."""


def cross_validated(
    traces: list[Trace], groups: Sequence[str], folds: int
) -> tuple[list[str], dict[str, list[bool]]]:
    """Cross-validation over ``traces`` (the shipped training sources), reported on
    Who&When's subsets."""
    table = build_table(traces, groups)
    cv = cross_validate(table, groups, k=folds)
    # As shipped: each fold's model is the deploy fit (the mean of fold fits) on the rest.
    shipped = cross_fit(table, cv.folds, lambda train: deploy_fit(table, groups, train, folds))
    ww = [i for i, t in enumerate(traces) if subset_of(t) in WHO_AND_WHEN]
    ww_table = build_table([traces[i] for i in ww], groups)
    alone = cross_fit(ww_table, [cv.folds[i] for i in ww], lambda t: fit(ww_table, groups, t))
    old_table = build_table([traces[i] for i in ww], OLD_GROUPS)
    old_folds = [cv.folds[i] for i in ww]
    previous = cross_fit(
        old_table, old_folds, lambda t: fit(old_table, OLD_GROUPS, t, "listwise", PREVIOUS_PENALTY)
    )
    pointwise = cross_fit(
        old_table, old_folds, lambda t: fit(old_table, OLD_GROUPS, t, "pointwise")
    )
    at = {i: j for j, i in enumerate(ww)}
    priors = {
        f: prior_from([traces[i] for i in ww if cv.folds[i] != f], True) for f in set(cv.folds)
    }
    out: list[str] = []
    top1: dict[str, list[bool]] = {}
    for subset in WHO_AND_WHEN:
        idx = [i for i in ww if subset_of(traces[i]) == subset]
        if not idx:
            continue
        ts = [traces[i] for i in idx]
        mine = [ranked_of(traces[i], shipped.probs[i]) for i in idx]
        prior = [priors[cv.folds[i]](traces[i]) for i in idx]
        rankings = {
            "shortlist (cross-validated, as shipped: the mean of fold fits)": mine,
            SINGLE_CV: [ranked_of(traces[i], cv.probs[i]) for i in idx],
            **(
                {WHO_AND_WHEN_ONLY: [ranked_of(traces[i], alone.probs[at[i]]) for i in idx]}
                if len(ww) < len(traces)
                else {}
            ),
            PREVIOUS: [ranked_of(traces[i], previous.probs[at[i]]) for i in idx],
            POINTWISE: [ranked_of(traces[i], pointwise.probs[at[i]]) for i in idx],
            **floors_for(ts, prior),
        }
        out += report(f"{subset}, cross-validated", ts, rankings)
        top1[subset] = hits(ts, mine, 1)
    out += noise_lines(traces, groups, shipped)
    return out, top1


POINTWISE = "pointwise learner (before issue 26)"
"""The features shipped before issue 26, trained the old way (``objective="pointwise"``) on
Who&When alone, for comparison."""
OLD_GROUPS = ("position", "agent", "errors")
"""The feature groups of the weights shipped before generated failures trained them."""
PREVIOUS_PENALTY = 30.0
PREVIOUS = "ranker shipped before (position + agent + errors, λ = 30, Who&When only)"
"""The listwise ranker shipped until the generated sources joined its training."""
ISSUE_26_GROUPS = ("structure", "errors", "cause")
"""Issue 26's evidence without absolute positions or role names."""


def anonymised(trace: Trace) -> Trace:
    """``trace`` with every agent renamed 'agent1', 'agent2'... in order of appearance (the
    label's agent too), so no evidence can come from role names."""
    names: dict[str, str] = {}
    for s in trace.steps:
        names.setdefault(s.agent, f"agent{len(names) + 1}")
    steps = [s.model_copy(update={"agent": names[s.agent]}) for s in trace.steps]
    label = trace.label
    if label is not None and label.agent is not None:
        label = label.model_copy(update={"agent": names.get(label.agent, label.agent)})
    return trace.model_copy(update={"steps": steps, "label": label})


SINGLE = "same, one fit on four of five folds (the deploy model shipped before)"
"""The shipped configuration fitted as the deploy model was until it became the mean of
fold fits: on every fold but the one its thresholds were calibrated on."""


def leave_one_source_out(
    traces: list[Trace],
    groups: Sequence[str],
    ablations: Sequence[Sequence[str]],
    trained: Sequence[str] | None = None,
    folds: int = 5,
) -> list[str]:
    """Each source tested by models trained on the ``trained`` sources (default: all)
    other than it, as the shipped deploy model is (the mean of fold fits), beside one fit
    on four of five folds (the deploy model shipped before), the floors, with paired tests
    and the feature-group ablation (one fit on every training trace per feature set)."""
    out: list[str] = []
    sources = sorted({subset_of(t) for t in traces})
    ablation_rows: list[str] = []
    old_table = build_table(traces, OLD_GROUPS)
    deploy = shipped_weights().deploy
    for source in sources:
        train_idx = [
            i
            for i, t in enumerate(traces)
            if subset_of(t) != source and (trained is None or subset_of(t) in trained)
        ]
        test = [t for t in traces if subset_of(t) == source]
        train = [traces[i] for i in train_idx]
        # The deploy model shipped before: one fit on every fold but one.
        single_idx = [
            train_idx[j] for j, f in enumerate(assign_folds(train, folds)) if f != SINGLE_HOLDOUT
        ]
        rankings: dict[str, list[Ranked]] = {}
        for gs in [groups, *ablations]:
            table = build_table(traces, gs)
            # As shipped: the deploy model, which ranks every trace outside the training
            # data, is the mean of the fits that each leave one fold out.
            shipped = list(gs) == list(groups)
            model = (
                deploy_fit(table, gs, train_idx, folds) if shipped else fit(table, gs, train_idx)
            )
            ranked = [
                ranked_of(t, softmax(model.logits(table.rows[slice(*table.spans[i])])))
                for i, t in enumerate(traces)
                if subset_of(t) == source
            ]
            if shipped:
                names = ", ".join(sorted(set(map(subset_of, train))))
                rankings[f"shortlist (as shipped: trained on {names})"] = ranked
                single = fit(table, gs, single_idx)
                rankings[SINGLE] = [
                    ranked_of(t, softmax(single.logits(table.rows[slice(*table.spans[i])])))
                    for i, t in enumerate(traces)
                    if subset_of(t) == source
                ]
                if list(deploy.groups) == list(gs) and source not in (trained or sources):
                    # This source is one the shipped file never trained on: the model
                    # above must be the shipped deploy model itself.
                    gap = max(abs(a - b) for a, b in zip(model.coef, deploy.coef, strict=True))
                    out += [
                        "",
                        f"{source} was never trained on: the model that ranks it below is "
                        + (
                            "the shipped file's deploy model (coefficients equal to 1e-4)."
                            if gap < 1e-4
                            else "NOT the shipped file's deploy model (coefficients differ by "
                            f"up to {gap:.3g}: the weights were built from other data)."
                        ),
                    ]
                old_idx = [i for i in single_idx if subset_of(traces[i]) in WHO_AND_WHEN]
                ww_train = [i for i in train_idx if subset_of(traces[i]) in WHO_AND_WHEN]
                for name, model_old in (
                    (PREVIOUS, fit(old_table, OLD_GROUPS, old_idx, "listwise", PREVIOUS_PENALTY)),
                    (POINTWISE, fit(old_table, OLD_GROUPS, ww_train, "pointwise")),
                ):
                    rankings[name] = [
                        ranked_of(
                            t, softmax(model_old.logits(old_table.rows[slice(*old_table.spans[i])]))
                        )
                        for i, t in enumerate(traces)
                        if subset_of(t) == source
                    ]
            else:
                r = [hits(test, ranked, k) for k in (*KS, None)]
                ablation_rows.append(
                    f"| {source} | {' + '.join(gs)} | "
                    + " | ".join(cell(sum(c), len(test), ci=False) for c in r)
                    + " |"
                )
            if list(gs) in (list(groups), list(OLD_GROUPS), list(ISSUE_26_GROUPS)):
                # The same model on the test traces with their agents renamed agent1, agent2...
                hidden = [anonymised(t) for t in test]
                ranked = [
                    ranked_of(t, softmax(model.logits(trace_features(t, gs)))) for t in hidden
                ]
                r = [hits(hidden, ranked, k) for k in (*KS, None)]
                ablation_rows.append(
                    f"| {source} | {' + '.join(gs)}, agent names hidden | "
                    + " | ".join(cell(sum(c), len(test), ci=False) for c in r)
                    + " |"
                )
        rankings.update(floors_for(test, prior_from(train, False)))
        out += report(f"{source}, never seen in training", test, rankings)
    if ablation_rows:
        out += [
            "",
            "Which evidence transfers (other feature groups, each one fit on every training "
            "trace of the other sources; %, no intervals):",
            "",
            "| test source | features | recall@1 | recall@3 | recall@5 | top-1 agent |",
            "|---|---|---:|---:|---:|---:|",
            *ablation_rows,
        ]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--also", type=Path, nargs="*", default=[], help="more labelled sources")
    parser.add_argument("--no-readme", action="store_true", help="print only")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument(
        "--no-selection", action="store_true", help="skip the configuration grid (minutes)"
    )
    parser.add_argument("--groups", nargs="*", default=list(FeatureSpec().groups))
    args = parser.parse_args()
    traces = load_dataset(args.data)
    for extra in args.also:
        traces += load_dataset(extra)
    groups = tuple(args.groups)
    ablations = [
        g
        for g in (
            OLD_GROUPS,
            ISSUE_26_GROUPS,
            ("errors",),
            ("structure", "errors"),
            ("errors", "cause"),
            ("position", "structure", "errors", "cause"),
        )
        if tuple(g) != groups
    ]
    counts = Counter(subset_of(t) for t in traces)
    today = datetime.now(UTC).date().isoformat()
    out = [
        f"Measured {today}. {len(traces)} labelled traces "
        f"({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}); features: "
        f"{', '.join(groups)}. Brackets: 95% Wilson interval. A shortlist lead is called "
        "significant only where its paired exact McNemar p < 0.05.",
        "",
        "### Cross-validated (5 folds by content over the shipped training sources, "
        "as shipped; Who&When's subsets reported)",
    ]
    trained = [s for s in shipped_weights().trained_sources if s in counts]
    never = sorted(set(counts) - set(trained))
    cv_lines, _ = cross_validated(
        [t for t in traces if subset_of(t) in trained], groups, args.folds
    )
    out += cv_lines
    out += [
        "",
        "### Leave one source out (transfer to a source never trained on)",
        "",
        f"As shipped, the ranker trains on {', '.join(trained)}"
        + (f"; {', '.join(never)} never trained or calibrated it" if never else "")
        + ". Each source below is tested by a model trained on the shipped training "
        "sources other than it.",
    ]
    out += leave_one_source_out(traces, groups, ablations, trained, args.folds)
    out += every_other_source(traces, groups)
    out += loso_sets(traces, groups, args.folds, trained)
    if not args.no_selection:
        out += criterion(traces, trained, args.folds)
        out += deploy_choice(traces, trained, groups, args.folds)
        out += tried(traces, trained, BEFORE, args.folds)
        out += selection(traces, trained)
    text = "\n".join(out)
    print(text)
    if not args.no_readme:
        heading = (
            "\n## Transfer and paired tests — `bench/transfer.py`\n\n"
            "Reproduce: `python bench/fault_injection.py --program all` (the generated "
            "sources, git-ignored), then `python bench/transfer.py --also "
            ".faultfinder/generated/*` (needs the `shortlist` extra, and the `frameworks` "
            "extra for the generators). Every claim about the shortlist in "
            "docs/methods/shortlist.md, docs/step-sets.md and docs/methods/compose.md "
            "follows from these tables.\n\n"
        )
        write_section(README, BEGIN, END, text, heading)
    return 0


if __name__ == "__main__":
    sys.exit(main())
