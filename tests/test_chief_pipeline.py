"""CHIEF end to end with a function model that routes on each prompt's stage."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from faultfinder.judging.method import Attribution, run_method
from faultfinder.llm import LLM, ChatRequest, FunctionBackend
from faultfinder.methods.chief import ChiefConfig, build_graph, write_graph
from faultfinder.methods.chief.prompts import stage_of
from faultfinder.registry import create_method
from faultfinder.traces.loader import load_trace
from faultfinder.traces.schema import Trace

FIXTURES = Path(__file__).parent / "fixtures" / "chief"
REPLIES: dict[str, Any] = json.loads((FIXTURES / "replies_loop.json").read_text("utf-8"))


def last_user(request: ChatRequest) -> str:
    return next(m["content"] for m in reversed(request.messages) if m["role"] == "user")


class Router:
    """Answers each stage with its canned reply; records stages and prompts."""

    def __init__(self, overrides: dict[str, Any] | None = None) -> None:
        self.replies = {**REPLIES, **(overrides or {})}
        self.stages: list[str] = []
        self.prompts: dict[str, list[str]] = {}

    def __call__(self, request: ChatRequest) -> str:
        text = last_user(request)
        stage = stage_of(text)
        self.stages.append(stage)
        self.prompts.setdefault(stage, []).append(text)
        reply = self.replies.get(stage, "")
        if callable(reply):
            reply = reply(text)
        if stage == "oracle" and "oracle" not in self.replies:
            wanted = re.search(r"synthesize the oracle for subtask (S\d+)", text)
            assert wanted is not None
            reply = next(o for o in REPLIES["oracles"]["oracles"] if o["subtask"] == wanted[1])
        return reply if isinstance(reply, str) else json.dumps(reply)


def run(
    spec: str = "chief",
    router: Router | None = None,
    trace: Trace | None = None,
    **cfg: Any,
) -> tuple[Attribution, Router]:
    router = router or Router()
    cfg.setdefault("stage_cache", None)
    method = create_method(spec, **cfg)
    llm = LLM(FunctionBackend(router))
    trace = trace or load_trace(FIXTURES / "loop_trace.json")
    return asyncio.run(run_method(method, trace, llm, label=spec)), router


def test_full_chief_attributes_and_explains_with_stages() -> None:
    result, router = run()
    assert (result.status, result.agent, result.step) == ("ok", "Assistant", 9)
    assert result.details["stages_supporting"] == ["Data-Flow", "Final Screening"]
    assert router.stages == [
        "decompose",
        "otar",
        "edges",
        "step-edges",
        "oracles",
        "backtrack",
        "attribution",
    ]
    summary = result.details["graph"]
    assert summary["subtasks"] == 3 and summary["agent_nodes"] == 6
    assert summary["zero_shot"] is True and summary["loop_groups"] == 2
    assert summary["step_edge_origins"]["both"] == 2  # 7->9 and 3->8 found by both
    stages = result.details["stages"]
    assert {k: v["status"] for k, v in stages.items()} == {
        "decompose": "ok",
        "otar": "ok",
        "edges": "ok",
        "step_edges": "ok",
        "oracles": "ok",
        "backtrack": "ok",
        "attribution": "ok",
    }
    assert "Nobody" in stages["edges"]["note"]  # the edge to an unknown agent was dropped
    assert "9->4" in stages["step_edges"]["note"]  # a backwards step edge was dropped
    cand = result.details["candidates"]
    assert cand["subtasks"] == ["S3", "S2"] and cand["steps"] == [6, 9]
    assert any("step 7" in d for d in cand["dropped"])  # WebSurfer was not a candidate agent
    assert result.usage.calls == 7


def test_presets_select_the_ablations() -> None:
    m1, r1 = run("chief:M1")
    assert (m1.agent, m1.step) == ("Assistant", 9)
    assert r1.stages == ["decompose", "otar", "edges", "step-edges", "direct"]
    m12, r12 = run("chief:M1+M2")
    assert (m12.agent, m12.step) == ("Orchestrator", 6)  # earliest candidate step
    assert "attribution" not in r12.stages and "backtrack" in r12.stages
    m13, r13 = run("chief:M1+M3")
    assert (m13.agent, m13.step) == ("Assistant", 9)
    assert "oracles" not in r13.stages and "backtrack" not in r13.stages
    prompt = r13.prompts["attribution"][0]
    assert "every step is a candidate" in prompt and '"oracle"' not in prompt


def test_ground_truth_is_shown_only_when_asked() -> None:
    _, without = run("chief:M1")
    assert "The correct answer" not in without.prompts["decompose"][0]
    assert "The correct answer" not in without.prompts["direct"][0]
    _, with_gt = run("chief:M1", with_ground_truth=True)
    assert "The correct answer for the problem is: 555-0142" in with_gt.prompts["direct"][0]


def test_observability_decides_whether_recorded_inputs_are_shown() -> None:
    trace = load_trace(FIXTURES / "inputs_trace.json")
    plan = {"subtasks": [{"id": "S1", "name": "all", "step_range": [0, 4]}]}
    direct = "Agent Name: Coder\nStep Number: 3\nReason for Mistake: misquoted 1234.5"
    full, r_full = run(
        "chief:M1", Router({"decompose": plan, "direct": direct}), trace, observability="full"
    )
    assert (full.agent, full.step) == ("Coder", 3)
    assert "SECRET-INPUT-MARKER" in r_full.prompts["decompose"][0]
    assert "[tool result python] 1234.5" in r_full.prompts["decompose"][0]
    out, r_out = run(
        "chief:M1", Router({"decompose": plan, "direct": direct}), trace, observability="outputs"
    )
    assert "SECRET-INPUT-MARKER" not in r_out.prompts["decompose"][0]
    assert out.details["graph"]["step_edges"] < full.details["graph"]["step_edges"]


def test_a_plan_breaking_the_rules_is_sent_back_then_accepted() -> None:
    gap = {
        "subtasks": [
            {"id": "S1", "name": "a", "step_range": [0, 3]},
            {"id": "S2", "name": "b", "step_range": [5, 10]},
        ]
    }
    answers = iter([gap, REPLIES["decompose"]])
    router = Router(
        {"decompose": lambda _t: next(answers), "decompose-refine": lambda _t: next(answers)}
    )
    result, router = run("chief:M1", router)
    assert router.stages[:2] == ["decompose", "decompose-refine"]
    assert "steps 4-4 (between S1 and S2) are not covered" in router.prompts["decompose-refine"][0]
    graph = result.details["graph"]
    assert graph["reflection_rounds"] == 1 and graph["repaired"] is False


def test_a_plan_still_wrong_after_the_rounds_is_repaired_and_recorded() -> None:
    overlap = {
        "subtasks": [
            {"id": "S1", "name": "a", "step_range": [0, 6]},
            {"id": "S2", "name": "b", "step_range": [4, 10]},
        ]
    }
    router = Router({"decompose": overlap, "decompose-refine": overlap})
    result, router = run("chief:M1", router, reflection_rounds=1)
    assert router.stages.count("decompose-refine") == 1
    assert result.details["graph"]["repaired"] is True
    assert "start moved from 4 to 7" in result.details["stages"]["decompose"]["note"]


def test_knowledge_base_exemplars_are_retrieved_and_own_task_excluded(tmp_path: Path) -> None:
    kb = tmp_path / "kb.jsonl"
    kb.write_text(
        "\n".join(
            json.dumps(e)
            for e in [
                {"id": "invented-q-1", "task": "library phone Sundays", "steps": ["leak"]},
                {
                    "id": "lib",
                    "task": "Which library near the park is open Sundays?",
                    "steps": ["search libraries", "check hours"],
                },
            ]
        ),
        encoding="utf-8",
    )
    result, router = run("chief:M1", knowledge_base=str(kb))
    prompt = router.prompts["decompose"][0]
    assert "check hours" in prompt and "leak" not in prompt
    assert result.details["graph"]["zero_shot"] is False
    assert result.details["graph"]["exemplars"] == ["lib"]
    builtin, router_b = run("chief:M1", knowledge_base="builtin")
    assert "[Injected exemplar 1]" in router_b.prompts["decompose"][0]
    assert builtin.details["graph"]["zero_shot"] is False


def test_sequential_oracles_give_each_call_the_earlier_oracles() -> None:
    result, router = run(oracle_mode="sequential")
    assert router.stages.count("oracle") == 3
    second = router.prompts["oracle"][1]
    assert "synthesize the oracle for subtask S2" in second
    assert "A plan that keeps the Sunday constraint" in second  # S1's oracle as constraint
    assert "steps 2 to 10" in second  # the remaining trajectory (named after the log)
    assert result.details["graph"]["oracles"] == 3


def test_garbage_replies_degrade_to_an_honest_unparsed_verdict() -> None:
    router = Router({stage: "I am not sure." for stage in REPLIES})
    router.replies["decompose-refine"] = "no"
    for spec in ("chief", "chief:M1", "chief:M1+M2", "chief:M1+M3"):
        result, _ = run(spec, router)
        assert result.status == "unparsed", spec
        assert result.agent is None and result.step is None
        stages = result.details["stages"]
        assert stages["decompose"]["status"] == "fallback"
        assert stages["otar"]["status"] == "unparsed"


def test_failed_backtracking_falls_back_to_every_step_in_full_mode() -> None:
    result, _ = run(router=Router({"backtrack": "nothing to see"}))
    assert (result.agent, result.step) == ("Assistant", 9)
    assert "every step is a candidate" in result.details["widening"]
    m12, _ = run("chief:M1+M2", Router({"backtrack": "nothing"}))
    assert m12.status == "unparsed"


def test_screening_enforce_overrides_a_reversible_pick_and_model_mode_keeps_it() -> None:
    reply = dict(REPLIES["attribution"])
    reply["agent_name"], reply["step_number"] = "Orchestrator", 6
    enforced, _ = run(router=Router({"attribution": reply}))
    assert (enforced.agent, enforced.step) == ("Assistant", 9)
    assert enforced.details["screening"]["overridden"] is True
    kept, _ = run(router=Router({"attribution": reply}), screening="model")
    assert (kept.agent, kept.step) == ("Orchestrator", 6)


@pytest.mark.parametrize("screening", ["enforce", "model"])
def test_an_attributed_step_outside_the_trace_keeps_the_agent(screening: str) -> None:
    # Before, the whole answer was refused (re-asked, then unparsed with no agent): the
    # agent the model stated was lost. Now it is kept, as every method keeps it.
    reply = dict(REPLIES["attribution"])
    reply["step_number"] = 57
    result, router = run(router=Router({"attribution": reply}), screening=screening)
    assert router.stages.count("attribution") == 1
    assert (result.status, result.agent, result.step) == ("unparsed", "Assistant", None)
    assert result.details["step_unparsed"] == "step 57 is outside the trace (0..10)"
    assert result.details["out_of_range_step"] == 57
    assert result.details["model_pick"]["step"] == 57
    assert "screening" not in result.details


def test_the_stage_cache_lets_an_ablation_sweep_build_the_graph_once(tmp_path: Path) -> None:
    router = Router()
    llm = LLM(FunctionBackend(router))
    trace = load_trace(FIXTURES / "loop_trace.json")
    cache = str(tmp_path / "stages")
    results = {}
    for spec in ("chief:M1", "chief:M1+M2", "chief:M1+M3", "chief"):
        method = create_method(spec, stage_cache=cache)
        results[spec] = asyncio.run(run_method(method, trace, llm, label=spec))
    assert router.stages.count("decompose") == 1
    assert router.stages.count("oracles") == 1 and router.stages.count("backtrack") == 1
    assert results["chief"].details["stage_cache"] == {"graph": "hit", "m2": "hit"}
    assert results["chief:M1"].details["stage_cache"] == {"graph": "miss"}
    assert results["chief"].details["stages"]["decompose"]["status"] == "cached"
    assert (results["chief"].agent, results["chief"].step) == ("Assistant", 9)
    # Another option that changes the graph is another entry.
    method = create_method("chief:M1", stage_cache=cache, with_ground_truth=True)
    asyncio.run(run_method(method, trace, llm))
    assert router.stages.count("decompose") == 2


def test_failed_stages_are_not_cached(tmp_path: Path) -> None:
    router = Router({"otar": "garbage"})
    llm = LLM(FunctionBackend(router))
    trace = load_trace(FIXTURES / "loop_trace.json")
    for _ in range(2):
        method = create_method("chief:M1", stage_cache=str(tmp_path))
        asyncio.run(run_method(method, trace, llm))
    assert router.stages.count("decompose") == 2


def test_graph_file_round_trip_and_graph_out(tmp_path: Path) -> None:
    trace = load_trace(FIXTURES / "loop_trace.json")
    router = Router()
    llm = LLM(FunctionBackend(router))
    graph = asyncio.run(build_graph(trace, llm, ChiefConfig(stage_cache=None), with_oracles=True))
    path = tmp_path / "graph.json"
    write_graph(graph, path)
    calls_before = len(router.stages)
    out = tmp_path / "out" / "g.json"
    result, _ = run(router=router, graph_file=str(path), graph_out=str(out))
    assert router.stages[calls_before:] == ["attribution"]
    assert (result.agent, result.step) == ("Assistant", 9)
    assert result.details["graph"]["path"] == str(out)
    assert json.loads(out.read_text("utf-8"))["stages"]["attribution"]["status"] == "ok"
    other = load_trace(FIXTURES / "inputs_trace.json")
    mismatch, _ = run(router=router, trace=other, graph_file=str(path))
    assert mismatch.status == "error" and "different trace" in (mismatch.error or "")


def test_a_small_context_budget_truncates_visibly() -> None:
    trace = load_trace(FIXTURES / "loop_trace.json")
    trace.steps[3].content += " filler" * 1500
    # (The default layout's system message needs about 3k tokens of the budget itself;
    # tests/test_chief_instructions.py checks that it counts.)
    result, router = run("chief:M1", trace=trace, context_budget=2500, prompt_layout="paper")
    assert result.status == "ok"
    assert "truncated by faultfinder" in router.prompts["decompose"][0]
    assert "context_budget" in result.details["stages"]["decompose"]["note"]
    too_small, _ = run("chief:M1", trace=trace, context_budget=600, prompt_layout="paper")
    assert too_small.status == "error" and "context budget" in (too_small.error or "")


def test_unknown_options_are_rejected() -> None:
    with pytest.raises(Exception, match="modules"):
        create_method("chief", modules="M2")


def test_scripted_models_never_write_the_stage_cache(tmp_path: Path) -> None:
    from faultfinder.llm import ScriptedBackend

    order = ["decompose", "otar", "edges", "step-edges", "direct"]
    replies = [r if isinstance(r := REPLIES[s], str) else json.dumps(r) for s in order]
    method = create_method("chief:M1", stage_cache=str(tmp_path / "stages"))
    trace = load_trace(FIXTURES / "loop_trace.json")
    result = asyncio.run(run_method(method, trace, LLM(ScriptedBackend(replies))))
    assert (result.agent, result.step) == ("Assistant", 9)
    assert not (tmp_path / "stages").exists()


def test_replies_of_the_wrong_shape_are_unparsed_not_crashes() -> None:
    weird: dict[str, Any] = {
        "decompose": {"subtasks": 5},
        "otar": [1, 2],
        "edges": {"subtask_edges": 3, "agent_edges": "x"},
        "step-edges": {"step_edges": [{"upstream_step": {"step_id": "a"}}]},
        "oracles": {"oracles": [[]]},
        "backtrack": {"subtasks": [{"id": "S1", "discrepancy": 1}], "agents": 7, "steps": 1},
        "attribution": {"assessments": 3, "agent_name": 4, "step_number": [1]},
    }
    result, _ = run(router=Router(weird))
    assert result.status == "unparsed"
    stages = result.details["stages"]
    assert stages["backtrack"]["status"] in ("ok", "unparsed")
    assert stages["attribution"]["status"] == "unparsed"
