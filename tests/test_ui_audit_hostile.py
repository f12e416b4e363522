"""Fixes from the audit of `faultfinder ui` over hostile and awkward folders: a
TraceElephant run (or any directory format) hides nothing else in a folder, names that are
not UTF-8 and lone surrogates in answer, graph and DoVer files are listed under "Not shown"
instead of breaking the runs page, the runs page is linear in what it shows and never holds
up other requests, and the trace page's source link always leads to a file."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="needs the 'ui' extra")

import httpx
from starlette.testclient import TestClient

from faultfinder.judging.method import Attribution
from faultfinder.replay.httpserver import ServerThread
from faultfinder.ui import pages
from faultfinder.ui.app import create_app
from faultfinder.ui.catalog import AttributionEntry
from faultfinder.ui.scan import build_catalog
from faultfinder.ui.serve import ui_server
from ui_support import Artifacts, shared

FIXTURES = Path(__file__).parent / "fixtures"
IMPORTERS = FIXTURES / "importers"
CAPTAIN = IMPORTERS / "traceelephant" / "captain-runs-gaia"
HOST = "http://127.0.0.1"
TRACE = {
    "schema_version": "1",
    "id": "plain-case",
    "task": "Add 2 and 2",
    "steps": [
        {"index": 0, "agent": "Planner", "content": "Ask the calculator."},
        {"index": 1, "agent": "Calculator", "content": "2 + 2 = 5"},
    ],
    "label": {"agent": "Calculator", "step": 1},
}


def answer(trace_id: str, method: str = "all-at-once", reason: str = "it said 5") -> dict[str, Any]:
    return {
        "trace_id": trace_id,
        "method": method,
        "prompt_version": "1",
        "status": "ok",
        "agent": "Calculator",
        "step": 1,
        "reason": reason,
        "config": {},
        "model": "scripted",
        "with_ground_truth": False,
        "observability": "full",
    }


@pytest.fixture(scope="module")
def art(tmp_path_factory: pytest.TempPathFactory) -> Artifacts:
    return shared(tmp_path_factory)


@contextmanager
def ui_command(*paths: Path, cwd: Path) -> Iterator[str]:
    """`faultfinder ui PATHS --port 0` as a user starts it; yields the URL it serves."""
    log = cwd / f"ui-{len(list(cwd.glob('ui-*.log')))}.log"
    with log.open("w") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-m", "faultfinder", "ui", *map(str, paths), "--port", "0"],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        try:
            assert child.stdout is not None
            line = ""
            while not line.startswith("serving "):
                line = child.stdout.readline()
                assert line, log.read_text()
            yield line.split()[1].rstrip("/")
        finally:
            child.terminate()
            child.wait(timeout=10)


def runs_page(url: str) -> str:
    response = httpx.get(url + "/", timeout=30)
    assert response.status_code == 200, response.text[-500:]
    return response.text


def trace_count(page: str) -> int:
    found = re.search(r"(\d+) of (\d+) traces", page)
    assert found, page[-500:]
    return int(found.group(2))


def sources(page: str) -> list[str]:
    """The source column of the runs table."""
    return re.findall(r"<td>(?:trace|recording|replay)</td><td>([^<]*)</td>", page)


def not_shown(page: str) -> list[str]:
    """The lines under "Not shown", as text."""
    if "<h2>Not shown</h2>" not in page:
        return []
    part = page.split("<h2>Not shown</h2>", 1)[1].split("</ul>", 1)[0]
    return [html.unescape(re.sub(r"<[^>]+>", "", item)) for item in part.split("<li>")[1:]]


# --- 1. a directory format hides nothing else ---------------------------------------------


def test_a_traceelephant_run_in_a_folder_hides_nothing_else(art: Artifacts, tmp_path: Path) -> None:
    before = build_catalog([art.root])
    assert not before.problems
    folder = tmp_path / "served"
    shutil.copytree(art.root, folder)
    shutil.copytree(CAPTAIN, folder / CAPTAIN.name)
    with ui_command(folder, cwd=tmp_path) as url:
        page = runs_page(url)
    assert trace_count(page) == len(before.traces) + 1
    assert sources(page).count("traceelephant") == 1
    for heading in ("Evaluations", "DoVer debugging results", "Replays", "CHIEF graphs"):
        assert f"<h2>{heading}</h2>" in page, heading
    assert page.count('href="/eval/') == len(before.evals)
    assert page.count('href="/graph/') == len(before.graphs)
    assert page.count('href="/replay/') == len(before.replays)
    assert not_shown(page) == []


def test_the_importer_fixtures_folder_shows_every_format(tmp_path: Path) -> None:
    with ui_command(IMPORTERS, cwd=tmp_path) as url:
        page = runs_page(url)
        formats = set(sources(page))
        assert {
            "who-and-when", "traceelephant", "otlp", "langfuse", "phoenix", "generic", "ag2"
        } <= formats  # fmt: skip
        assert sources(page).count("traceelephant") == 3
        assert sources(page).count("who-and-when") == 4
        # The one file left out says why: its messages need a mapping (--format generic).
        (only,) = not_shown(page)
        assert only.startswith("importers/generic/wrapped.json: ")
        assert "no reader recognises it" in only


def test_a_directory_format_is_read_where_it_is(tmp_path: Path) -> None:
    # The run directory itself, given directly: its two files are its parts, not problems.
    run = tmp_path / CAPTAIN.name / "task_7"  # (a run's id is its parent's name and its own)
    shutil.copytree(CAPTAIN / "task_7", run)
    catalog = build_catalog([run])
    assert [t.trace.id for t in catalog.traces.values()] == ["captain-runs-gaia/task_7"]
    assert catalog.problems == []
    # A folder above it: the run is found below, and what lies beside it is read too.
    folder = tmp_path / "mixed"
    runs = folder / CAPTAIN.name
    shutil.copytree(CAPTAIN, runs)
    (folder / "plain.json").write_text(json.dumps(TRACE))
    (runs / "answer.json").write_text(json.dumps(answer("captain-runs-gaia/task_7")))
    catalog = build_catalog([folder])
    ids = sorted(t.trace.id for t in catalog.traces.values())
    assert ids == ["captain-runs-gaia/task_7", "plain-case"]
    assert len(catalog.attributions_for("captain-runs-gaia/task_7")) == 1
    assert catalog.problems == []
    # A damaged run is listed with its reason, and still hides nothing.
    (runs / "task_7" / "step_records.json").write_text("[{")
    catalog = build_catalog([folder])
    assert [t.trace.id for t in catalog.traces.values()] == ["plain-case"]
    run_dir = f"mixed/{CAPTAIN.name}/task_7"
    shown = {catalog.roots.shown(p.path) for p in catalog.problems}
    assert shown == {run_dir, f"{run_dir}/step_records.json"}
    assert len(catalog.attributions) == 1


def test_who_and_when_cases_are_read_from_their_own_files(tmp_path: Path) -> None:
    folder = tmp_path / "subset"
    shutil.copytree(IMPORTERS / "whoandwhen" / "Algorithm-Generated", folder)
    (folder / "result.json").write_text(json.dumps(answer("Algorithm-Generated/1")))
    catalog = build_catalog([folder])
    assert sorted(t.path.name for t in catalog.traces.values()) == ["1.json", "10.json", "2.json"]
    assert len(catalog.attributions_for("Algorithm-Generated/1")) == 1
    assert catalog.problems == []


# --- 2. names that are not UTF-8 --------------------------------------------------------


def test_a_name_that_is_not_utf8_is_listed_and_the_page_works(tmp_path: Path) -> None:
    folder = tmp_path / "served"
    folder.mkdir()
    (folder / "ok.json").write_text(json.dumps(TRACE))
    (folder / os.fsdecode(b"bad\xff.json")).write_text(json.dumps({**TRACE, "id": "hidden-1"}))
    inner = folder / os.fsdecode(b"dir\xfe")
    inner.mkdir()
    (inner / "t.json").write_text(json.dumps({**TRACE, "id": "hidden-2"}))
    with ui_command(folder, cwd=tmp_path) as url:
        page = runs_page(url)
        assert trace_count(page) == 1 and "plain-case" in page
        assert sorted(not_shown(page)) == [
            "served/bad\\xff.json: skipped: its name is not valid UTF-8",
            "served/dir\\xfe: skipped: its name is not valid UTF-8",
        ]
        assert httpx.get(url + "/static/style.css", timeout=10).status_code == 200


# --- 3. lone surrogates -----------------------------------------------------------------


def test_lone_surrogates_in_answers_graphs_and_dover_rows_are_refused(
    art: Artifacts, tmp_path: Path
) -> None:
    folder = tmp_path / "served"
    folder.mkdir()
    (folder / "ok.json").write_text(json.dumps(TRACE))
    # json.dumps writes a lone surrogate as its escape, "\ud800", as a hostile file would.
    (folder / "answer.json").write_text(json.dumps(answer("plain-case", reason="\ud800 x")))
    graph = json.loads(art.graph.read_text("utf-8"))
    graph["model"] = "\udcff"
    (folder / "graph.json").write_text(json.dumps(graph))
    rows = [json.loads(line) for line in art.dover.read_text("utf-8").splitlines() if line]
    rows[0]["hypothesis"]["reason"] = "\udcfft"
    (folder / "dover.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert "\\ud800" in (folder / "answer.json").read_text()
    with ui_command(folder, cwd=tmp_path) as url:
        page = runs_page(url)
        refused = not_shown(page)
        assert sorted(line.split(":", 1)[0] for line in refused) == [
            "served/answer.json",
            "served/dover.jsonl",
            "served/graph.json",
        ]
        assert all("lone UTF-16 surrogate" in line for line in refused), refused
        key = re.findall(r'href="/trace/([0-9a-f]+)"', page)[0]
        trace_page = httpx.get(f"{url}/trace/{key}", timeout=10)
        assert trace_page.status_code == 200
        assert "No method has attributed this trace yet." in trace_page.text


def test_a_page_with_text_that_is_not_unicode_still_renders(tmp_path: Path) -> None:
    """The last line of defence: text the readers let through is escaped, never a 500."""
    (tmp_path / "ok.json").write_text(json.dumps(TRACE))
    catalog = build_catalog([tmp_path])
    planted = Attribution.model_validate({**answer("plain-case"), "reason": "odd \ud800 text"})
    catalog.attributions.append(AttributionEntry(planted, "ui", tmp_path / "x.jsonl"))
    client = TestClient(create_app(catalog), base_url=HOST, raise_server_exceptions=False)
    (key,) = catalog.traces
    response = client.get(f"/trace/{key}")
    assert response.status_code == 200
    assert "odd \\ud800 text" in response.text


# --- 4. the runs page: linear, and never holding up the server -----------------------------


class CountingList(list[AttributionEntry]):
    """A list that counts how often it is walked through."""

    walks = 0

    def __iter__(self) -> Iterator[AttributionEntry]:
        CountingList.walks += 1
        return super().__iter__()


def many_traces(folder: Path, n: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(n):
        (folder / f"t{i}.json").write_text(json.dumps({**TRACE, "id": f"t{i}"}))
        lines += [json.dumps(answer(f"t{i}", method)) for method in ("random", "all-at-once")]
    (folder / "answers.jsonl").write_text("\n".join(lines) + "\n")


def test_answers_are_found_by_trace_id_without_a_scan(tmp_path: Path) -> None:
    many_traces(tmp_path / "many", 300)
    catalog = build_catalog([tmp_path / "many"])
    assert len(catalog.attributions) == 600
    catalog.attributions = CountingList(catalog.attributions)
    CountingList.walks = 0
    for i in range(300):
        found = catalog.attributions_for(f"t{i}")
        assert [a.attribution.method for a in found] == ["random", "all-at-once"]
        assert {a.attribution.trace_id for a in found} == {f"t{i}"}
        assert [t.trace.id for t in catalog.traces_with_id(f"t{i}")] == [f"t{i}"]
    assert catalog.attributions_for("nobody") == []
    assert CountingList.walks == 0  # 300 look-ups, and the answers were never walked
    context = pages.index(catalog, {})
    assert [r.answers for r in context["rows"]] == [2] * 300
    assert CountingList.walks <= 1  # once for the list of answer files, not once per trace
    # An answer appended later (a run from the page) is found, at its position.
    extra = Attribution.model_validate(answer("t7", "echo"))
    catalog.attributions.append(AttributionEntry(extra, "ui", tmp_path / "store.jsonl"))
    assert [a.attribution.method for a in catalog.attributions_for("t7")][-1] == "echo"
    assert catalog.answer_positions("t7")[-1] == 600
    (key,) = [e.key for e in catalog.traces_with_id("t7")]
    chosen = pages.trace(catalog, catalog.traces[key], 600)["chosen"]
    assert chosen is not None and chosen.method == "echo"


def test_a_slow_page_does_not_hold_up_other_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ok.json").write_text(json.dumps(TRACE))
    catalog = build_catalog([tmp_path])
    (key,) = catalog.traces
    entered, release = threading.Event(), threading.Event()
    real_index = pages.index

    def slow_index(*args: Any) -> dict[str, Any]:
        entered.set()
        release.wait(timeout=30)  # a page that takes its time (10,000 runs, say)
        return real_index(*args)

    monkeypatch.setattr(pages, "index", slow_index)
    app = create_app(catalog)
    answers: list[httpx.Response] = []
    with ServerThread(lambda: ui_server(app, "127.0.0.1", 0).start()) as server:
        slow = threading.Thread(target=lambda: answers.append(httpx.get(server.url + "/")))
        slow.start()
        try:
            assert entered.wait(timeout=10)
            # While the runs page is being built, the server answers the others.
            assert httpx.get(server.url + "/static/style.css", timeout=5).status_code == 200
            assert httpx.get(f"{server.url}/trace/{key}", timeout=5).status_code == 200
            assert not answers
        finally:
            release.set()
            slow.join(timeout=30)
    assert [r.status_code for r in answers] == [200]


# --- 5. the source link -------------------------------------------------------------------


def test_the_source_link_of_a_trace_page_opens_its_file(tmp_path: Path) -> None:
    whowhen, elephant = IMPORTERS / "whoandwhen", IMPORTERS / "traceelephant"
    with ui_command(whowhen, elephant, cwd=tmp_path) as url:
        page = runs_page(url)
        keys = sorted(set(re.findall(r'href="/trace/([0-9a-f]+)"', page)))
        assert len(keys) == 7
        linked = []
        for key in keys:
            trace_page = httpx.get(f"{url}/trace/{key}", timeout=10).text
            source = trace_page.split("<dt>source</dt>", 1)[1].split("</dd>", 1)[0]
            for target in re.findall(r'href="(/raw\?path=[^"]+)"', source):
                raw = httpx.get(url + html.unescape(target), timeout=10)
                assert raw.status_code == 200, (key, target)
                assert json.loads(raw.text)  # the case's own JSON file
                linked.append(source)
            if "traceelephant" in source:  # a run is two files: its folder named, no link
                assert "/raw?path=" not in source and "traceelephant/" in source
        assert len(linked) == 4 and all("who-and-when" in s for s in linked)


def test_direction_overrides_in_trace_text_are_shown_as_escapes(tmp_path: Path) -> None:
    """A right-to-left override in an agent name would make the page show 'exe.txt' as
    'txt.exe'; the UI shows it as its escape, as the terminal does."""
    spoof = "Coder\u202etxt.exe"
    trace = {**TRACE, "steps": [{**s, "agent": spoof} for s in TRACE["steps"]]}
    (tmp_path / "ok.json").write_text(json.dumps(trace))
    catalog = build_catalog([tmp_path])
    client = TestClient(create_app(catalog), base_url=HOST, raise_server_exceptions=False)
    (key,) = catalog.traces
    page = client.get(f"/trace/{key}")
    assert page.status_code == 200
    assert "\u202e" not in page.text
    assert "Coder\\u202etxt.exe" in page.text
