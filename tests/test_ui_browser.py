"""The UI in a real browser: Debian's headless Chromium driven by Playwright.

Every page is loaded and screenshotted (kept in test-artifacts/ui/), a trace is clicked
through, the highlighted step and a replay's diff are checked, an attribution is run from
the page, and a trace full of planted script is shown with the Content-Security-Policy
switched off, so only escaping stands between it and the page: no script may run.

Without chromium these tests skip (with the install command), except in CI (CI=true),
where they fail instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.browser

CHROMIUM = Path(os.environ.get("FAULTFINDER_CHROMIUM", "/usr/bin/chromium"))
"""Debian's chromium; FAULTFINDER_CHROMIUM names another Chromium binary."""
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "ui"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _require_browser() -> None:
    missing = []
    if not CHROMIUM.exists():
        missing.append("Debian's chromium (apt-get install -y chromium)")
    try:
        import playwright.sync_api  # noqa: F401
        import starlette  # noqa: F401
    except ImportError as exc:
        missing.append(f"the Python package {exc.name} (pip install -e '.[dev]')")
    if not missing:
        return
    reason = "browser tests need " + " and ".join(missing)
    if os.environ.get("CI") == "true":
        pytest.fail(reason + " (CI=true: not skipped)")
    pytest.skip(reason, allow_module_level=True)


_require_browser()

import httpx  # noqa: E402
from playwright.sync_api import BrowserContext, Page, expect, sync_playwright  # noqa: E402

from faultfinder.demo_team import mock_model  # noqa: E402
from faultfinder.dover.edit_repeats import Program  # noqa: E402
from faultfinder.dover.report import read_rows  # noqa: E402
from faultfinder.llm.client import LLM  # noqa: E402
from faultfinder.llm.doubles import ScriptedBackend  # noqa: E402
from faultfinder.replay.httpserver import ServerThread  # noqa: E402
from faultfinder.testing import FakeOpenAIServer  # noqa: E402
from faultfinder.traces.io import write_trace  # noqa: E402
from faultfinder.traces.schema import Step, Trace  # noqa: E402
from faultfinder.ui.app import UIConfig, create_app  # noqa: E402
from faultfinder.ui.catalog import Catalog  # noqa: E402
from faultfinder.ui.jobs import JobRunner  # noqa: E402
from faultfinder.ui.replay_jobs import ReplayRunner  # noqa: E402
from faultfinder.ui.replay_requests import ReplaySettings  # noqa: E402
from faultfinder.ui.scan import build_catalog  # noqa: E402
from faultfinder.ui.serve import ui_server  # noqa: E402
from ui_support import (  # noqa: E402
    FIX,
    TEAM,
    XSS_ID,
    Artifacts,
    debug_team,
    plant_hostile_recording,
    record_team,
    shared,
    xss_trace,
)


class Server:
    """The app on the server `faultfinder ui` runs it on (``ui/serve.py``), on a free
    loopback port, in a thread."""

    def __init__(self, app: Any) -> None:
        self.thread = ServerThread(lambda: ui_server(app, "127.0.0.1", 0).start())

    def __enter__(self) -> str:
        return self.thread.start().url

    def __exit__(self, *exc: object) -> None:
        self.thread.stop()


@pytest.fixture(scope="module")
def art(tmp_path_factory: pytest.TempPathFactory) -> Artifacts:
    return shared(tmp_path_factory)


@pytest.fixture(scope="module")
def catalog(art: Artifacts) -> Catalog:
    return build_catalog([art.root])


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            headless=True,
            args=ARGS,
            viewport={"width": 1280, "height": 860},
        )
        yield context
        context.close()


@pytest.fixture(scope="module")
def base(catalog: Catalog) -> Iterator[str]:
    with Server(create_app(catalog)) as url:
        yield url


@pytest.fixture
def page(browser: BrowserContext) -> Iterator[Page]:
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield page
    page.close()
    assert not errors, errors


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def trace_key(catalog: Catalog, trace_id: str) -> str:
    return catalog.traces_with_id(trace_id)[0].key


