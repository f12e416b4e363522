"""The offline step shortlist: features, the ranker without scikit-learn, conformal sets,
surprisal (with a stub scorer), training folds and the registered method."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from faultfinder.errors import ConfigError
from faultfinder.judging.method import run_method
from faultfinder.llm import LLM, ScriptedBackend
from faultfinder.registry import create_method
from faultfinder.shortlist import conformal
from faultfinder.shortlist.features import GROUPS, feature_names, trace_features
from faultfinder.shortlist.model import ShortlistModel, softmax, trace_hash
from faultfinder.shortlist.rank import rank_trace
from faultfinder.shortlist.surprisal import CachedSurprisal
from faultfinder.shortlist.weights import load_weights
from faultfinder.traces.schema import GoldLabel, Step, Trace
from shortlist_helpers import labelled_fixtures

FIXTURES = Path(__file__).parent / "fixtures" / "oracle"


def make_trace(outputs: list[tuple[str, str]], step: int | None = None) -> Trace:
    label = GoldLabel(agent=outputs[step][0], step=step) if step is not None else None
    return Trace(
        id="t",
        task="Find the thing.",
        steps=[Step(index=i, agent=a, content=c) for i, (a, c) in enumerate(outputs)],
        label=label,
    )


TRACE = make_trace(
    [
        ("Planner", "Plan: search, then verify."),
        ("Coder", "import os\nprint(find())"),
        ("Computer_terminal", "Traceback (most recent call last):\nNameError: find"),
        ("Coder", "Unable to find it. The answer is 42."),
    ],
    step=1,
)


class StubScorer:
    """Surprisal from the step's length, and a count of calls."""

    def __init__(self) -> None:
        self.calls = 0

    def identity(self) -> str:
        return "stub"

    def score(self, trace: Trace) -> list[tuple[float, float]]:
        self.calls += 1
        return [(float(len(s.content)), float(len(s.content)) * 2) for s in trace.steps]


def test_features_have_one_row_per_step_and_named_columns() -> None:
    groups = ("position", "agent", "errors")
    rows = trace_features(TRACE, groups)
    assert len(rows) == 4
    names = feature_names(groups)
    assert all(len(r) == len(names) for r in rows)
    col = {n: i for i, n in enumerate(names)}
    assert rows[0][col["position.is_first"]] == 1.0
    assert rows[3][col["position.is_last"]] == 1.0
    assert rows[2][col["errors.traceback"]] == 1.0
    assert rows[1][col["errors.next_traceback"]] == 1.0  # the step it feeds failed
    assert rows[0][col["agent.planner"]] == 1.0
    assert rows[2][col["agent.tool_speaker"]] == 1.0
    assert rows[3][col["errors.unable"]] > 0
    assert rows[1][col["agent.agent_first_turn"]] == 1.0
    assert rows[3][col["agent.agent_first_turn"]] == 0.0


def test_features_never_read_the_label() -> None:
    unlabelled = TRACE.model_copy(update={"label": None})
    assert trace_features(TRACE, GROUPS[:3]) == trace_features(unlabelled, GROUPS[:3])


def test_unknown_group_and_missing_surprisal_are_errors() -> None:
    with pytest.raises(ValueError, match="available: position"):
        feature_names(["nope"])
    with pytest.raises(ValueError, match="surprisal"):
        trace_features(TRACE, ("position", "surprisal"))


def test_surprisal_features_from_a_stub_scorer() -> None:
    rows = trace_features(TRACE, ("surprisal",), StubScorer().score(TRACE))
    means = [r[0] for r in rows]
    assert means == [float(len(s.content)) for s in TRACE.steps]
    assert rows[2][3] == 0.0  # the longest output ranks first


def test_surprisal_cache_scores_each_trace_once(tmp_path: Path) -> None:
    stub = StubScorer()
    cached = CachedSurprisal(stub, tmp_path)
    first = cached.score(TRACE)
    again = CachedSurprisal(stub, tmp_path).score(TRACE)
    assert first == again and stub.calls == 1
    assert cached.cpu_seconds(TRACE) is not None


