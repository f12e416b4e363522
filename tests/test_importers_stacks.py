"""More tracing stacks, agent-only spans and OTLP envelopes (issue 27).

Every fixture here comes from a real program in tests/fixtures/otel/programs run offline
against the loopback scripted upstream (`python tests/otel_programs.py --producer NAME
PYTHON`, each library in its own interpreter): CrewAI with OpenInference and the model
client *not* instrumented, Traceloop's OpenLLMetry SDK, Pydantic AI under Logfire (whose
export repeats every span: Logfire's own OTLP exporter and the one the program adds both
send), MLflow Tracing (`Trace.to_json()`), LangSmith (a run tree with `child_runs`).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.judging.method import run_method
from faultfinder.llm import LLM, ScriptedBackend
from faultfinder.registry import create_method
from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import Trace

FIXTURES = Path(__file__).parent / "fixtures" / "otel"
QUESTION = "What is 2 + 3?"
TEAM = {
    "traceloop-team.otlp.jsonl": "otlp",
    "logfire-pydantic-ai.otlp.jsonl": "otlp",
    "mlflow-team.trace.json": "mlflow",
    "langsmith-team.runs.json": "langsmith",
}


def check_team(trace: Trace) -> None:
    """Planner restates; Solver calls add (wrongly: 4 for 3), gets 6, reports it."""
    assert [s.agent for s in trace.steps] == ["Planner", "Solver", "Solver"]
    assert [a.name for a in trace.agents] == ["Planner", "Solver"]
    planner, call, answer = trace.steps
    assert planner.content == "Solver, please add 2 and 3."
    assert [(c.name, json.loads(c.arguments)) for c in call.tool_calls] == [
        ("add", {"a": 2, "b": 4})
    ]
    assert [(r.name, r.content) for r in call.tool_results] == [("add", "6")]
    assert answer.content == "The answer is 6."
    assert trace.task == QUESTION and trace.final_answer == "The answer is 6."
    assert all(s.kind == "llm" and s.input_messages and s.usage for s in trace.steps)
    assert [s.usage.prompt_tokens for s in trace.steps if s.usage] == [17, 20, 21]
    assert all("agent" in s.metadata["inferred"] for s in trace.steps)


def attribute(trace: Trace, agent: str, step: int) -> None:
    """A method runs on the imported trace (all-at-once, scripted model)."""
    reply = f"Agent Name: {agent}\nStep Number: {step}\nReason for Mistake: 4 is not 3."
    backend = ScriptedBackend([reply])
    result = asyncio.run(run_method(create_method("all-at-once"), trace, LLM(backend)))
    assert (result.status, result.agent, result.step) == ("ok", agent, step)


@pytest.mark.parametrize("name", sorted(TEAM))
def test_stack_fixture(name: str) -> None:
    (trace,) = load_traces(FIXTURES / name)  # detected by content
    assert trace.source.format == TEAM[name]
    check_team(trace)
    attribute(trace, "Solver", 1)


def test_traceloop_agent_and_tool_spans_are_read() -> None:
    (trace,) = load_traces(FIXTURES / "traceloop-team.otlp.jsonl")
    assert trace.metadata["final_answer_from"] == "output of span 'math_team.workflow'"
    assert "traceloop.tracer" in trace.metadata["instrumentations"]
    assert "enclosing agent span 'Solver.agent'" in trace.steps[1].metadata["inferred"]["agent"]


def test_logfire_duplicated_spans_are_removed() -> None:
    (trace,) = load_traces(FIXTURES / "logfire-pydantic-ai.otlp.jsonl")
    assert trace.metadata["spans"] == 7 and trace.metadata["duplicate_spans"] == 7
    assert (
        trace.metadata["final_answer_from"] == "output of the last agent span 'invoke_agent Solver'"
    )


def test_crewai_agent_spans_without_llm_spans() -> None:
    """The model client is not instrumented: each agent span is its agent's step, the three
    tool spans under the Researcher are its three calls in start order, the crew's output
    is the final answer — not one step and one call, as before."""
    (trace,) = load_traces(FIXTURES / "crewai-agents-only.otlp.jsonl")
    assert [s.agent for s in trace.steps] == ["Researcher", "Writer"]
    researcher, writer = trace.steps
    assert [json.loads(c.arguments) for c in researcher.tool_calls] == [
        {"a": 2, "b": 4},
        {"a": 6, "b": 1},
        {"a": 7, "b": 0},
    ]
    assert [r.content for r in researcher.tool_results] == ["6", "7", "7"]
    assert researcher.content.endswith("Final Answer: 7")
    assert writer.content == "The answer is 7."
    assert trace.final_answer == "The answer is 7."
    assert QUESTION in trace.task
    for step in trace.steps:
        inferred = step.metadata["inferred"]
        assert "no LLM span" in inferred["step"] and "agent span" in inferred["agent"]
        assert step.input_messages  # the agent's conversation, from CrewAI's task output
    assert trace.metadata["agent_steps"] == 2
    attribute(trace, "Researcher", 0)


def test_genai_invoke_agent_spans_without_chat_spans(tmp_path: Path) -> None:
    """The OpenAI Agents SDK run traced by the OTel GenAI instrumentation, its `chat` spans
    removed (as if the model calls were not traced): the `invoke_agent` spans give each
    agent's step, `execute_tool` its call and result, the last agent's reply the answer."""
    lines = []
    for line in (FIXTURES / "openai-agents-genai.otlp.jsonl").read_text().splitlines():
        request = json.loads(line)
        for rs in request["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                ss["spans"] = [
                    s
                    for s in ss["spans"]
                    if not any(
                        a["key"] == "gen_ai.operation.name"
                        and a["value"].get("stringValue") == "chat"
                        for a in s.get("attributes", [])
                    )
                ]
        lines.append(json.dumps(request))
    path = tmp_path / "agents-only.otlp.jsonl"
    path.write_text("\n".join(lines))
    (trace,) = load_traces(path)
    assert [s.agent for s in trace.steps] == ["Triage", "Math tutor"]
    tutor = trace.steps[1]
    assert [(c.name, json.loads(c.arguments)) for c in tutor.tool_calls] == [
        ("add", {"a": 2, "b": 4})
    ]
    assert [r.content for r in tutor.tool_results] == ["6"]
    assert tutor.content == "The answer is 6." and trace.final_answer == "The answer is 6."
    assert all("no LLM span" in s.metadata["inferred"]["step"] for s in trace.steps)
    (handoff,) = trace.metadata["handoffs"]
    assert (handoff["from"], handoff["to"]) == ("Triage", "Math tutor")


def _span(span_id: str, parent: str | None, start: int, attrs: dict[str, str]) -> dict[str, Any]:
    return {
        "traceId": "ab" * 16,
        "spanId": span_id * 8,
        **({"parentSpanId": parent * 8} if parent else {}),
        "name": attrs["gen_ai.operation.name"],
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 1),
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()],
    }


def test_repeated_calls_of_one_tool_stay_separate_calls(tmp_path: Path) -> None:
    """One model call, then three executions of the same tool without call ids: three
    calls with their results in start order, not one call with three results."""
    call = {"type": "tool_call", "name": "add", "arguments": "{}"}
    out = json.dumps([{"role": "assistant", "parts": [call]}])
    op = "gen_ai.operation.name"
    agent = {op: "invoke_agent", "gen_ai.agent.name": "Solver"}
    tools = [
        {op: "execute_tool", "gen_ai.tool.name": "add", "gen_ai.tool.call.result": str(n)}
        for n in (3, 4, 5)
    ]
    spans = [
        _span("01", None, 1, agent),
        _span("02", "01", 2, {op: "chat", "gen_ai.output.messages": out}),
        *(_span(f"0{n}", "01", n, tool) for n, tool in zip((3, 4, 5), tools, strict=True)),
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}))
    (trace,) = load_traces(path)
    (step,) = trace.steps
    assert [c.name for c in step.tool_calls] == ["add", "add", "add"]
    assert [r.content for r in step.tool_results] == ["3", "4", "5"]


def test_crewai_with_llm_spans_still_gives_the_finer_steps() -> None:
    (trace,) = load_traces(FIXTURES / "crewai-openinference.otlp.jsonl")
    assert [s.agent for s in trace.steps] == ["Researcher", "Researcher", "Writer"]
    assert "agent_steps" not in trace.metadata


def _otlp_lines() -> list[dict[str, Any]]:
    path = FIXTURES / "openai-agents-openinference.otlp.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _shape(trace: Trace) -> list[tuple[str, str, list[str]]]:
    return [(s.agent, s.content, [c.name for c in s.tool_calls]) for s in trace.steps]


@pytest.mark.parametrize(
    ("wrap", "under"),
    [
        (lambda r: {"timestamp": 1, "project_id": "p", "data": r}, ["data"]),
        (lambda r: {"payload": json.dumps(r), "kind": "otlp"}, ["payload"]),
        (lambda r: {"event": {"body": {"request": r}}}, ["event.body.request"]),
        (lambda r: [r], []),
    ],
)
def test_otlp_envelopes_per_line_and_gzipped(tmp_path: Path, wrap: Any, under: list[str]) -> None:
    (plain,) = load_traces(FIXTURES / "openai-agents-openinference.otlp.jsonl")
    text = "\n".join(json.dumps(wrap(r)) for r in _otlp_lines()) + "\n"
    path = tmp_path / "store.jsonl.gz"
    path.write_bytes(gzip.compress(text.encode()))
    (trace,) = load_traces(path)  # detected
    assert trace.source.format == "otlp"
    assert _shape(trace) == _shape(plain)
    assert trace.metadata.get("otlp_under", []) == under


def test_otlp_envelope_document_holding_an_array_of_requests(tmp_path: Path) -> None:
    (plain,) = load_traces(FIXTURES / "openai-agents-openinference.otlp.jsonl")
    path = tmp_path / "export.json"
    path.write_text(json.dumps({"meta": {"n": 1}, "payload": {"requests": _otlp_lines()}}))
    (trace,) = load_traces(path)
    assert _shape(trace) == _shape(plain)
    assert trace.metadata["otlp_under"] == ["payload.requests[]"]


def test_cli_import_names_the_envelope(tmp_path: Path) -> None:
    path = tmp_path / "store.jsonl"
    path.write_text("\n".join(json.dumps({"data": r}) for r in _otlp_lines()))
    result = CliRunner().invoke(main, ["import", str(path)])
    assert result.exit_code == 0, result.output
    assert "OTLP under 'data'" in result.output


def test_envelope_without_a_request_is_an_error_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    lines = [json.dumps({"data": r}) for r in _otlp_lines()]
    lines[1] = json.dumps({"data": {"resourceSpans": "oops"}})
    path.write_text("\n".join(lines))
    with pytest.raises(Exception, match=r"bad.jsonl:2: field 'data.resourceSpans'"):
        load_traces(path, format="otlp")


def _runs(tree: dict[str, Any]) -> list[dict[str, Any]]:
    """A run tree as the flat run list `Client.list_runs` returns."""
    children = tree.get("child_runs") or []
    flat = {k: v for k, v in tree.items() if k != "child_runs"}
    return [flat] + [r for child in children for r in _runs(child)]


def test_langsmith_flat_runs_and_dotted_order(tmp_path: Path) -> None:
    tree = json.loads((FIXTURES / "langsmith-team.runs.json").read_text())
    runs = _runs(tree)
    flat = tmp_path / "runs.json"
    flat.write_text(json.dumps(list(reversed(runs))))  # any order: the tree orders them
    (trace,) = load_traces(flat)
    check_team(trace)
    lines = tmp_path / "runs.jsonl"
    lines.write_text("\n".join(json.dumps({**r, "parent_run_id": None}) for r in runs))
    (by_dotted_order,) = load_traces(lines)  # parents from dotted_order alone
    check_team(by_dotted_order)


def test_langsmith_langgraph_nodes_name_the_agents(tmp_path: Path) -> None:
    """A LangGraph run: each run carries its node in `extra.metadata.langgraph_node`."""
    tree = json.loads((FIXTURES / "langsmith-team.runs.json").read_text())
    for agent_run, node in zip(tree["child_runs"], ["plan", "solve"], strict=True):
        agent_run["name"] = "RunnableSequence"  # LangGraph's node runs are not named after agents
        for run in [agent_run, *agent_run["child_runs"]]:
            run["extra"]["metadata"]["langgraph_node"] = node
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(tree))
    (trace,) = load_traces(path)
    assert [s.agent for s in trace.steps] == ["plan", "solve", "solve"]
    assert all("graph node" in s.metadata["inferred"]["agent"] for s in trace.steps)
    assert [r.content for r in trace.steps[1].tool_results] == ["6"]


def test_langsmith_langchain_messages(tmp_path: Path) -> None:
    """LangChain chat-model runs: serialised messages in, `generations` out."""
    tree = json.loads((FIXTURES / "langsmith-team.runs.json").read_text())
    llm = tree["child_runs"][1]["child_runs"][0]
    assert llm["run_type"] == "llm"

    def lc(kind: str, **kwargs: Any) -> dict[str, Any]:
        return {
            "lc": 1,
            "type": "constructor",
            "id": ["langchain", "schema", "messages", kind],
            "kwargs": kwargs,
        }

    llm["inputs"] = {
        "messages": [
            [lc("SystemMessage", content="You are the Solver."), lc("HumanMessage", content="Add.")]
        ]
    }
    call = {"name": "add", "args": {"a": 2, "b": 4}, "id": "call_t1", "type": "tool_call"}
    llm["outputs"] = {
        "generations": [[{"text": "", "message": lc("AIMessage", content="", tool_calls=[call])}]]
    }
    path = tmp_path / "lc.json"
    path.write_text(json.dumps(tree))
    (trace,) = load_traces(path)
    step = trace.steps[1]
    assert [m["role"] for m in step.input_messages or []] == ["system", "user"]
    assert [(c.name, json.loads(c.arguments)) for c in step.tool_calls] == [
        ("add", {"a": 2, "b": 4})
    ]
    assert [r.content for r in step.tool_results] == ["6"]


def test_mlflow_2_layout(tmp_path: Path) -> None:
    """MLflow 2 wrote spans with `context` (hex ids), `parent_id` and `status_code`."""
    data = json.loads((FIXTURES / "mlflow-team.trace.json").read_text())
    old = copy.deepcopy(data)

    def hexed(value: str | None) -> str | None:
        return "0x" + base64.b64decode(value).hex() if value else None

    old["info"] = {"request_id": data["info"]["trace_id"], "status": "OK"}
    old["data"]["spans"] = [
        {
            "name": s["name"],
            "context": {"trace_id": hexed(s["trace_id"]), "span_id": hexed(s["span_id"])},
            "parent_id": hexed(s["parent_span_id"]),
            "start_time": s["start_time_unix_nano"],
            "end_time": s["end_time_unix_nano"],
            "status_code": "OK",
            "status_message": "",
            "attributes": s["attributes"],
            "events": [],
        }
        for s in data["data"]["spans"]
    ]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    (trace,) = load_traces(path)
    check_team(trace)


@pytest.mark.parametrize("name", ["crewai-agents-only.otlp.jsonl", *sorted(TEAM)])
def test_cli_attribute_reads_each_stack(tmp_path: Path, name: str) -> None:
    agent, step = ("Researcher", 0) if name.startswith("crewai") else ("Solver", 1)
    replies = tmp_path / "replies.json"
    replies.write_text(
        json.dumps([f"Agent Name: {agent}\nStep Number: {step}\nReason for Mistake: x"])
    )
    args = ["attribute", str(FIXTURES / name), "--method", "all-at-once"]
    args += ["--model", f"scripted:{replies}", "--cache", "none", "--json", "--no-save"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.output[result.output.index("{") :])
    assert (verdict["agent"], verdict["step"]) == (agent, step)
