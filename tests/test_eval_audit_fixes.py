"""Fixes from an audit of `eval`, `report` and `calibrate`: sync function models run off
the event loop, floors say `model: none` beside model methods, error rows carry their
repeat's config, the report's sections keep the main table's groups and format, `cases`
counts what the accuracies are over, and `calibrate` says why it skipped traces."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.errors import ConfigError
from faultfinder.eval import reliability, step_sets
from faultfinder.eval.cases import Case, failed_row, plan_cases, plan_methods
from faultfinder.eval.datasets import DatasetOptions, load_dataset
from faultfinder.eval.metrics import ScoredRow, aggregate, score
from faultfinder.eval.report import main_cells, records, render, summarise
from faultfinder.eval.rows import read_rows
from faultfinder.llm import ChatRequest
from faultfinder.shortlist.calibrate import calibrate
from faultfinder.shortlist.model import trace_hash
from faultfinder.shortlist.weights import shipped_weights
from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import GoldLabel

HERE = Path(__file__).parent
FIXTURE = HERE / "fixtures" / "eval" / "traces.jsonl"
TINY = HERE / "fixtures" / "core" / "tiny_trace.json"
AG = HERE / "fixtures" / "oracle" / "Algorithm-Generated"
MODULE = Path(__file__).stem

_lock = threading.Lock()
_active = 0
seen: dict[str, list[int]] = {"overlap": [], "rows": []}


def _answer(request: ChatRequest) -> str:
    """Blames the second step the prompt lists (or step 0)."""
    text = "\n".join(str(m.get("content", "")) for m in request.messages)
    found = re.findall(r"Step (\d+) - ([^\n:]+)", text)
    step, agent = found[min(1, len(found) - 1)] if found else ("0", "X")
    return f"Agent Name: {agent.strip()}\nStep Number: {step}\nReason for Mistake: because"


def judge(request: ChatRequest) -> str:
    """A quick sync function model."""
    return _answer(request)


def slow_judge(request: ChatRequest) -> str:
    """A sync function model that sleeps ``FF_TEST_SLEEP`` seconds (blocking), noting how
    many calls are in progress and how many rows ``FF_TEST_OUT`` holds when it starts."""
    global _active
    out = os.environ.get("FF_TEST_OUT")
    if out:
        rows = Path(out).read_text().count("\n") if Path(out).exists() else 0
        seen["rows"].append(rows)
    with _lock:
        _active += 1
        seen["overlap"].append(_active)
    try:
        time.sleep(float(os.environ.get("FF_TEST_SLEEP", "0.2")))
    finally:
        with _lock:
            _active -= 1
    return _answer(request)


def broken_on_alpha_2(request: ChatRequest) -> str:
    """A function model with a bug on one trace."""
    if "alpha/2." in "\n".join(str(m.get("content", "")) for m in request.messages):
        raise KeyError("boom")
    return _answer(request)


def invoke(*args: object) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def model(name: str) -> list[str]:
    return ["--model", f"function:{MODULE}:{name}", "--cache", "none", "--no-progress"]


# --- 1. sync function models run off the event loop ------------------------------------


def test_a_sync_function_model_lets_cases_overlap_and_rows_land_as_cases_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "r.jsonl"
    monkeypatch.setenv("FF_TEST_OUT", str(out))
    monkeypatch.setenv("FF_TEST_SLEEP", "0.2")
    seen["overlap"].clear()
    seen["rows"].clear()
    code, _, err = invoke(
        "eval", FIXTURE, "--method", "all-at-once", *model("slow_judge"), "--concurrency", "2",
        "--out", out,
    )  # fmt: skip
    assert code == 0, err
    assert len(read_rows(out)) == 5
    # Two cases at a time: the blocking calls ran side by side, not one after another ...
    assert max(seen["overlap"]) == 2
    # ... and the finished cases' rows were in the file before the last case started.
    assert max(seen["rows"]) >= 2


def test_timeout_cuts_off_a_slow_sync_function_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FF_TEST_OUT", raising=False)
    monkeypatch.setenv("FF_TEST_SLEEP", "2")
    started = time.perf_counter()
    code, out, err = invoke(
        "attribute", TINY, *model("slow_judge"), "--timeout", "0.2", "--no-save", "--json"
    )
    assert time.perf_counter() - started < 1.5
    assert code == 4, out + err
    assert "no complete reply within 0.2 s" in json.loads(out)["error"]


def test_an_async_function_model_is_still_awaited_on_the_loop() -> None:
    import asyncio

    from faultfinder.llm.doubles import FunctionBackend

    threads: list[str] = []

    async def reply(request: ChatRequest) -> str:
        threads.append(threading.current_thread().name)
        return "ok"

    def sync_reply(request: ChatRequest) -> str:
        threads.append(threading.current_thread().name)
        return "ok"

    request = ChatRequest(messages=[{"role": "user", "content": "hi"}])

    async def both() -> None:
        assert (await FunctionBackend(reply).complete(request)).text == "ok"
        assert (await FunctionBackend(sync_reply).complete(request)).text == "ok"

    asyncio.run(both())
    assert threads[0] == threading.main_thread().name
    assert threads[1] != threading.main_thread().name


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
def test_ctrl_c_stops_an_eval_of_a_slow_sync_function_model_and_keeps_its_rows(
    tmp_path: Path,
) -> None:
    out = tmp_path / "r.jsonl"
    env = {**os.environ, "PYTHONPATH": str(HERE), "FF_TEST_SLEEP": "0.3"}
    env.pop("FF_TEST_OUT", None)
    args = [
        sys.executable, "-m", "faultfinder", "eval", str(FIXTURE), "--method", "all-at-once",
        *model("slow_judge"), "--runs", "20", "--temperature", "0.5", "--concurrency", "2",
        "--out", str(out),
    ]  # fmt: skip
    child = subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (out.exists() and out.read_text().count("\n")):
            time.sleep(0.05)
        assert out.exists() and out.read_text().count("\n"), "no row while the eval ran"
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode != 0 and "Interrupted" in err
    assert 0 < len(read_rows(out)) < 100


# --- 3. floors say model none beside model methods ---------------------------------------


def test_floors_run_beside_a_model_method_say_model_none(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    code, _, err = invoke(
        "eval", FIXTURE, "--method", "all-at-once,random", *model("judge"), "--out", out
    )
    assert code == 0, err
    rows = read_rows(out)
    floors = [r for r in rows if r.method == "random"]
    judged = [r for r in rows if r.method == "all-at-once"]
    assert floors and all(r.model == "none" and "|none|" in r.key for r in floors)
    assert judged and all(r.model == f"function:{MODULE}:judge" for r in judged)
    # The same rows as a floor run alone writes.
    alone = tmp_path / "alone.jsonl"
    assert invoke("eval", FIXTURE, "--method", "random", *model("judge"), "--out", alone)[0] == 0
    assert {r.key for r in read_rows(alone)} == {r.key for r in floors}

    # A file written before (floors keyed with the judge's name) resumes: the floors run
    # again under their new keys, nothing else does.
    legacy = tmp_path / "legacy.jsonl"
    with legacy.open("w") as handle:
        for row in rows:
            if row.method == "random":
                row = row.model_copy(
                    update={"key": row.key.replace("|none|", f"|{judged[0].model}|"),
                            "model": judged[0].model}
                )  # fmt: skip
            handle.write(row.model_dump_json() + "\n")
    code, _, err = invoke(
        "eval", FIXTURE, "--method", "all-at-once,random", *model("judge"), "--out", legacy,
        "--resume",
    )  # fmt: skip
    assert code == 0, err
    assert f"ran {len(floors)} case(s), {len(judged)} already in" in err


def test_plan_cases_keys_a_method_that_calls_no_model_with_none() -> None:
    traces = load_dataset(FIXTURE, DatasetOptions())[:1]
    plans = plan_methods(["all-at-once", "baseline:position", "shortlist"])
    keys = [c.key for c in plan_cases(traces, plans, 1, "function:x")]
    assert [k.split("|")[3] for k in keys] == ["function:x", "none", "none"]


# --- 4. error rows carry the config of their repeat --------------------------------------


def test_error_rows_carry_the_config_their_repeat_ran_with(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    code, _, err = invoke(
        "eval", FIXTURE, "--method", "all-at-once", *model("broken_on_alpha_2"), "--runs", "2",
        "--temperature", "0.5", "--out", out,
    )  # fmt: skip
    assert code == 4, err  # some cases errored
    rows = read_rows(out)
    errors = [r for r in rows if r.status == "error"]
    assert len(errors) == 2
    for row in rows:
        ok_seed = next(
            r.config.get("seed") for r in rows if r.run == row.run and r.status != "error"
        )
        assert row.config.get("seed") == ok_seed
    assert {r.run: r.config.get("seed") for r in errors}[1] == 1


def test_failed_row_of_a_floor_says_model_none() -> None:
    traces = load_dataset(FIXTURE, DatasetOptions())[:1]
    (plan,) = plan_methods(["random"])
    case = Case(traces[0], plan, 3, "k")
    row = failed_row(case, "function:x", "lost")
    assert row.model == "none"
    assert row.config == plan.build(3).config.model_dump(mode="json")


# --- 2 and 8. step sets and reliability keep the main table's groups and format ----------


def test_report_sections_keep_models_apart_and_follow_the_format(tmp_path: Path) -> None:
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    for path, name in ((one, "judge"), (two, "slow_judge")):
        code, _, err = invoke(
            "eval", FIXTURE, "--method", "all-at-once,shortlist", *model(name), "--out", path
        )
        assert code == 0, err
    code, text, err = invoke("report", one, two, "--no-tolerances")
    assert code == 0, err
    section = text.split("Step sets:", 1)[1].split("\n\n", 1)[0]
    lines = [line.split() for line in section.splitlines()[3:]]
    # One line per main-table group: the two models of all-at-once apart, each over the
    # subset's own cases (Alpha has 3), and a model column to tell them apart.
    alpha = [line for line in lines if line[:2] == ["Alpha", "all-at-once"]]
    assert sorted(line[2] for line in alpha) == [
        f"function:{MODULE}:judge",
        f"function:{MODULE}:slow_judge",
    ]
    assert all(line[4] == "3" for line in alpha)
    # The reliability section is a text table in a text report, not a Markdown one.
    reliable = text.split("Reliability of stated confidence:", 1)[1]
    assert "|" not in reliable.split("Prompt tokens")[0]
    assert "confidence  cases" in reliable
    code, md, _ = invoke("report", one, two, "--format", "markdown")
    assert code == 0 and "| confidence | cases |" in md
    assert f"| Alpha | all-at-once | function:{MODULE}:judge | 90% | 3 |" in md


def test_step_set_coverage_figures_follow_the_main_table_groups(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    code, _, err = invoke("eval", FIXTURE, "--method", "all-at-once", *model("judge"), "--out", out)
    assert code == 0, err
    rows = read_rows(out)
    other = [r.model_copy(update={"model": "function:other", "key": r.key + "x"}) for r in rows]
    figures = step_sets.coverage([*rows, *other])
    groups = {g.key for g in summarise([*rows, *other])}
    assert {f.group for f in figures} <= groups
    assert len(figures) == 4  # two subsets × two models
    assert reliability.render_rows(rows, "text") == ""  # all-at-once states no confidence


# --- 7. cases counts the cases the accuracies are over -----------------------------------


def test_cases_counts_the_scored_cases_and_says_the_unlabelled_apart() -> None:
    gold = GoldLabel(agent="Coder", step=1)
    items = [
        ScoredRow(case="a", run=0, status="ok", score=score("Coder", 1, gold)),
        ScoredRow(case="b", run=0, status="ok", score=score("Planner", 0, gold)),
        ScoredRow(case="c", run=0, status="ok", score=None),
    ]
    m = aggregate(items)
    assert (m.cases, m.scored_cases, m.unlabelled_cases) == (3, 2, 1)
    assert m.agent.ci is not None


def test_report_cases_column_matches_the_accuracy_denominator(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    code, _, err = invoke(
        "eval", FIXTURE, "--method", "all-at-once", *model("judge"), "--include-unlabelled",
        "--out", out,
    )  # fmt: skip
    assert code == 0, err
    summaries = summarise(read_rows(out))
    beta = next(g for g in summaries if g.key.subset == "Beta")
    assert main_cells(beta)[4] == "2 (+1 unlabelled)"
    record = next(r for r in records(summaries) if r["subset"] == "Beta")
    assert (record["cases"], record["scored_cases"], record["unlabelled_cases"]) == (3, 2, 1)
    text = render(summaries)
    assert "`cases` counts the labelled cases" in text
    alpha = next(g for g in summaries if g.key.subset == "Alpha")
    assert main_cells(alpha)[4] == "3"


# --- 5. calibrate says why it skipped traces ---------------------------------------------


def test_calibrate_on_training_traces_says_why_they_were_skipped() -> None:
    traces = load_traces(AG)
    weights = replace(shipped_weights(), fold_of={trace_hash(t): 0 for t in traces})
    with pytest.raises(ConfigError) as raised:
        calibrate(weights, traces, "my-team")
    message = str(raised.value)
    assert f"0 usable labelled trace(s) of {len(traces)}" in message
    assert f"Skipped {len(traces)}: {len(traces)} × the weights trained on it (e.g. " in message
    assert "--train" in message


def test_report_says_when_an_unfinished_last_row_is_left_out(tmp_path: Path) -> None:
    """A results file cut mid-row (a run killed while writing): the report still reads the
    complete rows, and says that the last one was left out instead of dropping it silently."""
    from faultfinder.errors import FaultfinderWarning
    from faultfinder.eval.rows import read_rows

    whole = tmp_path / "whole.jsonl"
    result = CliRunner().invoke(
        main,
        ["eval", str(FIXTURE), "--method", "random,baseline:first-speaker",
         "--out", str(whole), "--no-progress"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    cut = tmp_path / "cut.jsonl"
    data = whole.read_bytes()
    cut.write_bytes(data[: len(data) - 40])
    with pytest.warns(FaultfinderWarning, match="last line is unfinished"):
        rows = read_rows(cut)
    assert len(rows) == len(whole.read_text().splitlines()) - 1
    shown = CliRunner().invoke(main, ["report", str(cut)])
    assert shown.exit_code == 0 and "last line is unfinished" in shown.output
