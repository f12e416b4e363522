"""`faultfinder calibrate`: step sets calibrated on labelled traces of one's own framework,
used by `attribute` and `eval` through --shortlist-weights."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.errors import ConfigError
from faultfinder.eval.rows import read_rows
from faultfinder.shortlist import conformal
from faultfinder.shortlist.calibrate import MIN_TRACES, calibrate
from faultfinder.shortlist.model import ShortlistModel, trace_hash
from faultfinder.shortlist.rank import rank_trace
from faultfinder.shortlist.sets import withdrawn_because
from faultfinder.shortlist.weights import load_weights, shipped_weights
from faultfinder.traces.loader import load_trace, load_traces
from faultfinder.traces.schema import GoldLabel, Trace

FIXTURES = Path(__file__).parent / "fixtures" / "oracle"
AG = FIXTURES / "Algorithm-Generated"


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def without_source(trace: Trace) -> Trace:
    """The trace as a user's own run looks: it names no source."""
    return trace.model_copy(update={"source": trace.source.model_copy(update={"subset": None})})


def edited(trace: Trace) -> Trace:
    """Another run of the same shape: a space after each step's text."""
    steps = [s.model_copy(update={"content": f"{s.content} "}) for s in trace.steps]
    return trace.model_copy(update={"id": f"{trace.id}-again", "steps": steps})


def shortlist_with(trace: Trace, weights: Path, tmp_path: Path) -> dict[str, Any]:
    """`attribute --method shortlist --shortlist-weights WEIGHTS --json` on ``trace``."""
    path = tmp_path / "run.json"
    path.write_text(trace.model_dump_json())
    code, output = cli(
        "attribute", str(path), "--method", "shortlist", "--shortlist-weights", str(weights),
        "--no-save", "--json",
    )  # fmt: skip
    assert code == 0, output
    result: dict[str, Any] = json.loads(output)
    return result


def test_calibrate_writes_the_conformal_thresholds_of_unseen_scores(tmp_path: Path) -> None:
    out = tmp_path / "mine.json"
    code, output = cli("calibrate", str(AG), "--source", "my-team", "--out", str(out))
    assert code == 0, output
    traces = load_traces(AG)
    assert f"calibrated on {len(traces)} labelled trace(s) of my-team" in output
    assert f"--shortlist-weights {out}" in output
    written = load_weights(out)
    assert written.default_source == "my-team"
    record = written.trained_on["step_sets_calibrated_on"]
    assert (record["source"], record["traces"]) == ("my-team", len(traces))
    # Recomputed here: each trace's nonconformity under the shipped deploy model, which
    # never saw these traces, and the split-conformal quantile per level.
    deploy = shipped_weights().deploy
    scores = []
    for t in traces:
        assert t.label is not None
        scores.append(
            conformal.nonconformity(rank_trace(t, deploy).probs, t.label.acceptable_steps)
        )
    for level in conformal.LEVELS:
        key = conformal.source_key("my-team", level)
        assert written.deploy.conformal[key] == round(conformal.threshold(scores, level), 6)
        assert all(key in m.conformal for m in written.folds)
    # The ranker itself is unchanged.
    assert written.deploy.coef == deploy.coef


