"""Fixes from the audit of `faultfinder ui` and `faultfinder serve-local`: free-form answer
details of any shape render, slow clients are dropped (real sockets), heads are bounded,
`/raw` serves only catalogued artefacts, bad query parameters are client errors, hosts are
checked, and serve-local refuses what a web page could send it."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="needs the 'ui' extra")

import httpx
from click.testing import CliRunner
from starlette.testclient import TestClient

from faultfinder.cli import main
from faultfinder.cli.proxy_options import warn_if_exposed
from faultfinder.llm.client import LLM
from faultfinder.llm.doubles import FunctionBackend
from faultfinder.replay.httpserver import HttpLimits, ServerThread
from faultfinder.replay.local_server import LocalModelServer
from faultfinder.ui.app import create_app
from faultfinder.ui.scan import build_catalog
from faultfinder.ui.serve import MAX_HEAD, ui_server

HOST = "http://127.0.0.1"
TRACE = {
    "schema_version": "1",
    "id": "echo-case",
    "task": "Add 2 and 2",
    "ground_truth": "4",
    "final_answer": "5",
    "steps": [
        {"index": 0, "agent": "Planner", "content": "Ask the calculator."},
        {"index": 1, "agent": "Calculator", "content": "2 + 2 = 5"},
    ],
    "label": {"agent": "Calculator", "step": 1},
}


def answer(details: Any) -> dict[str, Any]:
    return {
        "trace_id": "echo-case",
        "method": "echo",
        "prompt_version": "1",
        "status": "ok",
        "agent": "Calculator",
        "step": 1,
        "reason": "two of three analysts agree",
        "details": details,
        "config": {},
        "model": "scripted",
        "with_ground_truth": False,
        "observability": "full",
    }


def served(folder: Path, details: Any) -> tuple[TestClient, str]:
    """A client of the UI over the trace above and one answer with ``details``, and the
    trace's key."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trace.json").write_text(json.dumps(TRACE), "utf-8")
    (folder / "answer.json").write_text(json.dumps(answer(details)), "utf-8")
    catalog = build_catalog([folder])
    assert not catalog.problems, catalog.problems
    (key,) = catalog.traces
    return TestClient(create_app(catalog), base_url=HOST, raise_server_exceptions=False), key


# What `eval` writes for an analyst whose reply could not be parsed (no 'conclusion').
UNPARSED = {
    "analyst": "skeptical@0.30",
    "status": "unparsed",
    "attempts": 3,
    "parse_error": "no valid JSON object in the answer",
}


def test_an_unparsed_analyst_is_shown_as_unparsed_with_its_reason(tmp_path: Path) -> None:
    details = {
        "agent_pass": {
            "analysts": [
                {"analyst": "general@0.60", "status": "ok", "conclusion": {"agent": "Calc"}},
                UNPARSED,
            ],
            "consensus": {"agent_scores": {"Calculator": 0.8}, "step_scores": {"1": 0.8}},
        }
    }
    client, key = served(tmp_path, details)
    response = client.get(f"/trace/{key}")
    assert response.status_code == 200, response.text[-800:]
    panel = response.text.split('id="echo-votes"', 1)[1].split("</details>", 1)[0]
    assert "skeptical@0.30" in panel and "unparsed" in panel
    assert "no valid JSON object in the answer" in panel and "attempts: 3" in panel
    assert "agent: Calc" in panel and "Calculator 0.80" in panel


MALFORMED: list[Any] = [
    {"agent_pass": {"analysts": [{"analyst": "a", "status": "ok", "conclusion": "Calculator"}]}},
    {"agent_pass": {"analysts": [], "consensus": {"agent_scores": {"Calculator": "high"}}}},
    {"agent_pass": {"analysts": [], "consensus": []}},
    {"agent_pass": {"analysts": "everyone", "consensus": "yes"}},
    {"agent_pass": {"analysts": [1, "x", None, {}], "consensus": {"step_scores": [1, 2]}}},
    {"step_pass": {"analysts": [{"conclusion": [1, {"a": 2}]}], "consensus": {"step_scores": 0}}},
    {"unified_pass": {"analysts": [{"analyst": {"n": 1}, "status": 7, "conclusion": None}]}},
    {"unified_pass": {"analysts": None, "consensus": {"agent_scores": {"x": True}}}},
    {"unified_pass": "text", "agent_pass": [], "step_pass": 3},
    {"candidates": {"steps": 7}},
    {"candidates": {"order": 5, "reasons": ["x"], "steps": "abc"}},
    {"candidates": {"order": {"a": 1}, "subtasks": "s", "agents": 3, "dropped": {"d": 1}}},
    {"candidates": {"steps": [1, "2", True, 2.5, None], "reasons": {"1": {"why": [1]}}}},
    {"candidates": []},
    {"candidates": None, "step_set": "abc"},
]


