"""A LangChain program traced by OpenInference has CHAIN, LLM and TOOL spans and no AGENT
span: its agents are the named chains that hold the model and tool calls (the LangSmith
reader's rule for the same runs), not the service name for every step; LangChain's and
LangGraph's own wrapper chains (`RunnableSequence`, `LangGraph`...) are looked through. A
LangChain tool's result is its ToolMessage's content, not the serialised message.

The traces come from real programs (tests/fixtures/otel/programs/langchain_team.py: plain
runnables, and a LangGraph graph) run against the loopback fake upstream with the real
`openinference-instrumentation-langchain` and OTLP/HTTP exporter (slow); the rule's edges
are pinned on small hand-built exports.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import Trace
from otel_helpers import export, span
from otel_programs import QUESTION, Run, run_program, team_upstream

# --- real programs ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """The team written with plain runnables and as a LangGraph graph, each run once."""
    for module in (
        "openinference.instrumentation.langchain",
        "langchain_openai",
        "langgraph.prebuilt",
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    ):
        pytest.importorskip(module)
    base = tmp_path_factory.mktemp("langchain")
    return {
        mode: run_program(["langchain_team.py", mode, QUESTION], team_upstream, base / mode)
        for mode in ("chains", "graph")
    }


def imported(run: Run) -> Trace:
    assert "FINAL ANSWER: The answer is 6." in run.stdout
    (trace,) = load_traces(run.raw)
    assert len(trace.steps) == run.llm_requests == 3
    return trace


def check_tool_call(trace: Trace) -> None:
    """The Solver's call of add (2 + 4, the scripted mistake), answered with 6: the
    ToolMessage's content and call id, matched to the call by that id."""
    call = trace.steps[1]
    assert [(c.id, c.name, json.loads(c.arguments)) for c in call.tool_calls] == [
        ("call_t1", "add", {"a": 2, "b": 4})
    ]
    assert [(r.call_id, r.name, r.content, r.status) for r in call.tool_results] == [
        ("call_t1", "add", "6", "success")
    ]
    assert [t["matched_by"] for t in call.metadata["tool_spans"]] == ["call id"]
    assert trace.steps[2].content == trace.final_answer == "The answer is 6."


@pytest.mark.slow
def test_named_chains_of_a_langchain_program_are_its_agents(runs: dict[str, Run]) -> None:
    trace = imported(runs["chains"])
    assert [s.agent for s in trace.steps] == ["Planner", "Solver", "Solver"]
    assert [a.name for a in trace.agents] == ["Planner", "Solver"]
    assert trace.metadata["service"] == "langchain-team"  # no longer every step's agent
    # the Planner's model call sits in a RunnableSequence inside the Planner chain
    assert [s.metadata["inferred"]["agent"] for s in trace.steps] == [
        f"chain span '{name}' holding model or tool calls (no agent span)"
        for name in ("Planner", "Solver", "Solver")
    ]
    check_tool_call(trace)
    assert trace.task == QUESTION


@pytest.mark.slow
def test_langgraph_nodes_still_name_the_agents_and_tool_results_are_unwrapped(
    runs: dict[str, Run],
) -> None:
    trace = imported(runs["graph"])
    assert [s.agent for s in trace.steps] == ["planner", "solver", "solver"]
    assert all(
        s.metadata["inferred"]["agent"] == "graph node of span 'ChatOpenAI'" for s in trace.steps
    )
    check_tool_call(trace)


# --- the rule on hand-built exports --------------------------------------------------------

LLM = {
    "openinference.span.kind": "LLM",
    "llm.model_name": "m",
    "llm.input_messages.0.message.role": "user",
    "llm.input_messages.0.message.content": "hi",
    "llm.output_messages.0.message.role": "assistant",
    "llm.output_messages.0.message.content": "hello",
}


def chain(sid: str, parent: str | None, name: str, start: int) -> dict[str, Any]:
    return span(sid, parent, name, start, {"openinference.span.kind": "CHAIN"})


def load_one(tmp_path: Path, spans: list[dict[str, Any]]) -> Trace:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(export(spans)), encoding="utf-8")
    (trace,) = load_traces(path)
    return trace


def test_wrapper_chains_are_looked_through(tmp_path: Path) -> None:
    trace = load_one(
        tmp_path,
        [
            chain("a000000000000001", None, "LangGraph", 0),
            chain("a000000000000002", "a000000000000001", "Researcher", 1),
            chain("a000000000000003", "a000000000000002", "RunnableParallel<plan,notes>", 2),
            chain("a000000000000004", "a000000000000003", "RunnableSequence", 3),
            span("a000000000000005", "a000000000000004", "ChatOpenAI", 4, LLM),
        ],
    )
    (step,) = trace.steps
    assert step.agent == "Researcher"


