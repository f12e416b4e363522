"""The edit panel in Debian's headless Chromium on a step whose reply makes a tool call
(the demo team's ``lookup`` at step 2): the panel lists the calls it keeps, *use this
edit* keeps the intervention's own, and the replay it starts serves them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

# The browser, its page fixture (failing the test on any script error) and the server.
from playwright.sync_api import Page, expect  # noqa: E402

from faultfinder.demo_team import mock_model  # noqa: E402
from faultfinder.dover.edit_repeats import Program  # noqa: E402
from faultfinder.testing import FakeOpenAIServer  # noqa: E402
from faultfinder.traces.loader import load_traces  # noqa: E402
from faultfinder.ui.app import create_app  # noqa: E402
from faultfinder.ui.replay_jobs import ReplayRunner  # noqa: E402
from faultfinder.ui.replay_requests import ReplaySettings  # noqa: E402
from faultfinder.ui.scan import build_catalog  # noqa: E402
from test_ui_browser import Server, browser, off_loop, page, shot  # noqa: E402, F401
from ui_support import TEAM, intervention_on_a_tool_call, record_team  # noqa: E402

TEXT = "Looking that up."


def test_the_panel_keeps_a_tool_call_steps_calls(tmp_path: Path, page: Page) -> None:  # noqa: F811
    with FakeOpenAIServer(reply=mock_model.reply) as upstream:
        run = off_loop(record_team, tmp_path / "runs", upstream.base_url)
        recorded = load_traces(run / "trace.json", format="faultfinder")[0].steps[2].tool_calls
        served = intervention_on_a_tool_call(run, 2, TEXT)
        catalog = build_catalog([run.parent])
        settings = ReplaySettings(Program(tuple(TEAM), upstream.base_url))
        app = create_app(catalog, replays=ReplayRunner(catalog, settings))
        with Server(app) as url:
            page.goto(url + "/")
            page.locator("#runs a", has_text="avalon").first.click()
            page.wait_for_url("**/trace/**")
            # By hand: the recorded call is listed and kept.
            page.locator("#step-2 > summary").click()
            page.locator("#step-2 button.change-step").click()
            expect(page.locator("#edit-keep")).to_be_visible()
            expect(page.locator("#edit-keep-calls")).to_be_checked()
            expect(page.locator("#edit-keep-source")).to_have_text("the recorded")
            expect(page.locator("#edit-kept-calls li")).to_have_text(
                [f"{recorded[0].name}({recorded[0].arguments})"]
            )
            # A step without tool calls shows no such box.
            page.click("#edit-close")
            page.locator("#step-1 > summary").click()
            page.locator("#step-1 button.change-step").click()
            expect(page.locator("#edit-keep")).to_be_hidden()
            # DoVer's intervention: its text and its own call, replayed.
            page.click("#edit-close")
            page.locator("#suggested button.change-step").click()
            expect(page.locator("#edit-output")).to_have_value(TEXT)
            expect(page.locator("#edit-keep-source")).to_have_text("the intervention's")
            expect(page.locator("#edit-kept-calls li")).to_have_text(
                [f"{served.name}({served.arguments})"]
            )
            shot(page, "edit-tool-call-step")
            page.click("#edit-replay")
            page.wait_for_url("**/replay-jobs/**")
            expect(page.locator("#attempt-0 a.branch-link")).to_be_visible(timeout=90_000)
    (edit_file,) = (run / "edits").glob("*.json")
    assert json.loads(edit_file.read_text())["kind"] == "reply"
    (branch,) = (run / "branches").iterdir()
    step = load_traces(branch / "trace.json", format="faultfinder")[0].steps[2]
    assert step.content == TEXT
    assert [(c.id, c.name, c.arguments) for c in step.tool_calls] == [
        (served.id, served.name, served.arguments)
    ]
