"""The spans an Agents SDK team on the Responses API emits (OpenInference and the
OpenTelemetry GenAI instrumentation, exported by the real OTLP/HTTP exporter) import
with the same agents and steps as faultfinder's recording of the same run."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import pytest

from faultfinder.replay.session import SessionOptions, record_run
from faultfinder.testing import FakeOpenAIServer
from faultfinder.traces.loader import load_traces
from otel_programs import PROGRAMS, QUESTION, QUIET_ENV, agents_upstream, collecting, settle

PROGRAM = PROGRAMS / "agents_team.py"


@pytest.mark.parametrize("kind", ["openinference", "genai"])
def test_responses_spans_import_as_recorded(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = {
        "openinference": "openinference.instrumentation.openai_agents",
        "genai": "opentelemetry.instrumentation.openai_agents",
    }[kind]
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is missing too
        found = False
    if not found:
        pytest.skip(f"{module} is not installed")
    raw = tmp_path / "raw.otlp.jsonl"
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with (
        FakeOpenAIServer(reply=agents_upstream) as upstream,
        collecting(tmp_path / "traces", raw) as collector,
    ):
        recorded = asyncio.run(
            record_run(
                [sys.executable, str(PROGRAM), kind, QUESTION, "responses"],
                upstream.base_url,
                tmp_path / "runs",
                run_id="run",
                options=SessionOptions(echo=False, timeout=180, env={**QUIET_ENV, **collector.env}),
            )
        )
        assert recorded.child.exit_code == 0, recorded.child.stderr[-3000:]
        settle(collector.server)
    ours = recorded.trace
    assert [s.metadata["api"] for s in ours.steps] == ["responses"] * 3
    (theirs,) = load_traces(raw)

    def shape(trace: object) -> list[tuple[str, list[str]]]:
        return [
            (s.content, [c.name for c in s.tool_calls])
            for s in trace.steps  # type: ignore[attr-defined]
        ]

    assert shape(theirs) == shape(ours)
    # The same agents step for step. The spans name them as the program did ('Math
    # tutor'); the proxy, seeing only requests, names them from their instructions
    # ('You are the Math tutor' gives 'Math': a capitalised name).
    pairs = {(t.agent, o.agent) for t, o in zip(theirs.steps, ours.steps, strict=True)}
    assert pairs == {("Triage", "Triage"), ("Math tutor", "Math")}
    assert ours.steps[1].tool_results[0].content == "6"
    assert [r.content for r in theirs.steps[1].tool_results] == ["6"]
