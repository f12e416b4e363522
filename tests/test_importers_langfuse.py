"""Langfuse: the public sample exports, v2 observations API pages, and --from-langfuse
against a loopback fake of the API."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.errors import TraceFormatError
from faultfinder.replay.httpserver import Request, Response, ServerThread, json_response
from faultfinder.traces.importers.langfuse import LangfuseImporter
from faultfinder.traces.io import trace_from_dict
from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import Trace
from raw_http import raw_server

# FAULTFINDER_TRACE_SAMPLES: the samples elsewhere (a worktree outside the checkout's
# parent, whose ../shared is not there).
_DEFAULT_SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "data" / "trace-samples"
SAMPLES = Path(os.environ.get("FAULTFINDER_TRACE_SAMPLES", str(_DEFAULT_SAMPLES))) / "langfuse"


def sample(name: str) -> Trace:
    path = SAMPLES / f"{name}.trace.json"
    if not path.exists():
        pytest.skip(f"sample not present: {path} (shared data is not part of the repository)")
    assert LangfuseImporter().detect(path)
    (trace,) = load_traces(path)  # detected by content
    assert trace.source.format == "langfuse"
    assert trace_from_dict(json.loads(trace.model_dump_json())) == trace
    return trace


def test_openai_agents_sample() -> None:
    trace = sample("openai-agents-2025-09-30")
    assert [s.kind for s in trace.steps] == ["llm", "llm"]
    assert {s.agent for s in trace.steps} == {"Hello world"}
    assert [a.name for a in trace.agents] == ["Hello world"]  # the workflow root is no agent
    first, second = trace.steps
    assert [(c.name, json.loads(c.arguments)) for c in first.tool_calls] == [
        ("get_weather", {"city": "Tokyo"})
    ]
    assert [r.content for r in first.tool_results] == ["The weather in Tokyo is sunny."]
    # The tool span names no call id and is attached by name; the next generation's
    # input answers the call by id (a function_call_output item), so the result takes it.
    (result,) = first.tool_results
    assert result.call_id == first.tool_calls[0].id == "call_Kud0j0DxWSmLzv9W5m6qVqXn"
    (attached,) = first.metadata["tool_spans"]
    assert attached["matched_by"] == "tool name"
    assert attached["call_id_from"] == (
        "input of step 1 (span 90d94774e8e3724d): the only unanswered 'get_weather' call"
    )
    assert second.content.startswith("The weather in Tokyo is currently sunny")
    assert first.started_at is not None and second.started_at is not None
    assert first.started_at < second.started_at  # observations come out of order in the file
    assert trace.task == "What's the weather in Tokyo?"
    assert first.model == "gpt-4.1-2025-04-14"
    # No span holds the run's output (the SDK's agent spans carry none): the run ended on
    # the reply that asked for no tool, which is the final answer.
    assert trace.final_answer == second.content
    assert "reply of the last model call 'response'" in trace.metadata["final_answer_from"]


def test_crewai_sample() -> None:
    trace = sample("crewai-2025-07-11")
    (step,) = trace.steps
    assert step.agent == "Software developer" and step.kind == "llm"
    assert step.tool_calls == [] and step.model == "gpt-4o-mini"
    assert step.usage is not None and step.usage.prompt_tokens == 190
    assert "Hello World" in step.content
    # The task is the first user message without CrewAI's task wrapper; the task's own
    # prompt (description, expected output) is whole, and what was removed is kept.
    assert trace.task == (
        "Define the HTML for making a simple website with heading- Hello World! Langfuse "
        "monitors your CrewAI agent!\n\nThis is the expected criteria for your final answer: "
        "A clear and concise HTML code\nyou MUST return the actual complete content as the "
        "final answer, not a summary."
    )
    removed = trace.metadata["task_unwrapped"]
    assert removed["wrapper"] == "CrewAI task prompt" and removed["before"] == "\nCurrent Task: "
    assert removed["after"].startswith("\n\nBegin! This is VERY important to you")
    message = next(m["content"] for m in step.input_messages or [] if m["role"] == "user")
    assert message == removed["before"] + trace.task + removed["after"]  # nothing lost


def test_langgraph_sample() -> None:
    trace = sample("langgraph-python-2025-08-22")
    assert [s.agent for s in trace.steps] == ["agent", "agent"]
    first = trace.steps[0]
    assert [(c.name, c.id) for c in first.tool_calls] == [
        ("Web-Search", "call_1oGK863sxQHlPreFhDdEs3yl")
    ]
    (result,) = first.tool_results
    assert result.call_id == "call_1oGK863sxQHlPreFhDdEs3yl" and "example.com" in result.content
    assert trace.task == "Search the web for 'example' and summarize."


def test_koog_sample() -> None:
    trace = sample("koog-2025-08-26")
    assert len(trace.steps) == 2 and len(trace.agents) == 1
    assert {s.agent for s in trace.steps} == {trace.agents[0].name}
    first = trace.steps[0]
    assert [c.name for c in first.tool_calls] == ["HelloTool", "ByeTool"]
    # Both tool spans started in the same millisecond and the file lists ByeTool first:
    # the results follow the calls, matched by call id, and so does metadata.tool_spans.
    assert [(r.name, r.call_id) for r in first.tool_results] == [
        (c.name, c.id) for c in first.tool_calls
    ]
    assert [r.content for r in first.tool_results] == ["Hello my darling Bob!", "Bye my dear Bob!"]
    assert [t["span_id"] for t in first.metadata["tool_spans"]] == [
        "66f269083a2fff81",
        "33188493784a060d",
    ]
    assert trace.steps[1].tool_results == []
    assert trace.steps[1].content == "Hello my darling Bob! And, bye my dear Bob!"
    # Why each call stopped: Koog writes the tool-call reply's reason on its completion
    # messages (whose content is the call list), the last reply's only in the span's
    # gen_ai.response.finish_reasons ('["stop"]', a string in Langfuse).
    assert [s.metadata.get("finish_reason") for s in trace.steps] == ["tool_calls", "stop"]
    # Langfuse keeps span attributes as strings, and they override the numeric
    # modelParameters: gen_ai.request.temperature "1" is the number it spells.
    assert [s.request for s in trace.steps] == [{"temperature": 1.0}] * 2
    # Koog's agent and run spans carry no output; its strategy ends on that reply.
    assert trace.final_answer == "Hello my darling Bob! And, bye my dear Bob!"
    assert "reply of the last model call 'llm.chat'" in trace.metadata["final_answer_from"]


def v2_page() -> dict[str, Any]:
    def obs(
        i: str, parent: str | None, kind: str, name: str, t: str, **extra: Any
    ) -> dict[str, Any]:
        return {
            "id": i,
            "traceId": "t-1",
            "parentObservationId": parent,
            "type": kind,
            "name": name,
            "startTime": f"2025-01-01T00:00:0{t}Z",
            "endTime": f"2025-01-01T00:00:0{t}.5Z",
            **extra,
        }

    return {
        "data": [
            obs(
                "o3",
                "o1",
                "GENERATION",
                "chat",
                "3",
                input=[{"role": "user", "content": "go"}],
                output={"role": "assistant", "content": "done"},
                model="m",
                usageDetails={"input": 5, "output": 1},
            ),
            obs("o1", None, "AGENT", "Leader", "1"),
            obs(
                "o2",
                "o1",
                "GENERATION",
                "chat",
                "2",
                input=[{"role": "user", "content": "go"}],
                output={
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "k1",
                            "type": "function",
                            "function": {"name": "look", "arguments": "{}"},
                        }
                    ],
                },
            ),
            obs(
                "o4",
                "o1",
                "TOOL",
                "look",
                "2",
                input={},
                output="seen",
                level="ERROR",
                statusMessage="boom",
            ),
        ],
        "meta": {"cursor": None},
    }


def test_v2_observations_page(tmp_path: Path) -> None:
    path = tmp_path / "page.json"
    path.write_text(json.dumps(v2_page()), encoding="utf-8")
    (trace,) = load_traces(path)
    assert [(s.agent, s.content) for s in trace.steps] == [("Leader", ""), ("Leader", "done")]
    assert [(r.name, r.status) for r in trace.steps[0].tool_results] == [("look", "error")]
    assert trace.steps[1].usage is not None and trace.steps[1].usage.prompt_tokens == 5
    assert trace.metadata["trace_id"] == "t-1"


def test_malformed_observation_is_named(tmp_path: Path) -> None:
    page = v2_page()
    page["data"][1]["startTime"] = "yesterday"
    path = tmp_path / "page.json"
    path.write_text(json.dumps(page), encoding="utf-8")
    with pytest.raises(TraceFormatError) as err:
        load_traces(path, format="langfuse")
    assert err.value.field == "data[1].startTime"


class FakeLangfuse:
    """Serves v2 observation pages two at a time and records what it was asked."""

    def __init__(self) -> None:
        self.requests: list[Request] = []

    async def handle(self, request: Request) -> Response:
        self.requests.append(request)
        if request.path != "/api/public/v2/observations":
            return json_response(404, {"message": "not found"})
        if request.header("authorization") is None:
            return json_response(401, {"message": "no auth"})
        data = v2_page()["data"]
        second = "cursor=c2" in request.query
        page = data[2:] if second else data[:2]
        return json_response(200, {"data": page, "meta": {"cursor": None if second else "c2"}})


@pytest.mark.parametrize("proxy", [False, True], ids=["no-proxy", "http-proxy-set"])
def test_import_from_langfuse_fetches_all_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proxy: bool
) -> None:
    from faultfinder.replay.httpserver import HttpServer

    fake = FakeLangfuse()
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-test")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-test")
    if proxy:  # a proxy nothing listens on: a self-hosted Langfuse on loopback goes direct
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)

    async def factory() -> HttpServer:
        return await HttpServer(fake.handle).start()

    with ServerThread(factory) as server:
        out = tmp_path / "t.json"
        result = CliRunner().invoke(
            main,
            ["import", "--from-langfuse", "t-1", "--langfuse-host", server.url, "--out", str(out)],
        )
    assert result.exit_code == 0, result.output
    trace = trace_from_dict(json.loads(out.read_text()))
    assert len(trace.steps) == 2
    assert len(fake.requests) == 2 and "traceId=t-1" in fake.requests[0].query
    assert "sk-test" not in out.read_text()


def test_import_from_langfuse_needs_a_host() -> None:
    result = CliRunner().invoke(main, ["import", "--from-langfuse", "t-1"])
    assert result.exit_code == 2 and "--langfuse-host" in result.output


@pytest.mark.parametrize(
    ("trace_id", "ids", "exported"),
    [
        # Langfuse's OpenTelemetry-based SDKs (v3, every shared sample): OTLP's own ids.
        ("a287bb31e317433610d8827617471140", ["231c43964b7e7e63", "042f9350c3729147",
         "e44e72cf2d221781", "4f6535aaebcda355"], True),
        # Langfuse's v2 SDK: UUIDs, which name nothing an OTLP receiver holds.
        ("0b7c4f5e-2d1a-4a8e-9c3b-5f6e7d8c9b0a", ["5d0e8c1a-3f2b-4c6d-8e9f-0a1b2c3d4e5f",
         "6e1f9d2b-4a3c-4d7e-9f0a-1b2c3d4e5f6a", "7f2a0e3c-5b4d-4e8f-a01b-2c3d4e5f6a7b",
         "8a3b1f4d-6c5e-4f9a-b12c-3d4e5f6a7b8c"], False),
    ],
)  # fmt: skip
def test_export_to_otlp_takes_only_a_langfuse_trace_with_otlp_ids(
    tmp_path: Path, trace_id: str, ids: list[str], exported: bool
) -> None:
    """`export --to otlp` of an imported Langfuse trace: its ids are sent when they are
    OTLP's own (32 and 16 hex digits); UUIDs are refused in one line that says to export
    --to langfuse, and nothing is written."""
    from faultfinder.judging.method import Attribution
    from faultfinder.traces.io import write_trace

    page = Path(__file__).parent / "fixtures" / "importers" / "langfuse" / "observations-page.json"
    text = page.read_text().replace('"t-1"', json.dumps(trace_id))
    for old, new in zip(("o1", "o2", "o3", "o4"), ids, strict=True):
        text = text.replace(f'"{old}"', json.dumps(new))
    (tmp_path / "page.json").write_text(text)
    (trace,) = load_traces(tmp_path / "page.json")
    write_trace(trace, tmp_path / "t.json")
    verdict = Attribution(
        agent="Leader", step=1, reason="r", trace_id=trace.id, method="all-at-once",
        config={}, model="scripted", prompt_version="x", with_ground_truth=False,
        observability="full",
    )  # fmt: skip
    (tmp_path / "a.json").write_text(verdict.model_dump_json())
    out = tmp_path / "v.otlp.json"
    result = CliRunner().invoke(
        main,
        ["export", str(tmp_path / "a.json"), str(tmp_path / "t.json"), "--to", "otlp",
         "--out", str(out)],
    )  # fmt: skip
    if exported:
        assert result.exit_code == 0, result.output
        (span,) = json.loads(out.read_text())["resourceSpans"][0]["scopeSpans"][0]["spans"]
        assert span["traceId"] == trace_id
        assert span["parentSpanId"] == trace.steps[1].metadata["span_id"] in ids
        return
    assert result.exit_code == 1 and not out.exists()
    message = result.output.strip()
    assert "\n" not in message, message
    assert f"trace id '{trace_id}' is not 32 hex digits" in message
    assert "is not 16 hex digits" in message and "--to langfuse" in message


@contextlib.contextmanager
def dripping(where: str, every: float = 0.25, cap: float = 8.0) -> Iterator[str]:
    """A loopback server that answers each request a byte at a time, one every ``every``
    seconds (far inside the importer's per-read timeout): in its ``head`` (status line,
    then a header) or in its ``body`` (a v2 page's JSON). It gives up after ``cap``
    seconds, ending the answer there, so a client without a deadline ends too (with what
    it got) instead of hanging the test."""

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        if where == "head":
            conn.sendall(b"HTTP/1.1 200 OK\r\nx-slow: ")
        else:
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
            conn.sendall(b"transfer-encoding: chunked\r\n\r\n")
        ends = time.monotonic() + cap
        while not stop.is_set() and time.monotonic() < ends:
            conn.sendall(b"a" if where == "head" else b'1\r\n"\r\n')
            stop.wait(every)
        conn.sendall(b"\r\ncontent-length: 0\r\n\r\n" if where == "head" else b"0\r\n\r\n")

    with raw_server(answer) as url:
        yield url


@pytest.mark.parametrize("where", ["head", "body"])
def test_import_from_langfuse_gives_up_on_a_page_that_drips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A server sending its page a byte at a time never trips the 30 s per-read timeout:
    before, `import --from-langfuse` waited on it for ever. Now each page has a deadline
    in all (lowered here from 60 s to 1 s) and the import stops (exit 1) with an error
    naming the URL and the deadline, never the host's user info or the keys."""
    from faultfinder.traces.importers import langfuse

    monkeypatch.setattr(langfuse, "PAGE_DEADLINE", 1.0, raising=False)
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-test")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-test")
    started = time.monotonic()
    with dripping(where) as url:
        host = url.replace("http://", "http://someone:hunter2@")
        out = tmp_path / "t.json"
        args = ["import", "--from-langfuse", "t-1", "--langfuse-host", host, "--out", str(out)]
        result = CliRunner().invoke(main, args)
    took = time.monotonic() - started
    assert result.exit_code == 1, result.output
    shown = url.replace("http://", "http://[REDACTED]@")  # the user info is never shown
    said = f"no whole page from {shown}/api/public/v2/observations within 1 s"
    assert said in result.output, result.output
    assert not any(s in result.output for s in ("hunter2", "sk-test", "pk-test"))
    assert took < 6 and not out.exists()