def test_an_unlabelled_trace_is_counted_among_the_skipped(tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    shutil.copytree(AG, folder)
    log = json.loads((AG / "1.json").read_text())
    for key in ("mistake_agent", "mistake_step", "mistake_reason"):
        del log[key]
    (folder / "999.json").write_text(json.dumps(log))
    code, output = cli(
        "calibrate", str(folder), "--source", "my-team", "--out", str(tmp_path / "w.json")
    )
    assert code == 0, output
    assert f"calibrated on {len(load_traces(AG))} labelled trace(s) of my-team" in output
    assert "skipped 1: 1 × no labelled decisive step (e.g. " in output


def test_attribute_uses_the_calibrated_file_for_a_trace_that_names_no_source(
    tmp_path: Path,
) -> None:
    out = tmp_path / "mine.json"
    assert cli("calibrate", str(AG), "--source", "my-team", "--out", str(out))[0] == 0
    mine = without_source(load_trace(AG / "3.json"))
    result = shortlist_with(mine, out, tmp_path)
    assert result["details"]["shortlist_model"] == "mine.json:deploy"
    assert result["step_set_source"] == "mine.json:deploy (calibrated on my-team)"
    weights = load_weights(out)
    tau = weights.deploy.conformal[conformal.source_key("my-team", 0.9)]
    expected = conformal.prediction_set(rank_trace(mine, weights.deploy).probs, tau)
    assert result["step_set"] == sorted({*expected, result["step"]})
    # The trace calibrated the file, so its own set claims nothing (its score set the
    # thresholds, and it is in the shift reference it is compared with).
    assert result["step_set_calibrated"] is False
    assert "step sets were calibrated on it" in withdrawn_because(
        result["step_set_shift"], result["step_set_shift_limit"]
    )
    # Without the file: the shipped thresholds for a source never trained on.
    run = str(tmp_path / "run.json")  # written by shortlist_with
    code, output = cli("attribute", run, "--method", "shortlist", "--no-save", "--json")
    assert code == 0 and "sources never trained on" in json.loads(output)["step_set_source"]
    # As text, such a set comes with the hint to calibrate; with the file, without it.
    code, output = cli("attribute", run, "--method", "shortlist", "--no-save")
    assert code == 0 and "`faultfinder calibrate` on a few dozen labelled runs" in output
    with_file = ["--shortlist-weights", str(out)]
    code, output = cli("attribute", run, "--method", "shortlist", "--no-save", *with_file)
    assert code == 0 and "faultfinder calibrate" not in output


def test_a_new_run_like_the_calibration_traces_claims_the_level(tmp_path: Path) -> None:
    out = tmp_path / "mine.json"
    assert cli("calibrate", str(AG), "--source", "my-team", "--out", str(out))[0] == 0
    weights = load_weights(out)
    record = weights.trained_on["step_sets_calibrated_on"]
    assert record["hashes"] == sorted(trace_hash(t) for t in load_traces(AG))
    # A run the file never saw, shaped like them (a space after each step): in
    # distribution, so its level is claimed; the calibration run it was edited from is not.
    trace = without_source(load_trace(AG / "3.json"))
    fresh = edited(trace)
    assert not weights.calibrated_on(fresh) and weights.calibrated_on(trace)
    result = shortlist_with(fresh, out, tmp_path)
    assert result["step_set_source"] == "mine.json:deploy (calibrated on my-team)"
    assert result["step_set_calibrated"] is True


def test_eval_on_the_calibration_traces_claims_no_coverage(tmp_path: Path) -> None:
    # Calibrating on a folder and evaluating the same folder used to report "coverage
    # where claimed" on every case: in-sample, at least the level by construction.
    out = tmp_path / "mine.json"
    assert cli("calibrate", str(AG), "--source", "my-team", "--out", str(out))[0] == 0
    rows_path = tmp_path / "rows.jsonl"
    code, output = cli(
        "eval", str(AG), "--method", "shortlist", "--shortlist-weights", str(out),
        "--out", str(rows_path), "--no-progress",
    )  # fmt: skip
    assert code == 0, output
    rows = read_rows(rows_path)
    assert rows and all(r.step_set_calibrated is False for r in rows)
    code, output = cli("report", str(rows_path))
    assert code == 0 and f"0/{len(rows)}" in output
    assert "step sets were calibrated on it" in output
    # A recalibration on other traces keeps the earlier ones' hashes.
    others = tmp_path / "others"
    others.mkdir()
    for n, trace in enumerate(load_traces(AG)):
        (others / f"{n}.json").write_text(edited(trace).model_dump_json())
    again = tmp_path / "again.json"
    code, output = cli(
        "calibrate", str(others), "--source", "other", "--weights", str(out),
        "--out", str(again),
    )  # fmt: skip
    assert code == 0, output
    both = load_weights(again)
    assert all(both.calibrated_on(t) for t in [*load_traces(AG), *load_traces(others)])


def test_traces_that_name_another_source_are_warned_about(tmp_path: Path) -> None:
    # These traces name Algorithm-Generated: their sets keep that source's thresholds,
    # so a file calibrated on them "of my-team" used to leave them (and their kind)
    # uncalibrated without a word.
    result = CliRunner().invoke(
        main, ["calibrate", str(AG), "--source", "my-team", "--out", str(tmp_path / "w.json")]
    )
    assert result.exit_code == 0, result.output
    n = len(load_traces(AG))
    warning = f"warning: {n} of these traces name a source of their own ({n} × Algorithm-"
    assert warning in result.stderr and "not my-team's" in result.stderr
    assert "their own source's thresholds" in result.stderr
    # Traces of the user's own framework name no source: no warning.
    mine = tmp_path / "mine"
    mine.mkdir()
    for t in load_traces(AG):
        (mine / f"{t.id.replace('/', '-')}.json").write_text(without_source(t).model_dump_json())
    args = ["calibrate", str(mine), "--source", "my-team", "--out", str(tmp_path / "m.json")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0 and "warning" not in result.stderr
    # A source the shipped file has no thresholds of: its sets stay those of a source
    # never trained on, the very thing calibrating was meant to replace.
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    for t in load_traces(AG):
        named = t.model_copy(update={"source": t.source.model_copy(update={"subset": "x"})})
        (theirs / f"{t.id.replace('/', '-')}.json").write_text(named.model_dump_json())
    args = ["calibrate", str(theirs), "--source", "my-team", "--out", str(tmp_path / "x.json")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0 and f"({n} × x)" in result.stderr
    assert "keep the thresholds for a source never trained on" in result.stderr
    # --train writes a file of one source: the others get its pooled thresholds.
    out = tmp_path / "t.json"
    args = ["calibrate", str(FIXTURES), "--source", "my-team", "--train", "--out", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0 and "Hand-Crafted" in result.stderr
    assert "their own source's thresholds or the file's pooled thresholds" in result.stderr


def test_eval_rows_carry_the_calibrated_sets(tmp_path: Path) -> None:
    out = tmp_path / "mine.json"
    assert cli("calibrate", str(AG), "--source", "my-team", "--out", str(out))[0] == 0
    rows_path = tmp_path / "rows.jsonl"
    code, output = cli(
        "eval",
        str(FIXTURES / "Hand-Crafted"),
        "--method",
        "shortlist,baseline:first-speaker",
        "--shortlist-weights",
        str(out),
        "--out",
        str(rows_path),
        "--no-progress",
    )
    assert code == 0, output
    rows = read_rows(rows_path)
    assert rows and all(str(r.step_set_source).startswith("mine.json:") for r in rows)
    shortlist_rows = [r for r in rows if r.method == "shortlist"]
    assert all(r.details["shortlist_model"].startswith("mine.json:") for r in shortlist_rows)
    # These traces name their own subset, which the file keeps the shipped thresholds
    # of; they are unlike the calibration traces, so no level is claimed for them.
    assert all(r.step_set_calibrated is False for r in rows)


def test_too_few_traces_an_existing_file_and_no_source_are_clear_errors(
    tmp_path: Path,
) -> None:
    few = tmp_path / "few"
    few.mkdir()
    for name in sorted(p.name for p in AG.glob("*.json"))[: MIN_TRACES - 1]:
        shutil.copy(AG / name, few / name)
    code, output = cli("calibrate", str(few), "--source", "x", "--out", str(tmp_path / "w.json"))
    assert code == 1 and f"needs at least {MIN_TRACES}" in output
    assert not (tmp_path / "w.json").exists()
    existing = tmp_path / "exists.json"
    existing.write_text("{}")
    code, output = cli("calibrate", str(AG), "--source", "x", "--out", str(existing))
    assert code == 1 and "--force" in output and existing.read_text() == "{}"
    # Mixed sources and no --source: say what to pass.
    code, output = cli("calibrate", str(FIXTURES), "--out", str(tmp_path / "w.json"))
    assert code == 2 and "--source NAME" in output
    # One named source: it is the default.
    code, output = cli("calibrate", str(AG), "--out", str(tmp_path / "w.json"))
    assert code == 0 and "of Algorithm-Generated" in output


def test_training_traces_never_calibrate() -> None:
    traces = load_traces(AG)
    shipped = shipped_weights()
    # As if the weights had trained on the first trace (its fold's model would rank it).
    weights = replace(shipped, fold_of={trace_hash(traces[0]): 0})
    calibrated, report = calibrate(weights, traces, "my-team")
    assert traces[0].id in report.skipped and "trained on it" in report.skipped[traces[0].id]
    assert len(report.used) == len(traces) - 1
    assert calibrated.default_source == "my-team"
    with pytest.raises(ConfigError, match="name the traces' source"):
        calibrate(shipped, traces, conformal.UNSEEN)


def test_train_fits_the_ranker_on_the_users_traces_alone(tmp_path: Path) -> None:
    out = tmp_path / "trained.json"
    code, output = cli(
        "calibrate", str(FIXTURES), "--source", "my-team", "--train", "--out", str(out)
    )
    assert code == 0, output
    assert "trained and calibrated on" in output
    weights = load_weights(out)
    assert weights.default_source == "my-team"
    assert weights.trained_on["sources"] == {"my-team": len(weights.fold_of)}
    assert weights.deploy.coef != shipped_weights().deploy.coef
    # A training trace is answered by the held-out model of its fold; a new run that names
    # no source by the deploy model, with the thresholds of this source.
    trace = load_trace(AG / "3.json")
    assert weights.choose(trace).source.startswith("trained.json:fold-")
    steps = [s.model_copy(update={"content": f"{s.content} (again)"}) for s in trace.steps]
    fresh = without_source(trace).model_copy(
        update={"task": "another task", "id": "new", "steps": steps}
    )
    result = shortlist_with(fresh, out, tmp_path)
    assert result["step_set_source"].endswith("(calibrated on my-team)")


def test_train_on_traces_of_one_length_writes_a_usable_file(tmp_path: Path) -> None:
    # Every run of a small team has the same three steps: the column of the trace's length
    # is constant up to rounding noise, which used to be stored as a scale of 0.
    runs = tmp_path / "runs"
    runs.mkdir()
    base = load_trace(AG / "3.json")
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]
    for n in range(24):
        steps = [
            s.model_copy(update={"content": f"{words[n % 6]} {n} {s.content}"})
            for s in base.steps[:3]
        ]
        label = GoldLabel(step=n % 3, agent=steps[n % 3].agent)
        trace = without_source(base).model_copy(
            update={"id": f"run-{n}", "task": f"task {n}", "steps": steps, "label": label}
        )
        (runs / f"run-{n}.json").write_text(trace.model_dump_json())
    out = tmp_path / "team.json"
    code, output = cli("calibrate", str(runs), "--source", "team", "--train", "--out", str(out))
    assert code == 0, output
    assert all(s > 0 for s in load_weights(out).deploy.scale)
    fresh = load_trace(runs / "run-5.json").model_copy(update={"id": "new", "task": "new"})
    assert shortlist_with(fresh, out, tmp_path)["status"] == "ok"


def test_a_weights_file_with_a_zero_scale_is_refused() -> None:
    model = shipped_weights().deploy.to_json()
    model["scale"][0] = 0.0
    with pytest.raises(ConfigError, match="positive number"):
        ShortlistModel.from_json(model)


def test_train_needs_enough_traces(tmp_path: Path) -> None:
    code, output = cli(
        "calibrate", str(AG), "--source", "x", "--train", "--out", str(tmp_path / "w.json")
    )
    assert code == 1 and "needs at least 20" in output


def test_the_ui_runs_methods_with_the_calibrated_file(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from faultfinder.llm import LLM, ScriptedBackend
    from faultfinder.ui.app import create_app
    from faultfinder.ui.jobs import JobRunner
    from faultfinder.ui.scan import build_catalog

    out = tmp_path / "mine.json"
    assert cli("calibrate", str(AG), "--source", "my-team", "--out", str(out))[0] == 0
    run = tmp_path / "traces" / "run.json"
    run.parent.mkdir()
    run.write_text(without_source(load_trace(AG / "3.json")).model_dump_json())
    results = tmp_path / "results.jsonl"
    catalog = build_catalog([run.parent], results_file=results)
    runner = JobRunner(catalog, "shortlist", lambda: LLM(ScriptedBackend([])), results, str(out))
    with TestClient(create_app(catalog, runner=runner), base_url="http://127.0.0.1") as client:
        key = next(iter(catalog.traces))
        token = client.get(f"/trace/{key}").text.split('name="ff-token" content="')[1]
        started = client.post(
            f"/trace/{key}/attribute", headers={"x-faultfinder-token": token.split('"')[0]}
        )
        job = started.json()["job"]
        for _ in range(200):
            if client.get(f"/jobs/{job}").json()["state"] in ("done", "failed"):
                break
            time.sleep(0.02)
    saved = json.loads(results.read_text().splitlines()[0])
    assert saved["details"]["shortlist_model"] == "mine.json:deploy"
    assert saved["step_set_source"] == "mine.json:deploy (calibrated on my-team)"
