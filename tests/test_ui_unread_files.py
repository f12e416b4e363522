"""`faultfinder ui` never opens what it must not: a named pipe or socket under a trace's
name (which would block the walk, and with it the whole UI) and a file over the bound the
UI reads are listed under "Not shown", saying why, and hide nothing else."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("starlette", reason="needs the 'ui' extra")

from starlette.testclient import TestClient

import faultfinder.traces.io as trace_io
from faultfinder.cli.demo import load_demo_trace
from faultfinder.traces.io import write_trace
from faultfinder.ui import catalog as ui_catalog
from faultfinder.ui.app import create_app
from faultfinder.ui.catalog import Catalog
from faultfinder.ui.pages import recorded_command
from faultfinder.ui.scan import build_catalog

HOST = "http://127.0.0.1"
WW = Path(__file__).parent / "fixtures" / "importers" / "whoandwhen" / "Hand-Crafted" / "1.json"
T = TypeVar("T")
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")


def within(call: Callable[[], T]) -> T:
    """``call()`` in a thread, failing (not hanging) when it blocks on a file."""
    found: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            found.append(call())
        except BaseException as exc:  # reported below
            failed.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=20)
    assert not worker.is_alive(), "it blocked (it opened a named pipe)"
    if failed:
        raise failed[0]
    return found[0]


def scan(*paths: Path, results: Path | None = None) -> Catalog:
    return within(lambda: build_catalog(list(paths), results))


@pytest.fixture
def fifos() -> Iterator[list[Path]]:
    """Named pipes to make; a reader an old scan left blocked on one is let go after."""
    made: list[Path] = []
    yield made
    for fifo in made:
        with contextlib.suppress(OSError):  # no reader: nothing to let go
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def reasons(catalog: Catalog) -> dict[str, str]:
    return {p.path.name: p.reason for p in catalog.problems}


@needs_fifo
def test_pipes_and_sockets_under_trace_names_are_listed_not_opened(
    tmp_path: Path, fifos: list[Path]
) -> None:
    folder = tmp_path / "f"
    folder.mkdir()
    write_trace(load_demo_trace(), folder / "demo.json")
    for name in ("x.jsonl", "y.json", "z.gz", "notes"):
        os.mkfifo(folder / name)
        fifos.append(folder / name)
    (folder / "a.json").symlink_to(folder / "y.json")  # a link to a pipe is a pipe
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(OSError):  # a path too long for a socket: pipes make the case
        sock.bind(str(folder / "s.jsonl"))
    try:
        catalog = scan(folder)
    finally:
        sock.close()
    assert [t.path.name for t in catalog.traces.values()] == ["demo.json"]
    found = reasons(catalog)
    for name in ("x.jsonl", "y.json", "z.gz", "notes", "a.json"):
        assert found[name] == "not read: a named pipe (FIFO), not a regular file"
    if (folder / "s.jsonl").exists():
        assert found["s.jsonl"] == "not read: a socket, not a regular file"
    root = scan(folder / "x.jsonl")  # given by itself
    assert reasons(root) == {"x.jsonl": "not read: a named pipe (FIFO), not a regular file"}


@needs_fifo
def test_a_pipe_in_a_recording_lists_it_and_its_trace_page_opens(
    tmp_path: Path, fifos: list[Path]
) -> None:
    run = tmp_path / "runs" / "r1"
    branch = run / "branches" / "b1"
    for directory in (run, branch):
        directory.mkdir(parents=True)
        (directory / "steps.jsonl").write_text("")
    write_trace(load_demo_trace(), run / "trace.json")
    os.mkfifo(run / "meta.json")  # read when the trace page shows the recorded command
    os.mkfifo(branch / "meta.json")
    other = tmp_path / "runs" / "r2"
    other.mkdir()
    (other / "steps.jsonl").write_text("")
    os.mkfifo(other / "trace.json")
    fifos.extend([run / "meta.json", branch / "meta.json", other / "trace.json"])
    catalog = scan(tmp_path / "runs")
    (entry,) = catalog.traces.values()
    assert entry.kind == "recording" and catalog.replays == {}
    found = {p.path.name: p.reason for p in catalog.problems}
    assert "meta.json" in found["b1"] and "named pipe" in found["b1"]
    assert "trace.json" in found["r2"] and "named pipe" in found["r2"]
    note = within(lambda: recorded_command(run))  # the trace page's note
    assert note == "the recording's meta.json: not read: a named pipe (FIFO), not a regular file"
    client = TestClient(create_app(catalog), base_url=HOST)
    assert client.get(f"/trace/{entry.key}").status_code == 200


def opened(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every file the trace readers open from now on."""
    seen: list[Path] = []
    real = trace_io.read_chunks

    def spy(path: str | Path, *args: Any, **kwargs: Any) -> Iterator[bytes]:
        seen.append(Path(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(trace_io, "read_chunks", spy)
    return seen


def test_a_file_over_the_bound_is_listed_with_its_size_and_never_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "f"
    (folder / "ww").mkdir(parents=True)
    write_trace(load_demo_trace(), folder / "big-but-allowed.json")
    bound = (folder / "big-but-allowed.json").stat().st_size  # exactly at the bound: read
    monkeypatch.setattr(ui_catalog, "MAX_READ", bound, raising=False)
    trace = json.loads((folder / "big-but-allowed.json").read_text("utf-8"))
    over = json.dumps(trace, indent=2) + " " * bound
    (folder / "huge.json").write_text(over)
    (folder / "huge.jsonl").write_text(json.dumps(trace) + "\n" + json.dumps(trace) + " " * bound)
    (folder / "huge.trace").write_text(over)  # no trace suffix: not even looked into
    shutil.copy(WW, folder / "ww" / "1.json")
    (folder / "ww" / "2.json").write_text(" " * (bound + 1))  # a Who&When folder: not read whole
    store = tmp_path / "results.jsonl"
    store.write_text(" " * (bound + 1))
    seen = opened(monkeypatch)
    catalog = scan(folder, results=store)
    names = sorted(t.path.name for t in catalog.traces.values())
    assert names == ["1.json", "big-but-allowed.json"]
    found = reasons(catalog)
    for name in ("huge.json", "huge.jsonl", "huge.trace", "2.json", "results.jsonl"):
        path = store if name == "results.jsonl" else folder / name
        path = path if path.exists() else folder / "ww" / name
        assert found[name] == (
            f"too large to show: {path.stat().st_size:,} bytes, over the {bound:,} bytes "
            "the UI reads of a file: not read"
        )
    assert not {"huge.json", "huge.jsonl", "huge.trace", "2.json"} & {p.name for p in seen}
    (entry,) = [t for t in catalog.traces.values() if t.path.name == "big-but-allowed.json"]
    client = TestClient(create_app(catalog), base_url=HOST)
    page = client.get(f"/trace/{entry.key}")
    assert page.status_code == 200 and entry.trace.id in page.text
    runs = client.get("/")
    assert "too large to show" in runs.text and "huge.jsonl" in runs.text
