"""`faultfinder ui` over big artefacts: a replay whose changed steps are long or many is
answered quickly, and whatever it does not compare or show, it says it does not."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="needs the 'ui' extra")

from starlette.testclient import TestClient

from faultfinder.ui.app import create_app
from faultfinder.ui.scan import build_catalog
from ui_support import Artifacts, shared

HOST = "http://127.0.0.1"


@pytest.fixture(scope="module")
def art(tmp_path_factory: pytest.TempPathFactory) -> Artifacts:
    return shared(tmp_path_factory)


def words(prefix: str, n: int) -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


def replay_with(art: Artifacts, tmp_path: Path, original: list[str], replayed: list[str]) -> str:
    """The demo recording and its `fix` branch with these step texts (one per step, the
    steps beyond them dropped), served; returns the branch's replay page."""
    run = tmp_path / "runs" / "avalon"
    shutil.copytree(art.run, run)
    for path, texts in (
        (run / "trace.json", original),
        (run / "branches/fix/trace.json", replayed),
    ):
        trace = json.loads(path.read_text("utf-8"))
        first = trace["steps"][0]
        trace["steps"] = [
            {**first, "index": i, "content": text, "tool_calls": [], "tool_results": []}
            for i, text in enumerate(texts)
        ]
        path.write_text(json.dumps(trace), "utf-8")
    catalog = build_catalog([tmp_path / "runs"])
    client = TestClient(create_app(catalog), base_url=HOST)
    (key,) = [k for k, r in catalog.replays.items() if r.branch_dir.name == "fix"]
    started = time.monotonic()
    page = client.get(f"/replay/{key}")
    assert page.status_code == 200
    # difflib without bounds took 3 s for two steps of 500 different words, 23 s for
    # 1,000: these steps would hold a server thread for minutes.
    assert time.monotonic() - started < 5
    return page.text


def test_long_changed_steps_are_compared_quickly(art: Artifacts, tmp_path: Path) -> None:
    original = [words("old", 1200) for _ in range(3)]
    replayed = [words("new", 1200) for _ in range(3)]
    page = replay_with(art, tmp_path, original, replayed)
    assert page.count("<del>") == 3 and page.count("<ins>") == 3
    assert "new1199" in page and "old1199" in page


def test_a_step_longer_than_the_diff_says_it_is_cut(art: Artifacts, tmp_path: Path) -> None:
    long = words("w", 6000) + " THE-END"
    page = replay_with(art, tmp_path, ["short", "same"], [long, "same"])
    assert "THE-END" not in page  # past DIFF_LIMIT: not on the page...
    said = f"the first 20,000 of {len(long):,} characters"
    assert page.count(said) == 1  # ...and the page says so, with a link to the whole step
    assert '/step/0">the whole step</a>' in page


def test_changed_steps_past_the_page_budget_are_shown_not_compared(
    art: Artifacts, tmp_path: Path
) -> None:
    n = 60  # steps of ~4,000 characters a side: 480,000 to compare
    original = [words(f"o{i}x", 700) for i in range(n)]
    replayed = [words(f"o{i}x", 350) + " changed " + words(f"n{i}x", 350) for i in range(n)]
    page = replay_with(art, tmp_path, original, replayed)
    assert 0 < page.count("Not compared word by word") < n
    assert f"o{n - 1}x349 changed" in page.replace("<ins>", "").replace("</ins>", "")


def test_long_tool_calls_and_results_are_cut_on_the_trace_page(tmp_path: Path) -> None:
    big = "x" * 3_000_000
    trace = {
        "schema_version": "1",
        "id": "huge",
        "task": "t",
        "steps": [
            {
                "index": 0,
                "agent": "A",
                "content": "y" * 30_000,
                "tool_calls": [{"id": "c", "name": "fetch", "arguments": big}],
                "tool_results": [{"call_id": "c", "content": big + "z"}],
            }
        ],
    }
    (tmp_path / "huge.json").write_text(json.dumps(trace), "utf-8")
    catalog = build_catalog([tmp_path])
    client = TestClient(create_app(catalog), base_url=HOST)
    (key,) = catalog.traces
    page = client.get(f"/trace/{key}").text
    assert len(page) < 200_000  # was 6 MB: every call's arguments and result whole
    assert "Output cut at 20,000 of 30,000 characters" in page
    assert "Cut at 20,000 of 3,000,000 characters" in page
    assert "Cut at 20,000 of 3,000,001 characters" in page
    assert page.count(f'href="/trace/{key}/step/0">full step</a>') == 3
    step = client.get(f"/trace/{key}/step/0").text
    assert big + "z" in step  # the step page shows everything
