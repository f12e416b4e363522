"""What prompts cost against a caching server: rows record the trace's own tokens, and
`report` shows prompt, cached and uncached tokens per case and their ratio to the trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.eval.prompt_cost import costly, render, trace_ratio
from faultfinder.eval.report import records, summarise
from faultfinder.eval.rows import EvalRow, read_rows
from faultfinder.judging.render import own_text
from faultfinder.llm import base
from faultfinder.llm.base import approx_token_count
from faultfinder.testing.fake_openai import FakeOpenAIServer
from faultfinder.testing.prefix_cache import PrefixCache
from faultfinder.traces.schema import Step, Trace
from faultfinder.usage import Usage


def _row(trace_id: str, prompt: int, cached: int, trace_tokens: int | None, **kw: Any) -> EvalRow:
    fields: dict[str, Any] = {
        "key": trace_id,
        "config_id": "c",
        "run": 0,
        "subset": "S",
        "trace_id": trace_id,
        "method": "all-at-once",
        "model": "m",
        "status": "ok",
        "config": {},
        "prompt_version": "v",
        "with_ground_truth": False,
        "observability": "outputs",
        "usage": Usage(prompt_tokens=prompt, cached_prompt_tokens=cached, calls=1),
        "trace_tokens": trace_tokens,
    }
    fields.update(kw)
    return EvalRow.model_validate(fields)


def test_ratios_over_totals_and_per_case() -> None:
    rows = [_row("a", 3000, 1000, 1000), _row("b", 3000, 0, 3000)]
    ratio = trace_ratio(rows)
    assert ratio is not None
    # Uncached 2,000 + 3,000 over 1,000 + 3,000 traces; per case 2.0 and 1.0.
    assert ratio.totals == pytest.approx(5000 / 4000)
    assert ratio.mean == pytest.approx(1.5)
    assert ratio.within == 2
    assert trace_ratio([_row("old", 10, 0, None)]) is None


def test_floors_and_rows_without_prompts_are_left_out() -> None:
    rows = [
        _row("a", 3000, 1500, 1000),
        _row("a", 0, 0, 1000, method="random"),
        _row("b", 0, 0, 1000, method="shortlist"),
    ]
    (only,) = costly(summarise(rows))
    m = only.metrics
    assert (only.label, m.cases) == ("all-at-once", 1)
    assert (m.prompt_tokens_per_case, m.cached_prompt_tokens_per_case) == (3000, 1500)
    assert render(summarise([_row("b", 0, 0, 1000, method="shortlist")])) == ""
    section = render(summarise([*rows, _row("old", 500, 0, None, method="step-by-step")]))
    assert "Prompt tokens and the prefix cache" in section
    assert "50%" in section and "1.50" in section  # cached share; uncached 1,500 / 1,000
    line = next(x for x in section.splitlines() if "step-by-step" in x)
    assert "–" in line  # the old row's ratio is unknown, not zero


def test_json_records_carry_the_prompt_figures() -> None:
    (record,) = records(summarise([_row("a", 3000, 1000, 1000), _row("b", 3000, 0, 3000)]))
    assert record["prompt_tokens_per_case"] == 3000
    assert record["cached_prompt_tokens_per_case"] == 500
    assert record["uncached_x_trace"] == 1.25 and record["uncached_x_trace_mean_of_cases"] == 1.5


def _long_trace() -> Trace:
    steps = [
        Step(index=i, agent=("Planner", "Coder")[i % 2], content=f"{i}: " + "lorem ipsum " * 400)
        for i in range(5)
    ]
    return Trace(id="long", task="Count the lorems.", steps=steps)


def test_eval_against_a_caching_endpoint_then_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)  # a loopback fake, not a model
    dataset = tmp_path / "data"
    dataset.mkdir()
    trace = _long_trace()
    (dataset / "long.json").write_text(trace.model_dump_json(), encoding="utf-8")
    out = tmp_path / "results.jsonl"
    runner = CliRunner()
    # Step-by-step shows the log up to each step in turn: each call repeats the last one's
    # prompt as its prefix, which the fake's prefix cache serves.
    with FakeOpenAIServer("1. No. 2. Nothing wrong here.", prefix_cache=PrefixCache()) as up:
        result = runner.invoke(
            main,
            ["eval", str(dataset), "--method", "step-by-step", "--model", "openai:m",
             "--base-url", up.base_url, "--include-unlabelled", "--cache", "none",
             "--no-progress", "--out", str(out)],
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    (row,) = read_rows(out)
    assert row.trace_tokens == approx_token_count(own_text(trace))
    assert row.usage.calls == 5 and row.usage.cached_prompt_tokens > 0

    report = runner.invoke(main, ["report", str(out)])
    assert report.exit_code == 0, report.output
    section = report.output.split("Prompt tokens and the prefix cache:", 1)[1]
    ratio = row.usage.uncached_prompt_tokens / row.trace_tokens
    share = row.usage.cached_prompt_tokens / row.usage.prompt_tokens
    line = next(x for x in section.splitlines() if "step-by-step" in x)
    assert f"{ratio:.2f}" in line and f"{100 * share:.0f}%" in line
    assert f"{row.usage.prompt_tokens:,}" in line


def test_a_run_without_a_cache_is_pointed_to_the_layout_for_none() -> None:
    def run(method: str, cached: int, layout: str) -> EvalRow:
        return _row("a", 5000, cached, 1000, method=method, config={"prompt_layout": layout})

    hint = "`--set prompt_layout=shared-prefix` (docs/methods/chief.md)"
    assert hint in render(summarise([run("chief", 0, "instructions-first")]))
    assert hint in render(summarise([run("chief:M1", 0, "instructions-first")]))
    assert "--set" not in render(summarise([run("chief", 2048, "instructions-first")]))
    assert "--set" not in render(summarise([run("chief", 0, "shared-prefix")]))
    echo = render(summarise([run("echo", 0, "shared-prefix")]))
    assert "echo: `--set prompt_layout=paper` (docs/methods/echo.md)" in echo
    assert "--set" not in render(summarise([run("all-at-once", 0, "paper")]))
