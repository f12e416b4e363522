"""The eval runner: rows, repeats, concurrency, failures, budget stops and resume."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import Field

from faultfinder.errors import ConfigError, FaultfinderError
from faultfinder.eval.cases import MethodPlan, plan_methods
from faultfinder.eval.datasets import DatasetOptions, load_dataset
from faultfinder.eval.rows import ResultsFileError, read_rows
from faultfinder.eval.runner import EvalOptions, run_eval
from faultfinder.judging.method import MethodBase, MethodConfig, Verdict
from faultfinder.llm import LLM, ChatRequest, FunctionBackend
from faultfinder.llm.cache import ResponseCache
from faultfinder.traces.schema import Trace
from faultfinder.usage import Budget

FIXTURE = Path(__file__).parent / "fixtures" / "eval" / "traces.jsonl"


class JudgeConfig(MethodConfig):
    PROMPT_VERSION: ClassVar[str] = "test-1"
    run: int = Field(default=0, ge=0)
    """Repeat index, set by the harness."""
    ask_twice: bool = False
    """Make two calls per case."""


class JudgeMethod(MethodBase):
    """Asks the model for the decisive step; the agent is the step's speaker."""

    name: ClassVar[str] = "eval-test-judge"
    summary: ClassVar[str] = "test double for the eval runner"
    Config: ClassVar[type[MethodConfig]] = JudgeConfig
    presets: ClassVar[dict[str, dict[str, Any]]] = {"twice": {"ask_twice": True}}

    def __init__(self, config: JudgeConfig) -> None:
        self.config = config

    async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
        assert isinstance(self.config, JudgeConfig)
        for _ in range(2 if self.config.ask_twice else 1):
            reply = await llm.chat(f"trace={trace.id} which step?", parse=int, purpose="judge")
        if reply.parsed is None:
            return Verdict(status="unparsed")
        return Verdict(agent=trace.steps[reply.parsed].agent, step=reply.parsed)


class ExplodingConfig(MethodConfig):
    PROMPT_VERSION: ClassVar[str] = "test-1"
    seed: int = 0
    """Seed; the harness adds the repeat index."""


class ExplodingMethod(MethodBase):
    """Raises a plain bug on traces whose id ends in '2'."""

    name: ClassVar[str] = "eval-test-exploding"
    summary: ClassVar[str] = "test double that crashes"
    Config: ClassVar[type[MethodConfig]] = ExplodingConfig
    presets: ClassVar[dict[str, dict[str, Any]]] = {}

    def __init__(self, config: ExplodingConfig) -> None:
        self.config = config

    async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
        if trace.id.endswith("2"):
            raise KeyError("boom")
        return Verdict(agent=trace.steps[0].agent, step=0)


def judge(label: str = "judge", **config: Any) -> MethodPlan:
    """A plan for the judge double (test methods stay out of the global registry)."""
    return MethodPlan(label=label, cls=JudgeMethod, config=JudgeConfig(**config))


def exploding(**config: Any) -> MethodPlan:
    return MethodPlan(label="exploding", cls=ExplodingMethod, config=ExplodingConfig(**config))


def gold_answers(traces: list[Trace], wrong: frozenset[str] = frozenset()) -> Any:
    """A reply function that answers each trace's gold step (or garbage for ``wrong``)."""
    by_id = {t.id: t for t in traces}

    def reply(request: ChatRequest) -> str:
        text = request.messages[-1]["content"]
        match = re.search(r"trace=(\S+)", text)
        assert match
        trace = by_id[match.group(1)]
        if trace.id in wrong or trace.label is None or trace.label.step is None:
            return "no idea"
        return str(trace.label.step)

    return reply


