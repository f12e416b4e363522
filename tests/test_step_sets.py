"""Step sets: the shortlist's split-conformal set plus the method's step, on every result;
the held-out model choice that keeps Who&When results out-of-sample; the conformal
quantile's coverage on exchangeable synthetic data; the CLI and the report."""

from __future__ import annotations

import asyncio
import json
import math
import random
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from faultfinder.cli import main
from faultfinder.errors import ConfigError
from faultfinder.eval.rows import read_rows
from faultfinder.eval.step_sets import coverage
from faultfinder.judging.method import run_method
from faultfinder.llm import LLM, ScriptedBackend
from faultfinder.registry import create_method
from faultfinder.shortlist import conformal, sets
from faultfinder.shortlist.features import feature_names
from faultfinder.shortlist.model import ShortlistModel, softmax, trace_hash
from faultfinder.shortlist.sets import step_ranges
from faultfinder.shortlist.train import HeldOut, Table
from faultfinder.shortlist.weights import Weights, from_json, load_weights, shipped_weights
from faultfinder.traces.loader import load_trace, load_traces
from faultfinder.traces.schema import GoldLabel, Step, Trace
from shortlist_helpers import labelled_fixtures

FIXTURES = Path(__file__).parent / "fixtures" / "oracle"
ONE = FIXTURES / "Algorithm-Generated" / "1.json"


def make_trace(n: int, step: int = 1) -> Trace:
    agents = ["Planner", "Coder", "Computer_terminal"]
    steps = [Step(index=i, agent=agents[i % 3], content=f"output {i} " * (i + 1)) for i in range(n)]
    return Trace(
        id="t", task="Do it.", steps=steps, label=GoldLabel(agent=agents[step % 3], step=step)
    )


def position_model(column: str, weight: float, thresholds: dict[str, float]) -> ShortlistModel:
    names = feature_names(["position"])
    coef = [weight if n == f"position.{column}" else 0.0 for n in names]
    return ShortlistModel(
        groups=["position"],
        mean=[0.0] * len(names),
        scale=[1.0] * len(names),
        coef=coef,
        intercept=0.0,
        conformal=thresholds,
    )


# --- the set on every result ------------------------------------------------------


@pytest.mark.parametrize("spec", ["baseline:first-speaker", "baseline:position", "random"])
def test_every_method_result_carries_a_set_holding_its_own_step(spec: str) -> None:
    trace = load_trace(ONE)
    result = asyncio.run(run_method(create_method(spec), trace, LLM(ScriptedBackend([]))))
    assert result.step is not None
    assert result.step_set is not None and result.step in result.step_set
    assert result.step_set == sorted(set(result.step_set))
    assert result.step_set_level == sets.DEFAULT_LEVEL
    assert result.step_set_source is not None


def test_the_union_adds_the_method_step_to_the_conformal_set() -> None:
    # The ranker puts all its mass on the first step: its set at any level is {0}.
    weights = Weights(position_model("is_first", 50.0, {"0.8": 0.5, "0.9": 0.5, "0.95": 0.5}))
    trace = make_trace(6)
    assert sets.step_set(trace, 0.9, weights=weights).steps == [0]  # type: ignore[union-attr]
    assert sets.step_set(trace, 0.9, include=4, weights=weights).steps == [0, 4]  # type: ignore[union-attr]
    # A step outside the trace (never produced by run_method's step rule) is not added.
    assert sets.step_set(trace, 0.9, include=99, weights=weights).steps == [0]  # type: ignore[union-attr]
    assert sets.step_set(trace.model_copy(update={"steps": []}), 0.9) is None


def test_step_set_off_and_uncalibrated_levels() -> None:
    trace = load_trace(ONE)
    result = asyncio.run(
        run_method(
            create_method("baseline:position"), trace, LLM(ScriptedBackend([])), step_set=None
        )
    )
    assert result.step_set is None and result.step_set_level is None
    with pytest.raises(ConfigError, match="not calibrated"):
        sets.step_set(trace, 0.85)


def test_higher_levels_give_nested_sets() -> None:
    for trace in load_traces(FIXTURES):
        sizes = [sets.step_set(trace, a).steps for a in conformal.LEVELS]  # type: ignore[union-attr]
        assert set(sizes[0]) <= set(sizes[1]) <= set(sizes[2])


# --- which model answers for a trace ------------------------------------------------


