"""The UI shows all it can (issue 27): a folder is read file by file, an unreadable file is
listed with its reason and hides nothing else, and `attribute` keeps every result in the
results store that `ui` reads by default."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("starlette", reason="needs the 'ui' extra")

from starlette.testclient import TestClient

from faultfinder.cli import main
from faultfinder.ui.app import create_app
from faultfinder.ui.scan import build_catalog

FIX = Path(__file__).parent / "fixtures"
WW = FIX / "importers" / "whoandwhen" / "Hand-Crafted" / "1.json"


def attribute(trace: Path, store: Path, tmp_path: Path, *extra: str) -> str:
    """Run `attribute` with a scripted model; returns stdout (the JSON result)."""
    from faultfinder.traces.loader import load_trace

    t = load_trace(trace)
    replies = tmp_path / f"replies-{len(list(tmp_path.iterdir()))}.json"
    replies.write_text(
        json.dumps([f"Agent Name: {t.steps[0].agent}\nStep Number: 0\nReason for Mistake: x"])
    )
    args = ["attribute", str(trace), "--method", "all-at-once", "--model", f"scripted:{replies}"]
    args += ["--cache", "none", "--results", str(store), *extra]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return result.output


def test_a_result_beside_a_trace_hides_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(WW, folder / "1.json")
    out = attribute(folder / "1.json", tmp_path / "store.jsonl", tmp_path, "--json", "--no-save")
    (folder / "result.json").write_text(out)
    (folder / "broken.json").write_text('{"steps": [')
    shutil.copy(FIX / "otel" / "mlflow-team.trace.json", folder / "mlflow.json")
    shutil.copy(FIX / "otel" / "traceloop-team.otlp.jsonl", folder / "spans.otlp.jsonl")
    catalog = build_catalog([folder])
    ids = sorted(t.trace.id for t in catalog.traces.values())
    assert len(ids) == 3 and any(i.startswith("mlflow/") for i in ids)
    assert any(i.startswith("spans.otlp/") for i in ids)
    (who,) = [t for t in catalog.traces.values() if t.path.name == "1.json"]
    assert [a.attribution.method for a in catalog.attributions_for(who.trace.id)] == ["all-at-once"]
    assert [(p.path.name, "broken.json" in str(p.path)) for p in catalog.problems] == [
        ("broken.json", True)
    ]
    assert catalog.problems[0].reason  # the reason is shown, one line


def test_saved_attributions_show_on_the_trace_page(tmp_path: Path) -> None:
    store = tmp_path / "store.jsonl"
    attribute(WW, store, tmp_path)
    attribute(WW, store, tmp_path, "--json")
    attribute(WW, store, tmp_path, "--no-save")
    lines = store.read_text().splitlines()
    assert len(lines) == 2  # --no-save kept nothing
    catalog = build_catalog([WW], results_file=store)
    (entry,) = catalog.traces.values()
    saved = catalog.attributions_for(entry.trace.id)
    assert [a.origin for a in saved] == ["saved", "saved"]
    client = TestClient(create_app(catalog), base_url="http://127.0.0.1")
    page = client.get(f"/trace/{entry.key}").text
    assert "No method has attributed this trace yet." not in page
    assert page.count("saved: ") == 2  # both saved answers in the answers table


def test_ui_reads_the_results_store_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`attribute` and `ui` agree on the store without any option."""
    monkeypatch.delenv("FAULTFINDER_RESULTS", raising=False)
    monkeypatch.chdir(tmp_path)
    from faultfinder.results_store import DEFAULT_RESULTS

    out = attribute(WW, DEFAULT_RESULTS, tmp_path)
    assert (tmp_path / DEFAULT_RESULTS).is_file(), out
    from faultfinder.cli import ui_cmd

    assert ui_cmd.DEFAULT_RESULTS == DEFAULT_RESULTS
