"""ECHO's prompt layouts: the shared-prefix layout gives the paper layout's verdicts, and
a prefix-caching server serves most of each case's prompt tokens from its cache."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from faultfinder.judging.method import Attribution, run_method
from faultfinder.llm import LLM, ChatRequest, FunctionBackend, ScriptedBackend
from faultfinder.llm.base import approx_token_count
from faultfinder.llm.scopes import track_usage
from faultfinder.registry import create_method
from faultfinder.testing.prefix_cache import BLOCK_TOKENS, PrefixCache, PrefixCachingBackend
from faultfinder.traces.loader import load_trace
from faultfinder.traces.schema import Trace
from test_echo_method import FIXTURES, RECORDED, ROOMS, PanelModel, analysis_json, role_of

VERDICT_FIELDS = ("status", "agent", "step", "confidence", "reason")


def run(spec: str, trace: Trace, backend: Any, **overrides: Any) -> Attribution:
    method = create_method(spec, **overrides)
    return asyncio.run(run_method(method, trace, LLM(backend), label=spec))


def verdict(result: Attribution) -> dict[str, Any]:
    """What a user reads of a result, and every vote behind it."""
    out = {f: getattr(result, f) for f in VERDICT_FIELDS}
    for name in ("agent_pass", "step_pass", "unified_pass"):
        record = result.details.get(name)
        if isinstance(record, dict):
            out[name] = record.get("consensus") or record.get("status")
    return out


def researcher_model(request: ChatRequest) -> str:
    """Votes depend on the analyst's role, so both layouts must route roles alike."""
    role = role_of(request)
    step = {"skeptical": 4, "liberal": 0}.get(role, 2)
    return analysis_json(["Researcher"], step, 0.5 + 0.05 * len(role))


@pytest.mark.parametrize("spec", ["echo", "echo:I3", "echo:panel6"])
@pytest.mark.parametrize(
    ("fixture", "model"),
    [(ROOMS, lambda: PanelModel({"pattern_focused": 1, "conservative": 8})), (RECORDED, None)],
)
def test_both_layouts_give_the_same_verdicts(spec: str, fixture: Path, model: Any) -> None:
    trace = load_trace(fixture)
    answers = model() if model else researcher_model
    results = {
        layout: run(spec, trace, FunctionBackend(answers), prompt_layout=layout)
        for layout in ("paper", "shared-prefix")
    }
    assert results["paper"].status == "ok"
    assert verdict(results["shared-prefix"]) == verdict(results["paper"])
    assert results["paper"].details["prompt_layout"] == "paper"


@pytest.mark.parametrize("spec", ["echo", "echo:I3"])
def test_both_layouts_give_the_same_verdicts_from_scripted_replies(spec: str) -> None:
    trace = load_trace(ROOMS)
    replies = FIXTURES / "decoupled_replies.json"
    paper, shared = (
        run(spec, trace, ScriptedBackend.from_file(replies), prompt_layout=layout)
        for layout in ("paper", "shared-prefix")
    )
    assert paper.agent == "Coder"
    assert verdict(shared) == verdict(paper)


def long_trace() -> Trace:
    """The rooms fixture with long step outputs, so its log is well past the cache's
    1,024-token minimum."""
    trace = load_trace(ROOMS)
    filler = "\n".join(f"row {i}: room {i % 7} has capacity {10 + i % 5}" for i in range(60))
    steps = [s.model_copy(update={"content": f"{s.content}\n{filler}"}) for s in trace.steps]
    return trace.model_copy(update={"steps": steps})


def cached_run(spec: str, layout: str) -> tuple[Attribution, list[Any]]:
    backend = PrefixCachingBackend(FunctionBackend(PanelModel()), PrefixCache())
    with track_usage() as scope:
        result = run(spec, long_trace(), backend, prompt_layout=layout)
    return result, scope.calls


@pytest.mark.parametrize(("spec", "calls"), [("echo", 6), ("echo:I3", 3)])
def test_a_prefix_cache_serves_the_shared_layout(spec: str, calls: int) -> None:
    result, records = cached_run(spec, "shared-prefix")
    assert result.status == "ok" and len(records) == calls
    usage = [r.usage for r in records]
    first = usage[0]
    # The first call pays for the log; every later call finds all of it but its own
    # question (and the part of a 128-token block the question cuts) in the cache.
    assert first.cached_prompt_tokens == 0 and first.prompt_tokens > 3000
    for later in usage[1:]:
        assert later.cached_prompt_tokens > 0.85 * later.prompt_tokens
        assert later.uncached_prompt_tokens < 400 + BLOCK_TOKENS
    total_prompt = sum(u.prompt_tokens for u in usage)
    uncached = sum(u.uncached_prompt_tokens for u in usage)
    assert uncached < first.prompt_tokens + (calls - 1) * (400 + BLOCK_TOKENS)
    assert uncached / total_prompt < 1.3 / calls
    assert result.usage.cached_prompt_tokens == total_prompt - uncached


def test_the_paper_layout_shares_no_prefix_between_analysts() -> None:
    result, records = cached_run("echo", "paper")
    assert result.status == "ok"
    assert sum(r.usage.cached_prompt_tokens for r in records) == 0


def test_the_first_call_of_a_pass_goes_alone_so_the_others_find_its_prefix() -> None:
    """Requests sent together miss each other's prefixes (PrefixCache.request); the
    panel therefore sends the first analyst of each pass alone. Without that, analysts 2
    and 3 of the agent-level pass would pay for the whole log again, and those of the
    step-level pass for its task and finding."""
    backend = PrefixCachingBackend(FunctionBackend(PanelModel()), PrefixCache())
    with track_usage() as scope:
        run("echo", long_trace(), backend)
    passes = [c.purpose.split()[1] for c in scope.calls]
    assert passes == ["agent"] * 3 + ["step"] * 3
    agent_pass = [r.usage.cached_prompt_tokens for r in scope.calls[:3]]
    assert agent_pass[0] == 0 and min(agent_pass[1:]) > 0
    step_pass = [r.usage.uncached_prompt_tokens for r in scope.calls[3:]]
    # The first step-level call pays for the step task and the finding; the others only
    # for their role (and the rest of the 128-token block it starts in).
    assert max(step_pass[1:]) < step_pass[0] - 100
    assert max(step_pass[1:]) < 100 + BLOCK_TOKENS


def test_a_cut_log_sends_the_step_pass_the_focused_view() -> None:
    trace = long_trace()
    model = PanelModel()
    budget = approx_token_count(trace.task) + 3000
    result = run("echo", trace, FunctionBackend(model), context_budget=budget)
    assert result.status == "ok" and result.details["conversation_truncated"] is True
    assert result.details["step_view"] == "focused"
    assert "[full] Step 3 - Coder" in model.prompts["step"][0]
    whole = run("echo", trace, FunctionBackend(PanelModel()))
    assert whole.details["step_view"] == "conversation"
