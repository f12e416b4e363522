"""CHIEF's prompt layouts: 'shared-prefix' and 'paper' give the same answers on the same
replies, say the same things, and only the shared one lets a prefix cache serve the
conversation after the first call. (The default, 'instructions-first', is tested in
tests/test_chief_instructions.py.)"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from faultfinder.judging.method import Attribution, run_method
from faultfinder.llm import LLM, ChatRequest, FunctionBackend
from faultfinder.llm.base import approx_token_count
from faultfinder.methods.chief import ChiefConfig, build_graph, instructions, prompts
from faultfinder.methods.chief.prompts import stage_of
from faultfinder.registry import create_method
from faultfinder.testing.prefix_cache import BLOCK_TOKENS, PrefixCache, PrefixCachingBackend
from faultfinder.traces.loader import load_trace
from faultfinder.traces.schema import Trace

FIXTURES = Path(__file__).parent / "fixtures" / "chief"
REPLIES: dict[str, Any] = json.loads((FIXTURES / "replies_loop.json").read_text("utf-8"))
TEMPLATES = instructions.TEMPLATES
# The introductions the shared-prefix layout replaces, and by what.
RENAMED = {
    variant.splitlines()[0]: introduction.splitlines()[0]
    for introduction, variants in prompts.SHARED_VIEWS
    for variant in variants
}
SHARED_LINE = prompts.GRAPH_VIEW.splitlines()[0]
HEADER_END = re.compile(r"There are total \d+ steps \(numbered 0 to \d+\), each entry .*\n")


def lines_of(paper_prompt: str) -> list[str]:
    """The paper layout's lines, with the shared views introduced as in the shared layout."""
    return sorted(RENAMED.get(x, x) for x in paper_prompt.splitlines())


def answer(request: ChatRequest) -> str:
    """The fixture's reply for the stage of the request's last user message."""
    text = next(m["content"] for m in reversed(request.messages) if m["role"] == "user")
    stage = stage_of(text)
    if stage == "oracle":
        wanted = re.search(r"synthesize the oracle for subtask (S\d+)", text)
        assert wanted is not None
        reply = next(o for o in REPLIES["oracles"]["oracles"] if o["subtask"] == wanted[1])
    else:
        reply = REPLIES[stage]
    return reply if isinstance(reply, str) else json.dumps(reply)


def padded_trace() -> Trace:
    """The loop fixture with long step outputs, so its conversation is past the 1,024
    tokens a prefix cache needs."""
    trace = load_trace(FIXTURES / "loop_trace.json")
    for step in trace.steps:
        step.content += " (page text: opening hours, addresses and phone numbers)" * 12
    return trace


def run(spec: str, trace: Trace, cache: PrefixCache | None = None, **cfg: Any) -> Attribution:
    if not spec.endswith(":paper"):
        cfg.setdefault("prompt_layout", "shared-prefix")
    backend: Any = FunctionBackend(answer)
    if cache is not None:
        backend = PrefixCachingBackend(backend, cache)
    method = create_method(spec, stage_cache=None, **cfg)
    llm = LLM(backend, keep_prompts=True)
    return asyncio.run(run_method(method, trace, llm, label=spec))


def test_arrange_moves_the_opening_sentence_and_the_graph_view_after_the_header() -> None:
    for stage, template in TEMPLATES.items():
        shared = prompts.arrange(template, "shared-prefix")
        assert shared.startswith("{header}\n"), stage
        assert sorted(shared.splitlines()) == lines_of(template), stage
        assert prompts.arrange(template, "paper") == template
        assert stage_of(shared) == stage
    views = {
        prompts.GRAPH_VIEW: (prompts.BACKTRACK, prompts.ATTRIBUTION),
        prompts.SUBTASKS_VIEW: (prompts.OTAR, prompts.STEP_EDGES, prompts.ORACLES),
    }
    for view, templates in views.items():
        for template in templates:
            shared = prompts.arrange(template, "shared-prefix")
            assert shared.startswith("{header}\n" + view + template.split("\n")[0])
    for stage in ("decompose", "edges", "direct"):
        shared = prompts.arrange(TEMPLATES[stage], "shared-prefix")
        assert shared.startswith("{header}\n" + TEMPLATES[stage].split("\n")[0] + "\n")


