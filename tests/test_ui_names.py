"""Names on the UI's pages: a trace's agent names, tool names, model labels and ids are
untrusted text, and an importer that took a system prompt for a name (or a hostile file)
makes them 100,000 characters long. Every page shows a name clipped, with a mark saying it
was clipped and how long it is, and lists it whole once, at its foot; step content stays
whole."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="needs the 'ui' extra")

from starlette.testclient import TestClient

from faultfinder.shown import NAME_CHARS, clip_name
from faultfinder.traces.io import write_trace
from faultfinder.traces.schema import GoldLabel, Step, ToolCall, Trace
from faultfinder.ui import names
from faultfinder.ui.app import create_app
from faultfinder.ui.catalog import Catalog
from faultfinder.ui.scan import build_catalog
from ui_support import Artifacts, shared

LONG = 100_000


def long_name(stem: str) -> str:
    """``stem`` grown to LONG characters, as a system prompt taken for a name would be."""
    return stem + "Q" * (LONG - len(stem))


def mark(name: str) -> str:
    """How a page shows ``name`` clipped."""
    return f"{name[:NAME_CHARS]}\u2026 ({len(name):,} chars)"


def client_of(catalog: Catalog) -> TestClient:
    return TestClient(create_app(catalog), base_url="http://127.0.0.1")


def team_trace(agents: list[str], tool: str, model: str, trace_id: str = "named") -> Trace:
    steps = [
        Step(
            index=i,
            agent=agents[i % len(agents)],
            content=f"Step {i}: looked up the figure and passed it on.",
            model=model,
            tool_calls=[ToolCall(name=tool, arguments='{"q": "x"}')] if i % 10 == 0 else [],
        )
        for i in range(300)
    ]
    return Trace(
        id=trace_id,
        task="Find the figure",
        steps=steps,
        label=GoldLabel(agent=agents[1], step=1, reason="passed on the wrong figure"),
    )


def trace_page(tmp_path: Path, trace: Trace) -> str:
    tmp_path.mkdir()
    write_trace(trace, tmp_path / "trace.json")
    catalog = build_catalog([tmp_path])
    response = client_of(catalog).get(f"/trace/{next(iter(catalog.traces))}")
    assert response.status_code == 200
    return response.text


def test_clip_name_marks_the_cut_and_the_whole_length() -> None:
    assert clip_name("R" * NAME_CHARS) == "R" * NAME_CHARS
    assert (
        clip_name("R" * (NAME_CHARS + 1)) == "R" * NAME_CHARS + f"\u2026 ({NAME_CHARS + 1} chars)"
    )
    assert clip_name("Researcher" + "x" * 100_002, 10) == "Researcher\u2026 (100,012 chars)"
    assert clip_name("Researcher", 6, count=False) == "Resear\u2026"


def test_the_list_of_whole_names_is_bounded() -> None:
    noted = names.ClippedNames()
    for stem in ("a", "b", "a", "c"):
        noted.add(stem * (names.LISTED_CHARS // 2))
    listing = noted.listing()
    assert [whole for _, whole in listing] == [True, True, False]
    assert listing[2][0] == clip_name("c" * (names.LISTED_CHARS // 2))


def test_long_names_keep_the_trace_page_small(tmp_path: Path) -> None:
    """300 steps, five agents named by 100,000-character texts, a tool and a model label as
    long: the page holds each name once (it held each on every step: 60 MB)."""
    short = team_trace([f"Agent{i}" for i in range(5)], "search", "gpt-4o")
    agents = [long_name(f"Agent{i} you are a helpful ") for i in range(5)]
    tool, model = long_name("search the web for "), long_name("gpt-4o deployed as ")
    hostile = team_trace(agents, tool, model)
    small = trace_page(tmp_path / "short", short)
    page = trace_page(tmp_path / "long", hostile)
    whole = [*agents, tool, model]
    assert 'id="full-names"' not in small  # nothing clipped, nothing listed
    assert len(page) <= 2 * len(small) + sum(map(len, whole)), len(page)
    for name in whole:
        assert page.count(name) == 1  # in the list at the page's foot
        assert mark(name) in page
    foot = page[page.index('id="full-names"') :]
    assert all(f'<pre class="full-name">{name}</pre>' in foot for name in whole)
    # Names are clipped on every step; content is not.
    summary = re.search(r'id="step-3".*?<span class="agent">([^<]*)</span>', page, re.S)
    assert summary is not None and summary.group(1) == mark(agents[3])
    assert page.count("Step 3: looked up the figure and passed it on.") == 2  # preview, body


def test_the_timeline_lanes_show_the_start_of_each_name(tmp_path: Path) -> None:
    agents = ["Planner", long_name("Researcher, a careful ")]
    page = trace_page(tmp_path / "t", team_trace(agents, "search", "m"))
    lanes = re.findall(r'<text class="lane-label"[^>]*>([^<]*)<title>([^<]*)</title>', page)
    assert lanes == [("Planner", "Planner"), (agents[1][:20] + "\u2026", mark(agents[1]))]
    boxes = re.findall(r"<rect [^>]*><title>([^<]*)</title>", page)
    assert boxes[1] == f"step 1 · {mark(agents[1])}"


# --- every page kind ----------------------------------------------------------------------

ORCHESTRATOR = long_name("Orchestrator; system: you plan the work of ")
SURFER = long_name("WebSurfer; system: you browse for ")
CHECKER = long_name("Checker_Expert; system: you check ")
TRACE_ID = long_name("case-0001 imported from a session titled ")


def _rename_agents(path: Path, old: str, new: str) -> None:
    data = json.loads(path.read_text("utf-8"))
    for step in data["steps"]:
        if step["agent"] == old:
            step["agent"] = new
    path.write_text(json.dumps(data), "utf-8")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    """The shared artefacts with long names: the recording's Orchestrator (its trace, its
    replays, the DoVer rows), the graph's WebSurfer, the evaluation's agents, and a trace
    whose id is long."""
    art: Artifacts = shared(tmp_path_factory)
    root = tmp_path_factory.mktemp("long-names")
    shutil.copytree(art.root / "runs", root / "runs")
    for trace in (root / "runs").rglob("trace.json"):
        _rename_agents(trace, "Orchestrator", ORCHESTRATOR)
    rows = [json.loads(line) for line in art.dover.read_text("utf-8").splitlines()]
    for row in rows:
        row["hypothesis"]["agent"] = row["intervention"]["agent"] = ORCHESTRATOR
    (root / "dover.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    graph = art.graph.read_text("utf-8").replace("WebSurfer", SURFER)
    (root / "graph.json").write_text(graph, "utf-8")
    rows = [json.loads(line) for line in art.eval_file.read_text("utf-8").splitlines()]
    rows = [{**r, "agent": CHECKER} for r in rows]
    (root / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    write_trace(team_trace(["Planner", "Coder"], "run", "m", TRACE_ID), root / "long-id.json")
    return build_catalog([root])


def _pages(catalog: Catalog) -> dict[str, tuple[str, str]]:
    """Page kind: (path, the long name it shows)."""
    avalon = catalog.traces_with_id("avalon")[0].key
    fix = next(k for k, r in catalog.replays.items() if r.branch_dir.name == "fix")
    return {
        "index": ("/", TRACE_ID),
        "trace": (f"/trace/{avalon}", ORCHESTRATOR),
        "step": (f"/trace/{avalon}/step/1", ORCHESTRATOR),
        "replay": (f"/replay/{fix}", ORCHESTRATOR),
        "graph": (f"/graph/{next(iter(catalog.graphs))}", SURFER),
        "eval": (f"/eval/{next(iter(catalog.evals))}", CHECKER),
        "dover": (f"/dover/{next(iter(catalog.dovers))}", ORCHESTRATOR),
    }


@pytest.mark.parametrize("kind", ["index", "trace", "step", "replay", "graph", "eval", "dover"])
def test_every_page_clips_names_and_lists_them_once(hostile: Catalog, kind: str) -> None:
    path, name = _pages(hostile)[kind]
    page = client_of(hostile).get(path).text
    assert mark(name) in page, kind
    assert page.count(name) == 1, kind
    foot = page[page.index('id="full-names"') :]
    assert f'<pre class="full-name">{html.escape(name)}</pre>' in foot


def test_the_graph_fits_names_to_its_boxes(hostile: Catalog) -> None:
    page = client_of(hostile).get(_pages(hostile)["graph"][0]).text
    nodes = re.findall(r'class="node-agent">([^<]*)<title>([^<]*)</title>', page)
    assert (SURFER[:26] + "\u2026", mark(SURFER)) in nodes
    assert ("Orchestrator", "Orchestrator") in nodes
    loops = re.findall(r'<text class="loop"[^>]*>([^<]*)<title>', page)
    assert loops and all(len(text) < 80 for text in loops)


def test_a_long_source_filters_the_runs_by_its_clipped_name(tmp_path: Path) -> None:
    """The runs page's filter offers each source as shown: a long one is a short query
    (as a whole 100,000-character query it was refused as too long a request)."""
    source = long_name("imported from a log titled ")
    plain = team_trace(["Planner", "Coder"], "run", "m", "plain")
    odd = team_trace(["Planner", "Coder"], "run", "m", "odd")
    odd = odd.model_copy(update={"source": odd.source.model_copy(update={"format": source})})
    write_trace(plain, tmp_path / "plain.json")
    write_trace(odd, tmp_path / "odd.json")
    client = client_of(build_catalog([tmp_path]))
    page = client.get("/").text
    assert f'<option value="{mark(source)}" >{mark(source)}</option>' in page
    assert page.count(source) == 1
    shown = client.get("/", params={"source": mark(source)}).text
    assert re.findall(r'<a href="/trace/[^"]*" title="[^"]*">([^<]*)</a>', shown) == ["odd"]


def test_an_edit_is_summarised_clipped_as_names_are() -> None:
    from faultfinder.ui.replay_view import edit_summary

    words = "Use the 2020 figure, not the 2023 one.\n" * 20
    flat = " ".join(words.split())
    assert edit_summary({"input": words}) == "instruction: " + clip_name(flat, 100)
    assert edit_summary({"input": words}).endswith(f"… ({len(flat):,} chars)")
    call = {"tool_call_changes": [{"index": 1, "name": "lookup", "arguments": "x" * 300}]}
    assert edit_summary(call) == "tool call 1: " + clip_name(f"lookup({'x' * 300})", 100)
    # Short text stays whole, on one line.
    assert edit_summary({"output": "Avalon:\n48210"}) == "output: Avalon: 48210"
    assert edit_summary(None) == "no edit"
