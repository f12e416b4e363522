"""Small sharp edges: concurrent evals on one file, a corrupt cache, '$' in plot labels,
generic-import ids from a column."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner
from filelock import FileLock

from faultfinder.cli import main
from faultfinder.errors import FaultfinderWarning, TraceFormatError
from faultfinder.eval.datasets import load_dataset
from faultfinder.eval.report import plot_tolerance, summarise
from faultfinder.eval.rows import read_rows
from faultfinder.eval.runner import EvalOptions, lock_path, run_eval
from faultfinder.llm import LLM, ChatRequest, FunctionBackend
from faultfinder.llm.base import Completion
from faultfinder.llm.cache import ResponseCache, cache_key
from faultfinder.traces.loader import load_traces
from test_eval_runner import FIXTURE, gold_answers, judge


def test_two_evals_appending_to_one_file_do_not_duplicate_rows(tmp_path: Path) -> None:
    traces = load_dataset(FIXTURE)
    out = tmp_path / "results.jsonl"
    answer = gold_answers(traces)

    async def slow(request: ChatRequest) -> str:
        await asyncio.sleep(0.05)  # both evals are surely running at the same time
        return answer(request)

    def one_eval() -> None:
        llm = LLM(FunctionBackend(slow), concurrency=1)
        options = EvalOptions(resume=True, progress=False, concurrency=1)
        asyncio.run(run_eval(traces, [judge()], llm, out, options))

    threads = [threading.Thread(target=one_eval) for _ in range(2)]
    for t in threads:
        t.start()
        time.sleep(0.02)
    for t in threads:
        t.join(timeout=60)
    keys = [row.key for row in read_rows(out)]
    assert len(keys) == len(traces)
    assert len(set(keys)) == len(keys)
    # Both released the lock (also the one that waited for it in a worker thread).
    lock = FileLock(lock_path(out))
    lock.acquire(timeout=1)
    lock.release()


def _fill_cache(path: Path) -> None:
    cache = ResponseCache(path)
    request = ChatRequest(messages=[{"role": "user", "content": "q"}])
    cache.put(cache_key({"b": 1}, request), request, Completion(text="a"))
    cache.close()


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupt_cache_is_set_aside_and_rebuilt(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "cache.sqlite"
    _fill_cache(path)
    data = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"this is not a database" * 100)
    else:
        path.write_bytes(data[:100] + b"\x00" * 50 + data[150 : len(data) // 2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = ResponseCache(path)
    assert any(issubclass(w.category, FaultfinderWarning) for w in caught)
    assert "set aside" in str(caught[0].message) or "moved it" in str(caught[0].message)
    assert len(cache) == 0  # rebuilt, usable
    request = ChatRequest(messages=[{"role": "user", "content": "q"}])
    cache.put("k", request, Completion(text="b"))
    assert cache.get("k") is not None
    cache.close()
    aside = list(tmp_path.glob("cache.sqlite.corrupt-*"))
    assert len(aside) == 1


def test_cache_entry_that_does_not_read_back_is_a_miss(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    cache = ResponseCache(path)
    db = sqlite3.connect(path)
    db.execute("INSERT INTO responses (key, request, completion) VALUES ('k', '{}', 'nope')")
    db.commit()
    db.close()
    assert cache.get("k") is None


def test_plot_survives_dollar_signs_in_method_names(tmp_path: Path) -> None:
    traces = load_dataset(FIXTURE)
    out = tmp_path / "r.jsonl"
    llm = LLM(FunctionBackend(gold_answers(traces)))
    plans = [judge(label="cost$5"), judge(label="$x$ and $y"), judge(label="_hidden")]
    asyncio.run(run_eval(traces, plans, llm, out, EvalOptions(progress=False)))
    png = plot_tolerance(summarise(read_rows(out)), tmp_path / "plot.png")
    assert png.stat().st_size > 0


def _wrappers(path: Path, ids: list[str]) -> Path:
    lines = [
        {
            "question_ID": qid,
            "messages": [
                {"role": "user", "content": f"task {qid}"},
                {"role": "assistant", "name": "Solver", "content": "done"},
            ],
        }
        for qid in ids
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return path


def test_generic_id_option_naming_a_column_reads_the_column(tmp_path: Path) -> None:
    path = _wrappers(tmp_path / "runs.jsonl", ["q-1", "q-2"])
    traces = load_traces(path, format="generic", id="question_ID")
    assert [t.id for t in traces] == ["q-1", "q-2"]


def test_generic_duplicate_ids_are_an_import_error(tmp_path: Path) -> None:
    path = _wrappers(tmp_path / "runs.jsonl", ["q-1", "q-1"])
    with pytest.raises(TraceFormatError, match=r"runs\.jsonl:2: field 'id'.*already used"):
        load_traces(path, format="generic", id="question_ID")
    with pytest.raises(TraceFormatError, match="already used"):
        load_traces(_wrappers(tmp_path / "b.jsonl", ["a", "b"]), format="generic", id="fixed")


def test_generic_messages_under_another_key_suggest_messages_key(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(
        json.dumps({"turns": [{"role": "user", "content": "hi"}, {"role": "assistant"}]}),
        encoding="utf-8",
    )
    with pytest.raises(TraceFormatError, match="--map messages_key=turns"):
        load_traces(path, format="generic")


def test_cli_import_map_id_from_column(tmp_path: Path) -> None:
    path = _wrappers(tmp_path / "runs.jsonl", ["q-1", "q-1"])
    result = CliRunner().invoke(
        main, ["import", str(path), "--format", "generic", "--map", "id=question_ID"]
    )
    assert result.exit_code == 1
    assert "already used" in result.output and "Traceback" not in result.output
