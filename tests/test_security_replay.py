"""Safety of record/replay/debug against hostile run directories and leaky programs:
no stored command is run, no key goes to an endpoint read from a file, no secret is
written anywhere, run ids stay inside --out."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.llm import base
from faultfinder.testing import FakeOpenAIServer, ReplyError

PROBES = Path(__file__).parent / "fixtures" / "replay"
DEBUGGER = ["--model", "function:faultfinder.demo_team.mock_debugger:respond", "--cache", "none"]

BENIGN = """\
import openai
reply = openai.OpenAI().chat.completions.create(
    model="m", messages=[{"role": "user", "content": "What is 2 + 2?"}]
)
print("FINAL ANSWER:", reply.choices[0].message.content)
"""


@pytest.fixture
def attacker() -> Iterator[FakeOpenAIServer]:
    """An endpoint named by a planted run directory: it records every hit."""
    with FakeOpenAIServer(reply="attacker reply") as server:
        yield server


def plant_run(root: Path, attacker: FakeOpenAIServer) -> tuple[Path, Path]:
    """A run directory whose meta.json names a command writing a marker file, a working
    directory holding a malicious team.py, and the attacker's endpoint."""
    marker = root / "MARKER"
    evil_dir = root / "evil"
    evil_dir.mkdir()
    (evil_dir / "team.py").write_text(f"open({str(marker)!r}, 'w').write('pwned')\n")
    run = root / "runs" / "planted"
    run.mkdir(parents=True)
    meta = {
        "run_id": "planted",
        "command": [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('pwned')"],
        "cwd": str(evil_dir),
        "upstream": attacker.base_url,
    }
    (run / "meta.json").write_text(json.dumps(meta))
    step = {
        "call": 0,
        "agent": "assistant",
        "agent_call": 0,
        "request": {"model": "m", "messages": [{"role": "user", "content": "recorded question"}]},
        "request_hash": "x",
        "response": {
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "4"},
                    "finish_reason": "stop",
                }
            ]
        },
        "started_at": "2026-01-01T00:00:00Z",
        "ended_at": "2026-01-01T00:00:01Z",
    }
    (run / "steps.jsonl").write_text(json.dumps(step) + "\n")
    return run, marker