def test_a_training_trace_is_answered_by_its_folds_held_out_model() -> None:
    thresholds = {"0.8": 0.5, "0.9": 0.6, "0.95": 0.7}
    deploy = position_model("is_first", 5.0, thresholds)
    folds = [
        position_model("is_last", 5.0, thresholds),
        position_model("is_second", 5.0, thresholds),
    ]
    trace = make_trace(5)
    weights = Weights(deploy, folds, {trace_hash(trace): 1})
    chosen = weights.choose(trace)
    assert chosen.model is folds[1] and chosen.source == "shipped:fold-1"
    assert sets.step_set(trace, 0.8, weights=weights).steps == [1]  # type: ignore[union-attr]
    other = make_trace(7)
    assert weights.choose(other).source == "shipped:deploy"
    # A format-1 file has one model: a trace it lists as trained on is flagged.
    single = position_model("is_first", 5.0, thresholds)
    single.trained_on = {"hashes": [trace_hash(trace)]}
    assert Weights(single).choose(trace).contaminated
    assert not Weights(single).choose(other).contaminated


def test_shortlist_method_ranks_a_training_trace_with_its_held_out_model(tmp_path: Path) -> None:
    thresholds = {"0.8": 0.5, "0.9": 0.6, "0.95": 0.7}
    deploy = position_model("is_first", 5.0, thresholds)
    held = position_model("is_last", 5.0, thresholds)
    trace = make_trace(5)
    path = tmp_path / "w.json"
    path.write_text(Weights(deploy, [deploy, held], {trace_hash(trace): 1}).dumps())
    method = create_method("shortlist", model_path=str(path))
    result = asyncio.run(run_method(method, trace, LLM(ScriptedBackend([]))))
    assert result.step == 4 and result.details["shortlist_model"] == "w.json:fold-1"
    assert result.details["trained_on_this_trace"] is False
    # The step set always comes from the shipped file, with the method's step added.
    assert result.step_set is not None and 4 in result.step_set
    # A trace of no known source gets the thresholds for a source never trained on.
    assert result.step_set_source == "shipped:deploy (calibrated on sources never trained on)"
    other = asyncio.run(run_method(method, make_trace(6), LLM(ScriptedBackend([]))))
    assert other.step == 0 and other.details["shortlist_model"] == "w.json:deploy"


def test_shipped_fold_models_never_trained_or_calibrated_on_their_fold() -> None:
    weights = shipped_weights()
    k = len(weights.folds)
    assert k >= 2 and len(weights.fold_of) >= 180  # every Who&When trace has a fold
    assert set(weights.fold_of.values()) == set(range(k))
    for fold, model in enumerate(weights.folds):
        info = model.trained_on
        assert info["held_out_fold"] == fold
        assert fold not in info["trained_on_folds"] and info["calibrated_on_fold"] != fold
        assert info["calibrated_on_fold"] not in info["trained_on_folds"]
        # Pooled thresholds, and per-source ones for each source trained on (issue 26).
        levels = {"0.8", "0.9", "0.95"}
        sources = (*weights.trained_on["sources"], conformal.UNSEEN)
        per_source = {f"{s}:{a}" for s in sources for a in levels}
        assert levels <= set(model.conformal) <= levels | per_source
        assert any(key in model.conformal for key in per_source)
    assert weights.deploy.trained_on["calibrated_on"].startswith("every trace's out-of-fold")
    # The synthetic fixtures are not Who&When traces: the deploy model answers for them.
    assert all(weights.choose(t).source == "shipped:deploy" for t in load_traces(FIXTURES))


def test_weights_files_round_trip_in_both_formats(tmp_path: Path) -> None:
    weights = shipped_weights()
    path = tmp_path / "w.json"
    path.write_text(weights.dumps())
    again = load_weights(path)
    assert again.fold_of == weights.fold_of and again.name == "w.json"
    assert [m.coef for m in again.folds] == [m.coef for m in weights.folds]
    single = position_model("is_first", 1.0, {"0.9": 0.5})
    assert from_json(single.to_json(), "x", "x").folds == []
    bad = weights.to_json()
    bad["fold_of"] = {"abc": 9}
    with pytest.raises(ConfigError, match="fold"):
        from_json(bad, "bad.json", "bad")


GROUPS = ("position", "agent", "errors")


def _held_out_fixtures() -> tuple[list[Trace], Table, HeldOut]:
    """The labelled fixtures, their table and their held-out models over four folds."""
    pytest.importorskip("sklearn")
    from faultfinder.shortlist.train import build_table, held_out_models

    traces = labelled_fixtures()
    table = build_table(traces, GROUPS)
    return traces, table, held_out_models(table, GROUPS, k=4)


