"""Edits from the page of a step whose recorded reply makes tool calls (a handoff, a
delegation, a lookup): "use this edit" carries a DoVer intervention's tool calls, the
editor gets the recorded ones with their ids, and the edit the page then POSTs (a
``reply``: the new text with the calls) replays with them kept, its DoVer row recording
them. On the demo team's recording, step 2 is the Researcher's ``lookup`` call."""

from __future__ import annotations

import html
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="needs the 'ui' extra")

from starlette.testclient import TestClient

from faultfinder.demo_team import mock_model
from faultfinder.dover.edit_repeats import Program
from faultfinder.dover.report import read_rows
from faultfinder.testing import FakeOpenAIServer
from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import Trace
from faultfinder.ui.app import create_app
from faultfinder.ui.replay_jobs import ReplayRunner
from faultfinder.ui.replay_requests import ReplaySettings
from faultfinder.ui.scan import build_catalog
from ui_support import TEAM, intervention_on_a_tool_call, record_team

HOST = "http://127.0.0.1"
AT = 2
"""The Researcher's step: its reply is a ``lookup`` tool call."""
TEXT = "Looking that up."


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(reply=mock_model.reply) as server:
        yield server


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, upstream: FakeOpenAIServer) -> Path:
    return record_team(tmp_path_factory.mktemp("recorded") / "runs", upstream.base_url).parent


@pytest.fixture
def runs(recorded: Path, tmp_path: Path) -> Path:
    shutil.copytree(recorded, tmp_path / "runs")
    return tmp_path / "runs"


def serve(runs: Path, upstream: FakeOpenAIServer) -> TestClient:
    """The page as `faultfinder ui --allow-replay --upstream URL -- TEAM` serves it."""
    catalog = build_catalog([runs])
    runner = ReplayRunner(catalog, ReplaySettings(Program(tuple(TEAM), upstream.base_url)))
    return TestClient(create_app(catalog, replays=runner), base_url=HOST)


@pytest.fixture
def client(runs: Path, upstream: FakeOpenAIServer) -> Iterator[TestClient]:
    with serve(runs, upstream) as test_client:
        yield test_client


def read_trace(path: Path) -> Trace:
    return load_traces(path, format="faultfinder")[0]


def key_of(client: TestClient) -> str:
    page = client.get("/").text
    return page.split('href="/trace/', 1)[1].split('"', 1)[0]


def post(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    token = client.get("/").text.split('name="ff-token" content="', 1)[1].split('"', 1)[0]
    response = client.post("/replay-jobs", json=body, headers={"X-Faultfinder-Token": token})
    assert response.status_code == 202, response.text
    url = response.json()["url"]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status: dict[str, Any] = client.get(url + "/status").json()
        if status["state"] not in ("queued", "running"):
            assert status["state"] == "done", status
            return status
        time.sleep(0.2)
    raise AssertionError(f"job did not finish: {status}")


def kept_calls(client: TestClient, key: str) -> list[dict[str, Any]]:
    """What the page's script sends as a reply edit's calls: the recorded ones, ids kept."""
    parts = client.get(f"/trace/{key}/step/{AT}/edit").json()
    return [{k: c[k] for k in ("id", "name", "arguments")} for c in parts["tool_calls"]]


def test_use_this_edit_carries_the_interventions_tool_calls(
    runs: Path, upstream: FakeOpenAIServer
) -> None:
    renamed = intervention_on_a_tool_call(runs / "avalon", AT, TEXT)
    with serve(runs, upstream) as client:
        page = client.get(f"/trace/{key_of(client)}").text
    button = page.split('id="suggested"', 1)[1].split("use this edit", 1)[0]
    calls = json.loads(html.unescape(button.split('data-calls="', 1)[1].split('"', 1)[0]))
    shown = f"{renamed.name}({renamed.arguments})"  # the panel lists it so, escaped
    served = {"id": renamed.id, "name": renamed.name, "arguments": renamed.arguments}
    assert calls == [{**served, "label": shown}]
    assert "its tool calls kept: lookup" in button


def test_the_editor_gets_the_recorded_calls_with_their_ids(runs: Path, client: TestClient) -> None:
    step = read_trace(runs / "avalon" / "trace.json").steps[AT]
    calls = kept_calls(client, key_of(client))
    recorded = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in step.tool_calls]
    assert calls == recorded


def test_a_reply_edit_from_the_page_replays_with_the_calls_kept(
    runs: Path, client: TestClient
) -> None:
    key = key_of(client)
    calls = kept_calls(client, key)
    edit = {"kind": "reply", "content": TEXT, "tool_calls": calls}
    status = post(client, {"trace": key, "at": AT, "edit": edit, "repeats": 1, "verdict": True})
    (attempt,) = status["attempts"]
    assert attempt["edit_applied"] is True
    branch = read_trace(runs / "avalon" / "branches" / attempt["branch"] / "trace.json")
    served = branch.steps[AT]
    assert served.content == TEXT
    assert [(c.id, c.name, c.arguments) for c in served.tool_calls] == [
        (c["id"], c["name"], c["arguments"]) for c in calls
    ]
    assert served.tool_results  # the program ran the kept lookup and sent its result
    # The DoVer row of the job says which calls the edit served, beside the recorded ones.
    (row,) = read_rows(sorted((runs / "avalon" / "dover").glob("*.jsonl")))
    assert row.intervention is not None and row.intervention.replacement == TEXT
    assert [c.model_dump() for c in row.intervention.tool_calls] == calls
    assert row.intervention.original_tool_calls == row.intervention.tool_calls


def test_the_recorded_reply_again_is_not_replayed_but_dropping_its_calls_is(
    runs: Path, client: TestClient
) -> None:
    key = key_of(client)
    step = read_trace(runs / "avalon" / "trace.json").steps[AT]
    same = {"kind": "reply", "content": step.content, "tool_calls": kept_calls(client, key)}
    status = post(client, {"trace": key, "at": AT, "edit": same, "repeats": 1, "verdict": True})
    assert status["attempts"] == []
    assert "changes nothing" in status["message"] + str(status.get("not_replayed"))
    dropped = {"kind": "message", "text": step.content}
    status = post(client, {"trace": key, "at": AT, "edit": dropped, "repeats": 1, "verdict": True})
    (attempt,) = status["attempts"]
    branch = read_trace(runs / "avalon" / "branches" / attempt["branch"] / "trace.json")
    assert branch.steps[AT].tool_calls == []


def test_use_this_edit_carries_the_interventions_own_text(
    runs: Path, upstream: FakeOpenAIServer
) -> None:
    """The page shows control and direction characters escaped; the button must still
    carry DoVer's text itself, or the replay would be of another edit."""
    text = "Line one\r\nsee \u202eright-to-left\u202c, tab\tend"
    intervention_on_a_tool_call(runs / "avalon", AT, text)
    with serve(runs, upstream) as client:
        page = client.get(f"/trace/{key_of(client)}").text
    button = page.split('id="suggested"', 1)[1].split("use this edit", 1)[0]
    carried = html.unescape(button.split('data-text="', 1)[1].split('"', 1)[0])
    # (read as the attribute's plain text too, as the page's script once did)
    assert (json.loads(carried) if carried.startswith('"') else carried) == text
