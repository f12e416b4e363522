"""JSON the UI reads that Python's reader cannot take: an integer over 4,300 digits,
nesting deeper than the recursion limit, bytes that are not UTF-8. Each is a clear
refusal (a 400 naming why, a listed problem naming file and line, a progress line
passed over), never a 500 or a lost listing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="needs the 'ui' extra")

from starlette.testclient import TestClient

from faultfinder.dover.edit_repeats import Program
from faultfinder.ui.app import create_app
from faultfinder.ui.replay_jobs import ReplayRunner
from faultfinder.ui.replay_requests import ReplaySettings
from faultfinder.ui.scan import build_catalog

HOST = "http://127.0.0.1"
LONG_INTEGER = b'{"trace": "t", "at": ' + b"9" * 5000 + b"}"
DEEP = b"[" * 100_000 + b"]" * 100_000
NOT_UTF8 = b'{"trace": "\xff"}'


def replay_client(folder: Path) -> TestClient:
    """The app with replays allowed (`--allow-replay`), over an empty folder: the bodies
    below are refused before any trace is looked up, and no program is ever run."""
    catalog = build_catalog([folder])
    runner = ReplayRunner(catalog, ReplaySettings(Program((sys.executable, "-c", "0"), None)))
    app = create_app(catalog, replays=runner)
    return TestClient(app, base_url=HOST, raise_server_exceptions=False)


def token_of(client: TestClient) -> str:
    page = client.get("/").text
    return page.split('name="ff-token" content="', 1)[1].split('"', 1)[0]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (LONG_INTEGER, "integer longer than 4,300 digits"),
        (DEEP, "nested too deeply"),
        (NOT_UTF8, "not JSON text: byte 11 is not UTF-8"),
        (b"{not json", "not valid JSON"),
    ],
    ids=["long-integer", "deep", "not-utf8", "invalid"],
)
def test_a_replay_request_json_cannot_read_is_a_400_saying_why(
    tmp_path: Path, body: bytes, reason: str
) -> None:
    with replay_client(tmp_path) as client:
        headers = {"X-Faultfinder-Token": token_of(client), "Content-Type": "application/json"}
        response = client.post("/replay-jobs", content=body, headers=headers)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error.startswith("the request is not JSON: ") and reason in error, error
        assert client.get("/").status_code == 200  # the server goes on serving


def test_progress_passes_over_lines_json_cannot_read_and_keeps_the_rest(
    tmp_path: Path,
) -> None:
    from faultfinder.ui.job_progress import BranchWatch

    def call(number: int, response: object) -> bytes:
        line = {"call": number, "agent": "A", "origin": "live", "response": response}
        return json.dumps(line).encode()

    lines = [
        call(0, {"usage": {"total_tokens": 30}}),
        b'{"call": 1, "origin": "live", "n": ' + b"9" * 5000 + b"}",
        DEEP,
        b'{"call": 2, "agent": "\xff"}',
        call(3, ["a reply that is not an object"]),
        call(4, {"usage": {"total_tokens": "many"}}),
        call(5, {"usage": {"total_tokens": [1]}}),
        call(6, {"usage": {"total_tokens": 12}}),
    ]
    (tmp_path / "steps.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    watch = BranchWatch(tmp_path)
    watch.poll()  # one read of the whole file: nothing in it may stop the rest
    assert [c["call"] for c in watch.calls] == [0, 3, 4, 5, 6]
    assert [c["tokens"] for c in watch.calls] == [30, 0, 0, 0, 12]
    assert watch.tokens == 42 and watch.counts()["live"] == 5