def test_every_page_loads(catalog: Catalog, base: str, page: Page) -> None:
    page.goto(base + "/")
    expect(page.locator("#runs")).to_contain_text("chief-loop-1")
    shot(page, "index")
    page.select_option("select[name=kind]", "recording")
    page.wait_for_url("**kind=recording**")
    expect(page.locator("#runs tbody tr")).to_have_count(1)
    for trace_id in ("demo-riverton-library-loans", "avalon", "long-1200", "echo-rooms-1"):
        page.goto(f"{base}/trace/{trace_key(catalog, trace_id)}")
        expect(page.locator("h1")).to_contain_text(trace_id)
        shot(page, f"trace-{trace_id}")
    whowhen = catalog.traces_with_id("Hand-Crafted/1")[0]
    page.goto(f"{base}/trace/{whowhen.key}")
    table = page.locator("#answer-table")
    for method in ("random", "all-at-once", "step-by-step", "binary-search", "hybrid"):
        expect(table).to_contain_text(method)
    for method in ("echo", "chief", "agentic"):
        expect(table).to_contain_text(method)
    shot(page, "trace-whoandwhen")
    for kind, entries in (
        ("graph", catalog.graphs),
        ("replay", catalog.replays),
        ("dover", catalog.dovers),
        ("eval", catalog.evals),
    ):
        for i, key in enumerate(entries):
            page.goto(f"{base}/{kind}/{key}")
            expect(page.locator("h1")).to_be_visible()
            shot(page, f"{kind}-{i}")


def test_click_through_a_trace(catalog: Catalog, base: str, page: Page) -> None:
    key = trace_key(catalog, "chief-loop-1")
    page.goto(f"{base}/trace/{key}")
    decisive = page.locator("details.decisive-step")
    expect(decisive).to_have_count(1)
    chosen = page.locator("#decisive a").first.inner_text()
    expect(decisive).to_have_attribute("id", f"step-{chosen}")
    # The timeline box of that step opens it.
    page.locator(f'#timeline a[href="#step-{chosen}"] rect').click()
    expect(decisive).to_have_attribute("open", "")
    expect(decisive.locator(".why")).to_be_visible()
    # Search, then jump.
    page.fill("#step-search", "library")
    expect(page.locator("#search-count")).to_contain_text("matching steps")
    assert page.locator("details.step.hit").count() >= 1
    page.fill("#step-search", "")
    page.fill("#jump-to", "2")
    page.click("#jump button")
    expect(page.locator("#step-2")).to_have_attribute("open", "")
    assert page.evaluate("location.hash") == "#step-2"
    # Choosing another method's answer moves the highlight.
    rows = page.locator("#answer-table tbody tr")
    if rows.count() > 1:
        rows.nth(1).locator("a").first.click()
        expect(page.locator("tr.chosen")).to_have_count(1)
    shot(page, "trace-clicked")


def test_inputs_load_when_a_step_opens(catalog: Catalog, base: str, page: Page) -> None:
    page.goto(f"{base}/trace/{trace_key(catalog, 'avalon')}")
    page.locator("#step-1 > summary").click()
    expect(page.locator("#step-1 .inputs .msg").first).to_be_visible()
    expect(page.locator("#step-1 .inputs")).to_contain_text("system")


def test_long_trace_renders_every_step(catalog: Catalog, base: str, page: Page) -> None:
    page.goto(f"{base}/trace/{trace_key(catalog, 'long-1200')}")
    expect(page.locator("details.step")).to_have_count(1200)
    page.fill("#jump-to", "1100")
    page.click("#jump button")
    expect(page.locator("#step-1100")).to_be_in_viewport()


def test_replay_diff_and_dover_verdict(catalog: Catalog, base: str, page: Page) -> None:
    fix = next(r for r in catalog.replays.values() if r.branch_dir.name == "fix")
    page.goto(f"{base}/replay/{fix.key}")
    first = page.locator("#diff tr.first-diff")
    expect(first).to_have_id("pair-1")
    expect(first.locator("ins").first).to_contain_text("2020")
    expect(page.locator("#replay-answer")).to_contain_text("matches the reference")
    shot(page, "replay-fix")
    dover = next(iter(catalog.dovers))
    page.goto(f"{base}/dover/{dover}")
    expect(page.locator(".trial").first).to_contain_text("validated")
    expect(page.locator(".trial ins").first).to_be_visible()
    expect(page.locator(".trial ol.reference")).to_contain_text("Multiply by 3: 144630.")
    expect(page.locator(".trial .ms-achieved").first).to_be_visible()