@pytest.fixture
def traces() -> list[Trace]:
    return load_dataset(FIXTURE)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_random_rows_are_self_describing(traces: list[Trace], tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    llm = LLM(FunctionBackend(lambda r: "unused"))
    outcome = run(
        run_eval(traces, plan_methods(["random"]), llm, out, EvalOptions(runs=3, progress=False))
    )
    assert outcome.planned == outcome.ran == 15 and outcome.skipped == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 15
    data = [json.loads(line) for line in lines]
    assert len({d["key"] for d in data}) == 15
    first = data[0]
    for key in ("trace_id", "method", "config", "model", "run", "subset", "gold", "usage", "key"):
        assert key in first
    assert {d["subset"] for d in data} == {"Alpha", "Beta"}
    # The harness passes the repeat index through the config's `run` field.
    assert all(d["config"]["run"] == d["run"] for d in data)
    draws = {(d["trace_id"], d["run"]): (d["agent"], d["step"]) for d in data}
    assert len({draws[("alpha/10", r)] for r in range(3)}) > 1


def test_seed_field_gets_seed_plus_run() -> None:
    plan = exploding(seed=7)
    assert plan.build(0).config.seed == 7
    assert plan.build(3).config.seed == 10


def test_judge_with_function_backend_scores_and_counts(traces: list[Trace], tmp_path: Path) -> None:
    reply = gold_answers(traces, wrong=frozenset({"alpha/2"}))
    backend = FunctionBackend(reply)
    out = tmp_path / "r.jsonl"
    outcome = run(
        run_eval(
            traces,
            [judge(), judge("judge:twice", ask_twice=True)],
            LLM(backend),
            out,
            EvalOptions(runs=2, progress=False),
        )
    )
    assert outcome.ran == 5 * 2 * 2
    by_key = {r.key: r for r in outcome.rows}
    assert len(by_key) == 20
    unparsed = [r for r in outcome.rows if r.status == "unparsed"]
    assert {r.trace_id for r in unparsed} == {"alpha/2"} and len(unparsed) == 4
    # 'no idea' is re-asked twice by the LLM layer: 3 calls per ask.
    assert all(r.usage.calls == 3 for r in unparsed if r.method == "judge")
    ok = [r for r in outcome.rows if r.status == "ok"]
    assert all(r.gold is not None and r.step == r.gold.step for r in ok)
    assert len(backend.requests) == 4 * 1 * 2 + 4 * 2 * 2 + 3 * 2 + 3 * 2 * 2


def test_case_concurrency_is_bounded(traces: list[Trace], tmp_path: Path) -> None:
    active = 0
    peak = 0

    async def slow(request: ChatRequest) -> str:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.01)
        active -= 1
        return "0"

    llm = LLM(FunctionBackend(slow), concurrency=50)
    run(
        run_eval(
            traces,
            [judge()],
            llm,
            tmp_path / "r.jsonl",
            EvalOptions(runs=4, concurrency=3, progress=False),
        )
    )
    assert peak == 3


def test_method_bug_becomes_error_row(traces: list[Trace], tmp_path: Path) -> None:
    outcome = run(
        run_eval(
            traces,
            [exploding()],
            LLM(FunctionBackend(lambda r: "")),
            tmp_path / "r.jsonl",
            EvalOptions(progress=False),
        )
    )
    errors = [r for r in outcome.rows if r.status == "error"]
    assert {r.trace_id for r in errors} == {"alpha/2", "beta/2"}
    assert all(r.error == "KeyError: 'boom'" for r in errors)
    assert sum(r.status == "ok" for r in outcome.rows) == 3