def test_the_root_chain_is_the_run_not_an_agent(tmp_path: Path) -> None:
    """As in the LangSmith reader: a call the root chain holds has no chain agent."""
    trace = load_one(
        tmp_path,
        [
            chain("a000000000000001", None, "team", 0),
            chain("a000000000000002", "a000000000000001", "RunnableSequence", 1),
            span("a000000000000003", "a000000000000002", "ChatOpenAI", 2, LLM),
        ],
    )
    (step,) = trace.steps
    assert step.agent == "demo"  # the service name
    assert step.metadata["inferred"]["agent"].startswith("service.name")


def test_an_agent_span_still_comes_first(tmp_path: Path) -> None:
    trace = load_one(
        tmp_path,
        [
            chain("a000000000000001", None, "team", 0),
            span(
                "a000000000000002",
                "a000000000000001",
                "Writer",
                1,
                {"openinference.span.kind": "AGENT", "agent.name": "Writer"},
            ),
            chain("a000000000000003", "a000000000000002", "draft", 2),
            span("a000000000000004", "a000000000000003", "ChatOpenAI", 3, LLM),
        ],
    )
    (step,) = trace.steps
    assert step.agent == "Writer"


def test_a_model_call_inside_a_tool_belongs_to_the_chain_holding_the_tool(
    tmp_path: Path,
) -> None:
    """As in the LangSmith reader, where that chain is an agent enclosing everything below."""
    trace = load_one(
        tmp_path,
        [
            chain("a000000000000001", None, "team", 0),
            chain("a000000000000002", "a000000000000001", "Solver", 1),
            span(
                "a000000000000003",
                "a000000000000002",
                "lookup",
                2,
                {"openinference.span.kind": "TOOL", "tool.name": "lookup"},
            ),
            span("a000000000000004", "a000000000000003", "ChatOpenAI", 3, LLM),
        ],
    )
    assert sorted((s.kind, s.agent) for s in trace.steps) == [("llm", "Solver"), ("tool", "Solver")]


def test_a_chain_holding_no_call_is_not_an_agent(tmp_path: Path) -> None:
    """Only a chain holding a model or tool call names one: here the Writer, not the
    "format" chain inside it, which holds a prompt span only."""
    trace = load_one(
        tmp_path,
        [
            chain("a000000000000001", None, "team", 0),
            chain("a000000000000002", "a000000000000001", "Writer", 1),
            chain("a000000000000003", "a000000000000002", "format", 2),
            span(
                "a000000000000004",
                "a000000000000003",
                "ChatPromptTemplate",
                3,
                {"openinference.span.kind": "PROMPT"},
            ),
            span("a000000000000005", "a000000000000002", "ChatOpenAI", 4, LLM),
        ],
    )
    (step,) = trace.steps
    assert step.agent == "Writer"
    assert [a.name for a in trace.agents] == ["Writer"]


def tool_spans(output: Any) -> list[dict[str, Any]]:
    """A Solver chain whose model call asks for `add` (call id call_9) and whose TOOL span
    (no call id of its own) has ``output``."""
    asks = {
        **LLM,
        "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call_9",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "add",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": "{}",
    }
    tool = {"openinference.span.kind": "TOOL", "tool.name": "add", "output.value": output}
    return [
        chain("a000000000000001", None, "team", 0),
        chain("a000000000000002", "a000000000000001", "Solver", 1),
        span("a000000000000003", "a000000000000002", "ChatOpenAI", 2, asks),
        span("a000000000000004", "a000000000000002", "add", 3, tool),
    ]


@pytest.mark.parametrize(
    ("output", "result"),
    [
        # OpenInference's LangChain instrumentation: {"type": "tool", "data": {...}}
        (
            {"type": "tool", "data": {"content": "6", "tool_call_id": "call_9", "status": "ok"}},
            ("call_9", "6", "success"),
        ),
        # LangChain's own serialisation, content as a list of parts
        (
            {
                "lc": 1,
                "type": "constructor",
                "id": ["langchain", "schema", "messages", "ToolMessage"],
                "kwargs": {"content": [{"type": "text", "text": "6"}], "tool_call_id": "call_9"},
            },
            ("call_9", "6", "success"),
        ),
        # a ToolMessage LangChain marked as an error
        (
            {"type": "tool", "data": {"content": "bad operand", "status": "error"}},
            (None, "bad operand", "error"),
        ),
        # any other object stays as it is
        (
            {"type": "sum", "data": {"value": 6}},
            (None, '{"type": "sum", "data": {"value": 6}}', "success"),
        ),
    ],
)
def test_tool_message_outputs_are_unwrapped(
    tmp_path: Path, output: dict[str, Any], result: tuple[Any, ...]
) -> None:
    trace = load_one(tmp_path, tool_spans(json.dumps(output)))
    (step,) = trace.steps
    assert step.agent == "Solver"
    assert [(r.call_id, r.content, r.status) for r in step.tool_results] == [result]