def test_held_out_models_exclude_the_fold_from_training_and_calibration() -> None:
    traces, table, held = _held_out_fixtures()
    from faultfinder.shortlist.train import calibrated, fit, ship

    groups = GROUPS
    for fold, model in enumerate(held.models):
        train = [i for i, f in enumerate(held.folds) if f in model.trained_on["trained_on_folds"]]
        assert all(held.folds[i] != fold for i in train)
        assert fit(table, groups, train).coef == pytest.approx(model.coef)
        calib = [i for i, f in enumerate(held.folds) if f == model.trained_on["calibrated_on_fold"]]
        assert calibrated(table, groups, train, calib).conformal == model.conformal
    weights = ship(table, groups, k=4)
    for trace, fold in zip(traces, held.folds, strict=True):
        assert weights.choose(trace).source == f"shipped:fold-{fold}"


def test_the_deploy_model_is_the_mean_of_the_folds_fits_calibrated_out_of_fold() -> None:
    traces, table, held = _held_out_fixtures()
    from faultfinder.shortlist.train import fit

    members = [
        fit(table, GROUPS, [i for i, f in enumerate(held.folds) if f != fold]) for fold in range(4)
    ]
    scores = []
    for i, trace in enumerate(traces):
        rows = table.rows[slice(*table.spans[i])]
        # Its score of every step is the members' mean score, whatever their scaling.
        mean = [sum(v) / 4 for v in zip(*(m.logits(rows) for m in members), strict=True)]
        assert held.deploy.logits(rows) == pytest.approx(mean)
        # Each trace calibrates it with the scores of the member that left its fold out.
        probs = softmax(members[held.folds[i]].logits(rows))
        assert trace.label is not None
        scores.append(conformal.nonconformity(probs, trace.label.acceptable_steps))
    for level in conformal.LEVELS:
        tau = round(conformal.threshold(scores, level), 6)
        assert held.deploy.conformal[str(level)] == tau


# --- the conformal quantile on exchangeable synthetic data ---------------------------


def _draw(rng: random.Random, steps: int) -> tuple[list[float], int]:
    """A ranker's probabilities and the decisive step, drawn from a noisier truth."""
    logits = [rng.gauss(0.0, 1.5) for _ in range(steps)]
    truth = softmax([0.6 * x + rng.gauss(0.0, 1.0) for x in logits])
    decisive = rng.choices(range(steps), weights=truth)[0]
    return softmax(logits), decisive


@settings(max_examples=12, deadline=None, derandomize=True)
@given(
    seed=st.integers(min_value=0, max_value=10_000),
    n=st.integers(min_value=19, max_value=60),
    level=st.sampled_from(conformal.LEVELS),
)
def test_split_conformal_coverage_holds_on_exchangeable_data(
    seed: int, n: int, level: float
) -> None:
    rng = random.Random(seed)
    reps, covered, below = 300, 0, 0
    for _ in range(reps):
        calib = [_draw(rng, 8) for _ in range(n)]
        tau = conformal.threshold([conformal.nonconformity(p, [y]) for p, y in calib], level)
        probs, y = _draw(rng, 8)
        covered += y in conformal.prediction_set(probs, tau)
        below += conformal.nonconformity(probs, [y]) <= tau
    slack = 3 * math.sqrt(level * (1 - level) / reps)
    # The guarantee: P(set holds the decisive step) >= level.
    assert covered / reps >= level - slack
    # The quantile is not needlessly high: P(score <= tau) <= level + 1 / (n + 1).
    assert below / reps <= level + 1 / (n + 1) + slack


# --- CLI end to end -----------------------------------------------------------------


def invoke(*args: object) -> object:
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_step_ranges() -> None:
    assert step_ranges([0, 1, 2, 3, 5, 7, 8, 10, 11, 12]) == "0-3, 5, 7, 8, 10-12"
    assert step_ranges([]) == "" and step_ranges([4]) == "4"