def test_import_from_langfuse_names_an_empty_trace_without_the_hosts_user_info(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trace with no observations stops the import naming where it looked. Before, that
    error printed --langfuse-host as given, a password in its user info included."""
    from faultfinder.replay.httpserver import HttpServer

    async def empty(request: Request) -> Response:
        return json_response(200, {"data": [], "meta": {"cursor": None}})

    async def factory() -> HttpServer:
        return await HttpServer(empty).start()

    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-test")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-test")
    with ServerThread(factory) as server:
        host = server.url.replace("http://", "http://someone:hunter2@")
        args = ["import", "--from-langfuse", "t-1", "--langfuse-host", host]
        result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "t.json")])
    assert result.exit_code == 1, result.output
    assert "trace t-1 has no observations at " in result.output
    assert server.url.split("//", 1)[1] in result.output  # the host and port, still named
    assert "hunter2" not in result.output


def test_import_from_langfuse_refuses_a_page_nested_too_deeply_to_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page nested deeper than Python's JSON reader goes (a broken or hostile server)
    raised RecursionError out of the import, a traceback; only ValueError was caught.
    Now it is the error any unreadable page gets, exit 1, nothing written."""
    from faultfinder.replay.httpserver import HttpServer

    async def deep(request: Request) -> Response:
        body = b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        return Response(200, [("content-type", "application/json")], body)

    async def factory() -> HttpServer:
        return await HttpServer(deep).start()

    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-test")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-test")
    out = tmp_path / "t.json"
    with ServerThread(factory) as server:
        args = ["import", "--from-langfuse", "t-1", "--langfuse-host", server.url]
        result = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert "did not return a v2 observations page" in result.output
    assert not out.exists()