def test_both_layouts_give_the_same_verdicts_graphs_and_wording() -> None:
    trace = load_trace(FIXTURES / "loop_trace.json")
    for spec in ("chief", "chief:M1", "chief:M1+M2", "chief:M1+M3"):
        results = {
            layout: run(spec, trace, prompt_layout=layout) for layout in ("paper", "shared-prefix")
        }
        paper, shared = results["paper"], results["shared-prefix"]
        assert paper.status == shared.status == "ok", spec
        assert (paper.agent, paper.step, paper.reason) == (shared.agent, shared.step, shared.reason)
        assert paper.details == shared.details, spec
        assert [c.purpose for c in paper.calls] == [c.purpose for c in shared.calls]
        for a, b in zip(paper.calls, shared.calls, strict=True):
            assert a.prompt is not None and b.prompt is not None
            assert a.prompt != b.prompt  # the order differs ...
            assert lines_of(a.prompt) == sorted(b.prompt.splitlines())  # ... only
    graphs = [
        asyncio.run(
            build_graph(
                trace,
                LLM(FunctionBackend(answer)),
                ChiefConfig(stage_cache=None, prompt_layout=layout),
                with_oracles=True,
            )
        ).model_dump(mode="json")
        for layout in ("paper", "shared-prefix")
    ]
    assert graphs[0] == graphs[1]
    assert graphs[0]["candidates"]["steps"] == [6, 9]


def test_the_paper_preset_keeps_the_papers_order() -> None:
    assert create_method("chief:paper").config.prompt_layout == "paper"  # type: ignore[attr-defined]
    assert create_method("chief").config.prompt_layout == "instructions-first"  # type: ignore[attr-defined]
    result = run("chief:paper", load_trace(FIXTURES / "loop_trace.json"))
    assert all(
        c.prompt is not None and c.prompt.startswith(("You are", "Your decomposition"))
        for c in result.calls
    )


def test_every_shared_prefix_call_starts_with_the_same_header() -> None:
    trace = padded_trace()
    result = run("chief", trace)
    heads = set()
    for call in result.calls:
        assert call.prompt is not None
        end = HEADER_END.search(call.prompt)
        assert end is not None
        heads.add(call.prompt[: end.end()])
        assert call.prompt.startswith("The problem is: ")
    assert len(heads) == 1 and len(result.calls) == 7


def test_a_prefix_cache_serves_the_conversation_to_every_call_after_the_first() -> None:
    trace = padded_trace()
    shared = run("chief", trace, PrefixCache())
    paper = run("chief", trace, PrefixCache(), prompt_layout="paper")
    assert (shared.agent, shared.step) == (paper.agent, paper.step) == ("Assistant", 9)
    assert shared.calls[0].usage.cached_prompt_tokens == 0
    prompt = shared.calls[0].prompt
    assert prompt is not None
    head = HEADER_END.search(prompt)
    assert head is not None
    header_tokens = approx_token_count(prompt[: head.end()])
    assert header_tokens > 1500
    # The paper's order starts each stage with its own sentence: only the step-edge call
    # shares its prefix (the OTAR call's sentence and the conversation) with an earlier one.
    served = {c.purpose: c.usage.cached_prompt_tokens for c in paper.calls}
    assert {p for p, n in served.items() if n} == {"chief step edges"}
    assert served["chief step edges"] <= header_tokens + BLOCK_TOKENS
    for call in shared.calls[1:]:
        # At least the header, in whole blocks (the role tag adds a few characters).
        assert call.usage.cached_prompt_tokens >= header_tokens - BLOCK_TOKENS, call.purpose
    usage = shared.usage
    # The same text but for the shared introductions of the graph and the subtask list.
    assert abs(usage.prompt_tokens - paper.usage.prompt_tokens) < 50
    assert usage.cached_prompt_tokens >= 6 * (header_tokens - BLOCK_TOKENS)
    # Attribution shows the graph view backtracking showed, right after the header.
    back, attribution = shared.calls[-2:]
    assert back.prompt is not None and attribution.prompt is not None
    graph_end = back.prompt.index(SHARED_LINE) + len(SHARED_LINE)
    graph_end = back.prompt.index("\nYou are", graph_end)
    assert attribution.prompt.startswith(back.prompt[:graph_end])
    through_graph = approx_token_count(back.prompt[:graph_end])
    assert attribution.usage.cached_prompt_tokens >= through_graph - BLOCK_TOKENS
    # Likewise the step-edge and oracle calls share the OTAR call's subtask list.
    by_purpose = {c.purpose: c for c in shared.calls}
    otar = by_purpose["chief otar"].prompt or ""
    through_subtasks = otar[: otar.index("\nYou are")]
    assert prompts.SUBTASKS_VIEW.splitlines()[0] in through_subtasks
    for purpose in ("chief step edges", "chief oracles"):
        assert (by_purpose[purpose].prompt or "").startswith(through_subtasks)
    assert usage.uncached_prompt_tokens < paper.usage.uncached_prompt_tokens * 0.6