def test_a_planted_run_directory_runs_nothing_and_contacts_nothing(
    tmp_path: Path, attacker: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, marker = plant_run(tmp_path, attacker)
    good = tmp_path / "good"
    good.mkdir()
    (good / "team.py").write_text(BENIGN)
    monkeypatch.chdir(good)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-users-own-key-0123456789abcdef")
    runner = CliRunner()
    team = [sys.executable, "team.py"]

    no_command = runner.invoke(main, ["replay", str(run)])
    assert no_command.exit_code == 2
    assert "shown for reference and never run" in no_command.output

    # Live calls wanted, no --upstream, no --trust-run (and no terminal to ask at).
    live = runner.invoke(main, ["replay", str(run), "--at", "0", "--quiet", "--", *team])
    assert live.exit_code == 1 and "--upstream" in live.output and "--trust-run" in live.output

    # A pure replay of a program that diverges: refused, nothing goes anywhere live.
    diverged = runner.invoke(
        main, ["replay", str(run), "--on-divergence", "fail", "--quiet", "--", *team]
    )
    assert diverged.exit_code == 3, diverged.output

    for command in (["debug", str(run), *DEBUGGER], ["check", str(run), *DEBUGGER]):
        refused = runner.invoke(main, command)
        assert refused.exit_code == 2 and "never run" in refused.output
    debugged = runner.invoke(main, ["debug", str(run), *DEBUGGER, "--", *team])
    assert (attacker.requests == [] and debugged.exception is None) or debugged.exit_code != 0

    assert not marker.exists(), "a command or program from the run directory was run"
    assert attacker.requests == [], "a request reached the endpoint named by the run directory"

    # Control: trusting the run does send live calls there (the test can see a hit).
    trusted = runner.invoke(
        main,
        ["replay", str(run), "--trust-run", "--on-divergence", "live", "--quiet", "--", *team],
    )
    assert trusted.exit_code == 0, trusted.output
    assert len(attacker.chat_requests) == 1
    assert not marker.exists()


SECRETS = {
    "OPENAI_API_KEY": "sk-bearer-SECRET-a1b2c3d4e5f6g7h8",
    "LEAK_BASIC": "basic-SECRET-pw-77aa",
    "LEAK_APIKEY": "apikey-SECRET-88bb",
    "LEAK_XAPIKEY": "xapikey-SECRET-99cc",
    "LEAK_GOOG": "goog-SECRET-00dd",
    "LEAK_COOKIE": "cookie-SECRET-11ee",
    "LEAK_QUERY": "query-SECRET-22ff",
    "LEAK_NESTED": "nested-SECRET-33gg",
    "LEAK_PW": "password-SECRET-44hh",
    "LEAK_TOOL_TOKEN": "tooltoken-SECRET-55ii",
    "FF_MODEL_KEY": "modelkey-SECRET-66jj",
}
ARGV_SECRET = "argv-SECRET-77kk"

ANSWER = "Agent Name: assistant\nStep Number: 0\nReason: it answered wrongly."


def test_no_secret_is_written_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)  # loopback fakes only
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # the default response cache (.faultfinder/) lands here
    monkeypatch.delenv("FAULTFINDER_CACHE")  # the default itself, not the suite's
    runner = CliRunner()
    program = [sys.executable, str(PROBES / "leaky_client.py"), "--api-key", ARGV_SECRET]

    def reply(body: dict[str, Any]) -> str:
        return ANSWER if "Agent Name" in json.dumps(body) else "hello"

    with FakeOpenAIServer(reply=reply) as upstream:
        recorded = runner.invoke(
            main,
            ["record", "--upstream", upstream.base_url, "--out", "runs", "--run-id", "leaky",
             "--ground-truth", "goodbye", "--quiet", "--", *program],
        )  # fmt: skip
        assert recorded.exit_code == 0, recorded.output
        run = work / "runs" / "leaky"
        replayed = runner.invoke(main, ["replay", str(run), "--quiet", "--", *program])
        assert replayed.exit_code == 0, replayed.output
        assert "fidelity 100%" in replayed.output
        debugged = runner.invoke(
            main,
            ["debug", str(run), "--repeats", "1", "--upstream", upstream.base_url,
             "--out", "dover.jsonl", *DEBUGGER, "--", *program],
        )  # fmt: skip
        assert debugged.exception is None or isinstance(debugged.exception, SystemExit)
        model = ["--model", "openai:m", "--base-url", upstream.base_url,
                 "--api-key-env", "FF_MODEL_KEY"]  # fmt: skip
        attributed = runner.invoke(main, ["attribute", str(run / "trace.json"), *model])
        assert attributed.exit_code == 0, attributed.output
        dataset = work / "dataset"
        dataset.mkdir()
        shutil.copy(run / "trace.json", dataset / "leaky.json")
        evaluated = runner.invoke(
            main,
            ["eval", str(dataset), "--out", "results.jsonl", "--include-unlabelled",
             "--no-progress", *model],
        )  # fmt: skip
        assert evaluated.exit_code == 0, evaluated.output

        # An endpoint that quotes the key back in its errors: neither the error row (a
        # refused request) nor the error that stops the batch (a refused key) may.
        def echo_key(status: int) -> Callable[[dict[str, Any]], str]:
            def refuse(body: dict[str, Any]) -> str:
                raise ReplyError(status, f"Incorrect API key provided: {SECRETS['FF_MODEL_KEY']}")

            return refuse

        for status, out in ((400, "errors.jsonl"), (401, "stopped.jsonl")):
            with FakeOpenAIServer(reply=echo_key(status)) as quoting:
                failing = [*model[:2], "--base-url", quoting.base_url, *model[4:]]
                errored = runner.invoke(
                    main,
                    ["eval", str(dataset), "--out", out, "--include-unlabelled",
                     "--no-progress", "--cache", "none", *failing],
                )  # fmt: skip
            assert SECRETS["FF_MODEL_KEY"] not in errored.output
            assert errored.exit_code == (4 if status == 400 else 1), errored.output
        assert "Incorrect API key provided" in (work / "errors.jsonl").read_text()
        assert "Incorrect API key provided" in errored.output
        # The fakes did see the secrets: they were really sent.
        seen = json.dumps([r.headers for r in upstream.requests])
        assert SECRETS["LEAK_GOOG"] in seen and SECRETS["FF_MODEL_KEY"] in seen

    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "cache.sqlite" for p in written)
    assert any(p.name == "results.jsonl" for p in written)
    hits = []
    for path in written:
        data = path.read_bytes()
        for secret in [*SECRETS.values(), ARGV_SECRET]:
            if secret.encode() in data:
                hits.append(f"{path.relative_to(tmp_path)}: {secret}")
    assert hits == []


KEY = "Zp4Lx9Qe2Wm7Tc5Rv8Hn"