def test_cli_attribute_prints_the_set_and_off_removes_it(tmp_path: Path) -> None:
    trace = load_trace(ONE)
    replies = tmp_path / "replies.json"
    agent = trace.steps[2].agent
    answer = f"Agent Name: {agent}\nStep Number: 2\nReason for Mistake: scripted."
    replies.write_text(json.dumps([answer, answer, answer]))
    model = ["--model", f"scripted:{replies}", "--cache", "none"]
    shown = invoke("attribute", ONE, "--method", "all-at-once", *model, "--step-set", "0.8")
    assert shown.exit_code == 0, shown.output  # type: ignore[attr-defined]
    line = next(x for x in shown.output.splitlines() if x.startswith("step set:"))  # type: ignore[attr-defined]
    expected = sets.step_set(trace, 0.8, include=2)
    assert expected is not None and 2 in expected.steps
    size = len(expected.steps)
    # The synthetic fixture is unlike Who&When (the calibration data): the set is shown,
    # its level is not claimed.
    assert not expected.calibrated and expected.shift is not None
    assert "{" + step_ranges(expected.steps) + "} — 80% NOT claimed (trace unlike" in line
    assert (
        f"{size} of {len(trace.steps)} steps ({100 * size / len(trace.steps):.0f}% of the trace)"
        in line
    )
    data = json.loads(
        invoke("attribute", ONE, "--method", "all-at-once", *model, "--json").output  # type: ignore[attr-defined]
    )
    assert data["step_set_level"] == 0.9 and 2 in data["step_set"]
    off = invoke("attribute", ONE, "--method", "all-at-once", *model, "--step-set", "off", "--json")
    assert json.loads(off.output)["step_set"] is None  # type: ignore[attr-defined]
    bad = CliRunner().invoke(main, ["attribute", str(ONE), "--step-set", "0.85"])
    assert bad.exit_code == 2 and "0.85" in bad.output


def test_cli_eval_and_report_show_coverage_per_method_and_level(tmp_path: Path) -> None:
    model = ["--model", "function:json:dumps", "--cache", "none", "--no-progress"]
    methods = "shortlist,baseline:position"
    out = tmp_path / "r.jsonl"
    ran = invoke("eval", FIXTURES, "--method", methods, *model, "--step-set", "0.95", "--out", out)
    assert ran.exit_code == 0, ran.output  # type: ignore[attr-defined]
    rows = read_rows(out)
    assert rows and all(r.step_set_level == 0.95 and r.step_set for r in rows)
    assert all(r.step is None or r.step in (r.step_set or []) for r in rows)
    again = CliRunner().invoke(
        main,
        [
            "eval",
            str(FIXTURES),
            "--method",
            methods,
            *model,
            "--step-set",
            "0.8",
            "--out",
            str(out),
            "--resume",
        ],
    )
    assert again.exit_code == 0 and "another level (0.95)" in again.stderr
    assert all(r.step_set_level == 0.95 for r in read_rows(out))
    off = tmp_path / "off.jsonl"
    invoke(
        "eval", FIXTURES, "--method", "baseline:position", *model, "--step-set", "off", "--out", off
    )
    assert all(r.step_set is None for r in read_rows(off))

    report = invoke("report", out, "--format", "markdown")
    assert report.exit_code == 0, report.output  # type: ignore[attr-defined]
    text = report.output  # type: ignore[attr-defined]
    assert "Step sets: how often the set holds the decisive step" in text
    for figure in coverage(read_rows(out)):
        low, high = figure.ci
        cell = f"{100 * figure.rate:.1f} ({100 * low:.1f}–{100 * high:.1f})"
        assert f"| {figure.subset} | {figure.method} | 95% | {figure.cases} | {cell} |" in text
        # The fixtures are unlike the calibration data: no case claims the level.
        assert figure.claimed == 0 and f"| 0/{figure.cases} | - |" in text
    assert all(r.step_set_calibrated is False and r.step_set_shift for r in read_rows(out))
    assert "carry no coverage claim" in text
    assert "Reliability of stated confidence: shortlist" in text


def test_a_trace_of_a_known_source_gets_that_sources_threshold() -> None:
    model = position_model("is_first", 1.0, {"0.9": 0.99, "Hand-Crafted:0.9": 0.2})
    weights = Weights(model)
    trace = make_trace(8)
    pooled = sets.step_set(trace, 0.9, weights=weights)
    sourced = trace.model_copy(
        update={"source": trace.source.model_copy(update={"subset": "Hand-Crafted"})}
    )
    own = sets.step_set(sourced, 0.9, weights=weights)
    assert pooled is not None and own is not None
    assert len(own.steps) < len(pooled.steps)
    assert own.source.endswith("(calibrated on Hand-Crafted)")
    assert "calibrated on" not in pooled.source


# --- thresholds for a source never trained on (issue 26) ------------------------------


