"""Text that would disguise what a page shows: direction overrides in what the pages'
scripts fill in (a step's input messages, a replay job's progress, the edit panel's
labels), and invisible characters in names (``Co\\u200bder`` beside ``Coder``)."""

from __future__ import annotations

import json
import sys
import unicodedata
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="needs the 'ui' extra")

from starlette.testclient import TestClient

from faultfinder.dover.edit_repeats import Program
from faultfinder.ui.app import create_app
from faultfinder.ui.job_progress import BranchWatch, tail
from faultfinder.ui.names import visible
from faultfinder.ui.replay_jobs import ReplayRunner
from faultfinder.ui.replay_requests import ReplaySettings
from faultfinder.ui.scan import build_catalog

HOST = "http://127.0.0.1"
RLO = "\u202e"
SPOOF = "Co\u200bder"
"""Shows as 'Coder'."""


def trace_file(tmp_path: Path) -> Path:
    trace = {
        "schema_version": "1",
        "id": "spoof",
        "task": "Add 2 and 2",
        "steps": [
            {
                "index": 0,
                "agent": "Coder",
                "content": "Ask the calculator. \U0001f469\u200d\U0001f4bb",
            },
            {
                "index": 1,
                "agent": SPOOF,
                "content": "2 + 2 = 5",
                "input_messages": [
                    {"role": f"user{RLO}", "name": f"Planner{RLO}exe.txt", "content": f"go{RLO}od"}
                ],
                "tool_calls": [{"id": "c1", "name": f"run{RLO}", "arguments": f"{{{RLO}}}"}],
                "tool_results": [{"call_id": f"c1{RLO}", "content": "4"}],
            },
        ],
        "label": {"agent": SPOOF, "step": 1},
    }
    path = tmp_path / "spoof.json"
    path.write_text(json.dumps(trace), "utf-8")
    return path


def test_input_messages_for_the_script_are_escaped_as_the_page_is(tmp_path: Path) -> None:
    catalog = build_catalog([trace_file(tmp_path)])
    client = TestClient(create_app(catalog), base_url=HOST)
    (key,) = catalog.traces
    (message,) = client.get(f"/trace/{key}/step/1/inputs").json()
    assert message == {
        "role": "user\\u202e",
        "name": "Planner\\u202eexe.txt",
        "content": "go\\u202eod",
    }


def test_invisible_characters_in_names_are_shown(tmp_path: Path) -> None:
    catalog = build_catalog([trace_file(tmp_path)])
    client = TestClient(create_app(catalog), base_url=HOST)
    (key,) = catalog.traces
    page = client.get(f"/trace/{key}").text
    assert "\u200b" not in page
    assert "Co\\u200bder" in page  # the lane, each of its steps, the ground truth
    assert "\U0001f469\u200d\U0001f4bb" in page  # step content keeps its joiners
    step = client.get(f"/trace/{key}/step/1").text
    assert "<h1>Step 1 · Co\\u200bder</h1>" in step


def test_every_format_character_is_escaped_in_a_name() -> None:
    hidden = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]
    assert hidden and all(visible(c).startswith("\\") for c in hidden)
    assert visible("Coder") == "Coder" and visible("Кодер") == "Кодер"


def test_the_edit_panel_labels_are_escaped_and_its_text_is_not(tmp_path: Path) -> None:
    catalog = build_catalog([trace_file(tmp_path)])
    replays = ReplayRunner(catalog, ReplaySettings(Program((sys.executable, "-c", "0"))))
    client = TestClient(create_app(catalog, replays=replays), base_url=HOST)
    (key,) = catalog.traces
    parts = client.get(f"/trace/{key}/step/1/edit").json()
    assert parts["agent"] == "Co\\u200bder"
    (call,) = parts["tool_calls"]
    assert call["label"] == "run\\u202e({\\u202e})"
    assert call["name"] == f"run{RLO}"  # what is edited (and sent back) is the recorded text
    assert parts["tool_results"][0]["label"] == "c1\\u202e"


def test_a_replay_jobs_progress_is_escaped(tmp_path: Path) -> None:
    branch = tmp_path / "branch"
    branch.mkdir()
    line = {"call": 0, "agent": f"Coder{RLO}\u200b", "origin": "live", "status": 200}
    (branch / "steps.jsonl").write_text(json.dumps(line) + "\n", "utf-8")
    (branch / "stdout.txt").write_text(f"answer{RLO}: 5\n", "utf-8")
    watch = BranchWatch(branch)
    watch.poll()
    assert watch.calls[0]["agent"] == "Coder\\u202e\\u200b"
    assert tail(branch / "stdout.txt") == "answer\\u202e: 5\n"