def _model(groups: tuple[str, ...], coef_of: dict[str, float]) -> ShortlistModel:
    names = feature_names(groups)
    return ShortlistModel(
        groups=list(groups),
        mean=[0.0] * len(names),
        scale=[1.0] * len(names),
        coef=[coef_of.get(n, 0.0) for n in names],
        intercept=0.0,
        conformal={"0.9": 0.5},
    )


def test_model_applies_weights_in_plain_python_and_round_trips() -> None:
    model = _model(
        ("position", "errors"), {"errors.next_traceback": 3.0, "position.is_first": -1.0}
    )
    ranking = rank_trace(TRACE, model)
    assert ranking.order[0] == 1
    assert abs(sum(ranking.probs) - 1) < 1e-9
    again = ShortlistModel.from_json(json.loads(json.dumps(model.to_json())))
    assert again.logits(trace_features(TRACE, again.groups)) == ranking.logits


def test_a_model_reading_surprisal_needs_a_scorer() -> None:
    model = _model(("surprisal",), {"surprisal.mean": 1.0})
    with pytest.raises(ConfigError, match="surprisal"):
        rank_trace(TRACE, model)
    assert rank_trace(TRACE, model, StubScorer()).order[0] == 2


def test_bad_weights_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "w.json"
    bad.write_text('{"format": "faultfinder-shortlist/1", "groups": ["position"]}')
    with pytest.raises(ConfigError, match="missing field 'mean'"):
        load_weights(bad)
    bad.write_text('{"format": "faultfinder-shortlist/2", "groups": ["position"]}')
    with pytest.raises(ConfigError, match="missing field 'deploy'"):
        load_weights(bad)
    bad.write_text("{")
    with pytest.raises(ConfigError, match="line 1"):
        load_weights(bad)


def test_a_weights_file_for_other_features_is_refused(tmp_path: Path) -> None:
    # The shipped file, as another version would have written it: the same numbers for
    # columns in another order, or for a renamed column. Applied, they would rank steps by
    # the wrong features with no error.
    from importlib import resources

    shipped = json.loads(
        resources.files("faultfinder.shortlist").joinpath("weights.json").read_text("utf-8")
    )
    assert shipped["features"] == feature_names(shipped["groups"])
    first, second = shipped["features"][:2]
    swapped = dict(shipped, features=[second, first, *shipped["features"][2:]])
    path = tmp_path / "old.weights.json"
    path.write_text(json.dumps(swapped), "utf-8")
    with pytest.raises(ConfigError) as refused:
        load_weights(path)
    message = str(refused.value)
    assert message.startswith(f"{path}: field 'features' does not match")
    assert f"column 0 is {second!r} in the file and {first!r} here" in message
    assert "rebuild the file with this one" in message
    renamed = dict(shipped, features=["position.renamed", *shipped["features"][1:]])
    path.write_text(json.dumps(renamed), "utf-8")
    with pytest.raises(ConfigError, match=r"computes \['position.rel'\] that the file has no"):
        load_weights(path)
    # A one-model file (format 1) is checked too.
    model = _model(("position", "errors"), {}).to_json()
    model["features"] = list(reversed(model["features"]))
    path.write_text(json.dumps(model), "utf-8")
    with pytest.raises(ConfigError, match="another order: column 0"):
        load_weights(path)


def test_conformal_threshold_and_sets() -> None:
    scores = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    assert conformal.threshold(scores, 0.8) == 0.8  # ceil(10 * 0.8) = 8th smallest
    assert conformal.threshold(scores, 0.95) == 1.0  # needs more calibration traces
    probs = [0.1, 0.6, 0.3]
    assert conformal.nonconformity(probs, [2]) == pytest.approx(0.9)
    assert conformal.prediction_set(probs, 0.5) == [1]
    assert sorted(conformal.prediction_set(probs, 0.85)) == [1, 2]
    assert softmax([0.0, 0.0]) == [0.5, 0.5]


