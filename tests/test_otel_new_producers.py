"""Producers first tried in 2026-11: Pydantic AI's own instrumentation (no Logfire) with a
Coordinator delegating to a Researcher through a tool, and AutoGen AgentChat's built-in
tracing of a SelectorGroupChat, alone and with either OpenAI client instrumentation.

The committed fixtures come from the real programs in tests/fixtures/otel/programs, run
against the loopback scripted upstream and exported by the real OTLP/HTTP exporter to the
collector (`python tests/otel_programs.py --producer NAME PYTHON`). The tests marked
``frameworks_env`` run the programs again, each in its framework's own environment
(tests/framework_env.py), and check the fresh export reads the same.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import Trace

FIXTURES = Path(__file__).parent / "fixtures" / "otel"
QUESTION = "What is 2 + 3?"
DELEGATION = FIXTURES / "pydantic-ai-delegation.otlp.jsonl"


def _calls(trace: Trace) -> list[tuple[str, list[tuple[str, object]], list[tuple[str, str]]]]:
    return [
        (
            s.agent,
            [(c.name, json.loads(c.arguments)) for c in s.tool_calls],
            [(r.name, r.content) for r in s.tool_results],
        )
        for s in trace.steps
    ]


def check_delegation(trace: Trace) -> None:
    """The Coordinator asks the Researcher through its tool; the Researcher's run nests
    under that tool span, and its own `add` call (the wrong operand) keeps its result."""
    assert _calls(trace) == [
        (
            "Coordinator",
            [("ask_researcher", {"question": "Add 2 and 3."})],
            [("ask_researcher", "2 + 3 = 6")],
        ),
        ("Researcher", [("add", {"a": 2, "b": 4})], [("add", "6")]),
        ("Researcher", [], []),
        ("Coordinator", [], []),
    ]
    assert [a.name for a in trace.agents] == ["Coordinator", "Researcher"]
    assert [s.content for s in trace.steps[2:]] == ["2 + 3 = 6", "The answer is 2 + 3 = 6."]
    assert trace.task == QUESTION and trace.final_answer == "The answer is 2 + 3 = 6."
    assert all(s.kind == "llm" and s.input_messages and s.usage for s in trace.steps)
    researcher = trace.steps[1].metadata["tool_spans"]
    assert [t["matched_by"] for t in researcher] == ["call id"]


def test_pydantic_ai_delegation_fixture() -> None:
    (trace,) = load_traces(DELEGATION)
    assert trace.source.format == "otlp"
    check_delegation(trace)
    others = sorted(span["name"] for span in trace.metadata["other_spans"])
    assert others == ["invoke_agent Coordinator", "invoke_agent Researcher"]  # the rest: steps


def test_cli_shortlist_reads_the_delegation() -> None:
    args = ["attribute", str(DELEGATION), "--method", "shortlist", "--json", "--no-save"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.output[result.output.index("{") :])
    ranked = {(s["step"], s["agent"]) for s in verdict["details"]["scores"]}
    assert ranked == {(0, "Coordinator"), (1, "Researcher"), (2, "Researcher"), (3, "Coordinator")}


@pytest.mark.slow
@pytest.mark.frameworks_env
def test_pydantic_ai_delegation_live(tmp_path: Path) -> None:
    from framework_env import PYDANTIC_AI_OTEL, framework_python
    from otel_programs import delegation_upstream, run_program

    python = str(framework_python("pydantic-ai-otel", PYDANTIC_AI_OTEL))
    program = ["pydantic_ai_delegation.py", QUESTION]
    run = run_program(program, delegation_upstream, tmp_path, python=python)
    assert run.llm_requests == 4
    (trace,) = load_traces(run.raw)
    check_delegation(trace)


AUTOGEN = {
    "none": "autogen-selector.otlp.jsonl",
    "openai-v2": "autogen-selector-openai-v2.otlp.jsonl",
    "openinference": "autogen-selector-openinference.otlp.jsonl",
}
"""AutoGen's own spans alone, and with each OpenAI client instrumentation."""


def autogen_run(traces: list[Trace]) -> Trace:
    """The run's trace (AutoGen's `create_agent` spans of agents built before the run's
    span starts are traces of their own, with no step)."""
    (run,) = [t for t in traces if t.steps]
    return run


