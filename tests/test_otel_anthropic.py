"""The Anthropic SDK team traced by OpenInference's Anthropic instrumentation: its spans,
exported with the real OTLP/HTTP exporter to faultfinder's collector, import with the same
agents and steps as the proxy records for the same program (issue 25, part 6)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

import claude_scripts
import frameworks_scripts as scripts
from faultfinder.replay.session import SessionOptions, record_run
from faultfinder.testing import FakeOpenAIServer
from faultfinder.traces.loader import load_traces
from otel_programs import collecting, settle

pytest.importorskip("openinference.instrumentation.anthropic")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")

HERE = Path(__file__).parent
PROGRAM = HERE / "fixtures" / "otel" / "programs" / "anthropic_team.py"
TEAM = HERE / "fixtures" / "frameworks" / "anthropic_sdk_team.py"


def traced_run(tmp_path: Path, stream: bool) -> Path:
    """Run the instrumented team against the fake upstream; the OTLP file it exported."""
    raw = tmp_path / "raw.otlp.jsonl"
    with (
        FakeOpenAIServer(claude_scripts.anthropic_sdk) as fake,
        collecting(tmp_path / "traces", raw) as collector,
    ):
        env = {
            **os.environ,
            "ANTHROPIC_BASE_URL": fake.base_url.removesuffix("/v1"),
            "ANTHROPIC_API_KEY": "sk-ant-fake-test-key",
            **collector.env,
            "NO_PROXY": "127.0.0.1,localhost",
        }
        args = [sys.executable, str(PROGRAM), scripts.TASK, *(["--stream"] if stream else [])]
        proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        settle(collector.server)
    return raw


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_openinference_spans_import_with_the_recorded_agents_and_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    for key in ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    raw = traced_run(tmp_path / "otel", stream)
    (imported,) = load_traces(str(raw))
    command = [sys.executable, str(TEAM), scripts.TASK, *(["--stream"] if stream else [])]
    with FakeOpenAIServer(claude_scripts.anthropic_sdk) as upstream:
        recorded = asyncio.run(
            record_run(command, upstream.base_url, tmp_path, run_id="r",
                       options=SessionOptions(echo=False))
        )  # fmt: skip
    proxy = recorded.trace
    llm_steps = [s for s in imported.steps if s.kind == "llm"]
    assert [s.agent for s in llm_steps] == [s.agent for s in proxy.steps]
    # Texts as written (a step that only calls a tool has no text in the recording; the
    # OpenInference span lists a tool_use part instead).
    assert [s.content for s in llm_steps[1:]] == [s.content for s in proxy.steps[1:]]
    assert [[c.name for c in s.tool_calls] for s in llm_steps] == [
        [c.name for c in s.tool_calls] for s in proxy.steps
    ]
    assert [m["role"] for m in llm_steps[1].input_messages] == [
        m["role"] for m in proxy.steps[1].input_messages
    ]