def test_sequential_oracles_name_the_remaining_steps_after_the_shared_header() -> None:
    trace = load_trace(FIXTURES / "loop_trace.json")
    shared = run("chief", trace, oracle_mode="sequential")
    paper = run("chief", trace, oracle_mode="sequential", prompt_layout="paper")
    assert (shared.agent, shared.step) == (paper.agent, paper.step)
    oracle_prompts = [c.prompt or "" for c in shared.calls if c.purpose == "chief oracle S2"]
    assert len(oracle_prompts) == 1
    prompt = oracle_prompts[0]
    assert "subsequent unprocessed trajectory for this subtask is steps 2 to 10" in prompt
    assert "Step 0 - " in prompt  # the whole conversation, as in every other stage
    paper_prompt = next(c.prompt or "" for c in paper.calls if c.purpose == "chief oracle S2")
    assert "steps 2 to 10 of 11" in paper_prompt and "Step 0 - " not in paper_prompt


def header_of(prompt: str | None) -> str:
    end = HEADER_END.search(prompt or "")
    assert end is not None
    return (prompt or "")[: end.end()]


def test_a_cut_conversation_is_reused_by_every_later_stage_it_fits() -> None:
    trace = load_trace(FIXTURES / "loop_trace.json")
    trace.steps[3].content += " filler" * 1500
    result = run("chief", trace, context_budget=3000)
    assert result.status == "ok"
    heads = [header_of(c.prompt) for c in result.calls]
    assert all("truncated by faultfinder" in h for h in heads)
    assert all("context_budget" in r["note"] for r in result.details["stages"].values())
    # A stage whose own part does not fit beside the current cut cuts further (edges,
    # backtrack, attribution have the longest own parts); the stages after it reuse the cut
    # while they fit, where the paper layout fits each stage anew.
    assert [len(h) for h in heads] == sorted((len(h) for h in heads), reverse=True)
    assert heads[2] == heads[3] == heads[4]
    paper = run("chief", trace, context_budget=3000, prompt_layout="paper")
    assert len(header_of(paper.calls[3].prompt)) > len(heads[3])
    # With room for every stage but the graph views, the graph stages share one whole log.
    roomier = run("chief", trace, context_budget=5000)
    heads = [header_of(c.prompt) for c in roomier.calls]
    assert len(set(heads[:5])) == 1 and "truncated" not in heads[0]
    assert roomier.details["stages"]["otar"]["note"] == ""


def test_the_stage_cache_key_follows_the_layout_and_the_prompt_version(
    monkeypatch: Any,
) -> None:
    from faultfinder.methods.chief import pipeline

    trace = load_trace(FIXTURES / "loop_trace.json")
    llm = LLM(FunctionBackend(answer))

    def key(**cfg: Any) -> str:
        return pipeline.Chief(trace, llm, ChiefConfig(stage_cache=None, **cfg))._graph_key()

    shared, paper = key(prompt_layout="shared-prefix"), key(prompt_layout="paper")
    assert shared != paper != key()
    monkeypatch.setattr(pipeline, "PROMPT_VERSION", "chief-1")
    assert key(prompt_layout="shared-prefix") != shared
