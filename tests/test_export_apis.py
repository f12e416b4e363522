"""`faultfinder export` against loopback fakes that answer as Langfuse and Phoenix do
(tests/export_fakes.py), and the Langfuse public samples written back to Langfuse."""

from __future__ import annotations

import base64
import json
import os
import warnings
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from export_fakes import FakeLangfuse, FakePhoenix, serving
from faultfinder import writeback_http
from faultfinder.cli import main
from faultfinder.errors import ConfigError, FaultfinderWarning
from faultfinder.judging.method import Attribution
from faultfinder.replay.httpserver import Response, json_response
from faultfinder.traces.io import write_trace
from faultfinder.traces.loader import load_traces
from faultfinder.writeback_http import ExportUnavailableError, send

FIXTURES = Path(__file__).parent / "fixtures" / "otel"
_DEFAULT_SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "data" / "trace-samples"
SAMPLES = Path(os.environ.get("FAULTFINDER_TRACE_SAMPLES", str(_DEFAULT_SAMPLES))) / "langfuse"


def verdict(trace_id: str, *, step: int = 1, agent: str = "Math tutor", **kw: Any) -> Attribution:
    fields: dict[str, Any] = {
        "agent": agent,
        "step": step,
        "reason": "added 4 instead of 3",
        "confidence": 0.8,
        "trace_id": trace_id,
        "method": "all-at-once",
        "config": {},
        "model": "scripted",
        "prompt_version": "x",
        "with_ground_truth": False,
        "observability": "full",
    }
    return Attribution(**{**fields, **kw})


def files(tmp_path: Path, **kw: Any) -> tuple[Any, list[str]]:
    (trace,) = load_traces(FIXTURES / "openai-agents-openinference.otlp.jsonl")
    write_trace(trace, tmp_path / "t.json")
    (tmp_path / "a.json").write_text(verdict(trace.id, **kw).model_dump_json())
    return trace, [str(tmp_path / "a.json"), str(tmp_path / "t.json")]


def langfuse_env(monkeypatch: pytest.MonkeyPatch, fake: FakeLangfuse) -> None:
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", fake.public_key)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", fake.secret_key)


def test_exporting_again_to_langfuse_replaces_the_score(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Langfuse keeps every score POSTed without an id (it makes one up), so a second
    export of the verdict (a retry, the verdict re-run) showed two scores on the trace. The
    score's id is now the trace's and the method's: the second export replaces the first,
    and another method's verdict is a score of its own."""
    trace, args = files(tmp_path)
    fake = FakeLangfuse()
    langfuse_env(monkeypatch, fake)
    with serving(fake) as url:
        command = ["export", *args, "--to", "langfuse", "--url", url]
        for _ in range(2):
            result = CliRunner().invoke(main, command)
            assert result.exit_code == 0, result.output
        assert len(fake.requests) == 2 and len(fake.scores) == 1
        (score,) = fake.scores.values()
        assert score["traceId"] == trace.metadata["trace_id"]
        assert score["id"] in result.output
        (tmp_path / "b.json").write_text(verdict(trace.id, method="echo").model_dump_json())
        other = ["export", str(tmp_path / "b.json"), args[1], "--to", "langfuse", "--url", url]
        assert CliRunner().invoke(main, other).exit_code == 0
        assert len(fake.scores) == 2


def test_exporting_again_to_phoenix_updates_the_annotation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace, args = files(tmp_path)
    fake = FakePhoenix(spans={s.metadata["span_id"] for s in trace.steps}, api_key="px-key")
    monkeypatch.setenv("PHOENIX_API_KEY", "px-key")
    with serving(fake) as url:
        for _ in range(2):
            result = CliRunner().invoke(main, ["export", *args, "--to", "phoenix", "--url", url])
            assert result.exit_code == 0, result.output
    ((key, annotation),) = fake.annotations.items()
    assert key == ("faultfinder", trace.steps[1].metadata["span_id"], "faultfinder:all-at-once")
    assert annotation["result"]["explanation"] == "added 4 instead of 3"


@pytest.mark.skipif(not SAMPLES.is_dir(), reason="Langfuse public samples not present")
@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.glob("*.json")) or ["none"])
def test_a_langfuse_sample_attributed_by_shortlist_goes_back_onto_its_own_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sample: str
) -> None:
    """A trace exported from Langfuse, attributed offline and written back: the score
    names the trace and an observation that the Langfuse export holds (Langfuse does not
    check them: a wrong id would be accepted and show nowhere)."""
    path = SAMPLES / sample
    doc = json.loads(path.read_text(encoding="utf-8"))
    attributed = CliRunner().invoke(
        main, ["attribute", str(path), "--method", "shortlist", "--json"]
    )
    assert attributed.exit_code == 0, attributed.output
    (tmp_path / "a.json").write_text(attributed.stdout)
    fake = FakeLangfuse()
    langfuse_env(monkeypatch, fake)
    with serving(fake) as url:
        result = CliRunner().invoke(
            main, ["export", str(tmp_path / "a.json"), str(path), "--to", "langfuse", "--url", url]
        )
    assert result.exit_code == 0, result.output
    (score,) = fake.scores.values()
    observations = {o["id"]: o for o in doc["observations"]}
    assert score["traceId"] == doc["trace"]["id"]
    assert observations[score["observationId"]]["traceId"] == doc["trace"]["id"]
    assert score["value"] == json.loads(attributed.stdout)["agent"]