def check_autogen(trace: Trace, kind: str) -> None:
    """The selector picks the Planner, who restates the task; the Solver calls add with a
    wrong operand (4 for 3), gets 6 and ends the chat."""
    assert trace.task == QUESTION
    # The Solver said "The answer is 6. TERMINATE": the word that ends the chat is not the
    # answer (as the AG2 reader and the program's own print treat it); the step keeps it.
    assert trace.final_answer == "The answer is 6."
    assert trace.metadata["final_answer_from"].endswith(
        "'TERMINATE' removed (AutoGen's word for ending the chat)"
    )
    solver_call = ("Solver", [("add", {"a": 2, "b": 4})], [("add", "6")])
    if kind == "none":  # no model-call span: each agent's turn is a step of its own
        assert _calls(trace) == [("Planner", [], []), solver_call]
        planner, solver = trace.steps
        assert planner.content == "Solver, please add 2 and 3."
        assert solver.content == "The answer is 6. TERMINATE"
        assert planner.input_messages == [{"role": "user", "content": QUESTION, "name": "user"}]
        assert [m["name"] for m in solver.input_messages or []] == ["user", "Planner"]
        assert all("AutoGen runtime spans" in s.metadata["inferred"]["io"] for s in trace.steps)
        assert trace.metadata["agent_steps"] == 2
        return
    assert _calls(trace) == [
        ("SelectorGroupChatManager", [], []),
        ("Planner", [], []),
        solver_call,
        ("Solver", [], []),
    ]
    selector = trace.steps[0]
    assert selector.content == "Planner"
    assert "AutoGen runtime span" in selector.metadata["inferred"]["agent"]
    assert [s.content for s in trace.steps[1::2]] == [
        "Solver, please add 2 and 3.",
        "The answer is 6. TERMINATE",
    ]
    assert all(s.input_messages and s.usage for s in trace.steps)


@pytest.mark.parametrize("kind", sorted(AUTOGEN))
def test_autogen_selector_fixture(kind: str) -> None:
    traces = load_traces(FIXTURES / AUTOGEN[kind])
    assert all(t.source.format == "otlp" for t in traces)
    check_autogen(autogen_run(traces), kind)


@pytest.mark.parametrize("kind", sorted(AUTOGEN))
def test_cli_shortlist_reads_the_autogen_run(tmp_path: Path, kind: str) -> None:
    result = CliRunner().invoke(
        main, ["import", str(FIXTURES / AUTOGEN[kind]), "--out-dir", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    (run,) = [p for p in tmp_path.glob("*.json") if json.loads(p.read_text())["steps"]]
    args = ["attribute", str(run), "--method", "shortlist", "--json", "--no-save"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.output[result.output.index("{") :])
    agents = [s["agent"] for s in verdict["details"]["scores"]]
    assert "Solver" in agents and len(agents) == (2 if kind == "none" else 4)


NO_SPAN = FIXTURES / "autogen-selector-no-span.otlp.jsonl"
"""The same team run with no span of the user's around it (``--no-span``): AutoGen's
runtime starts a new trace for every message it sends, tied to the sender by a span link."""


def check_stitched(traces: list[Trace]) -> None:
    """One run, read as the run inside the user's span reads; its parts' ids are kept."""
    run = autogen_run(traces)
    check_autogen(run, "none")
    parts = run.metadata["stitched_traces"]
    assert len(parts) > 10 and run.metadata["trace_id"] == parts[0]
    assert "span links of AutoGen's runtime spans" in run.metadata["stitched_by"]
    assert {s.metadata["trace_id"] for s in run.steps} <= set(parts)
    # Only the agents' create_agent traces, linked to nothing, stay apart (as with the span).
    assert [len(t.steps) for t in traces].count(0) == 2 and len(traces) == 3


def test_autogen_without_a_run_span_is_one_run() -> None:
    check_stitched(load_traces(NO_SPAN))


def test_a_verdict_on_a_stitched_run_exports_into_its_steps_own_trace() -> None:
    from faultfinder.judging.method import Attribution
    from faultfinder.writeback import otlp_payload

    run = autogen_run(load_traces(NO_SPAN))
    solver = run.steps[1]
    verdict = Attribution(
        agent="Solver", step=1, reason="4 is not 3", trace_id=run.id, method="shortlist",
        config={}, model="none", prompt_version="x", with_ground_truth=False,
        observability="outputs",
    )  # fmt: skip
    (span,) = otlp_payload(verdict, run)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert span["parentSpanId"] == solver.metadata["span_id"]
    assert span["traceId"] == solver.metadata["trace_id"] != run.metadata["trace_id"]


def test_links_of_other_spans_join_nothing(tmp_path: Path) -> None:
    """Two traces whose spans link, neither AutoGen's runtime: still two traces."""

    def span(trace: str, span_id: str, links: list[dict[str, str]]) -> dict[str, object]:
        attrs = [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}]
        return {
            "traceId": trace * 32, "spanId": span_id * 16, "name": "chat",
            "attributes": attrs, "links": links,
        }  # fmt: skip

    spans = [span("a", "1", []), span("b", "2", [{"traceId": "a" * 32, "spanId": "1" * 16}])]
    path = tmp_path / "linked.json"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}))
    assert len(load_traces(path)) == 2