def keyed_program(tmp_path: Path) -> list[str]:
    """A program that sends a key, read from a file, in the headers and the path of a
    request that is not a model call, then fails: only the proxy learns the key."""
    (tmp_path / "key.txt").write_text(KEY)
    return [sys.executable, str(PROBES / "keyed_client.py"), str(tmp_path / "key.txt")]


def test_a_key_in_the_path_of_an_unrecorded_request_is_not_in_meta_json(
    tmp_path: Path,
) -> None:
    """meta.json counts the requests that are not model calls by 'METHOD path': the keys
    of that mapping are scrubbed too."""
    with FakeOpenAIServer(reply="hello") as upstream:
        recorded = CliRunner().invoke(
            main,
            ["record", "--upstream", upstream.base_url, "--out", str(tmp_path / "runs"),
             "--run-id", "keyed", "--quiet", "--", *keyed_program(tmp_path)],
        )  # fmt: skip
    assert recorded.exit_code == 1, recorded.output
    meta = (tmp_path / "runs" / "keyed" / "meta.json").read_text()
    assert json.loads(meta)["unrecorded"] == {"GET /v1/vaults/[REDACTED]/items": 1}
    assert KEY not in meta


def test_what_record_and_replay_return_holds_no_secret_they_learned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What record and replay return is what their meta.json and report.json hold. The
    recording's meta and the replay's report quote the key the program sent (in the path
    of a request that is not a model call, a live call of a failed program) and reach
    callers that print and write them: `record`'s notes, DoVer's rows and output."""
    from faultfinder.demo_team import mock_model
    from faultfinder.dover.verdict import program_failure
    from faultfinder.replay.replayer import Edit, ReplayOptions
    from faultfinder.replay.session import SessionOptions, record_run, replay_run

    monkeypatch.chdir(tmp_path)
    program = keyed_program(tmp_path)
    team = [sys.executable, "-m", "faultfinder.demo_team", "--quiet", "--task-id", "avalon-2020"]
    runner = CliRunner()
    options = SessionOptions(echo=False)
    with FakeOpenAIServer(reply=mock_model.reply) as upstream:
        recorded = runner.invoke(
            main,
            ["record", "--upstream", upstream.base_url, "--out", "runs", "--quiet", "--",
             *program],
        )  # fmt: skip
        assert recorded.exit_code == 1 and "GET /v1/vaults/" in recorded.output
        keyed = asyncio.run(record_run(program, upstream.base_url, "runs", options=options))
        team_run = asyncio.run(
            record_run(team, upstream.base_url, "runs", run_id="avalon", options=options)
        )
        run = team_run.run_dir
        replay = ReplayOptions(at=1, edit=Edit(output="NEXT: Researcher | Look it up"))
        outcome = asyncio.run(
            replay_run(run, program, replay, upstream=upstream.base_url, options=options)
        )
        debugged = runner.invoke(
            main,
            ["debug", str(run), "--repeats", "1", "--segment", "pattern:^PLAN", "--upstream",
             upstream.base_url, "--out", "dover.jsonl", *DEBUGGER, "--", *program],
        )  # fmt: skip
    assert KEY not in recorded.output
    assert keyed.meta.unrecorded and KEY not in keyed.meta.model_dump_json()
    report = outcome.report
    assert report.program_failed and [c.method for c in report.live] == ["GET"]
    assert KEY not in report.model_dump_json() and KEY not in program_failure(report)
    assert "the program failed on its own" in debugged.output
    rows = (tmp_path / "dover.jsonl").read_text()
    assert "GET /v1/vaults/" in rows
    assert KEY not in rows and KEY not in debugged.output


def test_run_id_cannot_leave_out(tmp_path: Path) -> None:
    runner = CliRunner()
    for bad in ("../escape", "/tmp/abs", "a/b", "..", ".hidden"):
        result = runner.invoke(
            main,
            ["record", "--upstream", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "runs"),
             "--run-id", bad, "--quiet", "--", sys.executable, "-c", "pass"],
        )  # fmt: skip
        assert result.exit_code != 0 and "run id" in result.output, (bad, result.output)
    assert not (tmp_path / "escape").exists()
    assert not any((tmp_path / "runs").rglob("*")) if (tmp_path / "runs").exists() else True


def test_record_says_one_agent_not_one_agents(tmp_path: Path) -> None:
    program = (
        "import openai\n"
        "openai.OpenAI().chat.completions.create(model='m', "
        "messages=[{'role': 'user', 'content': 'hi'}])\n"
    )
    with FakeOpenAIServer(reply="hello") as upstream:
        result = CliRunner().invoke(
            main,
            ["record", "--upstream", upstream.base_url, "--out", str(tmp_path), "--quiet",
             "--", sys.executable, "-c", program],
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "recorded 1 step from 1 agent " in result.output


def test_the_recorded_upstream_is_used_only_after_confirmation(
    tmp_path: Path, attacker: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from faultfinder.cli import proxy_options

    run, _ = plant_run(tmp_path, attacker)
    monkeypatch.setattr(proxy_options.sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(proxy_options.sys.stderr, "isatty", lambda: True, raising=False)
    answers = iter([False, True])
    monkeypatch.setattr(proxy_options.click, "confirm", lambda *a, **k: next(answers))
    assert proxy_options.choose_upstream(str(run), None, False) == (None, False)
    assert proxy_options.choose_upstream(str(run), None, False) == (None, True)
    # An upstream named on the command line is used without asking.
    assert proxy_options.choose_upstream(str(run), "http://mine/v1", False) == (
        "http://mine/v1",
        False,
    )


def test_without_an_upstream_a_live_call_is_refused_without_any_connection(
    tmp_path: Path, attacker: FakeOpenAIServer
) -> None:
    import httpx

    from faultfinder.replay.httpserver import ServerThread
    from faultfinder.replay.proxy import NO_UPSTREAM, ProxyConfig, RecordingProxy
    from faultfinder.replay.recorder import RunStore, load_calls
    from faultfinder.replay.replayer import Edit, ReplayOptions, ReplayPlan

    run, _ = plant_run(tmp_path, attacker)
    plan = ReplayPlan(load_calls(run), ReplayOptions(at=0, edit=Edit(input="changed")))

    async def factory() -> RecordingProxy:
        store = RunStore(tmp_path / "branch")
        return await RecordingProxy(ProxyConfig(upstream=None), store, plan).start()

    body = {"model": "m", "messages": [{"role": "user", "content": "recorded question"}]}
    with ServerThread(factory) as proxy:
        reply = httpx.post(
            proxy.url + "/v1/chat/completions",
            json=body,
            headers={"authorization": "Bearer sk-users-own-key-0123456789abcdef"},
        )
    assert reply.status_code == 502 and reply.headers["x-should-retry"] == "false"
    assert NO_UPSTREAM in reply.text
    assert attacker.requests == []


# A program that writes its own notes into the run directory it is told
# (FAULTFINDER_RUN_DIR), quoting its key under a name that says nothing.
WRITES_ITS_OWN_FILES = """
import os, pathlib, openai
run = pathlib.Path(os.environ["FAULTFINDER_RUN_DIR"])
(run / "notes.txt").write_text("connect with " + os.environ["SETTING"])
(run / "cache").mkdir(exist_ok=True)
(run / "cache" / "state.json").write_text('{"x": "' + os.environ["SETTING"] + '"}')
reply = openai.OpenAI().chat.completions.create(
    model="m", messages=[{"role": "user", "content": "What is 2 + 2?"}])