def test_graph_links_to_trace_steps(catalog: Catalog, base: str, page: Page) -> None:
    page.goto(f"{base}/graph/{next(iter(catalog.graphs))}")
    link = page.locator("#graph a").first
    href = link.get_attribute("href")
    assert href is not None and "#step-" in href
    link.click()
    page.wait_for_url("**/trace/**")
    expect(page.locator(f"details#{href.split('#')[1]}")).to_have_attribute("open", "")


def test_eval_drill_down_opens_the_method_on_the_trace(
    catalog: Catalog, base: str, page: Page
) -> None:
    page.goto(f"{base}/eval/{next(iter(catalog.evals))}")
    expect(page.locator(".report").first).to_contain_text("floor")
    expect(page.locator("svg.plot polyline").first).to_be_visible()
    cell = page.locator("#cases tbody td a[href*='?a=']").first
    said = cell.inner_text()
    cell.click()
    page.wait_for_url("**?a=**")
    agent = said.split(" @ ")[0]
    expect(page.locator("#decisive")).to_contain_text(agent)


def test_planted_script_never_runs(art: Artifacts, page: Page) -> None:
    catalog = build_catalog([art.xss_dir])
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    with Server(create_app(catalog, config=UIConfig(csp=False))) as url:
        key = next(iter(catalog.traces))
        for path in ("/", f"/trace/{key}", f"/trace/{key}/step/1", f"/trace/{key}/step/0"):
            page.goto(url + path)
            page.wait_for_load_state("load")
            for summary in page.locator("details.step > summary").all():
                summary.click()
            page.wait_for_timeout(200)
            assert page.evaluate("typeof window.__pwned") == "undefined", path
            assert page.locator("img, svg[onload], a[href^='javascript:']").count() == 0
        page.goto(f"{url}/trace/{key}")
        for summary in page.locator("details.step > summary").all():
            summary.click()
        text = page.locator("body").inner_text()
        assert "<script>window.__pwned = 1; alert('xss')</script>" in text
        assert '<a href="javascript:window.__pwned=3">click me</a>' in text
        assert XSS_ID in text
        shot(page, "xss-trace")
    assert dialogs == []


def test_run_an_attribution_from_the_page(art: Artifacts, tmp_path: Path, page: Page) -> None:
    results = tmp_path / "ui-results.jsonl"
    catalog = build_catalog([art.root / "traces" / "demo.json"], results_file=results)
    reply = "Agent Name: WebSurfer\nStep Number: 3\nReason: read the 2021 column"
    runner = JobRunner(catalog, "all-at-once", lambda: LLM(ScriptedBackend([reply])), results)
    with Server(create_app(catalog, runner=runner)) as url:
        page.goto(f"{url}/trace/{next(iter(catalog.traces))}")
        expect(page.locator("#decisive")).to_have_count(0)
        page.click("#run-attribution")
        page.wait_for_url("**?a=**")
        expect(page.locator("#decisive")).to_contain_text("read the 2021 column")
        expect(page.locator("details.decisive-step")).to_have_id("step-3")
        shot(page, "run-from-page")
    assert results.read_text().count("\n") == 1


# --- time travel: change a step, replay, compare, repeat for a verdict ------------------


class UIProcess:
    """`faultfinder ui` started as a user starts it (a subprocess), on a free port."""

    def __init__(self, args: list[str]) -> None:
        self.args = [sys.executable, "-m", "faultfinder", "ui", "--port", "0", *args]
        self.child: subprocess.Popen[str] | None = None

    def __enter__(self) -> str:
        self.child = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert self.child.stdout is not None
        url = ""
        for _ in range(10):
            line = self.child.stdout.readline()
            if line.startswith("serving "):
                url = line.split()[1].rstrip("/")
                break
        assert url, self.child.stderr.read() if self.child.stderr else "no url"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/", timeout=2).status_code == 200:
                    return url
            except httpx.TransportError:
                time.sleep(0.05)
        raise AssertionError("the UI did not answer")

    def __exit__(self, *exc: object) -> None:
        assert self.child is not None
        self.child.terminate()
        self.child.wait(timeout=15)