@pytest.mark.slow
@pytest.mark.frameworks_env
def test_autogen_without_a_run_span_live(tmp_path: Path) -> None:
    from framework_env import AUTOGEN_AGENTCHAT_OTEL, framework_python
    from otel_programs import autogen_upstream, run_program

    python = str(framework_python("autogen-agentchat-otel", AUTOGEN_AGENTCHAT_OTEL))
    program = ["autogen_selector_team.py", "none", QUESTION, "--no-span"]
    run = run_program(program, autogen_upstream, tmp_path, python=python)
    assert run.llm_requests == 4 and len(run.traces) > 10  # the collector: one file a part
    check_stitched(load_traces(run.raw))


@pytest.mark.slow
@pytest.mark.frameworks_env
@pytest.mark.parametrize("kind", sorted(AUTOGEN))
def test_autogen_selector_live(tmp_path: Path, kind: str) -> None:
    from framework_env import AUTOGEN_AGENTCHAT_OTEL, framework_python
    from otel_programs import autogen_upstream, run_program

    python = str(framework_python("autogen-agentchat-otel", AUTOGEN_AGENTCHAT_OTEL))
    program = ["autogen_selector_team.py", kind, QUESTION]
    run = run_program(program, autogen_upstream, tmp_path, python=python)
    assert run.llm_requests == 4
    check_autogen(autogen_run(load_traces(run.raw)), kind)


@pytest.mark.parametrize(
    ("said", "answer"),
    [
        ("TERMINATE", None),  # only the signal: no answer, as the AG2 reader gives none
        ("Process TERMINATED. TERMINATE", "Process TERMINATED."),  # a word holding it stays
        # A line break, as the message attribute's JSON inside the OTLP JSON writes it.
        ("TERMINATE\\\\nThe answer is 6.", "The answer is 6."),
    ],
)
def test_autogen_final_answer_loses_only_the_keyword(
    tmp_path: Path, said: str, answer: str | None
) -> None:
    path = tmp_path / "run.otlp.jsonl"
    text = (FIXTURES / AUTOGEN["none"]).read_text()
    assert text.count("The answer is 6. TERMINATE") > 1
    path.write_text(text.replace("The answer is 6. TERMINATE", said))
    run = autogen_run(load_traces(path))
    assert run.final_answer == answer
    assert run.steps[-1].content == said.replace("\\\\n", "\n")  # the Solver's words, whole
    if answer is None:
        assert "nothing else was said" in run.metadata["final_answer_from"]


def test_import_names_autogen_agent_creation_traces(tmp_path: Path) -> None:
    """The agents' `create_agent` spans, built before the run's span, are traces of their
    own: the warning says what they are instead of 'none of its spans is an agent'."""
    path = FIXTURES / AUTOGEN["none"]
    result = CliRunner().invoke(main, ["import", str(path), "--out-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if "has no steps" in line]
    assert len(warnings) == 2
    assert all("name the agent(s)" in w and "create_agent" in w for w in warnings)
    assert any("Planner but hold" in w for w in warnings)
