"""Koog's agents are named by their strategy (``koog.agent.strategy.name``), not by the
random UUID its spans carry as ``gen_ai.agent.id``; the id is kept in metadata."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from faultfinder.traces.loader import load_trace
from otel_helpers import export, span

_DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "trace-samples"
SAMPLES = Path(os.environ.get("FAULTFINDER_TRACE_SAMPLES", str(_DEFAULT)))
KOOG_ID = "f9f77d1a-437f-4ba6-890e-b592a50cbd21"


def test_the_koog_sample_names_its_agent_by_its_strategy() -> None:
    # It imported with its agent named 'f9f77d1a-437f-4ba6-890e-b592a50cbd21'.
    path = SAMPLES / "langfuse" / "koog-2025-08-26.trace.json"
    if not path.exists():
        pytest.skip(f"sample not present: {path} (shared data is not part of the repository)")
    trace = load_trace(path)
    assert [a.name for a in trace.agents] == ["single_run_sequential"]
    assert {s.agent for s in trace.steps} == {"single_run_sequential"}
    assert trace.metadata["agent_ids"] == {"single_run_sequential": KOOG_ID}
    assert "koog.agent.strategy.name" in trace.metadata["agent_ids_named_by"]


def koog_run(agent_id: str, run: str, strategy: str, start: int) -> list[dict[str, Any]]:
    """Koog's span tree for one run: agent span, run span (with the strategy), a node,
    a model call."""
    ids = [f"{start:02d}{n:014d}" for n in range(4)]
    return [
        span(ids[0], None, f"agent.{agent_id}", start, {"gen_ai.agent.id": agent_id}),
        span(
            ids[1],
            ids[0],
            f"run.{run}",
            start + 1,
            {
                "gen_ai.agent.id": agent_id,
                "gen_ai.operation.name": "invoke_agent",
                "koog.agent.strategy.name": strategy,
            },
        ),
        span(ids[2], ids[1], "node.nodeCallLLM", start + 2, {"koog.node.name": "nodeCallLLM"}),
        span(
            ids[3],
            ids[2],
            "llm.chat",
            start + 3,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.prompt.0.role": "user",
                "gen_ai.prompt.0.content": f"question {start}",
                "gen_ai.completion.0.role": "assistant",
                "gen_ai.completion.0.content": f"answer {start}",
            },
        ),
    ]


def loaded(tmp_path: Path, spans: list[dict[str, Any]]) -> Any:
    path = tmp_path / "koog.json"
    path.write_text(json.dumps(export(spans, scope="ai.koog")), encoding="utf-8")
    return load_trace(path, format="otlp")


def test_two_agents_of_one_strategy_stay_two(tmp_path: Path) -> None:
    first, second = KOOG_ID, "0b9d1c2e-1111-4222-8333-944455556666"
    trace = loaded(
        tmp_path,
        koog_run(first, "r1", "single_run_sequential", 10)
        + koog_run(second, "r2", "single_run_sequential", 20),
    )
    names = ["single_run_sequential (f9f77d1a)", "single_run_sequential (0b9d1c2e)"]
    assert [s.agent for s in trace.steps] == names
    assert sorted(a.name for a in trace.agents) == sorted(names)
    assert trace.metadata["agent_ids"] == dict(zip(names, [first, second], strict=True))


def test_an_id_the_program_chose_stays_the_name(tmp_path: Path) -> None:
    trace = loaded(tmp_path, koog_run("researcher", "r1", "single_run_sequential", 10))
    assert [s.agent for s in trace.steps] == ["researcher"]
    assert "agent_ids" not in trace.metadata


def test_an_agent_name_on_the_span_wins(tmp_path: Path) -> None:
    spans = koog_run(KOOG_ID, "r1", "planner_strategy", 10)
    spans[1]["attributes"].append({"key": "gen_ai.agent.name", "value": {"stringValue": "Ada"}})
    trace = loaded(tmp_path, spans)
    assert [s.agent for s in trace.steps] == ["Ada"]