def test_weighted_threshold_is_the_weighted_empirical_quantile() -> None:
    scores = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    assert conformal.weighted_threshold(scores, [1.0] * 10, 0.9) == 0.9
    assert conformal.weighted_threshold(scores, [1.0] * 10, 0.5) == 0.5
    # One heavy score moves the quantile to it: a small source weighs as much as a large one.
    heavy = [1.0] * 9 + [9.0]
    assert conformal.weighted_threshold(scores, heavy, 0.6) == 1.0
    assert conformal.weighted_threshold([], [], 0.9) == 1.0


def test_a_trace_of_an_unknown_source_gets_thresholds_fitted_leaving_sources_out() -> None:
    pytest.importorskip("sklearn")
    from faultfinder.shortlist.train import build_table, fit, ship, unseen_thresholds

    traces = labelled_fixtures()
    names = ("one", "two", "three")
    traces = [
        t.model_copy(
            update={"source": t.source.model_copy(update={"subset": names[i % len(names)]})}
        )
        for i, t in enumerate(traces)
    ]
    groups = ("position", "agent", "errors")
    table = build_table(traces, groups)
    unseen = unseen_thresholds(table, groups)
    assert set(unseen) == {conformal.source_key(conformal.UNSEEN, a) for a in conformal.LEVELS}
    # The 90% threshold by hand: each source scored by a model trained on the others.
    scores, weights = [], []
    for name in names:
        members = [i for i, t in enumerate(traces) if t.source.subset == name]
        model = fit(table, groups, [i for i in range(len(traces)) if i not in members])
        for i in members:
            probs = softmax(model.logits(table.rows[slice(*table.spans[i])]))
            scores.append(conformal.nonconformity(probs, traces[i].label.acceptable_steps))  # type: ignore[union-attr]
            weights.append(1 / len(members))
    key = conformal.source_key(conformal.UNSEEN, 0.9)
    assert unseen[key] == pytest.approx(
        conformal.weighted_threshold(scores, weights, 0.9), abs=1e-6
    )
    weights_file = ship(table, groups, k=3)
    for model in [weights_file.deploy, *weights_file.folds]:
        assert model.conformal[key] >= model.conformal["0.9"]
        assert model.conformal[key] >= unseen[key] - 1e-9
    stranger = traces[0].model_copy(
        update={
            "id": "stranger",
            "source": traces[0].source.model_copy(update={"subset": "elsewhere"}),
            "steps": [
                s.model_copy(update={"content": s.content + " (edited)"}) for s in traces[0].steps
            ],
        }
    )
    found = sets.step_set(stranger, 0.9, weights=weights_file)
    assert found is not None
    assert found.source.endswith("(calibrated on sources never trained on)")
    # Fewer than three sources: no such thresholds.
    two = [
        t.model_copy(update={"source": t.source.model_copy(update={"subset": "x"})}) for t in traces
    ]
    assert unseen_thresholds(build_table(two, groups), groups) == {}


def test_the_model_family_of_a_set_ignores_the_calibration_note() -> None:
    from faultfinder.eval.step_sets import model_family

    assert model_family("shipped:fold-3") == "fold"
    assert model_family("shipped:fold-2 (calibrated on Hand-Crafted)") == "fold"
    assert model_family("shipped:deploy (calibrated on sources never trained on)") == "deploy"
    assert model_family("w.json:deploy (calibrated on generated:ag2)") == "deploy"
    assert model_family(None) == "?"


def test_weights_without_a_shift_reference_claim_no_level(tmp_path: Path) -> None:
    """A one-model weights file cannot tell a trace unlike its calibration data from one
    like it, so its sets never carry an unqualified coverage claim (issue 26)."""
    path = tmp_path / "single.json"
    path.write_text(json.dumps(position_model("is_first", 5.0, {"0.9": 0.5}).to_json()))
    trace = load_trace(ONE)
    found = sets.step_set(trace, 0.9, weights=load_weights(path))
    assert found is not None and found.calibrated is False and found.shift is None
    result = CliRunner().invoke(
        main,
        ["attribute", str(ONE), "--method", "shortlist", "--shortlist-weights", str(path)],
    )
    assert result.exit_code == 0, result.output
    assert "90% NOT claimed (the weights hold no shift reference" in result.stdout
    assert "holds no shift reference" in result.stderr
    as_json = CliRunner().invoke(
        main,
        [
            "attribute",
            str(ONE),
            "--method",
            "shortlist",
            "--shortlist-weights",
            str(path),
            "--json",
        ],
    )
    assert json.loads(as_json.stdout)["step_set_calibrated"] is False