def langfuse_export(url: str, args: list[str]) -> Any:
    return CliRunner().invoke(main, ["export", *args, "--to", "langfuse", "--url", url])


def test_an_unavailable_server_is_tried_again_and_then_exits_4(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 503 or a 429 (Langfuse's rate limit, with Retry-After) failed the export at once,
    exit 1 like a wrong key. It is tried again (the score id makes a retry harmless); a
    server that stays unavailable is exit 4, 'the endpoint kept failing', so a script
    knows to try later."""
    _, args = files(tmp_path)
    outage = [503, 429]
    fake = FakeLangfuse()
    fake.answer = lambda _r: (
        json_response(outage.pop(0), {"message": "busy"}, [("retry-after", "0")])
        if outage
        else None
    )
    langfuse_env(monkeypatch, fake)
    with serving(fake) as url:
        result = langfuse_export(url, args)
        assert result.exit_code == 0, result.output
        assert len(fake.requests) == 3 and len(fake.scores) == 1
        fake.answer = lambda _r: json_response(503, {"message": "down"}, [("retry-after", "0")])
        result = langfuse_export(url, args)
    assert result.exit_code == 4, result.output
    assert len(fake.requests) == 6
    assert "unavailable (503)" in result.output and "tried 3 time(s)" in result.output


def test_a_retry_after_too_long_is_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, args = files(tmp_path)
    fake = FakeLangfuse()
    fake.answer = lambda _r: json_response(429, {"message": "slow down"}, [("retry-after", "3600")])
    langfuse_env(monkeypatch, fake)
    with serving(fake) as url:
        result = langfuse_export(url, args)
    assert result.exit_code == 4 and len(fake.requests) == 1
    assert "rate-limited (429)" in result.output and "wait 3600 s" in result.output


def refused(code: int, **headers: str) -> Any:
    return lambda _r: Response(code, list(headers.items()), b"<html>nope</html>")


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("wrong keys", "use the public and secret key of the project"),
        ("api path in url", "base URL (without /v1 or /api/public)"),
        ("too large", "(too large): the request was"),
        ("redirect", "does not follow redirects"),
        ("server error", "(server error)"),
    ],
)
def test_langfuse_refusals_say_what_to_do_and_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, expected: str
) -> None:
    _, args = files(tmp_path)
    fake = FakeLangfuse()
    langfuse_env(monkeypatch, fake)
    if case == "wrong keys":
        monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-of-another-project")
    fake.answer = {
        "too large": refused(413),
        "redirect": refused(307, location="https://langfuse.example/api/public/scores"),
        "server error": refused(500),
    }.get(case)
    with serving(fake) as url:
        result = langfuse_export(url + ("/api/public" if case == "api path in url" else ""), args)
    assert result.exit_code == (4 if case == "server error" else 1), result.output
    assert expected in result.output and len(fake.requests) == 1
    assert "sk-lf-" not in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("no key", "this Phoenix needs an API key: set PHOENIX_API_KEY"),
        ("wrong key", "PHOENIX_API_KEY was refused"),
        ("span not there", "this Phoenix holds no span with the decisive step's id"),
        ("viewer", "(forbidden): the key may not write here"),
    ],
)
def test_phoenix_refusals_say_what_to_do_and_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, expected: str
) -> None:
    trace, args = files(tmp_path)
    spans = {s.metadata["span_id"] for s in trace.steps}
    fake = FakePhoenix(spans=set() if case == "span not there" else spans, api_key="px-right")
    monkeypatch.setenv("PHOENIX_API_KEY", "px-right")
    if case == "no key":
        monkeypatch.delenv("PHOENIX_API_KEY")
    elif case == "wrong key":
        monkeypatch.setenv("PHOENIX_API_KEY", "px-wrong-key")
    elif case == "viewer":
        fake.answer = lambda _r: json_response(403, {"detail": "Viewers cannot perform this"})
    with serving(fake) as url:
        result = CliRunner().invoke(main, ["export", *args, "--to", "phoenix", "--url", url])
    assert result.exit_code == 1, result.output
    assert expected in result.output and fake.annotations == {}
    assert "px-wrong-key" not in result.output


def test_keys_a_server_echoes_back_are_not_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error body that repeats the request's Authorization header (a debugging proxy,
    a receiver that logs its input back) was printed as it came, keys included."""
    _, args = files(tmp_path)
    fake = FakeLangfuse(secret_key="sk-lf-0123456789abcdef")
    langfuse_env(monkeypatch, fake)
    fake.answer = lambda r: json_response(
        400, {"message": "bad", "headers": {"authorization": r.header("authorization")}}
    )
    basic = base64.b64encode(f"{fake.public_key}:{fake.secret_key}".encode()).decode()
    with serving(fake) as url:
        result = langfuse_export(url, args)
    assert result.exit_code == 1 and "(the request was refused)" in result.output
    assert fake.secret_key not in result.output and basic not in result.output


def test_a_server_that_never_answers_times_out_and_is_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio

    from faultfinder.replay.httpserver import HttpServer, Request, ServerThread

    calls: list[float] = []

    async def silent(_request: Request) -> Response:
        calls.append(0)
        await asyncio.sleep(2)
        return json_response(200, {})

    async def factory() -> HttpServer:
        return await HttpServer(silent).start()

    waits: list[float] = []
    monkeypatch.setattr(writeback_http, "TIMEOUT", 0.2)
    with (
        ServerThread(factory) as server,
        pytest.raises(ExportUnavailableError, match=r"ReadTimeout.*tried 3 time"),
    ):
        send("otlp", server.url, {"resourceSpans": []}, sleep=waits.append)
    assert len(calls) == 3 and waits == [1.0, 2.0]


def test_keys_sent_in_clear_to_another_machine_are_warned_of(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-lf-1")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-1")
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"id": "s1"})

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))  # no connection to close
    with pytest.warns(FaultfinderWarning, match="unencrypted over plain http"):
        send("langfuse", "http://langfuse.internal:3000", {}, client=client)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        send("langfuse", "https://langfuse.internal", {}, client=client)
        send("langfuse", "http://127.0.0.1:3000", {}, client=client)
        send("otlp", "http://collector.internal:4318", {}, client=client)
    assert str(sent[0].url) == "http://langfuse.internal:3000/api/public/scores"
    with pytest.raises(ConfigError, match="http:// or https://"):
        send("otlp", "localhost:4318", {})