def off_loop(fn: Any, *args: Any) -> Any:
    """Run ``fn`` in another thread: Playwright's sync API keeps an event loop running in
    this one, and the recorder runs its own."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn, *args).result()


JUDGE = ["--model", "function:faultfinder.demo_team.mock_debugger:respond", "--cache", "none"]


def test_from_a_failed_run_to_a_validated_fix(tmp_path: Path, page: Page) -> None:
    runs = tmp_path / "runs"
    with FakeOpenAIServer(reply=mock_model.reply) as upstream:
        run = off_loop(record_team, runs, upstream.base_url)
        rows = off_loop(debug_team, run, upstream.base_url)
        (row,) = read_rows([rows])
        assert row.intervention is not None
        suggested, suggested_step = row.intervention.replacement, row.intervention.step
        args = [str(runs), "--allow-replay", "--upstream", upstream.base_url, *JUDGE, "--", *TEAM]
        with UIProcess(args) as url:
            page.goto(url + "/")
            page.locator("#runs a", has_text="avalon").first.click()
            page.wait_for_url("**/trace/**")
            expect(page.locator("#edit-panel")).to_be_hidden()
            recorded = page.locator("#step-1 pre.content").text_content() or ""
            page.locator("#step-1 > summary").click()
            page.locator("#step-1 button.change-step").click()
            expect(page.locator("#edit-panel")).to_be_visible()
            expect(page.locator("#edit-output")).to_have_value(recorded)
            page.fill("#edit-output", FIX)
            shot(page, "edit-step")
            page.click("#edit-replay")
            page.wait_for_url("**/replay-jobs/**")
            link = page.locator("#attempt-0 a.branch-link")
            expect(link).to_be_visible(timeout=90_000)
            counts = page.locator("#attempt-0 .counts")
            expect(counts).to_contain_text("1 replayed · 1 edited")
            expect(page.locator("#attempt-0 .answer")).to_contain_text("matches the reference")
            expect(page.locator("#attempt-0 .command pre")).to_contain_text("faultfinder replay")
            shot(page, "replay-job")
            link.click()
            page.wait_for_url("**/replay/**")
            expect(page.locator("#compare")).to_contain_text("matches the reference")
            expect(page.locator("#compare")).to_contain_text("does not match the reference")
            expect(page.locator("#diff tr.first-diff")).to_have_id("pair-1")
            shot(page, "replay-branch")
            # Back on the recording: the branch is in its tree. DoVer's intervention is
            # one click away; run it 3 times for a verdict.
            page.locator("#replay-original").click()
            page.wait_for_url("**/trace/**")
            expect(page.locator("#branches")).to_contain_text("matches the reference")
            page.locator("#suggested button.change-step").first.click()
            expect(page.locator("#edit-output")).to_have_value(suggested)
            expect(page.locator("#edit-step")).to_have_text(str(suggested_step))
            page.fill("#edit-repeats", "3")
            page.click("#edit-verify")
            page.wait_for_url("**/replay-jobs/**")
            verdict = page.locator("#job-verdict .verdict")
            expect(verdict).to_have_text("verdict: validated", timeout=180_000)
            expect(page.locator("#job-verdict")).to_contain_text("flip rate 100%")
            expect(page.locator("#attempts section.attempt")).to_have_count(3)
            expect(page.locator("#job-command")).to_contain_text("faultfinder verify-edit")
            shot(page, "replay-verdict")
    assert len(list((runs / "avalon" / "branches").iterdir())) == 5  # 1 + DoVer's 1 + 3
    assert len(list((runs / "avalon" / "dover").glob("*.jsonl"))) == 2


def test_a_planted_recording_runs_and_contacts_nothing_from_the_page(
    tmp_path: Path, page: Page
) -> None:
    marker = tmp_path / "pwned"
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    with FakeOpenAIServer(reply="planted") as canary:
        run = off_loop(plant_hostile_recording, tmp_path / "runs", canary.base_url, marker)
        catalog = build_catalog([run.parent])
        replays = ReplayRunner(catalog, ReplaySettings(Program(tuple(TEAM))))
        app = create_app(catalog, replays=replays, config=UIConfig(csp=False))
        with Server(app) as url:
            key = next(k for k, t in catalog.traces.items() if t.kind == "recording")
            page.goto(f"{url}/trace/{key}")
            for summary in page.locator("details.step > summary").all():
                summary.click()
            page.locator("#step-0 button.change-step").click()
            expect(page.locator("#edit-output")).not_to_have_value("")
            page.fill("#edit-output", "NEXT: Researcher | anything")
            page.click("#edit-replay")
            page.wait_for_url("**/replay-jobs/**")
            expect(page.locator("#job-state")).to_contain_text("--upstream", timeout=30_000)
            assert page.evaluate("typeof window.__pwned") == "undefined"
            shot(page, "planted-recording")
        assert canary.requests == []
    assert not marker.exists()
    assert dialogs == []


def test_an_unbroken_30000_character_line_does_not_widen_the_pages(
    art: Artifacts, tmp_path: Path, page: Page
) -> None:
    """A trace's text is untrusted and may hold a line with no break opportunity: as an
    agent name it lands in the trace page's facts, answer table and timeline, and in every
    per-case cell of an evaluation. Neither page may grow wider than the window (it grew to
    300,000 px), nor take the browser long to lay out (the evaluation took most of a
    minute)."""
    wide = "W" * 30_000
    planted = xss_trace()
    steps = [s.model_copy(update={"agent": s.agent + wide}) for s in planted.steps]
    trace = planted.model_copy(update={"id": "wide", "task": wide, "steps": steps})
    write_trace(trace, tmp_path / "wide.json")
    rows = [json.loads(line) for line in art.eval_file.read_text("utf-8").splitlines()]
    wide_rows = [{**r, "agent": r["agent"] and r["agent"] + wide} for r in rows]
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in wide_rows))
    answer = {**json.loads((art.xss_dir / "xss-attribution.json").read_text("utf-8"))}
    answer.update(trace_id="wide", agent=steps[1].agent, reason=wide)
    (tmp_path / "wide-answer.json").write_text(json.dumps(answer))
    catalog = build_catalog([tmp_path])
    with Server(create_app(catalog)) as url:
        trace_page = f"/trace/{trace_key(catalog, 'wide')}"
        for path in (trace_page, f"/eval/{next(iter(catalog.evals))}"):
            page.goto(url + path, timeout=15_000)
            widths = page.evaluate("[document.documentElement.scrollWidth, innerWidth]")
            assert widths[0] <= widths[1], (path, widths)
        shot(page, "wide-eval")


def test_a_long_agent_name_is_shown_clipped_and_whole_once(tmp_path: Path, page: Page) -> None:
    """A system prompt taken for an agent's name: each step shows it clipped, with its
    length; the list at the page's foot holds it whole, wrapped to the window."""
    name = "Researcher, you are " + "Q" * 100_000
    steps = [Step(index=i, agent=name if i % 2 else "Planner", content=f"{i}") for i in range(40)]
    write_trace(Trace(id="named", task="t", steps=steps), tmp_path / "named.json")
    catalog = build_catalog([tmp_path])
    with Server(create_app(catalog)) as url:
        page.goto(f"{url}/trace/{next(iter(catalog.traces))}")
        expect(page.locator("#step-1 > summary .agent")).to_have_text(
            name[:80] + "\u2026 (100,020 chars)"
        )
        whole = page.locator("#full-names pre.full-name")
        expect(whole).to_have_count(1)
        expect(whole).to_be_hidden()
        page.locator("#full-names > summary").click()
        expect(whole).to_be_visible()
        assert whole.text_content() == name
        widths = page.evaluate("[document.documentElement.scrollWidth, innerWidth]")
        assert widths[0] <= widths[1], widths
        shot(page, "long-name")