def test_shipped_weights_load_and_list_their_training_traces() -> None:
    weights = load_weights()
    assert set(weights.groups) <= set(GROUPS)
    assert "Who&When" in weights.trained_on["dataset"]
    assert len(weights.fold_of) >= 180
    assert {"0.8", "0.9", "0.95"} <= set(weights.deploy.conformal)
    assert weights.choose(TRACE).source == "shipped:deploy"


def test_method_names_top_step_and_scores_every_step() -> None:
    method = create_method("shortlist", top_k=2)
    result = asyncio.run(run_method(method, TRACE, LLM(ScriptedBackend([]))))
    assert result.status == "ok" and result.usage.calls == 0
    assert result.step is not None and result.agent == TRACE.steps[result.step].agent
    scores = result.details["scores"]
    assert [s["step"] for s in scores] == [0, 1, 2, 3]
    assert max(scores, key=lambda s: s["score"])["step"] == result.step
    assert result.details["shortlist"][0] == result.step and len(result.details["shortlist"]) == 2
    assert result.step_set is not None and result.step in result.step_set
    assert result.confidence == pytest.approx(max(s["prob"] for s in scores), abs=1e-3)
    assert result.details["trained_on_this_trace"] is False
    assert result.details["shortlist_model"] == "shipped:deploy"
    assert result.step_set_source == "shipped:deploy (calibrated on sources never trained on)"


def test_method_flags_a_trace_its_weights_were_trained_on(tmp_path: Path) -> None:
    model = _model(("position",), {"position.is_first": 1.0})
    model.trained_on = {"dataset": "test", "hashes": [trace_hash(TRACE)]}
    path = tmp_path / "w.json"
    path.write_text(json.dumps(model.to_json()))
    method = create_method("shortlist", model_path=str(path))
    result = asyncio.run(run_method(method, TRACE, LLM(ScriptedBackend([]))))
    assert result.details["trained_on_this_trace"] is True
    assert result.step == 0


def test_the_former_coverage_option_is_gone() -> None:
    with pytest.raises(ConfigError, match="coverage"):
        create_method("shortlist", coverage=0.9)


def test_cross_validation_never_scores_a_trace_with_a_model_that_saw_it() -> None:
    pytest.importorskip("sklearn")
    from faultfinder.shortlist.train import assign_folds, build_table, cross_validate, fit

    traces = labelled_fixtures()
    groups = ("position", "agent", "errors")
    table = build_table(traces, groups)
    cv = cross_validate(table, groups, k=4)
    assert len(set(cv.folds)) == 4
    # Identical logs share a fold.
    twin = traces[0].model_copy(update={"id": "twin"})
    folds = assign_folds([*traces, twin], 4)
    assert folds[0] == folds[-1]
    # Each trace's probabilities are those of its own fold's model, which is the model
    # trained on the other folds only.
    for i in range(len(traces)):
        model = cv.models[cv.folds[i]]
        start, end = table.spans[i]
        assert cv.probs[i] == pytest.approx(softmax(model.logits(table.rows[start:end])))
    for fold, model in enumerate(cv.models):
        held_out = [j for j, f in enumerate(cv.folds) if f != fold]
        assert held_out and all(cv.folds[j] != fold for j in held_out)
        assert fit(table, groups, held_out).coef == pytest.approx(model.coef)