@pytest.mark.parametrize("details", MALFORMED, ids=lambda d: json.dumps(d)[:40])
def test_answer_details_of_any_shape_render(tmp_path: Path, details: Any) -> None:
    client, key = served(tmp_path, details)
    response = client.get(f"/trace/{key}")
    assert response.status_code == 200, response.text[-800:]


def _junk(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON value, nested a little."""
    kinds = ["int", "float", "str", "bool", "none", "list", "dict"]
    kind = rng.choice(kinds if depth < 3 else kinds[:5])
    if kind == "int":
        return rng.randint(-5, 10**12)
    if kind == "float":
        return rng.choice([0.5, -1.25, 1e300])
    if kind == "str":
        return rng.choice(["", "x", "<b>", "1", "agent"])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "none":
        return None
    if kind == "list":
        return [_junk(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    keys = ["analyst", "status", "conclusion", "agent_scores", "step_scores", "order", "1"]
    return {rng.choice(keys): _junk(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def test_randomly_shaped_echo_and_chief_details_never_break_the_page(tmp_path: Path) -> None:
    rng = random.Random(20240611)
    for case in range(40):
        analysts = [_junk(rng) for _ in range(rng.randint(0, 3))]
        analysts += [{k: _junk(rng) for k in ("analyst", "status", "conclusion", "attempts")}]
        details = {
            rng.choice(["unified_pass", "agent_pass", "step_pass"]): {
                "analysts": rng.choice([analysts, _junk(rng)]),
                "consensus": {"agent_scores": _junk(rng), "step_scores": _junk(rng)},
            },
            "candidates": {
                k: _junk(rng)
                for k in ("order", "subtasks", "agents", "steps", "reasons", "dropped")
            },
        }
        client, key = served(tmp_path / str(case), details)
        response = client.get(f"/trace/{key}")
        assert response.status_code == 200, (details, response.text[-800:])


# --- slow clients, over real sockets ---------------------------------------------------

PARTIAL_HEAD = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


def _stall(port: int, data: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if data:
        sock.sendall(data)
    return sock


def _answer_of(sock: socket.socket, timeout: float) -> bytes:
    """What the server sends before it closes ``sock`` (within ``timeout`` seconds)."""
    sock.settimeout(timeout)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except TimeoutError:
        return got + b"<still open>"
    finally:
        sock.close()
    return got


@pytest.fixture
def small_ui(tmp_path: Path) -> Any:
    (tmp_path / "trace.json").write_text(json.dumps(TRACE), "utf-8")
    app = create_app(build_catalog([tmp_path]))
    limits = HttpLimits(idle_timeout=1.0, header_timeout=1.0, body_timeout=1.0, max_head=MAX_HEAD)

    async def factory() -> Any:
        return await ui_server(app, "127.0.0.1", 0, limits).start()

    with ServerThread(factory) as thread:
        yield thread


def test_clients_that_stop_sending_are_dropped_and_block_nobody(small_ui: Any) -> None:
    port = small_ui.server.port
    stalled = [_stall(port, PARTIAL_HEAD) for _ in range(80)]  # more than uvicorn's 64
    silent = _stall(port, b"")
    slow_body = _stall(
        port,
        b"POST /trace/x/attribute HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\nab",
    )
    try:
        started = time.monotonic()
        response = httpx.get(small_ui.url + "/", timeout=5)
        assert response.status_code == 200 and "echo-case" in response.text
        assert time.monotonic() - started < 2
        # Each stalled head gets 408 and a closed connection after the head deadline.
        assert _answer_of(stalled[0], 5).startswith(b"HTTP/1.1 408 ")
        assert _answer_of(slow_body, 5).startswith(b"HTTP/1.1 408 ")
        assert _answer_of(silent, 5) == b""  # closed when idle, nothing said
    finally:
        for sock in stalled:
            sock.close()
    assert httpx.get(small_ui.url + "/", timeout=5).status_code == 200


@pytest.mark.parametrize("size", [20_000, 100_000])
def test_request_heads_over_16_kib_are_refused_even_in_one_packet(small_ui: Any, size: int) -> None:
    sock = _stall(small_ui.server.port, b"")
    head = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * size + b"\r\n\r\n"
    sock.sendall(head)
    assert _answer_of(sock, 5).startswith(b"HTTP/1.1 431 ")
    ok = httpx.get(small_ui.url + "/", headers={"x-big": "a" * 10_000}, timeout=5)
    assert ok.status_code == 200


def test_the_bridge_serves_static_files_and_keeps_the_security_headers(small_ui: Any) -> None:
    page = httpx.get(small_ui.url + "/", timeout=5)
    assert "content-security-policy" in page.headers
    script = httpx.get(small_ui.url + "/static/app.js", timeout=5)
    assert script.status_code == 200 and script.content
    assert httpx.get(small_ui.url + "/", headers={"host": "evil.example"}).status_code == 400


def test_a_page_that_fails_is_a_500_and_its_error_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Route

    async def broken(request: Any) -> Any:
        raise KeyError("page bug")

    app = Starlette(routes=[Route("/broken", broken)])
    with ServerThread(lambda: ui_server(app, "127.0.0.1", 0).start()) as thread:
        response = httpx.get(thread.url + "/broken", timeout=5)
        assert response.status_code == 500 and "page bug" not in response.text
    failed = [r for r in caplog.records if r.getMessage() == "ui: GET /broken failed"]
    assert failed and failed[0].exc_info is not None
    assert "page bug" in str(failed[0].exc_info[1])


def test_the_ui_command_drops_stalled_clients(tmp_path: Path) -> None:
    (tmp_path / "trace.json").write_text(json.dumps(TRACE), "utf-8")
    child = subprocess.Popen(
        [sys.executable, "-m", "faultfinder", "ui", str(tmp_path), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stalled: list[socket.socket] = []
    try:
        assert child.stdout is not None
        line = ""
        while not line.startswith("serving "):
            line = child.stdout.readline()
            assert line, child.stderr.read() if child.stderr else ""
        url = line.split()[1]
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        stalled = [_stall(port, PARTIAL_HEAD) for _ in range(80)]
        response = httpx.get(url, timeout=5)
        assert response.status_code == 200 and "echo-case" in response.text
    finally:
        for sock in stalled:
            sock.close()
        child.terminate()
        child.wait(timeout=10)


# --- /raw and query parameters -----------------------------------------------------------


def test_raw_serves_only_catalogued_artefacts(tmp_path: Path) -> None:
    root = tmp_path / "served"
    client, _key = served(root, {})
    (root / ".env").write_text("OPENAI_API_KEY=sk-secret\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[remote]\n")
    (root / ".faultfinder").mkdir()
    (root / ".faultfinder" / "cache.sqlite").write_text("cache")
    (root / "notes.txt").write_text("not an artefact")
    (root / "sub").mkdir()
    assert client.get("/raw", params={"path": str(root / "trace.json")}).status_code == 200
    assert client.get("/raw", params={"path": str(root / "answer.json")}).status_code == 200
    for name in (".env", ".git/config", ".faultfinder/cache.sqlite", "notes.txt", "sub", ""):
        response = client.get("/raw", params={"path": str(root / name)})
        assert response.status_code == 404, name
        assert "sk-secret" not in response.text
    assert client.get("/raw?path=%00").status_code == 400
    assert client.get("/raw", params={"path": "/" + "a" * 5000}).status_code == 404
    # A file made after the start is not an artefact either.
    (root / "late.json").write_text(json.dumps(TRACE))
    assert client.get("/raw", params={"path": str(root / "late.json")}).status_code == 404


def test_a_non_ascii_digit_answer_index_is_ignored(tmp_path: Path) -> None:
    client, key = served(tmp_path, {})
    for value in ("%C2%B2", "%D9%A3", "-1", "99999999999999999999", "abc"):
        response = client.get(f"/trace/{key}?a={value}")
        assert response.status_code == 200, value
    assert client.get(f"/trace/{key}/step/1?a=%C2%B2").status_code == 200


def test_not_shown_reasons_carry_no_machine_paths(tmp_path: Path) -> None:
    root = tmp_path / "served"
    root.mkdir()
    (root / "odd.json").write_text('{"foo": 1}')
    client = TestClient(create_app(build_catalog([root])), base_url=HOST)
    page = client.get("/").text
    assert "Not shown" in page and "served/odd.json" in page
    assert str(tmp_path) not in page


# --- hosts ---------------------------------------------------------------------------


def test_allow_run_refuses_a_host_beyond_loopback(tmp_path: Path) -> None:
    (tmp_path / "trace.json").write_text(json.dumps(TRACE), "utf-8")
    args = ["ui", str(tmp_path), "--allow-run", "--method", "random", "--model", "scripted:[]"]
    result = CliRunner().invoke(main, [*args, "--host", "0.0.0.0"])
    assert result.exit_code == 2
    assert "--allow-run serves on loopback only" in result.output


@pytest.mark.parametrize(
    "command", [["ui", "."], ["serve-local"], ["proxy", "--upstream", "http://x"]]
)
def test_an_empty_or_ipv4_mapped_host_is_refused(command: list[str]) -> None:
    runner = CliRunner()
    empty = runner.invoke(main, [*command, "--host", ""])
    assert empty.exit_code == 2 and "--host" in empty.output and "empty" in empty.output
    mapped = runner.invoke(main, [*command, "--host", "::ffff:127.0.0.1"])
    assert mapped.exit_code == 2 and "give 127.0.0.1" in mapped.output
    assert "Choose another --port" not in mapped.output


def test_all_of_127_slash_8_is_loopback(capsys: pytest.CaptureFixture[str]) -> None:
    for host in ("127.0.0.1", "127.0.0.2", "localhost", "::1"):
        warn_if_exposed(host)
    assert capsys.readouterr().err == ""
    warn_if_exposed("0.0.0.0")
    assert "warning: binding 0.0.0.0" in capsys.readouterr().err


# --- serve-local -----------------------------------------------------------------------


@pytest.fixture
def local_model() -> Any:
    async def factory() -> LocalModelServer:
        llm = LLM(FunctionBackend(lambda request: "four"))
        return await LocalModelServer(llm, model_name="local").start()

    with ServerThread(factory) as thread:
        yield thread


CHAT = {"model": "local", "messages": [{"role": "user", "content": "2+2?"}]}


def test_serve_local_refuses_what_a_web_page_could_send(local_model: Any) -> None:
    url = local_model.url
    port = url.rsplit(":", 1)[1]
    body = json.dumps(CHAT)
    attacker = {"host": f"attacker.example:{port}", "origin": "http://attacker.example"}
    plain = {"content-type": "text/plain"}
    # DNS rebinding: the page's own name in Host.
    for headers in ({**attacker, **plain}, {**attacker, "content-type": "application/json"}):
        response = httpx.post(url + "/v1/chat/completions", content=body, headers=headers)
        assert response.status_code == 400, response.text
    assert httpx.get(url + "/v1/models", headers=attacker).status_code == 400
    # A "simple" cross-origin POST (form or no-cors fetch): never JSON.
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None):
        headers = {"content-type": kind} if kind else {}
        response = httpx.post(url + "/v1/chat/completions", content=body, headers=headers)
        assert response.status_code == 415, (kind, response.text)
        assert "four" not in response.text
    # A page's request names its origin, which a program never does.
    page = {"origin": "http://attacker.example", "content-type": "application/json"}
    response = httpx.post(url + "/v1/chat/completions", content=body, headers=page)
    assert response.status_code == 403, response.text
    assert local_model.server.requests == 0  # the model was never asked


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_serve_local_still_answers_json_on_loopback_names(local_model: Any, host: str) -> None:
    port = local_model.url.rsplit(":", 1)[1]
    response = httpx.post(
        local_model.url + "/v1/chat/completions",
        json=CHAT,
        headers={"host": f"{host}:{port}", "content-type": "application/json; charset=utf-8"},
    )
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "four"


def test_the_sdks_still_reach_serve_local(local_model: Any) -> None:
    openai = pytest.importorskip("openai")
    port = local_model.url.rsplit(":", 1)[1]
    for base in (f"http://127.0.0.1:{port}/v1", f"http://localhost:{port}/v1"):
        client = openai.OpenAI(base_url=base, api_key="none", max_retries=0)
        chat = client.chat.completions.create(model="local", messages=CHAT["messages"])
        assert chat.choices[0].message.content == "four"
        reply = client.responses.create(model="local", input="2+2?")
        assert reply.output_text == "four"
    anthropic = pytest.importorskip("anthropic")
    claude = anthropic.Anthropic(base_url=local_model.url, api_key="none", max_retries=0)
    # serve-local speaks OpenAI's APIs only: the Messages call reaches the router (404),
    # past the Host and Content-Type checks.
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(
            model="local", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )


def test_serve_local_bound_beyond_loopback_takes_any_host() -> None:
    async def factory() -> LocalModelServer:
        llm = LLM(FunctionBackend(lambda request: "four"))
        return await LocalModelServer(llm, host="0.0.0.0", port=0).start()

    with ServerThread(factory) as thread:
        port = thread.server._server.port
        response = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json=CHAT,
            headers={"host": f"box.example:{port}"},
        )
        assert response.status_code == 200