print("FINAL ANSWER:", reply.choices[0].message.content)
"""


def test_files_the_program_writes_in_the_run_directory_are_never_copied(
    tmp_path: Path,
) -> None:
    """The program's own files in its run directory are the program's, unscrubbed:
    faultfinder writes none of them. `debug --executor ray` shipped every file of the
    recording to the workers and wrote back every file of the branch, the program's
    included; it now moves only faultfinder's own files of a run, each scrubbed."""
    import asyncio

    pytest.importorskip("ray")
    from faultfinder.replay.session import SessionOptions, record_run
    from faultfinder.scale.ray_debug import RUN_FILES, recording_files, run_files

    secret = "plain-words-not-key-shaped-42"
    options = SessionOptions(echo=False, timeout=60, env={"SETTING": secret})
    program = [sys.executable, "-c", WRITES_ITS_OWN_FILES]
    with FakeOpenAIServer(reply="4") as upstream:
        recorded = asyncio.run(record_run(program, upstream.base_url, tmp_path, options=options))
    assert recorded.child.exit_code == 0, recorded.child.stderr[-2000:]
    run = recorded.run_dir
    assert secret in (run / "notes.txt").read_text()  # the program's own write, as it was
    (run / "branches" / "b1").mkdir(parents=True)
    (run / "branches" / "b1" / "notes.txt").write_text(secret)
    shipped = recording_files(run)
    assert set(shipped) == {n for n in RUN_FILES if (run / n).is_file()} >= {
        "meta.json", "steps.jsonl", "trace.json", "stdout.txt", "stderr.txt"
    }  # fmt: skip
    assert not any(secret.encode() in data for data in shipped.values())
    assert set(run_files(run / "branches" / "b1")) == set()
