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
        call(0, {"usage": {"prompt_tokens": 20, "completion_tokens": 10}}),
        b'{"call": 1, "origin": "live", "n": ' + b"9" * 5000 + b"}",
        DEEP,
        b'{"call": 2, "agent": "\xff"}',
        call(3, ["a reply that is not an object"]),
        call(4, {"usage": {"prompt_tokens": "many"}}),
        call(5, {"usage": {"prompt_tokens": [1]}}),
        call(6, {"usage": {"prompt_tokens": 9, "completion_tokens": 3}}),
    ]
    (tmp_path / "steps.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    watch = BranchWatch(tmp_path)
    watch.poll()  # one read of the whole file: nothing in it may stop the rest
    assert [c["call"] for c in watch.calls] == [0, 3, 4, 5, 6]
    assert [c["tokens"] for c in watch.calls] == [30, 0, 0, 0, 12]
    assert watch.tokens == 42 and watch.counts()["live"] == 5


def test_a_jsonl_file_whose_first_line_json_cannot_read_is_listed_with_file_and_line(
    tmp_path: Path,
) -> None:
    demo = Path(__file__).parents[1] / "src" / "faultfinder" / "data" / "demo_trace.json"
    trace = json.dumps(json.loads(demo.read_text(encoding="utf-8"))).encode()
    (tmp_path / "long.jsonl").write_bytes(b'{"a": ' + b"9" * 5000 + b"}\n")
    (tmp_path / "deep.jsonl").write_bytes(b"\n\n" + DEEP + b"\n")
    (tmp_path / "latin1.jsonl").write_bytes(b"\n" + NOT_UTF8 + b"\n")
    (tmp_path / "cut.jsonl").write_bytes(b'\r\n{"a": \n')
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + trace + b"\n")  # as `attribute` reads it
    (tmp_path / "trace.jsonl").write_bytes(trace + b"\n")
    catalog = build_catalog([tmp_path])
    reasons = {p.path.name: p.reason for p in catalog.problems}
    assert reasons == {
        "long.jsonl": f"{tmp_path / 'long.jsonl'}:1: field '(json)': "
        "it holds an integer longer than 4,300 digits",
        "deep.jsonl": f"{tmp_path / 'deep.jsonl'}:3: field '(json)': "
        "it is nested too deeply to read",
        "latin1.jsonl": f"{tmp_path / 'latin1.jsonl'}:2: field '(file)': "
        "not UTF-8 text: byte 0xff at column 12",
        "cut.jsonl": f"{tmp_path / 'cut.jsonl'}:2: field '(json)': "
        "not valid JSON: Expecting value (line 1, column 7)",
    }
    assert sorted(e.path.name for e in catalog.traces.values()) == ["bom.jsonl", "trace.jsonl"]
    with TestClient(create_app(catalog), base_url=HOST) as client:
        page = client.get("/")
        assert page.status_code == 200
        assert "it holds an integer longer than 4,300 digits" in page.text


def test_a_jsonl_file_whose_first_line_is_over_the_bound_is_listed_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first line longer than the scan reads (a multi-gigabyte one-line file; the bound
    is lowered here to a few KiB, a compact demo trace is past it) is listed as unreadable
    with the reason, naming file and line, and the scan goes on. Before, the whole line
    was read into memory, however long."""
    from faultfinder.ui import scan

    bound = 4096
    monkeypatch.setattr(scan, "MAX_FIRST_LINE", bound, raising=False)
    demo = Path(__file__).parents[1] / "src" / "faultfinder" / "data" / "demo_trace.json"
    trace = json.dumps(json.loads(demo.read_text(encoding="utf-8"))).encode()
    assert len(trace) > bound
    (tmp_path / "one-line.jsonl").write_bytes(trace)  # no newline at all
    (tmp_path / "second.jsonl").write_bytes(b"\r\n" + trace + b"\n")
    (tmp_path / "at-bound.jsonl").write_bytes(b'{"a": "' + b"x" * (bound - 9) + b'"}\n')
    catalog = build_catalog([tmp_path])
    reasons = {p.path.name: p.reason for p in catalog.problems}
    said = f"a line longer than {bound:,} bytes: not read"
    assert reasons["one-line.jsonl"] == f"{tmp_path / 'one-line.jsonl'}:1: field '(file)': {said}"
    assert reasons["second.jsonl"] == f"{tmp_path / 'second.jsonl'}:2: field '(file)': {said}"
    # A line of exactly the bound is read (and is no trace: listed for that, not its size).
    assert "field '(format)': no reader recognises it" in reasons["at-bound.jsonl"]
    assert not catalog.traces
    with TestClient(create_app(catalog), base_url=HOST) as client:
        page = client.get("/")
        assert page.status_code == 200 and said in page.text
