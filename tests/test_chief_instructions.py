"""CHIEF's default prompt layout, 'instructions-first': every stage's instructions in one
system message shared by every call of every run, the graph shown in the order it is
built, and a short request per stage. Same answers as the paper's layout on the same
replies; a prefix cache then serves the instructions across runs and the conversation and
graph across the stages of a run."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

from faultfinder.judging.method import Attribution, run_method
from faultfinder.llm import LLM, ChatRequest, FunctionBackend
from faultfinder.llm.base import approx_token_count
from faultfinder.methods.chief import ChiefConfig, build_graph, instructions, prompts
from faultfinder.methods.chief.pipeline import OWN_INSTRUCTIONS_NOTE
from faultfinder.methods.chief.prompts import stage_of
from faultfinder.registry import create_method
from faultfinder.testing.prefix_cache import BLOCK_TOKENS, PrefixCache, PrefixCachingBackend
from faultfinder.traces.loader import load_trace
from faultfinder.traces.schema import Trace
from test_chief_layout import answer

FIXTURES = Path(__file__).parent / "fixtures" / "chief"
REPLIES: dict[str, Any] = json.loads((FIXTURES / "replies_loop.json").read_text("utf-8"))


class Recorder:
    """Answers each stage with the fixture's reply; keeps every request's messages."""

    def __init__(self) -> None:
        self.requests: list[list[dict[str, Any]]] = []

    def __call__(self, request: ChatRequest) -> str:
        self.requests.append(request.messages)
        return answer(request)


def run(
    spec: str,
    trace: Trace,
    recorder: Recorder | None = None,
    cache: PrefixCache | None = None,
    **cfg: Any,
) -> Attribution:
    backend: Any = FunctionBackend(recorder or Recorder())
    if cache is not None:
        backend = PrefixCachingBackend(backend, cache)
    method = create_method(spec, stage_cache=None, **cfg)
    return asyncio.run(run_method(method, trace, LLM(backend, keep_prompts=True), label=spec))


def padded_trace() -> Trace:
    trace = load_trace(FIXTURES / "loop_trace.json")
    for step in trace.steps:
        step.content += " (page text: opening hours, addresses and phone numbers)" * 12
    return trace


def filled_trace(words: int) -> Trace:
    """The loop fixture with ``words`` words of filler in step 3."""
    trace = load_trace(FIXTURES / "loop_trace.json")
    trace.steps[3].content += " filler" * words
    return trace


def test_the_system_message_holds_every_stages_instructions_with_values_named() -> None:
    text = instructions.instructions()
    for stage, template in instructions.TEMPLATES.items():
        assert f"### Stage: {prompts.STAGE_TITLES[stage]}\n" in text
        assert template.split("\n", 1)[0] in text  # the opening sentence
        for line in instructions.split(template).instructions:
            assert line.format(**instructions.PLACEHOLDERS) in text, (stage, line)
        # No view reaches the system message: it is the same for every run.
        for field in (*instructions.SHARED_FIELDS, *instructions.OWN_FIELDS):
            assert "{" + field + "}" not in text
    assert "{last}" not in text and "<the last step number, given in the request>" in text
    # Every line of every template is in the system message, is a view or its
    # introduction, or is the header.
    views = {"{" + f + "}" for f in (*instructions.SHARED_FIELDS, *instructions.OWN_FIELDS)}
    for template in instructions.TEMPLATES.values():
        lines = template.splitlines()[1:]
        intros = {a for a, b in itertools.pairwise(lines) if b in views}
        for line in lines:
            if line == "{header}" or line in views or line in intros:
                continue
            assert line.format(**instructions.PLACEHOLDERS) in text, line


def test_every_call_of_every_run_sends_the_same_system_message_and_one_stage() -> None:
    recorder = Recorder()
    trace = load_trace(FIXTURES / "loop_trace.json")
    for spec in ("chief", "chief:M1"):
        run(spec, trace, recorder)
    run("chief", trace, recorder, oracle_mode="sequential")
    systems = {m[0]["content"] for m in recorder.requests}
    assert systems == {instructions.instructions()}
    for messages in recorder.requests:
        assert [m["role"] for m in messages][:2] == ["system", "user"]
        user = messages[1]["content"]
        assert user.startswith("The problem is: ")
        assert user.count("Stage: ") == 1
        stage = stage_of(user)
        assert stage and user.rstrip().endswith(instructions.REQUEST_END), stage


def test_the_same_verdicts_and_graphs_as_the_papers_layout() -> None:
    trace = load_trace(FIXTURES / "loop_trace.json")
    for spec in ("chief", "chief:M1", "chief:M1+M2", "chief:M1+M3"):
        first = run(spec, trace)
        paper = run(spec, trace, prompt_layout="paper")
        assert first.status == paper.status == "ok", spec
        assert (first.agent, first.step, first.reason) == (paper.agent, paper.step, paper.reason)
        assert first.details == paper.details, spec
        assert [c.purpose for c in first.calls] == [c.purpose for c in paper.calls]
    graphs = [
        asyncio.run(
            build_graph(
                trace,
                LLM(FunctionBackend(Recorder())),
                ChiefConfig(stage_cache=None, prompt_layout=layout),
                with_oracles=True,
            )
        ).model_dump(mode="json")
        for layout in ("paper", "instructions-first")
    ]
    assert graphs[0] == graphs[1]


def test_the_graph_is_shown_in_the_order_it_is_built() -> None:
    recorder = Recorder()
    run("chief", load_trace(FIXTURES / "loop_trace.json"), recorder)
    users = {stage_of(m[1]["content"]): m[1]["content"] for m in recorder.requests}
    heads = {
        name: section.split("\n", 1)[0]
        for name, section in (
            ("subtasks", prompts.SUBTASKS_SECTION),
            ("nodes", prompts.NODES_SECTION),
            ("links", prompts.LINKS_SECTION),
        )
    }
    shown = {stage: [n for n, h in heads.items() if h in text] for stage, text in users.items()}
    assert shown == {
        "decompose": [],
        "otar": ["subtasks"],
        "edges": ["subtasks", "nodes"],
        "step-edges": ["subtasks"],
        "oracles": ["subtasks"],
        "backtrack": ["subtasks", "nodes", "links"],
        "attribution": ["subtasks", "nodes", "links"],
    }
    # Each stage's prompt repeats an earlier one up to its own part, byte for byte.
    through_subtasks = users["otar"][: users["otar"].index("Stage: ")]
    for stage in ("edges", "step-edges", "oracles", "backtrack"):
        assert users[stage].startswith(through_subtasks), stage
    through_nodes = users["edges"][: users["edges"].index("Stage: ")]
    assert users["backtrack"].startswith(through_nodes)
    through_graph = users["backtrack"][: users["backtrack"].index("Stage: ")]
    assert users["attribution"].startswith(through_graph)
    # The whole graph is there: every OTAR summary, edge type and oracle goal.
    for oracle in REPLIES["oracles"]["oracles"]:
        assert json.dumps(oracle["goal"], ensure_ascii=False) in users["backtrack"]
    assert "Here is the structured candidate_set:" in users["attribution"]


def test_a_prefix_cache_serves_instructions_across_runs_and_the_run_across_stages() -> None:
    trace = padded_trace()
    cache = PrefixCache()
    recorder = Recorder()
    first = run("chief", trace, recorder, cache=cache)
    system_tokens = approx_token_count(instructions.instructions())
    assert system_tokens > 2000
    assert first.calls[0].usage.cached_prompt_tokens == 0
    backtrack = recorder.requests[-2][1]["content"]
    links_head = prompts.LINKS_SECTION.split("\n", 1)[0]
    links = backtrack[backtrack.index(links_head) : backtrack.index("Stage: ")]
    for call in first.calls[1:]:
        # The instructions, the conversation and the graph sections seen before.
        assert call.usage.cached_prompt_tokens >= system_tokens + 1500, call.purpose
        # What is left: a new graph section (OTAR parsing: the subtasks; edges: the agent
        # nodes; backtracking: the links) and the request, from the last whole block on.
        own = approx_token_count(links) if call.purpose == "chief backtrack" else 400
        assert call.usage.uncached_prompt_tokens < own + 2 * BLOCK_TOKENS, call.purpose
    # Another run (another trace): the instructions come from the cache at once.
    other = load_trace(FIXTURES / "loop_trace.json")
    second = run("chief:M1", other, cache=cache)
    assert second.calls[0].usage.cached_prompt_tokens >= system_tokens - BLOCK_TOKENS
    # Against the 'shared-prefix' layout on the same trace, each with its own cache.
    shared = run("chief", trace, cache=PrefixCache(), prompt_layout="shared-prefix")
    assert (first.agent, first.step) == (shared.agent, shared.step) == ("Assistant", 9)
    later = sum(c.usage.uncached_prompt_tokens for c in first.calls[1:])
    later_shared = sum(c.usage.uncached_prompt_tokens for c in shared.calls[1:])
    assert later < later_shared * 0.6


def test_a_roomy_budget_keeps_every_instruction_and_the_whole_conversation() -> None:
    trace = filled_trace(1500)
    system_tokens = approx_token_count(instructions.instructions())
    roomy_recorder = Recorder()
    roomy = run("chief:M1", trace, roomy_recorder, context_budget=system_tokens + 12000)
    assert roomy.status == "ok"
    assert all(m[0]["role"] == "system" for m in roomy_recorder.requests)
    assert all("truncated" not in (c.prompt or "") for c in roomy.calls)
    assert OWN_INSTRUCTIONS_NOTE not in json.dumps(roomy.details)


def test_a_stage_that_does_not_fit_with_every_instruction_gets_its_own_only() -> None:
    trace = filled_trace(1500)
    system_tokens = approx_token_count(instructions.instructions())
    # The conversation fits beside one stage's instructions but not beside all of them:
    # no stage cuts it, each is sent in the shared-prefix form and says so.
    recorder = Recorder()
    result = run("chief:M1", trace, recorder, context_budget=system_tokens + 2500)
    assert result.status == "ok"
    assert all(len(m) == 1 and m[0]["role"] == "user" for m in recorder.requests)
    assert all("truncated by faultfinder" not in (c.prompt or "") for c in result.calls)
    stages = result.details["stages"]
    for name in ("decompose", "otar", "edges", "step_edges"):
        assert OWN_INSTRUCTIONS_NOTE in stages[name]["note"], name
    assert result.agent == run("chief:M1", trace, prompt_layout="shared-prefix").agent
    # Smaller still: the shared-prefix form cuts the conversation, as that layout does.
    cut = run("chief:M1", trace, context_budget=2500)
    assert cut.status == "ok"
    assert all("truncated by faultfinder" in (c.prompt or "") for c in cut.calls)
    too_small = run("chief:M1", trace, context_budget=300)
    assert too_small.status == "error" and "context budget" in (too_small.error or "")


def test_stages_use_every_instruction_while_they_fit() -> None:
    trace = filled_trace(300)
    recorder = Recorder()
    probe = run("chief:M1", trace, recorder)
    sizes = [
        approx_token_count(m[0]["content"] + "\n" + m[1]["content"]) for m in recorder.requests
    ]
    # A budget between the smallest and the largest prompt: the early stages keep the
    # system message, the later (larger) ones fall back, and nothing is cut.
    budget = (min(sizes) + max(sizes)) // 2
    recorder = Recorder()
    result = run("chief:M1", trace, recorder, context_budget=budget)
    assert result.status == "ok" and probe.agent == result.agent
    kinds = [m[0]["role"] for m in recorder.requests]
    assert "system" in kinds and "user" in kinds
    for messages, size in zip(recorder.requests, sizes, strict=True):
        assert (messages[0]["role"] == "system") == (size <= budget)
    assert all("truncated by faultfinder" not in (c.prompt or "") for c in result.calls)
