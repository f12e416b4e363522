"""`faultfinder collect` keeps a written trace in memory only for ``forget_seconds``: a long
run does not grow without end, and a span arriving after that is kept in a late file, never
over the complete one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from faultfinder.collect.collector import Collector, CollectorConfig
from faultfinder.traces.importers._spans import spans_from_otlp
from faultfinder.traces.loader import load_trace
from otel_helpers import TRACE, genai_current
from polling import wait_for
from test_collect_export import collector

KEY = "resource-secret-value-123"


def export(trace_id: str, span_id: str, *, parent: str | None, text: str = "") -> dict[str, Any]:
    span: dict[str, Any] = {
        "traceId": trace_id,
        "spanId": span_id,
        "name": "chat gpt-4o",
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.output.messages", "value": {"stringValue": text or "done"}},
        ],
    }
    if parent:
        span["parentSpanId"] = parent
    resource = {"attributes": [{"key": "service.api_key", "value": {"stringValue": KEY}}]}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]}


def test_written_traces_leave_memory(tmp_path: Path) -> None:
    with collector(tmp_path, quiet=0.1, forget_seconds=0.3) as server:
        url = server.url + "/v1/traces"
        for n in range(20):
            trace_id = f"{n + 1:032x}"
            assert httpx.post(url, json=export(trace_id, "a" * 16, parent=None)).is_success
        assert wait_for(lambda: len(server.server.written) == 20)
        assert wait_for(lambda: not server.server.traces)  # nothing held any more
        assert len(server.server.gone) == 20
    assert len(list((tmp_path / "out").glob("*.json"))) == 20


def test_a_span_after_the_trace_left_memory_goes_to_a_late_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with collector(tmp_path, quiet=0.1, forget_seconds=0.3) as server:
        url = server.url + "/v1/traces"
        assert httpx.post(url, json=export(TRACE, "a" * 16, parent=None)).is_success
        assert wait_for(lambda: TRACE in server.server.gone)
        first = (out / f"{TRACE}.json").read_text()
        # a late span quoting a secret only the earlier span's resource revealed
        late = export(TRACE, "9" * 16, parent="a" * 16, text=f"key is {KEY}")
        late["resourceSpans"][0].pop("resource")
        assert httpx.post(url, json=late).is_success
        assert wait_for(lambda: (out / f"{TRACE}.late-1.json").exists())
        assert wait_for(lambda: TRACE in server.server.gone and not server.server.traces)
        # a span later still makes a second late file
        assert httpx.post(url, json=export(TRACE, "8" * 16, parent="a" * 16)).is_success
        assert wait_for(lambda: (out / f"{TRACE}.late-2.json").exists())
    assert (out / f"{TRACE}.json").read_text() == first  # the complete file is untouched
    assert load_trace(out / f"{TRACE}.json").metadata["complete"] is True
    fragment = load_trace(out / f"{TRACE}.late-1.json")
    assert fragment.id == f"collected/{TRACE}/late-1"
    assert fragment.metadata["late_for"] == f"collected/{TRACE}"
    assert fragment.metadata["complete"] is False
    assert KEY not in (out / f"{TRACE}.late-1.json").read_text()


def test_a_late_span_within_forget_seconds_is_still_merged(tmp_path: Path) -> None:
    doc = genai_current()
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    with collector(tmp_path, quiet=0.1, forget_seconds=30) as server:
        url = server.url + "/v1/traces"
        httpx.post(url, json={"resourceSpans": [{"scopeSpans": [{"spans": spans[:3]}]}]})
        assert wait_for(lambda: len(server.server.written) == 1)
        httpx.post(url, json={"resourceSpans": [{"scopeSpans": [{"spans": spans[3:]}]}]})
        assert wait_for(lambda: len(server.server.written) == 2)
        assert not server.server.gone
    assert [p.name for p in (tmp_path / "out").iterdir()] == [f"{TRACE}.json"]
    assert len(load_trace(tmp_path / "out" / f"{TRACE}.json").steps) == 2


def test_a_late_file_scrubs_what_an_unwritten_span_revealed(tmp_path: Path) -> None:
    """The secrets kept when a trace leaves memory come from every span it held, also one
    whose rewrite failed: the late file scrubs a key only that span's resource revealed."""
    out = tmp_path / "out"
    out.mkdir()
    # Driven by hand, no server and no clock: quiet and forget times are 0, and a trace
    # counts as idle once its spans are made old.
    server = Collector(CollectorConfig(out_dir=out, quiet_seconds=0, forget_seconds=0))

    def receive(doc: dict[str, Any], *, keyless: bool = True) -> None:
        if keyless:
            doc["resourceSpans"][0].pop("resource")
        server.add(spans_from_otlp(doc, path="request"))
        for entry in server.traces.values():
            entry.last_seen -= 1000
        server.flush()

    receive(export(TRACE, "a" * 16, parent=None))
    (out / f"{TRACE}.json.tmp").mkdir()  # the rewrite with the next span fails
    receive(export(TRACE, "b" * 16, parent="a" * 16), keyless=False)
    assert server.errors and KEY not in (out / f"{TRACE}.json").read_text()
    server.flush()  # the trace leaves memory
    assert TRACE in server.gone and not server.traces
    receive(export(TRACE, "9" * 16, parent="a" * 16, text=f"key is {KEY}"))
    late = (out / f"{TRACE}.late-1.json").read_text()
    assert KEY not in late and "key is [REDACTED]" in late
