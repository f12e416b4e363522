"""A new verdict exported to Phoenix on another span than an earlier verdict of the same
method (a loopback fake answering as Phoenix does: tests/export_fakes.py). Phoenix keys an
annotation on (name, span, identifier), so the new one is added beside the old, which
export does not delete (Phoenix's REST API removes annotations only project-wide, by
name or identifier, which would take every other trace's verdicts with it); the new one
says it supersedes the old, and the command says the old one stays."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from export_fakes import FakePhoenix, serving
from faultfinder.cli import main
from faultfinder.traces.io import write_trace
from faultfinder.traces.loader import load_traces
from test_export_apis import FIXTURES, verdict


def test_a_verdict_on_another_span_says_it_supersedes_the_earlier_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (trace,) = load_traces(FIXTURES / "openai-agents-openinference.otlp.jsonl")
    write_trace(trace, tmp_path / "t.json")
    fake = FakePhoenix(spans={s.metadata["span_id"] for s in trace.steps})
    monkeypatch.delenv("PHOENIX_API_KEY", raising=False)
    outputs = []
    with serving(fake) as url:
        for step in (1, 2):  # the verdict re-run names the Math tutor's next step
            attribution = verdict(trace.id, step=step, agent=trace.steps[step].agent)
            (tmp_path / "a.json").write_text(attribution.model_dump_json())
            args = [str(tmp_path / "a.json"), str(tmp_path / "t.json")]
            result = CliRunner().invoke(main, ["export", *args, "--to", "phoenix", "--url", url])
            assert result.exit_code == 0, result.output
            outputs.append(result.output)
    spans = [trace.steps[n].metadata["span_id"] for n in (1, 2)]
    assert sorted(fake.annotations) == sorted(
        ("faultfinder", span, "faultfinder:all-at-once") for span in spans
    )  # the earlier annotation is kept, not deleted
    first, latest = (fake.annotations[("faultfinder", s, "faultfinder:all-at-once")] for s in spans)
    source_id = trace.metadata["trace_id"]
    for annotation in (first, latest):
        facts = annotation["metadata"]
        assert facts["trace_id"] == source_id
        assert f"on another span of trace {source_id}" in facts["supersedes"]
        assert "'faultfinder:all-at-once' annotation exported before" in facts["supersedes"]
    assert datetime.fromisoformat(latest["metadata"]["exported_at"]) >= datetime.fromisoformat(
        first["metadata"]["exported_at"]
    )
    assert latest["metadata"]["step"] == 2
    assert all("stays there" in out and "deletes nothing" in out for out in outputs)
