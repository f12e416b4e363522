"""Run the real instrumented programs of tests/fixtures/otel/programs offline.

Each program runs in its own process (instrumentations patch process-wide state) against
the loopback scripted upstream (faultfinder.testing.FakeOpenAIServer), exporting its spans
with the real OTLP/HTTP exporter to an in-process `Collector`. Framework telemetry is off
and nothing leaves 127.0.0.1.

`python tests/otel_programs.py` regenerates the committed fixtures in tests/fixtures/otel/.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faultfinder.collect.collector import Collector, CollectorConfig
from faultfinder.replay.httpserver import ServerThread
from faultfinder.testing import FakeOpenAIServer

HERE = Path(__file__).parent
PROGRAMS = HERE / "fixtures" / "otel" / "programs"
FIXTURES = HERE / "fixtures" / "otel"
QUESTION = "What is 2 + 3?"

# Everything a framework might phone home with, switched off.
QUIET_ENV = {
    "OTEL_SDK_DISABLED": "false",
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_DISABLE_TRACKING": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "",
    "ANONYMIZED_TELEMETRY": "False",
    "AUTOGEN_USE_DOCKER": "False",
    "HF_HUB_OFFLINE": "1",
    "NO_PROXY": "127.0.0.1,localhost",
    "OPENAI_API_KEY": "sk-fake-test-key",
}


def tool_named(body: dict[str, Any], prefix: str) -> str | None:
    for tool in body.get("tools") or []:
        name = (tool.get("function") or {}).get("name", "")
        if name.startswith(prefix):
            return str(name)
    return None


def agents_upstream(body: dict[str, Any]) -> Any:
    """Triage hands off; the tutor calls add with a wrong operand (3 read as 4), then
    reports the tool's result: the decisive error is the tutor's tool call."""
    messages = body["messages"]
    system = next((str(m.get("content")) for m in messages if m["role"] == "system"), "")
    last = messages[-1]
    if "Triage" in system:
        handoff = tool_named(body, "transfer_to")
        if handoff and last["role"] != "tool":
            return {"tool_calls": [{"id": "call_h1", "name": handoff, "arguments": "{}"}]}
        return "Handed over."
    called = any(
        (c.get("function") or {}).get("name") == "add"
        for m in messages
        for c in m.get("tool_calls") or []
    )
    if called and last["role"] == "tool":
        return f"The answer is {last['content']}."
    return {
        "tool_calls": [{"id": "call_a1", "name": "add", "arguments": json.dumps({"a": 2, "b": 4})}]
    }


def ag2_upstream(body: dict[str, Any]) -> Any:
    """The Planner asks; the Solver calls add with a wrong operand, then reports the result
    and ends the chat."""
    messages = body["messages"]
    system = next((str(m.get("content")) for m in messages if m["role"] == "system"), "")
    if "Planner" in system:
        return "Solver, please add the two numbers of the question."
    results = [m for m in messages if m.get("role") == "tool"]
    if results:
        return f"The answer is {results[-1]['content']}. TERMINATE"
    return {
        "tool_calls": [{"id": "call_g1", "name": "add", "arguments": json.dumps({"a": 2, "b": 4})}]
    }


def crewai_upstream(body: dict[str, Any]) -> Any:
    """The Researcher calls add with a wrong operand (native tool calls when tools are
    offered, else CrewAI's ReAct text), then answers; the Writer states the result."""
    messages = body["messages"]
    system = next((str(m.get("content")) for m in messages if m["role"] == "system"), "")
    # Not the system prompt's: on the ReAct path it describes the "Observation:" format.
    text = " ".join(str(m.get("content") or "") for m in messages if m["role"] != "system")
    if "Researcher" in system:
        done = any(m.get("role") == "tool" for m in messages) or "Observation:" in text
        if done:
            return "Thought: I now know the final answer\nFinal Answer: 6"
        if body.get("tools"):
            args = json.dumps({"a": 2, "b": 4})
            return {"tool_calls": [{"id": "call_c1", "name": "add", "arguments": args}]}
        return 'Thought: I must add.\nAction: add\nAction Input: {"a": 2, "b": 4}'
    return "Thought: I now can give a great answer\nFinal Answer: The answer is 6."


def crewai_agents_upstream(body: dict[str, Any]) -> Any:
    """Agents-only crew: the Researcher calls add three times (the first with a wrong
    operand), then answers; the Writer states the result."""
    messages = body["messages"]
    system = next((str(m.get("content")) for m in messages if m["role"] == "system"), "")
    if "Researcher" in system:
        later = " ".join(str(m.get("content") or "") for m in messages if m["role"] != "system")
        done = sum(1 for m in messages if m.get("role") == "tool") + later.count("Observation:")
        calls = [(2, 4), (6, 1), (7, 0)]
        if done < len(calls):
            args = json.dumps(dict(zip("ab", calls[done], strict=True)))
            if body.get("tools"):
                call = {"id": f"call_c{done + 1}", "name": "add", "arguments": args}
                return {"tool_calls": [call]}
            return f"Thought: I must add.\nAction: add\nAction Input: {args}"
        return "Thought: I now know the final answer\nFinal Answer: 7"
    return "Thought: I now can give a great answer\nFinal Answer: The answer is 7."


def team_upstream(body: dict[str, Any]) -> Any:
    """The two-agent team of the Traceloop, Logfire, MLflow and LangSmith programs: the
    Planner restates the question; the Solver calls add with a wrong operand (3 read as 4),
    then reports the tool's result."""
    messages = body["messages"]
    system = " ".join(str(m.get("content")) for m in messages if m["role"] == "system")
    if "Planner" in system:
        return "Solver, please add 2 and 3."
    results = [m for m in messages if m.get("role") == "tool"]
    if results:
        return f"The answer is {results[-1]['content']}."
    args = json.dumps({"a": 2, "b": 4})
    return {"tool_calls": [{"id": "call_t1", "name": "add", "arguments": args}]}


def autogen_upstream(body: dict[str, Any]) -> Any:
    """The AutoGen SelectorGroupChat: the selector's model picks the Planner, then the
    Solver; the Planner restates the question; the Solver calls add with a wrong operand
    (3 read as 4), then reports the tool's result and ends the chat."""
    messages = body["messages"]
    text = " ".join(str(m.get("content") or "") for m in messages)
    if "select the next role" in text:
        return "Solver" if "Solver, please add" in text else "Planner"
    system = " ".join(str(m.get("content")) for m in messages if m["role"] == "system")
    if "the Planner" in system:
        return "Solver, please add 2 and 3."
    results = [m for m in messages if m.get("role") == "tool"]
    if results:
        return f"The answer is {results[-1]['content']}. TERMINATE"
    args = json.dumps({"a": 2, "b": 4})
    return {"tool_calls": [{"id": "call_s1", "name": "add", "arguments": args}]}


def delegation_upstream(body: dict[str, Any]) -> Any:
    """The Pydantic AI Coordinator asks its Researcher (a tool whose run is the
    Researcher's), who calls add with a wrong operand (3 read as 4) and reports the result;
    the Coordinator answers with what it was told."""
    messages = body["messages"]
    system = " ".join(str(m.get("content")) for m in messages if m["role"] == "system")
    results = [m for m in messages if m.get("role") == "tool"]
    if "the Coordinator" in system:
        if results:
            return f"The answer is {results[-1]['content']}."
        args = json.dumps({"question": "Add 2 and 3."})
        return {"tool_calls": [{"id": "call_q1", "name": "ask_researcher", "arguments": args}]}
    if results:
        return f"2 + 3 = {results[-1]['content']}"
    args = json.dumps({"a": 2, "b": 4})
    return {"tool_calls": [{"id": "call_r1", "name": "add", "arguments": args}]}


@dataclass
class Collecting:
    """A collector running in this process, and what points a program's OTLP exporter at it."""

    server: Collector
    env: dict[str, str]


@contextmanager
def collecting(out_dir: Path, raw: Path) -> Iterator[Collecting]:
    """faultfinder's OTLP collector on a loopback port, writing traces to ``out_dir`` and
    every request it receives to ``raw``."""
    config = CollectorConfig(out_dir=out_dir, port=0, quiet_seconds=0.3, raw_file=raw)

    async def factory() -> Collector:
        return await Collector(config).start()

    with ServerThread(factory) as thread:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": thread.url,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        yield Collecting(thread.server, env)


def settle(server: Collector, seconds: float = 10) -> None:
    """Wait until the collector has seen each trace finish (root span in, then quiet) on its
    own: a program ends after its exporter's last request was answered, not processed."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.traces and all(not t.dirty for t in server.traces.values()):
            return
        time.sleep(0.05)


@dataclass
class Run:
    """What one program run produced."""

    traces: list[Path]
    """Trace files written, including at shutdown."""
    finished: list[Path]
    """Trace files written because their trace finished (before shutdown)."""
    raw: Path
    stdout: str
    llm_requests: int


def run_program(
    args: list[str],
    upstream: Callable[[dict[str, Any]], Any],
    out_dir: Path,
    *,
    collect: bool = True,
    timeout: float = 240,
    python: str = sys.executable,
) -> Run:
    """Run ``python PROGRAMS/args...`` against a scripted upstream and a collector."""
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = out_dir / "raw.otlp.jsonl"
    with FakeOpenAIServer(reply=upstream) as fake, collecting(out_dir / "traces", raw) as collector:
        env = {**os.environ, **QUIET_ENV, "OPENAI_BASE_URL": fake.base_url, **collector.env}
        if not collect:  # the program writes its own export (MLflow would send OTLP)
            del env["OTEL_EXPORTER_OTLP_ENDPOINT"]
        proc = subprocess.run(
            [python, str(PROGRAMS / args[0]), *args[1:]],
            env=env,
            cwd=out_dir,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        server = collector.server
        if collect:
            settle(server)
        finished_before_shutdown = list(server.written)
        requests = len(fake.chat_requests)
    return Run(
        traces=sorted(set(server.written)),
        finished=sorted(set(finished_before_shutdown)),
        raw=raw,
        stdout=proc.stdout,
        llm_requests=requests,
    )


def regenerate() -> None:
    """Rewrite the committed fixtures from fresh runs."""
    import shutil
    import tempfile

    for kind in ("openinference", "genai"):
        with tempfile.TemporaryDirectory() as tmp:
            run = run_program(["agents_team.py", kind, QUESTION], agents_upstream, Path(tmp))
            target = FIXTURES / f"openai-agents-{kind}.otlp.jsonl"
            shutil.copy(run.raw, target)
            print(f"{target}: {len(run.traces)} trace(s), {run.llm_requests} LLM calls")
    for kind, log, name in (
        ("sqlite", "runtime.db", "ag2-groupchat.db"),
        ("file", "autogen_logs/runtime.log", "ag2-groupchat.runtime.log"),
    ):
        with tempfile.TemporaryDirectory() as tmp:
            run = run_program(
                ["ag2_groupchat.py", kind, QUESTION], ag2_upstream, Path(tmp), collect=False
            )
            shutil.copy(Path(tmp) / log, FIXTURES / name)
            print(f"{FIXTURES / name}: {run.llm_requests} LLM calls")


def regenerate_crewai(python: str) -> None:
    """CrewAI pins conflict with the dev environment: run it with its own interpreter."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        run = run_program(["crewai_crew.py", QUESTION], crewai_upstream, Path(tmp), python=python)
        target = FIXTURES / "crewai-openinference.otlp.jsonl"
        shutil.copy(run.raw, target)
        print(f"{target}: {len(run.traces)} trace(s), {run.llm_requests} LLM calls")


@dataclass(frozen=True)
class Producer:
    """A program whose library pins clash with the dev environment: run with its own
    interpreter (`python tests/otel_programs.py --producer NAME PYTHON`)."""

    program: list[str]
    upstream: Callable[[dict[str, Any]], Any]
    fixture: str
    output: str | None = None
    """A file the program writes (its own export) instead of sending OTLP."""


PRODUCERS = {
    "crewai": Producer(
        ["crewai_crew.py", QUESTION], crewai_upstream, "crewai-openinference.otlp.jsonl"
    ),
    "crewai-agents-only": Producer(
        ["crewai_crew.py", QUESTION, "--agents-only"],
        crewai_agents_upstream,
        "crewai-agents-only.otlp.jsonl",
    ),
    "crewai-react": Producer(
        ["crewai_crew.py", QUESTION, "--react"], crewai_upstream, "crewai-react.otlp.jsonl"
    ),
    "crewai-react-agents-only": Producer(
        ["crewai_crew.py", QUESTION, "--react", "--agents-only"],
        crewai_agents_upstream,
        "crewai-react-agents-only.otlp.jsonl",
    ),
    "traceloop": Producer(
        ["traceloop_team.py", QUESTION], team_upstream, "traceloop-team.otlp.jsonl"
    ),
    "logfire": Producer(
        ["logfire_team.py", QUESTION], team_upstream, "logfire-pydantic-ai.otlp.jsonl"
    ),
    **{
        name: Producer(
            ["autogen_selector_team.py", kind, QUESTION],
            autogen_upstream,
            f"autogen-selector{suffix}.otlp.jsonl",
        )
        for name, kind, suffix in (
            ("autogen", "none", ""),
            ("autogen-openai-v2", "openai-v2", "-openai-v2"),
            ("autogen-openinference", "openinference", "-openinference"),
        )
    },
    "autogen-no-span": Producer(
        ["autogen_selector_team.py", "none", QUESTION, "--no-span"],
        autogen_upstream,
        "autogen-selector-no-span.otlp.jsonl",
    ),
    "pydantic-ai": Producer(
        ["pydantic_ai_delegation.py", QUESTION],
        delegation_upstream,
        "pydantic-ai-delegation.otlp.jsonl",
    ),
    "mlflow": Producer(
        ["mlflow_team.py", QUESTION, "trace.json"],
        team_upstream,
        "mlflow-team.trace.json",
        "trace.json",
    ),
    "langsmith": Producer(
        ["langsmith_team.py", QUESTION, "runs.json"],
        team_upstream,
        "langsmith-team.runs.json",
        "runs.json",
    ),
}
"""Versions used for the committed fixtures are listed in docs/import.md."""


def scrub(text: str, *places: Path) -> str:
    """The fixture's text without this machine's paths (source file names, stores)."""
    for place in places:
        text = text.replace(str(place) + "/", "").replace(str(place), ".")
    return text


def regenerate_producer(name: str, python: str) -> None:
    import tempfile

    producer = PRODUCERS[name]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp).resolve()
        run = run_program(
            producer.program,
            producer.upstream,
            out,
            python=python,
            collect=producer.output is None,
        )
        source = out / producer.output if producer.output else run.raw
        target = FIXTURES / producer.fixture
        text = scrub(source.read_text(encoding="utf-8"), PROGRAMS.resolve(), out)
        target.write_text(text, encoding="utf-8")
        print(f"{target}: {run.llm_requests} LLM calls")


QUIET_ENV.update(
    {
        "TRACELOOP_TELEMETRY": "false",
        "LANGSMITH_ENDPOINT": "http://127.0.0.1:9",  # local tracing; the client's probe fails
        "DO_NOT_TRACK": "1",
    }
)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent / "src"))
    if len(sys.argv) == 3 and sys.argv[1] == "--crewai-python":
        regenerate_crewai(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "--producer":
        regenerate_producer(sys.argv[2], sys.argv[3])
    else:
        regenerate()