def test_budget_stops_the_run_and_resume_finishes(traces: list[Trace], tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    reply = gold_answers(traces)
    backend = FunctionBackend(reply)
    llm = LLM(backend, budget=Budget(max_calls=2))
    plans = [judge()]
    outcome = run(run_eval(traces, plans, llm, out, EvalOptions(concurrency=1, progress=False)))
    assert outcome.stopped is not None
    assert "Call budget of 2" in outcome.stopped and "--resume" in outcome.stopped
    statuses = [r.status for r in read_rows(out)]
    assert statuses == ["ok", "ok", "budget-exceeded"]
    assert len(backend.requests) == 2
    # Resume with room: the budget-exceeded case is retried, the ok ones are not.
    backend2 = FunctionBackend(reply)
    outcome2 = run(
        run_eval(
            traces,
            plans,
            LLM(backend2),
            out,
            EvalOptions(resume=True, progress=False),
        )
    )
    assert outcome2.stopped is None
    assert outcome2.skipped == 2 and outcome2.ran == 3
    assert len(backend2.requests) == 3
    assert len(outcome2.rows) == 5 and all(r.status == "ok" for r in outcome2.rows)


def test_resume_after_kill_runs_only_missing_rows(traces: list[Trace], tmp_path: Path) -> None:
    reply = gold_answers(traces)
    plans = [judge()]
    full = tmp_path / "full.jsonl"
    first = FunctionBackend(reply)
    run(run_eval(traces, plans, LLM(first), full, EvalOptions(runs=2, progress=False)))
    assert len(first.requests) == 10
    lines = full.read_bytes().splitlines(keepends=True)
    # Simulate a kill: four complete rows, then half of the fifth, without its newline.
    partial = tmp_path / "partial.jsonl"
    partial.write_bytes(b"".join(lines[:4]) + lines[4][: len(lines[4]) // 2])
    assert len(read_rows(partial)) == 4
    second = FunctionBackend(reply)
    outcome = run(
        run_eval(
            traces, plans, LLM(second), partial, EvalOptions(runs=2, resume=True, progress=False)
        )
    )
    assert len(second.requests) == 6
    assert outcome.skipped == 4 and outcome.ran == 6
    rows = read_rows(partial)
    assert len(rows) == 10 and len({r.key for r in rows}) == 10
    assert {r.key for r in rows} == {json.loads(line)["key"] for line in lines}
    assert partial.read_bytes().endswith(b"\n")


def test_damaged_middle_line_is_an_error(tmp_path: Path, traces: list[Trace]) -> None:
    out = tmp_path / "r.jsonl"
    run(
        run_eval(
            traces,
            plan_methods(["random"]),
            LLM(FunctionBackend(lambda r: "")),
            out,
            EvalOptions(progress=False),
        )
    )
    lines = out.read_text().splitlines()
    out.write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    with pytest.raises(ResultsFileError, match="line 2"):
        read_rows(out)


def test_refuses_to_overwrite_and_force_overwrites(traces: list[Trace], tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    out.write_text("something\n")
    plans = plan_methods(["random"])
    llm = LLM(FunctionBackend(lambda r: ""))
    with pytest.raises(ResultsFileError, match=r"--resume.*--force"):
        run(run_eval(traces, plans, llm, out, EvalOptions(progress=False)))
    assert out.read_text() == "something\n"
    with pytest.raises(ConfigError):
        run(run_eval(traces, plans, llm, out, EvalOptions(resume=True, force=True)))
    outcome = run(run_eval(traces, plans, llm, out, EvalOptions(force=True, progress=False)))
    assert outcome.ran == 5 and len(read_rows(out)) == 5


def test_retry_errors_switch(traces: list[Trace], tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    plans = [exploding()]
    llm = LLM(FunctionBackend(lambda r: ""))
    run(run_eval(traces, plans, llm, out, EvalOptions(progress=False)))
    kept = run(
        run_eval(
            traces,
            plans,
            llm,
            out,
            EvalOptions(resume=True, retry_errors=False, progress=False),
        )
    )
    assert kept.ran == 0
    retried = run(run_eval(traces, plans, llm, out, EvalOptions(resume=True, progress=False)))
    assert retried.ran == 2
    # The file keeps the old error rows; readers take the last row of each key.
    assert len(read_rows(out)) == 7 and len(retried.rows) == 5


def test_repeats_are_distinct_cache_entries(traces: list[Trace], tmp_path: Path) -> None:
    backend = FunctionBackend(lambda r: "1")
    cache = ResponseCache(tmp_path / "cache.sqlite")
    plans = [judge()]
    opts = EvalOptions(runs=2, progress=False)
    run(run_eval(traces, plans, LLM(backend, cache=cache), tmp_path / "a.jsonl", opts))
    assert len(backend.requests) == 10  # run 1 does not reuse run 0's replies
    outcome = run(run_eval(traces, plans, LLM(backend, cache=cache), tmp_path / "b.jsonl", opts))
    assert len(backend.requests) == 10  # everything now comes from the cache
    assert all(r.usage.cached_calls == 1 and r.usage.calls == 0 for r in outcome.rows)


def test_dataset_filters(tmp_path: Path) -> None:
    all_labelled = load_dataset(FIXTURE)
    assert [t.id for t in all_labelled] == ["alpha/1", "alpha/2", "alpha/10", "beta/1", "beta/2"]
    with_unlabelled = load_dataset(FIXTURE, DatasetOptions(labelled_only=False))
    assert "beta/3" in [t.id for t in with_unlabelled]
    limited = load_dataset(FIXTURE, DatasetOptions(limit=1, subsets=["Beta"]))
    assert [t.id for t in limited] == ["beta/1"]
    with pytest.raises(ConfigError, match="Available: Alpha, Beta"):
        load_dataset(FIXTURE, DatasetOptions(subsets=["Gamma"]))
    # A directory of canonical trace files is a dataset too.
    folder = tmp_path / "traces"
    folder.mkdir()
    for trace in with_unlabelled[:2]:
        (folder / f"{trace.id.replace('/', '_')}.json").write_text(trace.model_dump_json())
    assert [t.id for t in load_dataset(folder)] == ["alpha/1", "alpha/2"]


def test_plan_dedupes_and_sweeps_observability() -> None:
    plans = plan_methods(["random", "random"], {}, ["full", "outputs"])
    assert [(p.label, p.config.observability) for p in plans] == [
        ("random", "full"),
        ("random", "outputs"),
    ]
    assert isinstance(plans[0], MethodPlan)
    with pytest.raises(FaultfinderError):
        plan_methods(["no-such-method"])


def test_repair_keeps_a_complete_last_row_without_newline(
    tmp_path: Path, traces: list[Trace]
) -> None:
    out = tmp_path / "r.jsonl"
    llm = LLM(FunctionBackend(lambda r: ""))
    run(run_eval(traces, plan_methods(["random"]), llm, out, EvalOptions(progress=False)))
    out.write_bytes(out.read_bytes().rstrip(b"\n"))
    assert len(read_rows(out, repair=True)) == 5
    assert out.read_bytes().endswith(b"}\n")
    resumed = run(
        run_eval(
            traces, plan_methods(["random"]), llm, out, EvalOptions(resume=True, progress=False)
        )
    )
    assert resumed.ran == 0 and len(read_rows(out)) == 5
