"""Per-case token budgets (``--budget-tokens``): held by the LLM layer on one case's usage
scope, reserved before each call like the run-wide budget; a case over it is recorded
'budget-exceeded' and the batch goes on."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder import errors
from faultfinder.cli import main
from faultfinder.eval.cases import plan_methods
from faultfinder.eval.rows import config_id, read_rows
from faultfinder.eval.runner import EvalOptions, run_eval
from faultfinder.judging.method import run_method
from faultfinder.llm import LLM, ChatRequest, FunctionBackend
from faultfinder.llm.base import Completion
from faultfinder.llm.cache import ResponseCache
from faultfinder.llm.scopes import case_tokens_left, track_usage
from faultfinder.registry import create_method
from faultfinder.traces.schema import GoldLabel, Step, Trace
from faultfinder.usage import Budget, Usage

PROMPT = "x" * 400  # 100 tokens by the local estimate


def fixed_usage(prompt: int, completion: int) -> FunctionBackend:
    async def reply(request: ChatRequest) -> Completion:
        await asyncio.sleep(0.01)
        return Completion(
            text="Agent Name: A1\nStep Number: 1\nReason for Mistake: r",
            usage=Usage(prompt_tokens=prompt, completion_tokens=completion),
        )

    return FunctionBackend(reply)


async def _calls_in_case(llm: LLM, n: int, budget: int) -> tuple[int, int, Usage]:
    """``n`` concurrent calls in one case scope: (answered, refused, the case's usage)."""

    async def one(i: int) -> bool:
        try:
            await llm.chat(f"{i} {PROMPT}", max_tokens=50)
            return True
        except errors.CaseBudgetExceededError:
            return False

    with track_usage(max_tokens=budget) as scope:
        done = await asyncio.gather(*(one(i) for i in range(n)))
    return sum(done), n - sum(done), scope.usage


def test_concurrent_calls_of_one_case_cannot_overshoot_its_budget() -> None:
    llm = LLM(fixed_usage(100, 50), concurrency=8)
    answered, refused, usage = asyncio.run(_calls_in_case(llm, 12, 1000))
    assert usage.total_tokens <= 1000
    assert answered >= 5 and refused > 0  # the budget is used, then refused
    # The next case starts with its own full budget: a case's budget is not the run's.
    answered2, _, usage2 = asyncio.run(_calls_in_case(llm, 2, 1000))
    assert answered2 == 2 and usage2.total_tokens == 300


def test_refusal_names_the_per_case_budget_and_how_to_raise_it() -> None:
    llm = LLM(fixed_usage(100, 50))

    async def go() -> None:
        with track_usage(max_tokens=120):
            await llm.chat(PROMPT, max_tokens=50)

    with pytest.raises(errors.CaseBudgetExceededError) as caught:
        asyncio.run(go())
    assert "Per-case token budget of 120" in str(caught.value)
    assert "--budget-tokens" in str(caught.value)
    assert llm.usage.calls == 0  # refused before sending


def test_cache_hits_are_charged_so_the_answer_does_not_depend_on_the_cache(
    tmp_path: Path,
) -> None:
    cache = ResponseCache(tmp_path / "c.sqlite")
    llm = LLM(fixed_usage(100, 50), cache=cache)

    async def two_calls(budget: int) -> int:
        with track_usage(max_tokens=budget):
            await llm.chat("a " + PROMPT, max_tokens=50)
            try:
                await llm.chat("b " + PROMPT, max_tokens=50)
            except errors.CaseBudgetExceededError:
                return 1
            return 2

    assert asyncio.run(two_calls(300)) == 1  # 150 spent, the second may need 152 > 150
    assert asyncio.run(two_calls(300)) == 1  # the first is a cache hit now: still charged
    assert asyncio.run(two_calls(400)) == 2


def test_tokens_left_and_reservation_are_what_a_call_reserves() -> None:
    llm = LLM(fixed_usage(100, 50))

    async def go() -> tuple[int | None, int | None, int]:
        need = llm.reservation(PROMPT, 50)
        with track_usage(max_tokens=1000):
            before = case_tokens_left()
            await llm.chat(PROMPT, max_tokens=50)
            return before, case_tokens_left(), need

    before, after, need = asyncio.run(go())
    assert case_tokens_left() is None  # no case scope
    assert before == 1000 and after == 850 and need == 150


def trace_of(n: int) -> Trace:
    steps = [Step(index=i, agent=f"A{i % 2}", content=f"output {i} " + "y" * 200) for i in range(n)]
    return Trace(id=f"t{n}", task="Do it.", steps=steps, label=GoldLabel(agent="A1", step=1))


def test_run_method_records_a_case_over_budget_and_the_budget() -> None:
    method = create_method("all-at-once", budget_tokens=50)
    result = asyncio.run(run_method(method, trace_of(4), LLM(fixed_usage(100, 50))))
    assert result.status == "budget-exceeded" and result.budget_stop == "case"
    assert result.error is not None and "Per-case token budget of 50" in result.error
    assert result.config["budget_tokens"] == 50 and result.usage.calls == 0
    fits = asyncio.run(
        run_method(
            create_method("all-at-once", budget_tokens=5000), trace_of(4), LLM(fixed_usage(100, 50))
        )
    )
    assert fits.status == "ok" and fits.budget_stop is None and fits.usage.total_tokens <= 5000


def test_run_wide_budget_is_still_a_run_stop() -> None:
    llm = LLM(fixed_usage(100, 50), budget=Budget(max_tokens=10))
    result = asyncio.run(run_method(create_method("all-at-once"), trace_of(4), llm))
    assert result.status == "budget-exceeded" and result.budget_stop == "run"


def test_a_null_budget_keeps_the_config_id_of_rows_written_before_it_existed() -> None:
    config = create_method("all-at-once").config.model_dump(mode="json")
    assert config["budget_tokens"] is None
    older = {k: v for k, v in config.items() if k != "budget_tokens"}
    assert config_id(config) == config_id(older)
    assert config_id({**config, "budget_tokens": 100}) != config_id(older)


def answer_step_one(request: ChatRequest) -> str:
    return "Agent Name: A1\nStep Number: 1\nReason for Mistake: r"


def test_eval_goes_on_past_a_case_over_its_budget_and_resume_keeps_it(tmp_path: Path) -> None:
    traces = [trace_of(2), trace_of(40), trace_of(3)]  # the 40-step trace is over budget
    plans = plan_methods(["all-at-once"], {"budget_tokens": 1200})
    llm = LLM(FunctionBackend(answer_step_one))
    out = tmp_path / "r.jsonl"
    outcome = asyncio.run(run_eval(traces, plans, llm, out, EvalOptions(progress=False)))
    assert outcome.stopped is None and len(outcome.rows) == 3
    by_trace = {row.trace_id: row for row in outcome.rows}
    assert by_trace["t40"].status == "budget-exceeded" and by_trace["t40"].budget_stop == "case"
    assert by_trace["t2"].status == by_trace["t3"].status == "ok"
    assert all(row.config["budget_tokens"] == 1200 for row in outcome.rows)
    again = asyncio.run(run_eval(traces, plans, llm, out, EvalOptions(progress=False, resume=True)))
    assert again.ran == 0  # a case over its own budget would be over it again


def test_cli_budget_tokens_for_attribute_and_eval(tmp_path: Path) -> None:
    small, big = tmp_path / "small.json", tmp_path / "big.json"
    small.write_text(trace_of(2).model_dump_json())
    big.write_text(trace_of(40).model_dump_json())
    model = ["--model", "function:faultfinder.demo_team.mock_debugger:respond", "--cache", "none"]
    runner = CliRunner()
    over = runner.invoke(main, ["attribute", str(big), "--budget-tokens", "1200", "--json", *model])
    assert over.exit_code == 5, over.output
    payload: dict[str, Any] = json.loads(over.stdout)
    assert payload["status"] == "budget-exceeded" and payload["config"]["budget_tokens"] == 1200
    assert "Per-case token budget of 1200" in payload["error"]
    fits = runner.invoke(main, ["attribute", str(small), "--budget-tokens", "1200", *model])
    assert fits.exit_code == 0, fits.output

    data = tmp_path / "data"
    data.mkdir()
    for trace in (trace_of(2), trace_of(40), trace_of(3)):
        (data / f"{trace.id}.json").write_text(trace.model_dump_json())
    out = tmp_path / "r.jsonl"
    ran = runner.invoke(
        main,
        ["eval", str(data), "--out", str(out), "--no-progress", "--budget-tokens", "1200", *model],
    )
    assert ran.exit_code == 5, ran.output
    rows = read_rows(out)
    assert len(rows) == 3 and sum(r.status == "budget-exceeded" for r in rows) == 1
    assert "1 ran out of budget" in ran.stderr
