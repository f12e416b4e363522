"""`faultfinder export --to otlp` sends the headers a hosted OTLP backend needs, read from
``OTEL_EXPORTER_OTLP_TRACES_HEADERS`` / ``OTEL_EXPORTER_OTLP_HEADERS`` as OpenTelemetry's
exporters read them, to a loopback receiver that answers 401 without them; the headers'
values are never printed nor written to a file."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.replay.httpserver import HttpServer, Request, Response, ServerThread
from faultfinder.replay.httpserver import json_response as answer
from faultfinder.traces.io import write_trace
from faultfinder.traces.loader import load_traces
from test_export_apis import FIXTURES, verdict

KEY = "otlp-Qz7Lm3Vx9Tb2Wn"  # a hosted backend's ingest key
GENERIC, TRACES = "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"


def _files(tmp_path: Path) -> list[str]:
    (trace,) = load_traces(FIXTURES / "openai-agents-openinference.otlp.jsonl")
    write_trace(trace, tmp_path / "t.json")
    (tmp_path / "a.json").write_text(verdict(trace.id).model_dump_json())
    return [str(tmp_path / "a.json"), str(tmp_path / "t.json")]


class _Receiver:
    """An OTLP/HTTP receiver behind a key, as hosted backends are: 401 without
    ``authorization: Bearer KEY`` and ``x-team: blue`` (echoing what it got, as some do)."""

    def __init__(self) -> None:
        self.requests: list[Request] = []

    async def handle(self, request: Request) -> Response:
        self.requests.append(request)
        if request.header("authorization") != f"Bearer {KEY}" or request.header("x-team") != (
            "blue"
        ):
            said = f"unauthenticated: got {request.header('authorization')!r}"
            return answer(401, {"code": 16, "message": said})
        return answer(200, {})


def _export(tmp_path: Path, receiver: _Receiver, *extra: str) -> tuple[int, str]:
    async def factory() -> HttpServer:
        return await HttpServer(receiver.handle).start()

    with ServerThread(factory) as server:
        args = ["export", *_files(tmp_path), "--to", "otlp", "--url", server.url, *extra]
        result = CliRunner().invoke(main, args)
    return result.exit_code, result.output


@pytest.fixture(autouse=True)
def _no_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(GENERIC, raising=False)
    monkeypatch.delenv(TRACES, raising=False)


def test_the_headers_of_the_environment_are_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """URL-encoded as the OpenTelemetry exporters expect (an unencoded space too, as the
    Python SDK accepts); the traces-only variable wins over the generic one."""
    receiver = _Receiver()
    monkeypatch.setenv(GENERIC, f"Authorization=Bearer%20{KEY}, X-Team=blue")
    code, output = _export(tmp_path, receiver)
    assert code == 0, output
    monkeypatch.setenv(GENERIC, "authorization=Bearer%20wrong")
    monkeypatch.setenv(TRACES, f"authorization=Bearer {KEY},x-team=blue")
    code, output = _export(tmp_path, receiver)
    assert code == 0, output
    assert [r.header("authorization") for r in receiver.requests] == [f"Bearer {KEY}"] * 2
    assert [r.header("content-type") for r in receiver.requests] == ["application/json"] * 2
    assert KEY not in output


def test_a_receiver_that_wants_a_key_says_where_it_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without headers: exit 1 naming the variable. With the wrong one: exit 1 saying it
    was refused, the value the receiver echoes scrubbed."""
    receiver = _Receiver()
    code, output = _export(tmp_path, receiver)
    assert code == 1 and f"set {GENERIC}" in output, output
    monkeypatch.setenv(TRACES, f"authorization=Bearer%20{KEY}-old,x-team=blue")
    code, output = _export(tmp_path, receiver)
    assert code == 1 and "were refused" in output, output
    assert receiver.requests[-1].header("authorization") == f"Bearer {KEY}-old"
    assert KEY not in output


@pytest.mark.parametrize(
    "value",
    [f"authorization Bearer {KEY}", f"x-team=blue,{KEY}", f"bad key=Bearer%20{KEY}"],
)
def test_a_malformed_variable_is_refused_before_anything_is_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    receiver = _Receiver()
    monkeypatch.setenv(GENERIC, value)
    code, output = _export(tmp_path, receiver)
    assert code == 1, output
    assert f"{GENERIC}: entry" in output and "key=value" in output
    assert KEY not in output and not receiver.requests


def test_a_control_character_in_a_value_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver = _Receiver()
    monkeypatch.setenv(GENERIC, f"authorization=Bearer%20{KEY}%0D%0Ax-evil=1")
    code, output = _export(tmp_path, receiver)
    assert code == 1 and "(key 'authorization') has a control character" in output, output
    assert KEY not in output and not receiver.requests


def test_an_export_to_a_file_writes_no_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(GENERIC, f"authorization=Bearer%20{KEY}")
    out = tmp_path / "verdict.otlp.json"
    result = CliRunner().invoke(
        main, ["export", *_files(tmp_path), "--to", "otlp", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert KEY not in out.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "value",
    [f"Bearer%20{KEY}%C3%A9", f"Bearer {KEY}é", f"Bearer%20{KEY}%FF", f"Bearer {KEY}\udcff"],
)
def test_a_value_that_is_not_ascii_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    # An accented letter, a byte that is not UTF-8 (%FF), an undecodable byte of the
    # environment: HTTP header values are ASCII, and the export stopped with a
    # UnicodeEncodeError traceback quoting the value (the key) instead.
    receiver = _Receiver()
    monkeypatch.setenv(GENERIC, f"authorization={value},x-team=blue")
    code, output = _export(tmp_path, receiver)
    assert code == 1 and "(key 'authorization') has a character that is not ASCII" in output
    assert KEY not in output and not receiver.requests
