"""Near-copies of training traces: found by content, never ranked by a model that saw them."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from faultfinder.shortlist import neardup
from faultfinder.shortlist.model import trace_hash
from faultfinder.shortlist.weights import from_json, load_weights
from faultfinder.traces.schema import Step, Trace
from shortlist_helpers import labelled_fixtures

FIXTURES = Path(__file__).parent / "fixtures" / "oracle"


def _edit(trace: Trace, edit: object) -> Trace:
    steps = [s.model_copy(update={"content": edit(s.index, s.content)}) for s in trace.steps]  # type: ignore[operator]
    return trace.model_copy(update={"steps": steps, "id": trace.id + "-copy"})


def _trace(texts: list[str]) -> Trace:
    return Trace(
        id="x", task="t", steps=[Step(index=i, agent="A", content=t) for i, t in enumerate(texts)]
    )


LONG = [
    f"Step {i}: the agent looked up the population of town number {i} in the fact book "
    f"and found {1000 + 37 * i} inhabitants, then passed the figure to the calculator."
    for i in range(12)
]


def test_whitespace_and_case_do_not_change_a_sketch() -> None:
    a = _trace(LONG)
    b = _trace([" ".join(t.upper().split()) + "  \n" for t in LONG])
    assert neardup.sketch(a) == neardup.sketch(b)
    assert trace_hash(a) != trace_hash(b)
    assert neardup.similarity(neardup.sketch(a), neardup.sketch(b)) == 1.0


def test_an_edited_step_stays_near_and_another_log_does_not() -> None:
    a = neardup.sketch(_trace(LONG))
    edited = neardup.sketch(_trace([*LONG[:5], "Something else entirely.", *LONG[6:]]))
    assert neardup.similarity(a, edited) >= neardup.NEAR
    other = neardup.sketch(
        _trace([f"Unrelated message {i} about weather in May." for i in range(12)])
    )
    assert neardup.similarity(a, other) < 0.2


def test_sketches_round_trip_as_text() -> None:
    sk = neardup.sketch(_trace(LONG))
    assert len(sk) == neardup.SKETCH
    assert neardup.decode(neardup.encode(sk)) == sk


def test_clusters_join_near_duplicates_transitively() -> None:
    a = neardup.sketch(_trace(LONG))
    b = neardup.sketch(_trace([t + " " for t in LONG]))
    c = neardup.sketch(_trace(["Nothing alike here at all, a different log."]))
    roots = neardup.clusters([a, c, b])
    assert roots[0] == roots[2] != roots[1]


@pytest.fixture(scope="module")
def shipped_on_fixtures() -> tuple[list[Trace], object]:
    pytest.importorskip("sklearn")
    from faultfinder.shortlist.train import build_table, ship

    traces = labelled_fixtures()
    groups = ("position", "agent", "errors")
    return traces, ship(build_table(traces, groups), groups, k=4)


@pytest.mark.parametrize(
    "perturb",
    [
        lambda i, c: c + " ",  # one trailing space: the exact-hash check misses it
        lambda i, c: " ".join(c.split()).lower(),
        lambda i, c: "An edited message." if i == 1 else c,
    ],
    ids=["trailing-space", "reflowed", "one-step-edited"],
)
def test_a_near_copy_goes_to_the_model_of_its_originals_fold(
    shipped_on_fixtures: tuple[list[Trace], object], perturb: object, tmp_path: Path
) -> None:
    traces, weights = shipped_on_fixtures
    # Through the file, as users load it.
    path = tmp_path / "w.json"
    path.write_text(weights.dumps())  # type: ignore[attr-defined]
    loaded = load_weights(path)
    checked = 0
    for trace in traces:
        copy = _edit(trace, perturb)
        if neardup.similarity(neardup.sketch(copy), neardup.sketch(trace)) < neardup.NEAR:
            continue  # a short trace whose edit changed most of its text is not a near copy
        fold = loaded.fold_of[trace_hash(trace)]
        chosen = loaded.choose(copy)
        model = (
            loaded.folds[int(chosen.source.rsplit("-", 1)[1])]
            if ":fold-" in chosen.source
            else None
        )
        if chosen.contaminated:
            assert chosen.near_copy is not None
        else:
            assert model is not None, chosen.source
            assert fold not in model.trained_on["trained_on_folds"], (trace.id, chosen.source)
            assert chosen.near_copy is not None or trace_hash(copy) == trace_hash(trace)
        checked += 1
    assert checked >= len(traces) // 2


def test_a_near_copy_of_traces_in_every_fold_is_flagged(
    shipped_on_fixtures: tuple[list[Trace], object],
) -> None:
    traces, weights = shipped_on_fixtures
    # A log near-identical to training traces of every fold: every model trained on one of
    # them, so no model can rank it out of sample and the result must say so.
    query = _trace(LONG)
    custom = from_json(weights.to_json(), "w", "w")  # type: ignore[attr-defined]
    first_of_fold = {custom.fold_of[trace_hash(t)]: trace_hash(t) for t in traces}
    assert len(first_of_fold) == len(custom.folds)
    custom.sketches = {h: neardup.sketch(query) for h in first_of_fold.values()}
    chosen = custom.choose(query)
    assert chosen.contaminated and chosen.source == "w:deploy" and chosen.near_copy == 1.0
    # Near only one fold's trace: that fold's held-out model answers, unflagged.
    only = next(iter(first_of_fold.items()))
    custom.sketches = {only[1]: neardup.sketch(query)}
    chosen = custom.choose(query)
    assert chosen.source == f"w:fold-{only[0]}" and not chosen.contaminated


def test_cli_attribute_ranks_a_near_copy_with_a_model_that_never_saw_it(
    shipped_on_fixtures: tuple[list[Trace], object], tmp_path: Path
) -> None:
    import json

    from click.testing import CliRunner

    from faultfinder.cli import main
    from faultfinder.traces.io import write_trace

    traces, weights = shipped_on_fixtures
    path = tmp_path / "w.json"
    path.write_text(weights.dumps())  # type: ignore[attr-defined]
    original = traces[0]
    copy = _edit(original, lambda i, c: c + " ")  # one trailing space per step
    file = tmp_path / "copy.json"
    write_trace(copy, file)
    shown = CliRunner().invoke(
        main,
        ["attribute", str(file), "--method", "shortlist", "--set", f"model_path={path}", "--json"],
        catch_exceptions=False,
    )
    assert shown.exit_code == 0, shown.output
    details = json.loads(shown.output)["details"]
    fold = weights.fold_of[trace_hash(original)]  # type: ignore[attr-defined]
    assert details["shortlist_model"] == f"w.json:fold-{fold}"
    assert details["trained_on_this_trace"] is False
    assert details["near_copy_similarity"] == 1.0


def _rewrite_one_step(trace: Trace) -> Trace:
    target = len(trace.steps) // 3
    return _edit(
        trace, lambda i, c: "I have rewritten this message entirely." if i == target else c
    )


def _cut_last_quarter(trace: Trace) -> Trace:
    keep = max(1, len(trace.steps) - len(trace.steps) // 4)
    return trace.model_copy(update={"steps": trace.steps[:keep], "id": trace.id + "-cut"})


@pytest.mark.parametrize(
    "perturb", [_rewrite_one_step, _cut_last_quarter], ids=["one-step-rewritten", "quarter-cut"]
)
def test_a_heavier_edit_is_never_ranked_by_a_model_that_saw_the_original(
    shipped_on_fixtures: tuple[list[Trace], object], perturb: object
) -> None:
    traces, weights = shipped_on_fixtures
    clean = 0
    for trace in traces:
        copy = perturb(trace)  # type: ignore[operator]
        assert trace_hash(copy) != trace_hash(trace)
        fold = weights.fold_of[trace_hash(trace)]  # type: ignore[attr-defined]
        chosen = weights.choose(copy)  # type: ignore[attr-defined]
        assert chosen.near_copy is not None, trace.id  # found, however heavy the edit
        if chosen.contaminated:
            continue  # said so: no model could be shown not to have seen it
        assert ":fold-" in chosen.source, (trace.id, chosen.source)
        assert fold not in chosen.model.trained_on["trained_on_folds"], (trace.id, chosen.source)
        clean += 1
    # Every fixture log is its own (distinct traces are < neardup.FLOOR similar), so the
    # original is the one nearest trace and its fold's model answers.
    assert clean == len(traces)


def test_an_unrelated_trace_gets_the_deploy_model(
    shipped_on_fixtures: tuple[list[Trace], object],
) -> None:
    _, weights = shipped_on_fixtures
    chosen = weights.choose(_trace(LONG))  # type: ignore[attr-defined]
    assert chosen.source == "shipped:deploy"
    assert not chosen.contaminated and chosen.near_copy is None


def test_the_estimate_against_a_stored_sketch_tracks_the_true_similarity() -> None:
    base = _trace(LONG)
    for changed in (1, 3, 6, 9):
        other = _trace([*LONG[:-changed], *(f"Unrelated note {i} on May." for i in range(changed))])
        full_a = set(neardup.shingle_hashes(base))
        full_b = set(neardup.shingle_hashes(other))
        truth = len(full_a & full_b) / len(full_a | full_b)
        (found,) = neardup.matches(neardup.shingle_hashes(other), {"a": neardup.sketch(base)}, 0.0)
        assert found.sample >= neardup.SKETCH
        assert abs(found.similarity - truth) <= 3 * found.variance**0.5 + 1e-9, changed


def test_possible_originals_in_folds_no_model_excludes_are_flagged(
    shipped_on_fixtures: tuple[list[Trace], object],
) -> None:
    traces, weights = shipped_on_fixtures
    custom = from_json(weights.to_json(), "w", "w")  # type: ignore[attr-defined]
    key_of = {custom.fold_of[trace_hash(t)]: trace_hash(t) for t in traces}
    query = _trace(LONG)
    same = neardup.sketch(query)
    unlike = neardup.sketch(_trace([*LONG[:4], *(f"Unrelated note {i} on May." for i in range(8))]))
    # Folds 0 and 2 (k = 4): fold f's model skips f and f + 1, so none skips both.
    custom.sketches = {key_of[0]: same, key_of[2]: same}
    chosen = custom.choose(query)
    assert chosen.contaminated and chosen.source == "w:deploy"
    # Folds 0 and 1: fold 0's model trained on neither.
    custom.sketches = {key_of[0]: same, key_of[1]: same}
    chosen = custom.choose(query)
    assert chosen.source == "w:fold-0" and not chosen.contaminated
    # A second trace clearly less similar is not a possible original: the nearest decides.
    custom.sketches = {key_of[2]: same, key_of[0]: unlike}
    found = neardup.matches(neardup.shingle_hashes(query), custom.sketches)
    assert [m.key for m in found] == [key_of[2], key_of[0]]
    assert [m.key for m in neardup.rivals(found)] == [key_of[2]]
    chosen = custom.choose(query)
    assert chosen.source == "w:fold-2" and not chosen.contaminated


def test_an_edit_that_changes_most_of_a_short_log_is_still_caught(
    shipped_on_fixtures: tuple[list[Trace], object],
) -> None:
    # Who&When's misses under the old 0.6 rule: short logs in which one long step holds
    # much of the text, so rewriting it, or cutting the end, leaves a copy ~0.4 similar.
    traces, weights = shipped_on_fixtures
    custom = from_json(weights.to_json(), "w", "w")  # type: ignore[attr-defined]
    key = trace_hash(traces[0])
    fold = custom.fold_of[key]
    rng = random.Random(7)

    def said(n: int) -> str:
        syllables = [a + b for a in "bdfklmnprst" for b in "aeiou"]
        return " ".join("".join(rng.choices(syllables, k=3)) for _ in range(n))

    rewritten = [said(10), said(120), said(60), said(10)]
    cut = [said(10), said(60), said(10), said(120)]
    for log, copy in (
        (rewritten, [rewritten[0], "I have rewritten this message entirely.", *rewritten[2:]]),
        (cut, cut[:3]),  # the last quarter of the steps cut (one step of four)
    ):
        custom.sketches[key] = neardup.sketch(_trace(log))  # a training log of fold `fold`
        chosen = custom.choose(_trace(copy))
        assert chosen.near_copy is not None
        assert neardup.FLOOR <= chosen.near_copy < neardup.NEAR
        assert not chosen.contaminated and ":fold-" in chosen.source
        assert fold not in chosen.model.trained_on["trained_on_folds"]


def test_the_warning_for_a_near_copy_says_near_copy_not_this_trace(
    shipped_on_fixtures: tuple[list[Trace], object], caplog: pytest.LogCaptureFixture
) -> None:
    from faultfinder.methods.shortlist import rank_with, ranking_details

    traces, weights = shipped_on_fixtures
    query = _trace(LONG)
    custom = from_json(weights.to_json(), "w", "w")  # type: ignore[attr-defined]
    custom.sketches = {trace_hash(t): neardup.sketch(query) for t in traces}
    chosen, ranking = rank_with(query, custom, None)
    assert chosen.contaminated and chosen.near_copy == 1.0
    with caplog.at_level("WARNING", logger="faultfinder"):
        ranking_details(query, chosen, ranking, 3)
    (said,) = [r.getMessage() for r in caplog.records]
    # It was trained on another trace like this one, not on this trace itself.
    assert f"trained on a trace 100% similar to trace '{query.id}'" in said
