"""Sampling settings (temperature, top_p, seed, max output tokens) and presets: every
method takes them, sends them with every call and records them in its result."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.eval.cases import plan_methods, repeat_warnings
from faultfinder.judging.method import Attribution, run_method
from faultfinder.llm import LLM, ChatRequest, FunctionBackend, ScriptedBackend
from faultfinder.methods.chief.context import REPLY_CAP_TOKENS
from faultfinder.methods.echo.config import ANALYSIS_REPLY_TOKENS, PAPER_REPLY_TOKENS
from faultfinder.methods.whowhen import common as ww
from faultfinder.registry import create_method, methods
from faultfinder.traces.loader import load_trace

FIVE = Path(__file__).parent / "fixtures" / "baselines" / "five_steps.json"
CALLING = ["all-at-once", "step-by-step", "binary-search", "hybrid", "echo", "chief", "agentic"]
"""The methods that call a model."""
BUILTIN = [name for name, cls in methods().items() if cls.__module__.startswith("faultfinder.")]
SAMPLING = {"temperature": 0.7, "top_p": 0.8, "seed": 5, "max_output_tokens": 200}


def run(spec: str, backend: Any, **cfg: Any) -> Attribution:
    method = create_method(spec, **cfg)
    return asyncio.run(run_method(method, load_trace(FIVE), LLM(backend, parse_retries=0)))


def junk(request: ChatRequest) -> str:
    return "no readable answer"


@pytest.mark.parametrize("spec", CALLING)
def test_every_method_sends_its_sampling_settings_and_records_them(spec: str) -> None:
    backend = FunctionBackend(junk)
    result = run(spec, backend, **SAMPLING)
    assert backend.requests, f"{spec} made no call"
    for request in backend.requests:
        assert request.top_p == 0.8 and request.max_tokens == 200
        assert request.temperature == 0.7
        assert request.seed is not None and request.seed >= 5
    for key, value in SAMPLING.items():
        assert result.config[key] == value


@pytest.mark.parametrize("spec", BUILTIN)
def test_every_method_takes_the_sampling_options(spec: str) -> None:
    config = create_method(spec, **SAMPLING).config.model_dump()
    assert {key: config[key] for key in SAMPLING} == SAMPLING


@pytest.mark.parametrize("spec", CALLING)
def test_every_method_bounds_every_reply_by_default(spec: str) -> None:
    backend = FunctionBackend(junk)
    run(spec, backend)
    assert backend.requests
    for request in backend.requests:
        assert request.max_tokens is not None and request.max_tokens <= PAPER_REPLY_TOKENS


BOUNDS = {
    "all-at-once": [ww.ALL_AT_ONCE_REPLY_TOKENS],
    "step-by-step": [ww.JUDGEMENT_REPLY_TOKENS] * 2,
    "binary-search": [ww.HALF_REPLY_TOKENS] * 3,
    "hybrid": [ww.ALL_AT_ONCE_REPLY_TOKENS, ww.JUDGEMENT_REPLY_TOKENS],
}
REPLIES = {
    "all-at-once": ["Agent Name: Searcher\nStep Number: 1\nReason for Mistake: wrong."],
    "step-by-step": ["1. No. 2. ok", "1. Yes. 2. wrong"],
    "binary-search": ["upper half", "upper half", "lower half"],
    "hybrid": [
        "Agent Name: Searcher\nStep Number: 1\nReason for Mistake: wrong.",
        "1. Yes. 2. wrong",
    ],
}


@pytest.mark.parametrize("spec", list(BOUNDS))
def test_whowhen_default_is_refined_greedy_and_bounded_per_answer_field(spec: str) -> None:
    backend = ScriptedBackend(REPLIES[spec])
    result = run(spec, backend)
    assert result.status == "ok"
    assert [r.max_tokens for r in backend.requests] == BOUNDS[spec]
    assert all(r.temperature == 0.0 and r.top_p is None for r in backend.requests)
    assert result.config["step_indices"] and result.config["guidance_reminder"]
    # 'refined' is the default, by name.
    assert create_method(f"{spec}:refined").config == create_method(spec).config


@pytest.mark.parametrize("spec", list(BOUNDS))
def test_whowhen_paper_preset_samples_as_the_papers_code(spec: str) -> None:
    backend = ScriptedBackend(REPLIES[spec])
    result = run(f"{spec}:paper", backend)
    for request in backend.requests:
        assert (request.temperature, request.top_p, request.max_tokens) == (1.0, 1.0, 1024)
    assert result.config["temperature"] == 1.0 and result.prompt_version == "whowhen-v1"


def test_dover_is_no_longer_a_preset_name() -> None:
    with pytest.raises(Exception, match="refined"):
        create_method("all-at-once:dover")


def test_echo_defaults_follow_the_paper_and_temperature_overrides_the_spread() -> None:
    temperatures: list[float | None] = []
    tokens: list[int | None] = []

    def record(request: ChatRequest) -> str:
        temperatures.append(request.temperature)
        tokens.append(request.max_tokens)
        assert request.top_p == 0.9
        return "unreadable"

    run("echo", FunctionBackend(record))
    assert len(set(temperatures)) == 3 and min(temperatures) >= 0.3  # type: ignore[type-var]
    assert set(tokens) == {ANALYSIS_REPLY_TOKENS}
    temperatures.clear()
    tokens.clear()
    run("echo:paper", FunctionBackend(record), temperature=0.5)
    assert set(temperatures) == {0.5} and set(tokens) == {PAPER_REPLY_TOKENS}


def test_chief_replies_are_bounded_by_what_each_stage_lists() -> None:
    backend = FunctionBackend(junk)
    run("chief", backend)
    assert backend.requests
    assert all(
        r.max_tokens is not None and r.max_tokens < REPLY_CAP_TOKENS for r in backend.requests
    )


def test_repeats_at_temperature_zero_are_flagged() -> None:
    greedy = plan_methods(["all-at-once", "echo"])
    warnings = repeat_warnings(greedy, 3)
    assert len(warnings) == 1 and "all-at-once" in warnings[0] and "echo" not in warnings[0]
    assert repeat_warnings(greedy, 1) == []
    assert repeat_warnings(plan_methods(["all-at-once"], {"temperature": 0.7}), 3) == []


def test_repeats_get_distinct_seeds() -> None:
    (plan,) = plan_methods(["step-by-step"], {"temperature": 0.7})
    seeds = [plan.build(run).config.seed for run in range(3)]
    assert len(set(seeds)) == 3


def test_cli_sampling_flags_reach_the_result(tmp_path: Path) -> None:
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(REPLIES["all-at-once"]), encoding="utf-8")
    args = ["attribute", str(FIVE), "--model", f"scripted:{replies}", "--cache", "none"]
    flags = ["--temperature", "0.3", "--top-p", "0.5", "--seed", "9", "--max-output-tokens", "99"]
    result = CliRunner().invoke(main, [*args, *flags, "--json"])
    assert result.exit_code == 0, result.output
    config = json.loads(result.stdout)["config"]
    assert (config["temperature"], config["top_p"], config["seed"]) == (0.3, 0.5, 9)
    assert config["max_output_tokens"] == 99
    bad = CliRunner().invoke(main, [*args, "--temperature", "-1"])
    assert bad.exit_code == 2 and "--temperature" in bad.output


def test_cli_reports_each_call_as_it_finishes(tmp_path: Path) -> None:
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(REPLIES["step-by-step"]), encoding="utf-8")
    args = ["attribute", str(FIVE), "--method", "step-by-step", "--cache", "none"]
    result = CliRunner().invoke(main, [*args, "--model", f"scripted:{replies}", "--progress"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("[call")]
    assert len(lines) == 2 and "is step 1 an error?" in lines[1]
    quiet = CliRunner().invoke(main, [*args, "--model", f"scripted:{replies}", "--no-progress"])
    assert "[call" not in quiet.stderr
