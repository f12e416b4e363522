"""CHIEF's deterministic parts, tested directly: reflection rules and repair, retrieval,
data-flow linking, loop detection, attribution screening, renderings, prompt routing."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from faultfinder.errors import ConfigError
from faultfinder.llm.client import ParseError
from faultfinder.methods.chief import prompts
from faultfinder.methods.chief.attribution import (
    Assessment,
    AttributionAnswer,
    candidate_view,
    parse_attribution,
    screen,
)
from faultfinder.methods.chief.backtrack import reverse_topological_order
from faultfinder.methods.chief.dataflow import extract_values, link_values, merge_step_edges
from faultfinder.methods.chief.decompose import PlanItem, check_plan, parse_plan, repair_plan
from faultfinder.methods.chief.graph import (
    AgentNode,
    Candidates,
    CausalGraph,
    Oracle,
    StepEdge,
    Subtask,
    SubtaskEdge,
)
from faultfinder.methods.chief.graph_render import (
    prompt_view,
    render_dot,
    render_mermaid,
    step_edge_entries,
    view_data,
)
from faultfinder.methods.chief.knowledge import (
    BM25,
    KBEntry,
    KnowledgeBase,
    load_knowledge_base,
    retrieve,
)
from faultfinder.methods.chief.loops import LoopConfig, detect_loops
from faultfinder.traces.loader import load_trace
from faultfinder.traces.schema import Step, Trace

FIXTURES = Path(__file__).parent / "fixtures" / "chief"


def _plan(*ranges: tuple[int, int]) -> list[PlanItem]:
    return [
        PlanItem(id=f"S{n}", name=f"part {n}", start=a, end=b)
        for n, (a, b) in enumerate(ranges, start=1)
    ]


def _trace(contents: list[tuple[str, str]], task: str = "Find the thing.") -> Trace:
    return Trace(
        id="t",
        task=task,
        steps=[
            Step(index=i, agent=agent, role=agent, content=text)
            for i, (agent, text) in enumerate(contents)
        ],
    )


# --- reflection rules -----------------------------------------------------------------


def test_clean_partition_has_no_violation() -> None:
    assert check_plan(_plan((0, 3), (4, 4), (5, 9)), 10) == []


@pytest.mark.parametrize(
    ("ranges", "expected"),
    [
        ([(1, 9)], "steps 0-0 are not covered"),
        ([(0, 4), (6, 9)], "steps 5-5 (between S1 and S2) are not covered"),
        ([(0, 5), (4, 9)], "S1 and S2 overlap on steps 4-5"),
        ([(0, 7)], "steps 8-9 are not covered"),
        ([(0, 4), (7, 5)], "S2: step range [7, 5] is reversed"),
        ([(0, 12)], "outside steps 0..9"),
        ([(5, 9), (0, 4)], "S2 starts before S1"),
    ],
)
def test_each_rule_violation_is_named(ranges: list[tuple[int, int]], expected: str) -> None:
    problems = check_plan(_plan(*ranges), 10)
    assert any(expected in p for p in problems), problems


def test_repair_moves_overlaps_closes_gaps_and_drops_swallowed_subtasks() -> None:
    subtasks, changes = repair_plan(_plan((2, 5), (4, 8), (5, 6)), 12)
    assert [(s.start, s.end) for s in subtasks] == [(0, 5), (6, 11)]
    assert [s.id for s in subtasks] == ["S1", "S2"]
    joined = " | ".join(changes)
    assert "S3: dropped (inside S2)" in joined
    assert "S2: start moved from 4 to 6" in joined
    assert "S1: start moved from 2 to 0" in joined
    assert "extended to the last step 11" in joined


def test_repair_of_a_clean_plan_changes_nothing() -> None:
    subtasks, changes = repair_plan(_plan((0, 2), (3, 9)), 10)
    assert changes == []
    assert [(s.start, s.end) for s in subtasks] == [(0, 2), (3, 9)]


def test_repair_always_yields_a_clean_partition() -> None:
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(1, 30)
        ranges = [
            (rng.randint(-3, n + 3), rng.randint(-3, n + 3)) for _ in range(rng.randint(0, 6))
        ]
        subtasks, _ = repair_plan(_plan(*ranges), n)
        as_plan = [PlanItem(id=s.id, name=s.name, start=s.start, end=s.end) for s in subtasks]
        assert check_plan(as_plan, n) == [], (ranges, n)


def test_plan_parsing_accepts_range_spellings_and_rejects_empty() -> None:
    plan = parse_plan(
        {"subtasks": [{"name": "a", "step_range": "0-3"}, {"name": "b", "start": 4, "end": 6}]}
    )
    assert [(p.start, p.end) for p in plan] == [(0, 3), (4, 6)]
    with pytest.raises(ValueError):
        parse_plan({"subtasks": []})
    with pytest.raises(ValueError):
        parse_plan({"subtasks": [{"name": "no range"}]})


# --- knowledge base and retrieval -------------------------------------------------------


def test_builtin_knowledge_base_loads() -> None:
    kb = load_knowledge_base("builtin")
    assert len(kb.entries) >= 10
    assert all(e.steps and e.task for e in kb.entries)


def test_bm25_prefers_the_matching_document() -> None:
    bm25 = BM25(["bakery opening hours sunday", "train fare round trip", "museum ceramic decade"])
    scores = bm25.scores("Which bakery is open on Sunday?")
    assert scores[0] > 0 and scores[1] == 0 and scores[2] == 0


def test_retrieval_excludes_the_traces_own_task_by_id_and_by_text() -> None:
    trace = load_trace(FIXTURES / "loop_trace.json")
    kb = KnowledgeBase(
        name="t",
        entries=[
            KBEntry(id="invented-q-1", task="library phone Sundays", steps=["a"]),
            KBEntry(id="other", task=trace.task.upper(), steps=["copy of the task"]),
            KBEntry(id="near", task="public library opening hours on Sundays", steps=["b"]),
            KBEntry(id="far", task="train fares", steps=["c"]),
        ],
    )
    got = retrieve(kb, trace, k=2)
    assert [e.id for e in got.entries] == ["near"]  # 'far' shares no term: not returned
    assert got.excluded == ["invented-q-1", "other"]


def test_embedding_retrieval_uses_cosine_over_the_embedder() -> None:
    class Fake:
        name = "fake"

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [[1.0, 0.0] if "library" in t.lower() else [0.0, 1.0] for t in texts]

    trace = load_trace(FIXTURES / "loop_trace.json")
    kb = KnowledgeBase(
        name="emb",
        entries=[
            KBEntry(id="x", task="train fares", steps=["a"]),
            KBEntry(id="y", task="library hours", steps=["b"]),
        ],
    )
    got = retrieve(kb, trace, k=1, retrieval="embeddings", embedder=Fake())
    assert [e.id for e in got.entries] == ["y"]


def test_knowledge_base_errors_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_knowledge_base(str(tmp_path / "missing.jsonl"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task": "x"}) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="steps"):
        load_knowledge_base(str(bad))
    ok = tmp_path / "ok.jsonl"
    ok.write_text(json.dumps({"question": "q", "solution": "1. a\n2. b"}) + "\n", encoding="utf-8")
    assert load_knowledge_base(str(ok)).entries[0].steps == ["a", "b"]


# --- data flow --------------------------------------------------------------------------


def test_values_are_linked_to_their_earliest_producer() -> None:
    trace = load_trace(FIXTURES / "loop_trace.json")
    edges = link_values(trace)
    phone = [e for e in edges if e.data == "555-0199"]
    assert {(e.producer, e.consumer) for e in phone} == {(7, 9), (7, 10)}
    url = [e for e in edges if e.data == "https://lib.example.org/elmwood"]
    assert {e.producer for e in url} == {3}
    query = [e for e in edges if e.data == "public libraries near Elmwood Park"]
    # Quoted at step 3, but step 2 said it first: step 2 is the producer.
    assert {e.producer for e in query} == {2}
    assert all(e.origin == "deterministic" for e in edges)


def test_values_from_the_task_and_list_markers_are_not_data() -> None:
    trace = _trace(
        [("A", "Step 1: look up 42 and data.csv"), ("B", "1. got 42 from data.csv")],
        task="Sum the values in data.csv",
    )
    values = {v.text for v in extract_values(trace.steps[0].content)}
    assert "1" not in values and "42" in values
    edges = link_values(trace)
    assert [(e.producer, e.consumer, e.data) for e in edges] == [(0, 1, "42")]


def test_numbers_inside_paths_file_names_and_identifiers_are_not_data() -> None:
    text = (
        "Read ../2023/validation/6359a0b1-8f7b-499b-9336-840f9ab90688.png, run gpt-4o-2024 "
        "and C:\\data\\v22\\x; area 259.81 on 12/25/2031, 2023-05-01, see --raw-77.csv"
    )
    values = {(v.kind, v.text) for v in extract_values(text)}
    assert ("file", "6359a0b1-8f7b-499b-9336-840f9ab90688.png") in values
    assert ("file", "raw-77.csv") in values
    numbers = {t for kind, t in values if kind == "numeric"}
    # Dates and plain numbers stay; the digits of the path, the UUID, the model name and
    # the Windows path do not.
    assert numbers == {"259.81", "12", "25", "2031", "2023-05-01"}
    trace = _trace([("A", "saved to out/2023/run.txt"), ("B", "the year 2023 had 3 runs")])
    assert link_values(trace) == []


def test_text_values_match_whole_words_only() -> None:
    trace = _trace(
        [("A", 'I ran "code" once. The key is "alpha beta"'), ("B", "coder: alpha beta")]
    )
    edges = link_values(trace)
    assert [e.data for e in edges] == ["alpha beta"]


def test_recorded_inputs_count_as_consumption_only_when_shown() -> None:
    trace = load_trace(FIXTURES / "inputs_trace.json")
    without = {(e.producer, e.consumer, e.data) for e in link_values(trace)}
    with_inputs = {
        (e.producer, e.consumer, e.data) for e in link_values(trace, include_inputs=True)
    }
    assert (2, 3, "1234.5") in with_inputs and (2, 3, "1234.5") not in without


def test_merge_marks_pairs_found_by_both() -> None:
    llm = [StepEdge(producer=1, consumer=3, producer_agent="A", consumer_agent="B", data="x")]
    det = [
        StepEdge(
            producer=1,
            consumer=3,
            producer_agent="A",
            consumer_agent="B",
            data="7",
            origin="deterministic",
        ),
        StepEdge(
            producer=0,
            consumer=2,
            producer_agent="A",
            consumer_agent="B",
            data="8",
            origin="deterministic",
        ),
    ]
    merged = merge_step_edges(llm, det)
    assert [(e.producer, e.consumer, e.origin) for e in merged] == [
        (0, 2, "deterministic"),
        (1, 3, "both"),
    ]


# --- loops ------------------------------------------------------------------------------


def test_repeated_instructions_form_loop_groups_with_roles() -> None:
    trace = load_trace(FIXTURES / "loop_trace.json")
    loops = detect_loops(trace)
    first = loops[0]
    assert (first.id, first.agent, first.repeats) == ("L1", "Orchestrator", [2, 4, 6])
    assert (first.start, first.end) == (2, 7)
    roles = {m.step: m.role for m in first.members}
    assert roles[2] == "entry" and roles[7] == "exit"
    assert {roles[s] for s in range(3, 7)} == {"internal"}
    assert first.other_agents == ["WebSurfer"]
    assert [g.agent for g in loops] == ["Orchestrator", "WebSurfer"]


def test_ledgers_with_the_same_keys_but_different_content_are_not_a_loop() -> None:
    def ledger(reason: str) -> str:
        return "Updated Ledger:\n" + json.dumps(
            {"is_request_satisfied": {"reason": reason, "answer": False}, "next_speaker": "X"}
        )

    trace = _trace(
        [
            ("Orchestrator", ledger("we still need the museum opening hours for saturday")),
            ("WebSurfer", "opened the museum website"),
            ("Orchestrator", ledger("the train fare table was downloaded successfully today")),
            ("WebSurfer", "downloaded the fare table"),
            ("Orchestrator", ledger("compute the average of three climbing gym ratings")),
        ]
    )
    assert detect_loops(trace) == []


def test_short_messages_and_distant_repeats_are_ignored() -> None:
    repeated = "please search the web for the opening hours of the city museum"
    trace = _trace(
        [("O", "Next speaker WebSurfer"), ("W", "ok"), ("O", "Next speaker WebSurfer")]
        + [("O", repeated)]
        + [("W", f"unrelated result number {i} about topic {i}") for i in range(6)]
        + [("O", repeated)]
    )
    assert detect_loops(trace, LoopConfig(max_gap=5)) == []
    assert [g.repeats for g in detect_loops(trace, LoopConfig(max_gap=12))] == [[3, 10]]


# --- screening --------------------------------------------------------------------------


def _graph() -> CausalGraph:
    trace = load_trace(FIXTURES / "loop_trace.json")
    return CausalGraph(
        trace_id=trace.id,
        trace_hash="h",
        task=trace.task,
        n_steps=len(trace.steps),
        step_agents=[s.agent for s in trace.steps],
        subtasks=[
            Subtask(id="S1", name="a", start=0, end=1),
            Subtask(id="S2", name="b", start=2, end=7),
            Subtask(id="S3", name="c", start=8, end=10),
        ],
        step_edges=link_values(trace),
        loops=detect_loops(trace),
    )


def _answer(step: int, agent: str, *assessments: Assessment) -> AttributionAnswer:
    return AttributionAnswer(assessments=list(assessments), agent=agent, step=step)


def test_an_irreversible_local_origin_keeps_the_models_pick() -> None:
    result = screen(
        _answer(
            9,
            "Assistant",
            Assessment(step=9, local_origin=True, data_flow="misinterprets", irrecoverable=True),
            Assessment(step=6, loop_responsibility="planner", reversible=True),
        ),
        _graph(),
    )
    assert (result.step, result.agent, result.overridden) == (9, "Assistant", False)
    assert result.stages == ["Local", "Data-Flow", "Final Screening"]


def test_a_reversible_pick_loses_to_an_irreversible_origin() -> None:
    result = screen(
        _answer(
            4,
            "Orchestrator",
            Assessment(step=4, local_origin=True, reversible=True),
            Assessment(step=9, local_origin=True, reversible=False, irrecoverable=True),
        ),
        _graph(),
    )
    assert (result.step, result.agent, result.overridden) == (9, "Assistant", True)
    assert any("reversible deviations [4] dropped" in t for t in result.trail)


def test_planner_responsibility_moves_to_the_loop_entry_and_executor_to_its_first_step() -> None:
    planner = screen(
        _answer(6, "Orchestrator", Assessment(step=6, loop_responsibility="planner")), _graph()
    )
    assert (planner.step, planner.agent) == (2, "Orchestrator")
    assert planner.stages == ["Planning-Control"]
    executor = screen(
        _answer(6, "Orchestrator", Assessment(step=6, loop_responsibility="executor")), _graph()
    )
    assert (executor.step, executor.agent) == (3, "WebSurfer")


def test_propagated_data_is_traced_to_the_corrupting_producer() -> None:
    result = screen(
        _answer(
            9,
            "Assistant",
            Assessment(step=9, data_flow="propagates"),
            Assessment(step=7, data_flow="fabricates"),
        ),
        _graph(),
    )
    assert (result.step, result.agent) == (7, "WebSurfer")
    assert "Data-Flow" in result.stages


def test_an_unassessed_upstream_cause_becomes_the_origin() -> None:
    result = screen(_answer(9, "Assistant", Assessment(step=9, upstream_causes=[5])), _graph())
    assert (result.step, result.agent, result.stages) == (5, "WebSurfer", ["Local"])


def test_without_assessments_the_models_pick_stands() -> None:
    result = screen(_answer(9, "Assistant"), _graph())
    assert (result.step, result.overridden) == (9, False)


def test_attribution_parsing_validates_agent_and_step() -> None:
    roster = ["Orchestrator", "WebSurfer", "Assistant"]
    data = {
        "assessments": [
            {"step": 9, "upstream_causes": [7, 12, "x"], "data_flow": "Misinterprets data"},
            {"step": 99},
        ],
        "agent_name": "assistant",
        "step_number": "9",
        "supporting_stages": "Data-Flow, final screening",
    }
    answer = parse_attribution(data, roster, 11)
    assert (answer.agent, answer.step) == ("Assistant", 9)
    assert [a.step for a in answer.assessments] == [9]
    assert answer.assessments[0].upstream_causes == [7]
    assert answer.assessments[0].data_flow == "misinterprets"
    assert answer.stages == ["Data-Flow", "Final Screening"]
    # A step outside the trace is read as written (the agent/step rule marks it later).
    assert parse_attribution({**data, "step_number": 11}, roster, 11).step == 11
    with pytest.raises(ValueError):
        parse_attribution({**data, "agent_name": "Nobody"}, roster, 11)


@pytest.mark.parametrize("written", [9, 9.0, "9", "Step 9", "step #9", "#9", "9.", "**9**"])
def test_the_attributed_step_is_read_as_every_method_reads_a_step(written: object) -> None:
    data = {"agent_name": "Assistant", "step_number": written}
    answer = parse_attribution(data, ["WebSurfer", "Assistant"], 11)
    assert (answer.agent, answer.step) == ("Assistant", 9)


@pytest.mark.parametrize(
    ("written", "error"),
    [("9 or 10", "several candidate steps"), ("about 9", "hedged"), ("3.5", "not a whole")],
)
def test_an_unreadable_attributed_step_says_why(written: str, error: str) -> None:
    with pytest.raises(ParseError, match=error):
        parse_attribution({"agent_name": "Assistant", "step_number": written}, ["Assistant"], 11)


# --- graph, order, renderings, routing ---------------------------------------------------


def test_reverse_topological_order_follows_subtask_edges() -> None:
    graph = _graph()
    graph.subtask_edges = [
        SubtaskEdge(source="S1", target="S2"),
        SubtaskEdge(source="S2", target="S3"),
    ]
    assert reverse_topological_order(graph) == ["S3", "S2", "S1"]


def test_dot_and_mermaid_renderings_show_nodes_edges_and_loops() -> None:
    graph = _graph()
    graph.agents = [
        AgentNode(id="S2:Orchestrator", subtask="S2", agent="Orchestrator", steps=[2, 4, 6]),
        AgentNode(id="S2:WebSurfer", subtask="S2", agent="WebSurfer", steps=[3, 5, 7]),
        AgentNode(id="S3:Assistant", subtask="S3", agent="Assistant", steps=[9]),
    ]
    graph.subtask_edges = [SubtaskEdge(source="S2", target="S3", type="data_dependency")]
    graph.candidates = Candidates(subtasks=["S3"], agents=["S3:Assistant"], steps=[9])
    dot = render_dot(graph)
    assert dot.startswith('digraph "chief:chief-loop-1"') and dot.rstrip().endswith("}")
    assert 'subgraph "cluster_S2"' in dot
    assert '"S2:Orchestrator" [label="Orchestrator\\nsteps 2,4,6"]' in dot
    assert "data_dependency" in dot and "L1: Orchestrator repeats x3" in dot
    assert "7→9: 555-0199" in dot
    assert 'fillcolor="#f4cccc"' in dot
    mermaid = render_mermaid(graph)
    assert mermaid.startswith("flowchart TB")
    assert "S2 ==>|data_dependency| S3" in mermaid
    assert 'S2_WebSurfer -->|"7→9: 555-0199"| S3_Assistant' in mermaid
    assert "class S3_Assistant candidate" in mermaid


def test_the_prompt_view_is_compact_json_with_one_entry_a_line() -> None:
    graph = _graph()
    graph.agents = [
        AgentNode(id="S2:Orchestrator", subtask="S2", agent="Orchestrator", steps=[2, 4, 6]),
        AgentNode(id="S3:Assistant", subtask="S3", agent="Assistant", steps=[9]),
    ]
    graph.subtask_edges = [
        SubtaskEdge(source="S1", target="S2", type="data_dependency"),
        SubtaskEdge(source="S2", target="S3", type="logical_prereq"),
    ]
    text = prompt_view(graph, max_step_edges=2)
    full = view_data(graph, include_oracles=True, max_step_edges=2)
    assert json.loads(text) == full  # same content as the data, nothing dropped
    assert full["step_edges_omitted"] == len(graph.step_edges) - 2 > 0
    lines = text.splitlines()
    assert not any(line.startswith(" ") for line in lines)
    assert '{"from":"S1","to":"S2","type":"data_dependency","patterns":[]},' in lines
    entries = sum(len(v) for v in full.values() if isinstance(v, list))
    sections = sum(1 for v in full.values() if isinstance(v, list) and v)
    scalars = len(full) - sections
    assert len(lines) == 2 + entries + 2 * sections + scalars


def test_a_value_linked_to_many_steps_is_one_entry_of_the_prompt_view() -> None:
    def edge(producer: int, consumer: int, data: str, origin: str) -> StepEdge:
        return StepEdge(
            producer=producer,
            consumer=consumer,
            producer_agent="A",
            consumer_agent="B",
            data=data,
            origin=origin,  # type: ignore[arg-type]
        )

    edges = [
        edge(0, 8, "10", "deterministic"),
        edge(0, 6, "10", "deterministic"),
        edge(2, 3, "the plan", "llm"),
        edge(0, 7, "10", "deterministic"),
        edge(0, 3, "42", "deterministic"),
        edge(5, 6, "10", "deterministic"),
    ]
    assert step_edge_entries(edges) == [
        {"producer": 0, "consumer": 3, "data": "42", "type": "text", "origin": "deterministic"},
        {"producer": 2, "consumer": 3, "data": "the plan", "type": "text", "origin": "llm"},
        {
            "producer": 0,
            "consumers": [6, 7, 8],
            "data": "10",
            "type": "text",
            "origin": "deterministic",
        },
        {"producer": 5, "consumer": 6, "data": "10", "type": "text", "origin": "deterministic"},
    ]
    # Every edge is still said: each (producer, consumer, value) appears once.
    said = {
        (e["producer"], c, e["data"])
        for e in step_edge_entries(edges)
        for c in e.get("consumers", [e.get("consumer")])
    }
    assert said == {(e.producer, e.consumer, e.data) for e in edges}


def test_the_attribution_candidate_set_leaves_the_oracles_to_the_graph() -> None:
    graph = _graph()
    graph.oracles = [Oracle(subtask="S2", goal="find the library's phone number")]
    graph.candidates = Candidates(subtasks=["S2"], reasons={"S2": "wrong branch"})
    view = json.loads(candidate_view(graph, [7], pruned=True))
    assert view["candidate_error_subtasks"] == [{"id": "S2", "reason": "wrong branch"}]
    shown = prompt_view(graph, include_oracles=True, max_step_edges=80)
    assert "find the library's phone number" in shown


def test_every_prompt_routes_to_its_own_stage() -> None:
    from faultfinder.methods.chief import instructions

    templates = {**instructions.TEMPLATES, "decompose-refine": prompts.DECOMPOSE_REFINE}
    assert len(templates) == len(prompts.MARKERS) == len(prompts.STAGE_TITLES) + 1
    for stage, template in templates.items():
        assert prompts.stage_of(template) == stage
    # An 'instructions-first' request names its stage by its title line alone.
    for stage, template in instructions.TEMPLATES.items():
        fields = {"last": 9, "rag_ref": "the problem", "order": "S2 -> S1", "subtask_id": "S1"}
        assert prompts.stage_of(instructions.request(template, fields)) == stage
        title_only = prompts.STAGE_LINE.format(title=prompts.STAGE_TITLES[stage])
        assert prompts.stage_of(title_only) == stage
