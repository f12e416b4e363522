"""The agentic navigator: its tools, the text action format, the loop and its budgets."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from faultfinder.judging.method import Attribution, run_method
from faultfinder.llm.base import ChatRequest, messages_text
from faultfinder.llm.client import LLM, ParseError
from faultfinder.llm.doubles import FunctionBackend, ScriptedBackend
from faultfinder.methods.agentic.actions import (
    action_grammar,
    parse_action,
    parse_submission_text,
)
from faultfinder.methods.agentic.tools import TraceTools
from faultfinder.registry import create_method
from faultfinder.traces.io import read_json, trace_from_dict
from faultfinder.traces.schema import Step, Trace

FIXTURES = Path(__file__).parent / "fixtures" / "agentic"
ALL_TOOLS = [
    "list_steps",
    "read_step_output",
    "read_step_input",
    "read_metadata",
    "search",
    "submit",
]


def zentar() -> Trace:
    path = FIXTURES / "zentar_trace.json"
    return trace_from_dict(read_json(path), path)


def tools(observability: str = "full", **options: Any) -> TraceTools:
    settings: dict[str, Any] = {"with_ground_truth": False, "max_result_tokens": 2000}
    settings.update(options)
    return TraceTools(zentar(), observability=observability, **settings)  # type: ignore[arg-type]


def run(spec: str, trace: Trace, backend: Any, **overrides: Any) -> Attribution:
    method = create_method(spec, **overrides)
    return asyncio.run(run_method(method, trace, LLM(backend)))


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


SUBMIT = call("submit", agent="WebSurfer", step=2, reason="used the 2019 survey", confidence=0.8)


# --- tools -----------------------------------------------------------------------


def test_tools_offered_follow_observability() -> None:
    assert tools("full").names == ALL_TOOLS
    assert tools("no-metadata").names == ALL_TOOLS
    for hidden in ("no-inputs", "outputs"):
        t = tools(hidden)
        assert "read_step_input" not in t.names
        assert "read_step_input" not in json.dumps(t.openai_tools())
        refused = t.call("read_step_input", {"step": 2})
        assert not refused.ok and "not available" in refused.text
        assert "You are WebSurfer" not in refused.text


def test_read_metadata_honours_observability_and_ground_truth() -> None:
    full = tools("full").call("read_metadata", {}).text
    assert "You are WebSurfer" in full and "directs WebSurfer" in full
    assert "Correct answer" not in full
    hidden = tools("outputs").call("read_metadata", {}).text
    assert "You are WebSurfer" not in hidden and "directs WebSurfer" not in hidden
    assert "hidden in this setting" in hidden
    assert (
        "Agents that acted: Orchestrator (4 steps), WebSurfer (1 step), Assistant (1 step)"
        in hidden
    )
    assert (
        "Correct answer (reference): 14"
        in tools("outputs", with_ground_truth=True).call("read_metadata", {}).text
    )
    for observability in ("full", "outputs"):
        text = tools(observability, with_ground_truth=True).call("read_metadata", {}).text
        assert "instead of" not in text and "2021 one" not in text  # never the gold label


def test_read_step_input_is_compact_by_default_and_full_on_request() -> None:
    t = tools("full")
    compact = t.call("read_step_input", {"step": 5}).text
    assert "3 new of 10 messages" in compact
    assert "7 earlier messages omitted" in compact
    assert "You are the Orchestrator" not in compact
    full = t.call("read_step_input", {"step": 5, "full": True}).text
    assert "10 messages" in full and "You are the Orchestrator" in full
    no_input = TraceTools(
        zentar().model_copy(
            update={
                "steps": [s.model_copy(update={"input_messages": None}) for s in zentar().steps]
            }
        ),
        observability="full",
        with_ground_truth=False,
        max_result_tokens=2000,
    ).call("read_step_input", {"step": 1})
    assert "no recorded input" in no_input.text


def test_long_results_are_paged_with_markers_and_nothing_is_lost() -> None:
    body = "".join(f"[{i:04d}]" for i in range(1500))
    trace = zentar()
    steps = list(trace.steps)
    steps[3] = steps[3].model_copy(update={"content": body})
    t = TraceTools(
        trace.model_copy(update={"steps": steps}),
        observability="outputs",
        with_ground_truth=False,
        max_result_tokens=200,
    )
    pages: list[str] = []
    offset = 0
    for _ in range(50):
        text = t.call("read_step_output", {"step": 3, "offset": offset}).text
        assert text.startswith("Step 3 - Orchestrator output:")
        chunk = text.split("]\n", 1)[1].split("\n[... ")[0]
        pages.append(chunk)
        if "more characters: call read_step_output" not in text:
            break
        offset = json.loads(text.rsplit("call read_step_output ", 1)[1].split(" to read on")[0])[
            "offset"
        ]
    assert len(pages) > 5
    assert "".join(pages) == body
    past = t.call("read_step_output", {"step": 3, "offset": 10**6})
    assert not past.ok and "past the end" in past.text


def test_list_steps_pages_long_listings() -> None:
    steps = [Step(index=i, agent="A", content=f"message {i} " + "x" * 200) for i in range(60)]
    t = TraceTools(
        Trace(id="many", task="t", steps=steps),
        observability="outputs",
        with_ground_truth=False,
        max_result_tokens=300,
        preview_chars=40,
    )
    first = t.call("list_steps", {}).text
    assert first.startswith("Step 0 - A: message 0")
    assert 'call list_steps {"start": ' in first
    following = json.loads(first.rsplit("call list_steps ", 1)[1].split(" for them")[0])
    assert following["end"] == 59 and "full" not in following
    next_start = following["start"]
    second = t.call("list_steps", following).text
    assert second.startswith(f"Step {next_start} - A")
    ranged = t.call("list_steps", {"start": 10, "end": 12}).text
    assert [ln.split(" - ")[0] for ln in ranged.splitlines()] == ["Step 10", "Step 11", "Step 12"]
    assert not t.call("list_steps", {"start": 5, "end": 2}).ok


def test_list_steps_full_shows_whole_outputs_in_pages() -> None:
    steps = [Step(index=i, agent="A", content=f"<{i}>" + "y" * 500 + f"</{i}>") for i in range(8)]
    t = TraceTools(
        Trace(id="f", task="t", steps=steps),
        observability="outputs",
        with_ground_truth=False,
        max_result_tokens=400,
    )
    first = t.call("list_steps", {"full": True}).text
    assert "<0>" + "y" * 500 + "</0>" in first
    assert 'call list_steps {"start": ' in first and '"full": true' in first
    following = json.loads(first.rsplit("call list_steps ", 1)[1].split(" for them")[0])
    second = t.call("list_steps", following).text
    assert second.startswith(f"Step {following['start']} - A:")
    huge = TraceTools(
        Trace(id="h", task="t", steps=[Step(index=0, agent="A", content="z" * 5000)]),
        observability="outputs",
        with_ground_truth=False,
        max_result_tokens=200,
    )
    assert 'read_step_output {"step": 0, "offset": ' in huge.call("list_steps", {"full": True}).text


def test_search_reads_outputs_and_visible_inputs_only() -> None:
    full = tools("full").call("search", {"query": "exactly what the pages say"}).text
    assert "Step 2 - WebSurfer (input)" in full
    hidden = tools("outputs").call("search", {"query": "exactly what the pages say"}).text
    assert hidden.startswith("No step contains")
    found = tools("outputs").call("search", {"query": "2021 UPDATE"}).text
    assert "Step 2 - WebSurfer (output)" in found
    assert not tools().call("search", {}).ok


def test_submit_validates_agent_step_and_confidence() -> None:
    t = tools("outputs")
    ok = t.call("submit", {"agent": "websurfer", "step": "2", "reason": "r", "confidence": 0.5})
    assert ok.submission is not None
    assert (ok.submission.agent, ok.submission.step, ok.submission.confidence) == (
        "WebSurfer",
        2,
        0.5,
    )
    # A percentage is a confidence as written; a word or a bare 85 is not.
    percent = t.call("submit", {"agent": "WebSurfer", "step": 2, "confidence": "85%"})
    assert percent.submission is not None and percent.submission.confidence == 0.85
    for bad in (
        {"agent": "WebSurfer", "step": 2, "reason": "r", "confidence": "high"},
        {"agent": "WebSurfer", "step": 2, "reason": "r", "confidence": 85},
        {"agent": "WebSurfer", "step": 2, "reason": "r", "confidence": True},
        {"agent": "Nobody", "step": 2, "reason": "r"},
        {"agent": "WebSurfer", "step": 6, "reason": "r"},
        {"agent": "WebSurfer", "step": "two", "reason": "r"},
        {"agent": "WebSurfer", "step": 2, "reason": "r", "confidence": 3},
        {"step": 2, "reason": "r"},
    ):
        outcome = t.call("submit", bad)
        assert outcome.submission is None and not outcome.ok and outcome.text.startswith("Error")


def test_bad_calls_come_back_as_errors() -> None:
    t = tools()
    assert "not valid JSON" in t.call("read_step_output", "{step: 1").text
    assert "unknown tool 'rm'" in t.call("rm", {}).text
    assert "missing argument 'step'" in t.call("read_step_output", {}).text
    assert "outside the trace" in t.call("read_step_output", {"step": -1}).text
    assert t.call("read_step_output", '{"step": 1}').ok


# --- text actions ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "name", "arguments"),
    [
        ('THOUGHT: x\nACTION: read_step_output {"step": 3}', "read_step_output", {"step": 3}),
        ('**Action:** `search {"query": "a b"}`', "search", {"query": "a b"}),
        ("Action: read_metadata", "read_metadata", {}),
        ("ACTION: LIST_STEPS {}\nOBSERVATION: made up\nACTION: submit {}", "list_steps", {}),
        ('ACTION: submit\n{"agent": "A", "step": 1}', "submit", {"agent": "A", "step": 1}),
        # Near-variants of the asked form: the arguments are read where they are written.
        ('ACTION: list_steps({"start": 10})', "list_steps", {"start": 10}),
        ('ACTION: list_steps: {"start": 10}', "list_steps", {"start": 10}),
        (
            'ACTION: submit\n```json\n{"agent": "A", "step": 1}\n```',
            "submit",
            {"agent": "A", "step": 1},
        ),
        # Only the first action's own arguments: a JSON block the model writes after it
        # (an imagined result) is not read as them.
        (
            'ACTION: read_step_output {"step": 3}\nResult:\n```json\n{"step": 5}\n```',
            "read_step_output",
            {"step": 3},
        ),
        (
            'ACTION: read_step_output {"step": 3}\n<json>{"step": 5}</json>',
            "read_step_output",
            {"step": 3},
        ),
        ("ACTION: list_steps\nOBSERVATION: {made up}", "list_steps", {}),
        ('ACTION: submit {"agent": "A",\n "step": 1,}', "submit", {"agent": "A", "step": 1}),
    ],
)
def test_parse_action(reply: str, name: str, arguments: dict[str, Any]) -> None:
    action = parse_action(reply, ALL_TOOLS)
    assert (action.name, action.arguments) == (name, arguments)


@pytest.mark.parametrize(
    "reply",
    [
        "I think step 3.",
        "ACTION: delete_trace {}",
        'ACTION: submit {"agent": ACTION: search [1, 2]',
        # Arguments that are not a JSON object are refused, not dropped: dropping
        # 'start=10' would list from step 0 as if the model had asked for that.
        "ACTION: list_steps start=10",
        "ACTION: read_step_output step 3",
    ],
)
def test_parse_action_refuses(reply: str) -> None:
    with pytest.raises(ParseError):
        parse_action(reply, ALL_TOOLS)


def test_parse_submission_text_accepts_action_or_paper_format() -> None:
    assert parse_submission_text('ACTION: submit {"agent": "A", "step": 2}') == {
        "agent": "A",
        "step": 2,
    }
    paper = "Agent Name: WebSurfer\nStep Number: 2\nReason for Mistake: wrong year"
    assert parse_submission_text(paper) == {"agent": "WebSurfer", "step": 2, "reason": "wrong year"}
    with pytest.raises(ParseError):
        parse_submission_text("no idea")


def test_action_grammar_lists_only_real_tools_agents_and_steps() -> None:
    grammar = action_grammar(["read_step_output", "submit"], ['Web "Surfer"', "B"], 3).gbnf
    assert grammar is not None
    assert "a-read-step-output" in grammar and "a-search" not in grammar
    assert 'step ::= "0" | "1" | "2"\n' in grammar
    assert r'"\"Web \\\"Surfer\\\"\""' in grammar  # JSON-quoted, then GBNF-escaped
    forced = action_grammar(["submit"], ["B"], 3, thought=False).gbnf
    assert forced is not None and forced.startswith('root ::= "ACTION: " action')


# --- the loop: tool calls --------------------------------------------------------


def test_tool_calling_run_end_to_end() -> None:
    backend = ScriptedBackend(
        [
            {
                "text": "Overview first.",
                "tool_calls": [
                    {"id": "a", "name": "read_metadata", "arguments": {}},
                    {"id": "b", "name": "read_step_input", "arguments": {"step": 2}},
                ],
            },
            call("read_step_output", step=2),
            SUBMIT,
        ]
    )
    result = run("agentic", zentar(), backend, observability="full")
    assert (result.status, result.agent, result.step, result.confidence) == (
        "ok",
        "WebSurfer",
        2,
        0.8,
    )
    assert result.details["mode"] == "tools" and not result.details["forced"]
    assert result.usage.calls == 3 and result.observability == "full"
    # The conversation is valid OpenAI tool calling: every call answered by a tool message.
    last = backend.requests[-1]
    assert last.tools is not None
    assert {t["function"]["name"] for t in last.tools} == set(ALL_TOOLS)
    roles = [m["role"] for m in last.messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant", "tool"]
    assert [m["tool_call_id"] for m in last.messages if m["role"] == "tool"] == ["a", "b", "call_0"]
    assert "You are WebSurfer" in last.messages[4]["content"]
    # The transcript keeps every call and result for audit.
    transcript = result.details["transcript"]
    used = [(e["tool"], e["arguments"]) for e in transcript if e["type"] == "tool"]
    assert used[0] == ("read_metadata", "{}")
    assert [u[0] for u in used] == [
        "read_metadata",
        "read_step_input",
        "read_step_output",
        "submit",
    ]
    assert any("2019 Zentar Moon Survey" in e.get("result", "") for e in transcript)
    assert transcript[2]["content"] == "Overview first."
    json.dumps(result.model_dump(mode="json"))


def test_invalid_submission_is_corrected_not_accepted() -> None:
    backend = ScriptedBackend([call("submit", agent="Zed", step=2, reason="r"), SUBMIT])
    result = run("agentic", zentar(), backend)
    assert (result.agent, result.step) == ("WebSurfer", 2)
    refused = next(e for e in result.details["transcript"] if e["type"] == "tool")
    assert not refused["ok"] and "not one of" in refused["result"]


def test_reply_without_tool_call_is_nudged_or_read_as_text_action() -> None:
    backend = ScriptedBackend(["I am thinking.", 'ACTION: read_step_output {"step": 4}', SUBMIT])
    result = run("agentic", zentar(), backend)
    assert result.agent == "WebSurfer"
    kinds = [e["type"] for e in result.details["transcript"]]
    assert "nudge" in kinds
    assert any(e.get("tool") == "read_step_output" for e in result.details["transcript"])
    assert "Please continue by calling one of the tools" in messages_text(
        backend.requests[1].messages
    )


def test_turn_budget_forces_a_verdict_with_submit_only() -> None:
    backend = ScriptedBackend([call("list_steps"), call("read_step_output", step=1), SUBMIT])
    result = run("agentic", zentar(), backend, max_turns=2)
    assert result.status == "ok" and result.agent == "WebSurfer"
    assert result.details["forced"] and result.details["forced_by"] == "turns"
    assert result.details["turns"] == 2
    forced = backend.requests[-1]
    assert forced.tool_choice == {"type": "function", "function": {"name": "submit"}}
    assert forced.tools is not None and [t["function"]["name"] for t in forced.tools] == ["submit"]
    assert "run out of turns" in forced.messages[-1]["content"]
    assert "1 turn(s) left" in messages_text(forced.messages)


def test_unreadable_forced_verdict_is_unparsed_never_guessed() -> None:
    backend = ScriptedBackend([call("list_steps"), "I cannot decide."])
    result = run("agentic", zentar(), backend, max_turns=1)
    assert result.status == "unparsed"
    assert result.agent is None and result.step is None
    assert result.details["forced_by"] == "turns"
    assert result.details["transcript"][-1]["type"] == "note"


def test_forced_verdict_may_come_in_the_papers_text_format() -> None:
    backend = ScriptedBackend(
        [call("list_steps"), "Agent Name: WebSurfer\nStep Number: 2\nReason for Mistake: x"]
    )
    result = run("agentic", zentar(), backend, max_turns=1)
    assert (result.status, result.agent, result.step) == ("ok", "WebSurfer", 2)
    assert result.details["forced"]


def test_token_budget_forces_the_verdict_and_holds() -> None:
    def answer(request: ChatRequest) -> dict[str, Any]:
        if request.tool_choice is not None:
            return SUBMIT
        return call("read_step_input", step=5, full=True)

    backend = FunctionBackend(answer)
    result = run("agentic", zentar(), backend, token_budget=12_000, max_output_tokens=200)
    assert result.details["forced_by"] == "tokens"
    assert result.agent == "WebSurfer"
    assert 2 <= result.details["turns"] < 30
    assert result.usage.total_tokens <= 12_000
    assert result.details["tokens"] == result.usage.total_tokens


def test_token_budget_holds_in_the_text_format_with_parse_retries() -> None:
    def answer(request: ChatRequest) -> str:
        if "run out of" in str(request.messages[-1]["content"]):
            return 'ACTION: submit {"agent": "WebSurfer", "step": 2, "reason": "r"}'
        return 'THOUGHT: more\nACTION: read_step_input {"step": 5, "full": true}'

    backend = FunctionBackend(answer)
    backend.supports_tools = False  # type: ignore[misc]
    result = run("agentic", zentar(), backend, token_budget=20_000, max_output_tokens=100)
    assert result.details["forced_by"] == "tokens" and result.agent == "WebSurfer"
    assert result.details["turns"] >= 2
    assert result.usage.total_tokens <= 20_000


def test_a_turn_too_big_for_the_context_forces_the_verdict() -> None:
    huge = {"text": "y" * 20_000, "tool_calls": [{"name": "list_steps", "arguments": {}}]}
    backend = ScriptedBackend([huge, SUBMIT])
    result = run("agentic", zentar(), backend, context_budget=3000)
    assert result.details["forced_by"] == "context"
    assert (result.status, result.agent) == ("ok", "WebSurfer")
    forced = backend.requests[-1]
    assert "y" * 1000 not in messages_text(forced.messages)
    assert backend.count_tokens(messages_text(forced.messages)) <= 3000


def test_context_budget_elides_old_results_and_every_prompt_fits() -> None:
    body = "evidence " * 700  # ~1600 tokens per read
    trace = zentar()
    steps = [s.model_copy(update={"content": f"{s.content} {body}"}) for s in trace.steps]
    trace = trace.model_copy(update={"steps": steps})
    replies: list[Any] = [call("read_step_output", step=i) for i in range(6)] + [SUBMIT]
    backend = ScriptedBackend(replies)
    budget = 4000
    result = run("agentic", trace, backend, context_budget=budget, overview_in_prompt=False)
    assert result.agent == "WebSurfer" and not result.details["forced"]
    assert result.details["elided_results"] >= 3
    for request in backend.requests:
        tokens = backend.count_tokens(messages_text(request.messages))
        tokens += backend.count_tokens(json.dumps(request.tools))
        assert tokens <= budget
    assert "call read_step_output again to re-read it" in messages_text(
        backend.requests[-1].messages
    )
    # The transcript still holds every result in full.
    reads = [e for e in result.details["transcript"] if e.get("tool") == "read_step_output"]
    assert len(reads) == 6 and all(
        body.strip() in e["result"] or "more characters" in e["result"] for e in reads
    )


def test_context_budget_drops_turns_when_eliding_is_not_enough() -> None:
    chatter = "x" * 3000
    replies: list[Any] = [
        {"text": chatter, "tool_calls": [{"name": "read_step_output", "arguments": {"step": 1}}]}
    ] * 5 + [SUBMIT]
    backend = ScriptedBackend(replies)
    result = run("agentic", zentar(), backend, context_budget=3000, overview_in_prompt=False)
    assert result.agent == "WebSurfer"
    assert result.details["dropped_turns"] >= 1
    last = backend.requests[-1].messages
    assert "earlier turn(s) were removed" in last[2]["content"]
    # Tool calls and their results stay paired after dropping.
    ids = [c["id"] for m in last if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    assert ids == [m["tool_call_id"] for m in last if m["role"] == "tool"]


def test_ground_truth_only_when_allowed() -> None:
    for allowed in (False, True):
        backend = ScriptedBackend([SUBMIT])
        run("agentic", zentar(), backend, with_ground_truth=allowed)
        assert (
            "The correct answer to the task is: 14" in messages_text(backend.requests[0].messages)
        ) is allowed


def test_empty_trace_makes_no_call() -> None:
    backend = ScriptedBackend([])
    result = run("agentic", Trace(id="e", task="t", steps=[]), backend)
    # Nothing to attribute: an error, not a verdict (run_method never runs the method).
    assert result.status == "error" and result.usage.calls == 0


# --- the loop: plain-text actions ------------------------------------------------


def text_backend(replies: list[str]) -> FunctionBackend:
    queue = list(replies)

    def answer(request: ChatRequest) -> str:
        assert request.tools is None
        return queue.pop(0)

    backend = FunctionBackend(answer)
    backend.supports_tools = False  # type: ignore[misc]
    return backend


def test_text_actions_run_end_to_end_with_a_grammar() -> None:
    backend = text_backend(
        [
            'THOUGHT: look\nACTION: search {"query": "survey"}',
            'THOUGHT: read\nACTION: read_step_output {"step": 2}',
            'THOUGHT: done\nACTION: submit {"agent": "WebSurfer", "step": 2, "reason": "2019",'
            ' "confidence": 0.9}',
        ]
    )
    result = run("agentic", zentar(), backend, observability="outputs")
    assert (result.status, result.agent, result.step, result.confidence) == (
        "ok",
        "WebSurfer",
        2,
        0.9,
    )
    assert result.details["mode"] == "text"
    first = backend.requests[0]
    assert first.constraint is not None and first.constraint.gbnf is not None
    assert "read_step_input" not in first.constraint.gbnf  # hidden under 'outputs'
    assert first.stop == ["\nOBSERVATION"]
    assert "ACTION: <tool name>" in first.messages[0]["content"]
    last = backend.requests[-1].messages
    assert [m["role"] for m in last] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert last[-1]["content"].startswith("OBSERVATION (read_step_output):")


def test_text_format_errors_are_retried_then_explained() -> None:
    backend = text_backend(
        [
            "hmm",
            "still thinking",
            "no action",  # one turn: first try + 2 parse retries
            'ACTION: submit {"agent": "WebSurfer", "step": 2, "reason": "r"}',
        ]
    )
    result = run("agentic:text", zentar(), backend)
    assert result.agent == "WebSurfer" and result.details["turns"] == 2
    assert result.usage.calls == 4
    assert [c.parsed for c in result.calls] == [False, False, False, True]
    assert "could not be read" in backend.requests[-1].messages[-1]["content"]
    assert [r.sample for r in backend.requests[:3]] == [0, 1000, 2000]


def test_text_forced_submit_uses_submit_only_grammar() -> None:
    backend = text_backend(
        [
            "ACTION: list_steps {}",
            'ACTION: submit {"agent": "Assistant", "step": 4, "reason": "r", "confidence": 0.2}',
        ]
    )
    result = run("agentic:text", zentar(), backend, max_turns=1)
    assert (result.agent, result.step, result.details["forced_by"]) == ("Assistant", 4, "turns")
    forced = backend.requests[-1]
    assert forced.constraint is not None and forced.constraint.gbnf is not None
    assert forced.constraint.gbnf.startswith('root ::= "ACTION: " action')
    assert "a-list-steps" not in forced.constraint.gbnf


def test_text_forced_submit_unparsed_after_retries() -> None:
    backend = text_backend(["ACTION: list_steps {}", "?", "??", "???"])
    result = run("agentic:text", zentar(), backend, max_turns=1)
    assert result.status == "unparsed" and result.agent is None
    assert result.usage.calls == 4


# --- CLI -------------------------------------------------------------------------


def cli(*args: str) -> str:
    from click.testing import CliRunner

    from faultfinder.cli import main

    outcome = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert outcome.exit_code == 0, outcome.output
    return outcome.output


def test_cli_on_a_traceelephant_directory_with_tool_calls() -> None:
    output = cli(
        "attribute",
        str(FIXTURES / "te" / "magentic-runs-demo" / "task_1"),
        "--method",
        "agentic",
        "--model",
        f"scripted:{FIXTURES / 'replies_tools.json'}",
        "--cache",
        "none",
        "--observability",
        "full",
        "--json",
    )
    result = json.loads(output)
    assert (result["agent"], result["step"], result["observability"]) == ("WebSurfer", 2, "full")
    inputs = [e for e in result["details"]["transcript"] if e.get("tool") == "read_step_input"]
    assert "You are WebSurfer" in inputs[0]["result"]


@pytest.mark.parametrize("observability", ["full", "no-metadata", "no-inputs", "outputs"])
def test_cli_text_actions_under_each_observability(observability: str) -> None:
    output = cli(
        "attribute",
        str(FIXTURES / "zentar_trace.json"),
        "--method",
        "agentic:text",
        "--observability",
        observability,
        "--model",
        f"scripted:{FIXTURES / 'replies_text.json'}",
        "--cache",
        "none",
    )
    assert "agent:      WebSurfer" in output and "step:       2  (0-based)" in output


def test_cli_on_a_who_and_when_file() -> None:
    replies = FIXTURES / "replies_ww.json"
    output = cli(
        "attribute",
        str(FIXTURES / "ww_demo.json"),
        "--method",
        "agentic",
        "--observability",
        "outputs",
        "--model",
        f"scripted:{replies}",
        "--cache",
        "none",
        "--json",
    )
    result = json.loads(output)
    assert (result["agent"], result["step"], result["status"]) == ("NumberTheory_Expert", 1, "ok")
    prompts = " ".join(
        str(e.get("content", "")) + str(e.get("result", ""))
        for e in result["details"]["transcript"]
    )
    assert "number theory" not in prompts.lower()  # system prompts are metadata
