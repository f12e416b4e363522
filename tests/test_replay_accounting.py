"""A replay never reports less live traffic than reached the upstream, and a replayed
program that fails never yields exit 0. Recorded streams are replayed as they were
(every event, in order), and a streamed request still matches a recording made without
a stream (and back)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.replay.recorder import load_calls
from faultfinder.testing import FakeOpenAIServer

# One chat call, then requests that are not model calls (models list, embeddings); with
# STREAM=1 the chat call streams and the program prints how many chunks it read.
PROGRAM = """
import os, sys
import openai
client = openai.OpenAI(max_retries=0)
stream = os.environ.get("STREAM") == "1"
messages = [{"role": "user", "content": "Say something long"}]
if stream:
    chunks = list(client.chat.completions.create(model="m", messages=messages, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    print("chunks", len(chunks))
else:
    text = client.chat.completions.create(model="m", messages=messages).choices[0].message.content
if os.environ.get("EXTRA") == "1":
    client.models.list()
    try:
        client.embeddings.create(model="e", input="x")
    except openai.NotFoundError:
        print("no embeddings upstream")
print("FINAL ANSWER:", text)
"""

LONG = " ".join(f"word{i}" for i in range(40))


def embeddings(body: dict[str, object]) -> str:
    return LONG


def run(args: list[str], monkeypatch: pytest.MonkeyPatch, **env: str) -> tuple[int, str]:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.output


def record(tmp_path: Path, upstream: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch,
           **env: str) -> tuple[Path, str]:  # fmt: skip
    code, output = run(
        ["record", "--upstream", upstream.base_url, "--out", str(tmp_path), "--run-id", "r",
         "--quiet", "--", sys.executable, "-c", PROGRAM],
        monkeypatch, **env,
    )  # fmt: skip
    assert code == 0, output
    return tmp_path / "r", output


def test_other_requests_are_counted_and_need_an_upstream_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with FakeOpenAIServer(reply=LONG) as upstream:
        run_dir, output = record(tmp_path, upstream, monkeypatch, EXTRA="1")
        assert "recorded 1 step from 1 agent over chat" in output
        # The embeddings call is not recorded: record says so.
        assert "forwarded without recording" in output and "POST /v1/embeddings" in output
        asked = len(upstream.requests)

        # Without --upstream the recording answers the model call; the other requests are
        # not sent anywhere, so the program fails: exit 4, the requests listed as not sent.
        code, output = run(
            ["replay", str(run_dir), "--quiet", "--", sys.executable, "-c", PROGRAM],
            monkeypatch,
        )
        assert code == 4, output
        assert "live calls:  0 sent to the upstream" in output
        assert "not sent:    1 request(s)" in output and "GET /v1/models" in output
        assert "the program FAILED" in output
        assert len(upstream.requests) == asked
        # The program is told the one option that forwards them (not --trust-run).
        [stderr] = (run_dir / "branches").glob("*/stderr.txt")
        said = stderr.read_text()
        assert "GET /v1/models is not a model call" in said and "(--upstream URL)" in said
        assert "--trust-run" not in said

        # With --upstream they go live, and every one is counted and listed.
        code, output = run(
            ["replay", str(run_dir), "--upstream", upstream.base_url, "--json", "--quiet",
             "--", sys.executable, "-c", PROGRAM],
            monkeypatch,
        )  # fmt: skip
    report = json.loads(output[: output.rindex("}") + 1])
    assert code == 0, output
    sent = len(upstream.requests) - asked
    assert report["live_calls"] == sent == 2 and report["passthrough_calls"] == 2
    assert [live["path"] for live in report["live"]] == ["/v1/models", "/v1/embeddings"]
    assert report["reproduced"] == 1 and report["program_exit_code"] == 0


def test_a_failing_program_is_never_a_passing_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with FakeOpenAIServer(reply=LONG) as upstream:
        run_dir, _ = record(tmp_path, upstream, monkeypatch)
        failing = PROGRAM + "\nsys.exit(7)\n"
        code, output = run(
            ["replay", str(run_dir), "--quiet", "--", sys.executable, "-c", failing],
            monkeypatch,
        )
    assert code == 4, output
    assert "replayed:    1/1" in output and "exit status: 7 (the program FAILED)" in output


def test_a_run_without_steps_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeOpenAIServer(reply="x") as upstream:
        code, output = run(
            ["record", "--upstream", upstream.base_url, "--out", str(tmp_path), "--quiet",
             "--", sys.executable, "-c", "print('no model here')"],
            monkeypatch,
        )  # fmt: skip
    assert code == 0
    assert "0 steps: the program sent no request through the proxy" in output


@pytest.mark.parametrize(
    "recorded_stream,replayed_stream", [(True, True), (False, True), (True, False)]
)
def test_chat_streams_are_replayed_as_they_were(
    recorded_stream: bool, replayed_stream: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with FakeOpenAIServer(reply=LONG) as upstream:
        run_dir, _ = record(tmp_path, upstream, monkeypatch, STREAM="1" if recorded_stream else "0")
        original = (run_dir / "stdout.txt").read_text()
        code, output = run(
            ["replay", str(run_dir), "--quiet", "--json", "--", sys.executable, "-c", PROGRAM],
            monkeypatch,
            STREAM="1" if replayed_stream else "0",
        )
    assert code == 0, output
    branch = next((run_dir / "branches").iterdir())
    replayed = (branch / "stdout.txt").read_text()
    assert replayed.splitlines()[-1] == original.splitlines()[-1] == f"FINAL ANSWER: {LONG}"
    if recorded_stream and replayed_stream:
        # Every recorded chunk, in order: the program reads as many as it did then.
        assert replayed == original and "chunks 42" in replayed
        [recorded] = load_calls(run_dir)
        [served] = load_calls(branch)
        assert served.events == recorded.events and served.writes == recorded.writes


def test_each_api_can_have_its_own_upstream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import frameworks_scripts as scripts

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    mixed = str(Path(__file__).parent / "fixtures" / "apis" / "mixed_apis.py")
    with (
        FakeOpenAIServer(reply=scripts.mixed) as chat,
        FakeOpenAIServer(reply=scripts.mixed) as responses,
    ):
        code, output = run(
            ["record", "--upstream", chat.base_url, "--api-upstream",
             f"responses={responses.base_url}", "--out", str(tmp_path), "--quiet", "--",
             sys.executable, mixed, scripts.TASK],
            monkeypatch,
        )  # fmt: skip
        assert code == 0, output
        assert [r.api for r in chat.model_requests] == ["chat"]
        assert [r.api for r in responses.model_requests] == ["responses", "responses"]
    bad = CliRunner().invoke(main, ["record", "--upstream", "http://127.0.0.1:9/v1",
                                    "--api-upstream", "nope=http://x", "--", "true"])  # fmt: skip
    assert bad.exit_code == 2 and "API=URL" in bad.output