@pytest.mark.parametrize("rejected", ["1", 0])
def test_an_otlp_receiver_that_rejects_the_span_in_a_200_is_a_failure(
    tmp_path: Path, rejected: str | int
) -> None:
    """OTLP/HTTP says 'partially accepted' with 200 and a partialSuccess naming how many
    spans it rejected (specification/protocol/otlp.md). The export printed success while
    the verdict span was dropped; now that is exit 1 with the receiver's reason, sent
    once (the specification forbids retrying it). A partialSuccess rejecting nothing is
    the receiver's warning: passed on, the export succeeds."""
    from faultfinder.replay.httpserver import HttpServer, Request, ServerThread

    requests: list[Request] = []

    async def receiver(request: Request) -> Response:
        requests.append(request)
        why = "span attribute limit exceeded" if rejected else "clock skew noted"
        partial = {"rejectedSpans": rejected, "errorMessage": why}
        return json_response(200, {"partialSuccess": partial})

    async def factory() -> HttpServer:
        return await HttpServer(receiver).start()

    _, args = files(tmp_path)
    with ServerThread(factory) as server:
        result = CliRunner().invoke(main, ["export", *args, "--to", "otlp", "--url", server.url])
    assert len(requests) == 1 and requests[0].path == "/v1/traces"
    if rejected:
        assert result.exit_code == 1, result.output
        assert "rejected the verdict span" in result.output
        assert "span attribute limit exceeded" in result.output
    else:
        assert result.exit_code == 0, result.output
        assert "warning: otlp:" in result.output and "clock skew noted" in result.output


@pytest.mark.parametrize("to", ["otlp", "langfuse"])
def test_an_answer_nested_too_deeply_to_read_is_no_crash(tmp_path: Path, to: str) -> None:
    """A receiver that took the verdict and answered with JSON nested deeper than Python's
    reader goes (a broken or hostile server) made `export` end in a RecursionError
    traceback, exit 1, though the verdict was written: the answer was read for an id or
    a rejection catching ValueError only. Now such an answer is read as one that says
    nothing, as a body that is not JSON is: the export succeeds, sent once."""
    from faultfinder.replay.httpserver import HttpServer, Request, ServerThread

    requests: list[Request] = []

    async def receiver(request: Request) -> Response:
        requests.append(request)
        body = b"[" * 100_000 + b"]" * 100_000
        return Response(200, [("content-type", "application/json")], body)

    async def factory() -> HttpServer:
        return await HttpServer(receiver).start()

    _, args = files(tmp_path)
    env = {"LANGFUSE_PUBLIC_KEY": "pk-lf-1", "LANGFUSE_SECRET_KEY": "sk-lf-1"}
    with ServerThread(factory) as server:
        argv = ["export", *args, "--to", to, "--url", server.url]
        result = CliRunner().invoke(main, argv, env=env)
    assert result.exit_code == 0, (result.output, result.exception)
    assert len(requests) == 1
