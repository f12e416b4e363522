"""`faultfinder export` against loopback fakes that answer as Langfuse and Phoenix do
(tests/export_fakes.py), and the Langfuse public samples written back to Langfuse."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from export_fakes import FakeLangfuse, FakePhoenix, serving
from faultfinder.cli import main
from faultfinder.judging.method import Attribution
from faultfinder.traces.io import write_trace
from faultfinder.traces.loader import load_traces

FIXTURES = Path(__file__).parent / "fixtures" / "otel"
_DEFAULT_SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "data" / "trace-samples"
SAMPLES = Path(os.environ.get("FAULTFINDER_TRACE_SAMPLES", str(_DEFAULT_SAMPLES))) / "langfuse"


def verdict(trace_id: str, *, step: int = 1, agent: str = "Math tutor", **kw: Any) -> Attribution:
    fields: dict[str, Any] = {
        "agent": agent,
        "step": step,
        "reason": "added 4 instead of 3",
        "confidence": 0.8,
        "trace_id": trace_id,
        "method": "all-at-once",
        "config": {},
        "model": "scripted",
        "prompt_version": "x",
        "with_ground_truth": False,
        "observability": "full",
    }
    return Attribution(**{**fields, **kw})


def files(tmp_path: Path, **kw: Any) -> tuple[Any, list[str]]:
    (trace,) = load_traces(FIXTURES / "openai-agents-openinference.otlp.jsonl")
    write_trace(trace, tmp_path / "t.json")
    (tmp_path / "a.json").write_text(verdict(trace.id, **kw).model_dump_json())
    return trace, [str(tmp_path / "a.json"), str(tmp_path / "t.json")]


def langfuse_env(monkeypatch: pytest.MonkeyPatch, fake: FakeLangfuse) -> None:
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", fake.public_key)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", fake.secret_key)


def test_exporting_again_to_langfuse_replaces_the_score(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Langfuse keeps every score POSTed without an id (it makes one up), so a second
    export of the verdict (a retry, the verdict re-run) showed two scores on the trace. The
    score's id is now the trace's and the method's: the second export replaces the first,
    and another method's verdict is a score of its own."""
    trace, args = files(tmp_path)
    fake = FakeLangfuse()
    langfuse_env(monkeypatch, fake)
    with serving(fake) as url:
        command = ["export", *args, "--to", "langfuse", "--url", url]
        for _ in range(2):
            result = CliRunner().invoke(main, command)
            assert result.exit_code == 0, result.output
        assert len(fake.requests) == 2 and len(fake.scores) == 1
        (score,) = fake.scores.values()
        assert score["traceId"] == trace.metadata["trace_id"]
        assert score["id"] in result.output
        (tmp_path / "b.json").write_text(verdict(trace.id, method="echo").model_dump_json())
        other = ["export", str(tmp_path / "b.json"), args[1], "--to", "langfuse", "--url", url]
        assert CliRunner().invoke(main, other).exit_code == 0
        assert len(fake.scores) == 2


def test_exporting_again_to_phoenix_updates_the_annotation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace, args = files(tmp_path)
    fake = FakePhoenix(spans={s.metadata["span_id"] for s in trace.steps}, api_key="px-key")
    monkeypatch.setenv("PHOENIX_API_KEY", "px-key")
    with serving(fake) as url:
        for _ in range(2):
            result = CliRunner().invoke(main, ["export", *args, "--to", "phoenix", "--url", url])
            assert result.exit_code == 0, result.output
    ((key, annotation),) = fake.annotations.items()
    assert key == ("faultfinder", trace.steps[1].metadata["span_id"], "faultfinder:all-at-once")
    assert annotation["result"]["explanation"] == "added 4 instead of 3"


@pytest.mark.skipif(not SAMPLES.is_dir(), reason="Langfuse public samples not present")
@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.glob("*.json")) or ["none"])
def test_a_langfuse_sample_attributed_by_shortlist_goes_back_onto_its_own_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sample: str
) -> None:
    """A trace exported from Langfuse, attributed offline and written back: the score
    names the trace and an observation that the Langfuse export holds (Langfuse does not
    check them: a wrong id would be accepted and show nowhere)."""
    path = SAMPLES / sample
    doc = json.loads(path.read_text(encoding="utf-8"))
    attributed = CliRunner().invoke(
        main, ["attribute", str(path), "--method", "shortlist", "--json"]
    )
    assert attributed.exit_code == 0, attributed.output
    (tmp_path / "a.json").write_text(attributed.stdout)
    fake = FakeLangfuse()
    langfuse_env(monkeypatch, fake)
    with serving(fake) as url:
        result = CliRunner().invoke(
            main, ["export", str(tmp_path / "a.json"), str(path), "--to", "langfuse", "--url", url]
        )
    assert result.exit_code == 0, result.output
    (score,) = fake.scores.values()
    observations = {o["id"]: o for o in doc["observations"]}
    assert score["traceId"] == doc["trace"]["id"]
    assert observations[score["observationId"]]["traceId"] == doc["trace"]["id"]
    assert score["value"] == json.loads(attributed.stdout)["agent"]
