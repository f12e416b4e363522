"""LangGraph's supervisor team on Claude (ChatAnthropic) traced by OpenInference's LangChain
instrumentation: its spans, exported with the real OTLP/HTTP exporter to faultfinder's
collector, import with the same agents, steps and tool calls as the proxy records for the
same program (issue 25, part 6).

Each ``create_react_agent`` runs its model in an inner graph node called ``agent``, which is
also the name of the AGENT span OpenInference writes; the agent the user named is the graph
node holding that subgraph, read from LangGraph's metadata on the span. The unit tests below
pin that reading on small hand-built exports.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import frameworks_scripts as scripts
import otel_helpers as h
from faultfinder.replay.session import SessionOptions, record_run
from faultfinder.testing import FakeOpenAIServer
from faultfinder.traces.importers._langgraph import graph_node_agent
from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import ToolCall
from otel_programs import collecting, settle

HERE = Path(__file__).parent
PROGRAM = HERE / "fixtures" / "otel" / "programs" / "langgraph_claude_team.py"
TEAM = HERE / "fixtures" / "frameworks" / "langgraph_claude_team.py"
QUIET = {"LANGCHAIN_TRACING_V2": "false", "LANGSMITH_TRACING": "false"}


def traced_run(tmp_path: Path) -> Path:
    """Run the instrumented team against the fake upstream; the OTLP file it exported."""
    raw = tmp_path / "raw.otlp.jsonl"
    with (
        FakeOpenAIServer(scripts.langgraph) as fake,
        collecting(tmp_path / "traces", raw) as collector,
    ):
        env = {
            **os.environ,
            **QUIET,
            "ANTHROPIC_BASE_URL": fake.base_url.removesuffix("/v1"),
            "ANTHROPIC_API_KEY": "sk-ant-fake-test-key",
            **collector.env,
            "NO_PROXY": "127.0.0.1,localhost",
        }
        proc = subprocess.run(
            [sys.executable, str(PROGRAM), scripts.TWO_CITIES],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        settle(collector.server)
    return raw


def arguments(call: ToolCall) -> Any:
    return json.loads(call.arguments) if call.arguments else {}


@pytest.mark.slow
def test_openinference_langgraph_spans_import_with_the_recorded_agents_and_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("openinference.instrumentation.langchain")
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    pytest.importorskip("langchain_anthropic")
    pytest.importorskip("langgraph_supervisor")
    for key in ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    raw = traced_run(tmp_path / "otel")
    for key, value in {**QUIET, "OTEL_SDK_DISABLED": "true"}.items():
        monkeypatch.setenv(key, value)  # the recorded run: no tracing
    (imported,) = load_traces(str(raw))
    command = [sys.executable, str(TEAM), scripts.TWO_CITIES]
    with FakeOpenAIServer(reply=scripts.langgraph) as upstream:
        recorded = asyncio.run(
            record_run(command, upstream.base_url, tmp_path, run_id="r",
                       options=SessionOptions(echo=False, timeout=240))
        )  # fmt: skip
    proxy = recorded.trace
    assert recorded.child.exit_code == 0
    steps = [s for s in imported.steps if s.kind == "llm"]
    assert len(steps) == len(proxy.steps) == 7
    # The spans name each agent by the graph node the program gave it ("researcher"); the
    # proxy by the role its system prompt states ("You are the Researcher"). Same agents,
    # step for step, and never LangGraph's inner node name "agent".
    assert [s.agent for s in steps] == [
        "supervisor",
        "researcher",
        "researcher",
        "supervisor",
        "calculator",
        "calculator",
        "supervisor",
    ]
    assert [s.agent.casefold() for s in steps] == [s.agent.casefold() for s in proxy.steps]
    assert sorted(a.name for a in imported.agents) == ["calculator", "researcher", "supervisor"]
    # OpenInference leaves out an attribute whose value is empty: a call without arguments
    # (transfer_to_researcher) has none on the span, "{}" in the recording.
    assert [[(c.name, arguments(c)) for c in s.tool_calls] for s in steps] == [
        [(c.name, arguments(c)) for c in s.tool_calls] for s in proxy.steps
    ]
    assert sum(len(s.tool_calls) for s in steps) == 5
    assert [s.content for s in steps] == [s.content for s in proxy.steps]
    assert imported.final_answer == proxy.final_answer == "164130"


# --- the reading of LangGraph's metadata, unit by unit ---------------------------------


@pytest.mark.parametrize(
    ("meta", "agent"),
    [
        # create_react_agent inside a supervisor: the node holding the subgraph.
        ({"langgraph_node": "agent", "langgraph_checkpoint_ns": "research:1|agent:2"}, "research"),
        ({"langgraph_node": "tools", "langgraph_checkpoint_ns": "research:1|tools:3"}, "research"),
        # Only the namespace of the node's graph (checkpoint_ns) is known.
        ({"langgraph_node": "agent", "checkpoint_ns": "writer:9"}, "writer"),
        # A team of teams: the innermost node that is not a prebuilt agent's own node.
        (
            {"langgraph_node": "agent", "langgraph_checkpoint_ns": "team:1|search:2|agent:3"},
            "search",
        ),
        # A subgraph whose nodes call the model themselves keeps their names.
        ({"langgraph_node": "critic", "langgraph_checkpoint_ns": "team:1|critic:2"}, "critic"),
        # A flat graph whose node is called "agent" keeps that name: nothing is invented.
        ({"langgraph_node": "agent", "langgraph_checkpoint_ns": "agent:1"}, "agent"),
        ({"langgraph_node": "planner"}, "planner"),
        ({"thread_id": "t1"}, None),
    ],
)
def test_graph_node_agent(meta: dict[str, Any], agent: str | None) -> None:
    assert graph_node_agent(meta) == agent


STATE = json.dumps(
    {
        "messages": [
            {"type": "human", "data": {"content": "Find it.", "type": "human"}},
            {"type": "ai", "data": {"content": "Found.", "type": "ai"}},
        ]
    }
)
"""The graph's final state as OpenInference writes it (LangChain's ``messages_to_dict``)."""


def langgraph_export(metadata: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, Any]:
    """An OpenInference LangChain trace: a CHAIN node span, the inner AGENT span ``agent``
    and its LLM span, each carrying LangGraph's metadata as OpenInference writes it."""
    user = {"llm.input_messages.0.message.role": "user"}
    user["llm.input_messages.0.message.content"] = "Find it."
    reply = {
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "Found.",
    }
    inner = {"langgraph_node": "agent", "langgraph_checkpoint_ns": "research:a1|agent:b2"}
    outer = {"langgraph_node": "research", "langgraph_checkpoint_ns": "research:a1"}
    return h.export(
        [
            h.span("a" * 16, None, "LangGraph", 0,
                   {"openinference.span.kind": "CHAIN", "output.value": STATE}),
            h.span("b" * 16, "a" * 16, "research", 1,
                   {"openinference.span.kind": "CHAIN", **metadata(outer)}),
            h.span("c" * 16, "b" * 16, "agent", 2,
                   {"openinference.span.kind": "AGENT", **metadata(inner)}),
            h.span("d" * 16, "c" * 16, "ChatAnthropic", 3,
                   {"openinference.span.kind": "LLM", **metadata(inner),
                    **user, **reply}),
        ]
    )  # fmt: skip


METADATA_ENCODINGS: dict[str, Callable[[dict[str, str]], dict[str, str]]] = {
    "json-string": lambda meta: {"metadata": json.dumps(meta)},
    "flattened": lambda meta: {f"metadata.{key}": value for key, value in meta.items()},
}


@pytest.mark.parametrize("encoding", list(METADATA_ENCODINGS))
def test_openinference_span_agent_is_the_graph_node_that_holds_the_inner_agent(
    tmp_path: Path, encoding: str
) -> None:
    """The ``metadata`` attribute as OpenInference writes it (a JSON string) or as an
    object flattened into ``metadata.*`` keys names the agent; the span name does not."""
    path = tmp_path / "t.otlp.json"
    path.write_text(json.dumps(langgraph_export(METADATA_ENCODINGS[encoding])))
    (trace,) = load_traces(str(path))
    (step,) = trace.steps
    assert step.agent == "research" and step.content == "Found."
    assert [a.name for a in trace.agents] == ["research"]
    assert trace.final_answer == "Found."  # the state's last reply