def test_cli_attribute_eval_and_report_with_reliability(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from faultfinder.cli import main

    def invoke(*args: object) -> object:
        return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)

    model = ["--cache", "none"]  # no --model: the shortlist needs none
    one = FIXTURES / "Algorithm-Generated" / "1.json"
    shown = invoke("attribute", one, "--method", "shortlist", *model, "--json")
    assert shown.exit_code == 0, shown.output  # type: ignore[attr-defined]
    data = json.loads(shown.output)  # type: ignore[attr-defined]
    assert len(data["details"]["scores"]) > 1 and data["usage"]["calls"] == 0

    out = tmp_path / "r.jsonl"
    ran = invoke("eval", FIXTURES, "--method", "shortlist", *model, "--no-progress", "--out", out)
    assert ran.exit_code == 0, ran.output  # type: ignore[attr-defined]
    plot = tmp_path / "rel.png"
    report = invoke("report", out, "--reliability-plot", plot)
    assert report.exit_code == 0, report.output  # type: ignore[attr-defined]
    assert "Reliability of stated confidence: shortlist" in report.output  # type: ignore[attr-defined]
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_attribute_runs_without_the_embedded_model(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from faultfinder import errors
    from faultfinder.cli import main
    from faultfinder.llm import local

    def missing() -> None:
        raise errors.ModelNotAvailableError("llama-cpp-python is not installed")

    monkeypatch.setattr(local, "_require_llama_cpp", missing)
    one = FIXTURES / "Hand-Crafted" / "1.json"
    args = ["attribute", str(one), "--method", "shortlist", "--cache", "none"]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "model none" in result.output and "step:" in result.output
    refused = CliRunner().invoke(main, [*args[:3], "all-at-once", "--cache", "none"])
    assert refused.exit_code != 0 and "not installed" in refused.output


class FakeLlama:
    """Context-free logits (token v has logit v), so each token's surprisal is fixed."""

    vocab = 10

    def __init__(self) -> None:
        self.chunks: list[list[int]] = []
        self.scores: object = None

    def reset(self) -> None:
        self.scores = None

    def eval(self, chunk: list[int]) -> None:
        import numpy as np

        self.chunks.append(list(chunk))
        self.scores = np.tile(np.arange(self.vocab, dtype=float), (len(chunk), 1))


@pytest.mark.parametrize(("window", "overlap"), [(4, 0), (4, 2), (5, 3), (64, 8)])
def test_windowed_surprisal_scores_every_token_once(window: int, overlap: int) -> None:
    import math

    from faultfinder.shortlist.surprisal import LlamaSurprisal

    scorer = LlamaSurprisal(window=window, overlap=overlap)
    fake = FakeLlama()
    scorer._llama = fake
    tokens = [1, 5, 2, 9, 0, 3, 3, 7, 4, 8, 6]
    lse = math.log(sum(math.exp(v) for v in range(fake.vocab)))
    got = scorer.token_surprisal(tokens)
    assert got == pytest.approx([lse - t for t in tokens[1:]])
    assert all(len(c) <= window for c in fake.chunks)
    if overlap and len(fake.chunks) > 1:
        assert fake.chunks[1][:overlap] == fake.chunks[0][-overlap:]


@pytest.mark.smoke
def test_embedded_model_surprisal_per_step() -> None:
    pytest.importorskip("llama_cpp")
    from faultfinder.shortlist.surprisal import LlamaSurprisal

    trace = make_trace([("A", "The cat sat on the mat."), ("B", "zq xv 9k!! ~~"), ("A", "ok")])
    values = LlamaSurprisal(max_step_tokens=16, window=24, overlap=8, n_threads=1).score(trace)
    assert len(values) == 3
    assert all(0 < mean <= top for mean, top in values)
    assert values[1][0] > values[0][0]  # gibberish is more surprising than plain English


def test_cause_and_structure_features_are_relative_to_the_trace() -> None:
    trace = make_trace(
        [
            ("Boss", "Plan: look the figure up, then compute."),
            ("Finder", "The population of Avalon is 51377 according to the book."),
            ("Maths", "Computing 51377 times 3 gives 154131."),
            ("Maths", "Error: the total 154131 failed the check against the reference."),
        ],
        step=1,
    )
    names = feature_names(["structure", "cause"])
    rows = trace_features(trace, ["structure", "cause"])
    col = {n: [r[names.index(n)] for r in rows] for n in names}
    # The first failure signal is step 3; step 1 introduced the number later steps reuse.
    assert col["cause.is_first_signal"] == [0.0, 0.0, 0.0, 1.0]
    assert col["cause.before_first_signal"] == [1.0, 1.0, 1.0, 0.0]
    assert col["cause.new_numbers_reused"][1] > 0 and col["cause.new_numbers_reused"][0] == 0
    assert col["cause.signal_rank"][3] == 1.0
    # Speaker evidence without names: renaming every agent changes nothing.
    renamed = trace.model_copy(
        update={"steps": [s.model_copy(update={"agent": f"x{s.agent}"}) for s in trace.steps]}
    )
    assert trace_features(renamed, ["structure", "cause"]) == rows
    # Appended bland steps leave the earlier steps' cause evidence as it was.
    noisy = make_trace(
        [(s.agent, s.content) for s in trace.steps] + [("Boss", "Noted.")] * 3, step=1
    )
    noisy_rows = trace_features(noisy, ["cause"])
    cause_names = feature_names(["cause"])
    keep = [cause_names.index(f"cause.{n}") for n in ("is_first_signal", "source_of_first_signal")]
    assert [[r[k] for k in keep] for r in noisy_rows[:4]] == [
        [r[names.index(cause_names[k])] for k in keep] for r in rows
    ]


def test_source_weights_give_other_sources_as_much_again_in_equal_shares() -> None:
    from faultfinder.shortlist.train import source_weights

    def of(subset: str) -> Trace:
        return TRACE.model_copy(
            update={"source": TRACE.source.model_copy(update={"subset": subset})}
        )

    anchors = [of("Algorithm-Generated")] * 3 + [of("Hand-Crafted")]
    others = [of("generated:a")] * 2 + [of("generated:b")] * 6
    weights = source_weights([*anchors, *others])
    assert weights[:4] == [1.0] * 4
    # Four anchor traces: each other source weighs 2 in total, however many traces it has.
    assert weights[4:6] == [1.0, 1.0]
    assert weights[6:] == pytest.approx([2 / 6] * 6)
    assert sum(weights[4:]) == pytest.approx(sum(weights[:4]))
    # A user's own traces (no anchor source), or anchors alone, train as they are.
    assert source_weights(others) == [1.0] * 8
    assert source_weights(anchors) == [1.0] * 4


def test_a_trace_weighing_two_trains_as_two_copies_of_it() -> None:
    pytest.importorskip("scipy")
    import numpy as np

    from faultfinder.shortlist.train import _listwise

    rng = np.random.default_rng(0)
    z = rng.normal(size=(9, 3))
    gold = np.zeros(9, dtype=bool)
    gold[[1, 4, 7]] = True
    sizes = [3, 3, 3]
    weighted = _listwise(z, gold, sizes, np.repeat([2.0, 1.0, 1.0], sizes), 1.0)
    copied = np.vstack([z[:3], z])
    copied_gold = np.concatenate([gold[:3], gold])
    twice = _listwise(copied, copied_gold, [3, *sizes], np.ones(12), 1.0)
    assert weighted == pytest.approx(twice, abs=1e-4)
    unweighted = _listwise(z, gold, sizes, np.ones(9), 1.0)
    assert weighted != pytest.approx(unweighted, abs=1e-4)


def test_fitting_on_no_training_trace_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("scipy")
    pytest.importorskip("sklearn")
    from faultfinder.shortlist.train import bagged, build_table, fit

    traces = labelled_fixtures()
    sources = {t.source.subset for t in traces}
    assert sources == {"Algorithm-Generated", "Hand-Crafted"}
    table = build_table(traces, ["position", "errors"])
    for call in (
        lambda: fit(table, ["position", "errors"], []),
        lambda: bagged(table, ["position", "errors"], [], []),
    ):
        with pytest.raises(ConfigError, match="the training set is empty") as refused:
            call()
        assert f"{len(traces)} trace(s) given in all" in str(refused.value)
    # Reached from bench/transfer.py with two sources, one of them the only trained one:
    # left out in turn, it leaves nothing to train on.
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    import transfer  # type: ignore[import-not-found]

    with pytest.raises(ConfigError, match="the training set is empty"):
        transfer.leave_one_source_out(traces, ("position", "errors"), [], ["Hand-Crafted"], 5)
