"""`debug`, `check` and `verify-edit` send each API's live calls to its own upstream
(``--api-upstream API=URL``, as `record` and `replay` do; `replay` is checked alongside),
end to end from the CLI against two loopback fakes that each speak only their own APIs:
an "OpenAI" one (Chat Completions and the Responses API, no Messages) and an "Anthropic"
one (Messages only).

- A team on Chat Completions, the Responses API and Messages (tests/fixtures/apis/
  mixed_apis.py --messages), recorded with ``--api-upstream messages=...``: the recording
  keeps that per-API upstream in meta.json (a URL, never a key). With the same option, or
  with ``--trust-run`` alone, every live Messages call after the edit reaches the Anthropic
  fake and none the OpenAI one, and the command exits 0. With only ``--upstream`` the
  replay is refused before anything runs (exit 1), naming the option to pass: the
  program's Anthropic key is never sent to the OpenAI endpoint (before, the Messages call
  went there and got 404). A recording made before the per-API upstreams were kept still
  loads; its Messages calls then reach the OpenAI fake, which answers 404, and the command
  exits 4 naming the failed calls and the option.
- A Claude program on the Anthropic SDK (Messages only): live calls reach the Anthropic
  fake whether it is the --upstream or only the messages --api-upstream.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import claude_scripts
import frameworks_scripts as scripts
from faultfinder.cli import main, proxy_options
from faultfinder.replay.recorder import read_meta
from faultfinder.testing import FakeOpenAIServer
from faultfinder.testing.fake_responses import FakeResponses

fake_messages = pytest.importorskip("faultfinder.testing.fake_messages")
if importlib.util.find_spec("anthropic") is None:
    pytest.skip("anthropic is not installed (pip install -e '.[dev]')", allow_module_level=True)

FIXTURES = Path(__file__).parent / "fixtures"
MIXED = [sys.executable, str(FIXTURES / "apis" / "mixed_apis.py"), scripts.TASK, "--messages"]
CLAUDE = [sys.executable, str(FIXTURES / "frameworks" / "anthropic_sdk_team.py"), scripts.TASK]
DEBUGGER = ["--model", "function:frameworks_scripts:debugger", "--cache", "none"]
COMMANDS = ["debug", "check", "verify-edit"]


@dataclass
class Upstreams:
    openai: FakeOpenAIServer
    """Chat Completions and Responses; a Messages call gets 404."""
    anthropic: FakeOpenAIServer
    """Messages (the fake answers chat completions too: nothing here should send any)."""

    def snapshot(self) -> tuple[int, int]:
        return len(self.openai.requests), len(self.anthropic.requests)

    def since(self, before: tuple[int, int]) -> tuple[list[Any], list[Any]]:
        return self.openai.requests[before[0] :], self.anthropic.requests[before[1] :]


@dataclass
class Recording:
    run_dir: Path
    program: list[str]
    at: int
    """The step verify-edit edits."""
    edit: dict[str, Any]


@pytest.fixture(scope="module")
def env() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OTEL_SDK_DISABLED", "true")
        for key in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_URL"):
            patch.delenv(key, raising=False)
        yield


def two_upstreams(reply: Any) -> Upstreams:
    openai = FakeOpenAIServer(reply=reply)
    openai.apis = [FakeResponses()]
    anthropic = FakeOpenAIServer(reply=reply)
    anthropic.apis = [fake_messages.FakeMessages()]
    return Upstreams(openai, anthropic)


def record(root: Path, name: str, program: list[str], *upstream_args: str) -> None:
    result = CliRunner().invoke(
        main,
        ["record", *upstream_args, "--out", str(root), "--run-id", name,
         "--ground-truth", scripts.ANSWER, "--quiet", "--", *program],
    )  # fmt: skip
    assert result.exit_code == 0, result.output


def recorded(
    factory: pytest.TempPathFactory,
    reply: Any,
    recording: Recording,
    routing: Callable[[Upstreams], list[str]],
) -> Iterator[tuple[Recording, Upstreams]]:
    """Record ``recording.program`` with the upstream options ``routing`` gives, each of
    its Messages calls at the Anthropic fake; the fakes stay up for the module's tests."""
    ups = two_upstreams(reply)
    with ups.openai, ups.anthropic:
        root = factory.mktemp("runs")
        record(root, recording.run_dir.name, recording.program, *routing(ups))
        assert ups.anthropic.requests_of("messages")
        assert not [r for r in ups.openai.requests if r.path.endswith("/messages")]
        yield replace(recording, run_dir=root / recording.run_dir.name), ups


@pytest.fixture(scope="module")
def mixed(
    env: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Recording, Upstreams]]:
    """The three-API team, recorded with its Messages calls at the Anthropic fake."""
    fix = {"kind": "message", "text": "population of Avalon in 2020"}
    yield from recorded(
        tmp_path_factory, scripts.mixed, Recording(Path("mixed"), MIXED, 0, fix),
        lambda ups: ["--upstream", ups.openai.base_url,
                     "--api-upstream", f"messages={ups.anthropic.base_url}"],
    )  # fmt: skip


@pytest.fixture(scope="module")
def claude(
    env: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Recording, Upstreams]]:
    """The Claude program (Messages only), recorded against the Anthropic fake."""
    fix = {"kind": "message", "text": "Found: Avalon had 144,630 inhabitants in 2020."}
    yield from recorded(
        tmp_path_factory, claude_scripts.anthropic_sdk, Recording(Path("claude"), CLAUDE, 1, fix),
        lambda ups: ["--upstream", ups.anthropic.base_url],
    )  # fmt: skip


def run(command: str, recording: Recording, tmp_path: Path, *upstream_args: str) -> Result:
    """``faultfinder COMMAND RUN_DIR ... -- PROGRAM`` with one replay (or one candidate)."""
    run_dir = str(recording.run_dir)
    if command == "debug":
        args = ["debug", run_dir, "--repeats", "1", "--segment", "none",
                "--out", str(tmp_path / "rows.jsonl"), *DEBUGGER]  # fmt: skip
    elif command == "check":
        args = ["check", run_dir, "--method", "all-at-once", "--candidates", "1", *DEBUGGER]
    else:
        edit = tmp_path / "fix.json"
        edit.write_text(json.dumps(recording.edit), encoding="utf-8")
        args = [command, run_dir, "--at", str(recording.at), "--edit-file", str(edit)]
        args += ["--quiet"] if command == "replay" else ["--repeats", "1"]
    return CliRunner().invoke(main, [*args, *upstream_args, "--", *recording.program])


def branches(recording: Recording) -> set[Path]:
    return set((recording.run_dir / "branches").glob("*"))


def reports(paths: set[Path]) -> list[dict[str, Any]]:
    return [json.loads((p / "report.json").read_text(encoding="utf-8")) for p in paths]


def assert_each_api_reached_its_own(
    result: Result, recording: Recording, ups: Upstreams, before: tuple[int, int], old: set[Path]
) -> dict[str, Any]:
    """The replay succeeded with its live Messages call at the Anthropic fake and every
    other live call at the OpenAI fake; the new branch's report."""
    assert result.exit_code == 0, result.output
    to_openai, to_anthropic = ups.since(before)
    # The Writer's Messages call after the edit went live, to the Anthropic fake only.
    assert [r.api for r in to_anthropic] == ["messages"]
    assert to_openai and {r.api for r in to_openai} <= {"chat", "responses"}
    (report,) = reports(branches(recording) - old)
    assert report["edit_applied"] and report["program_exit_code"] == 0
    assert [(live["api"], live["status"]) for live in report["live"]][-1] == ("messages", 200)
    assert report["live_calls"] == len(to_openai) + len(to_anthropic)
    assert "answered with an error" not in result.output
    return report


def test_the_recording_keeps_each_apis_upstream(mixed: tuple[Recording, Upstreams]) -> None:
    recording, ups = mixed
    meta = json.loads((recording.run_dir / "meta.json").read_text(encoding="utf-8"))
    assert meta["upstream"] == ups.openai.base_url
    assert meta["upstreams"] == {"messages": ups.anthropic.base_url}


@pytest.mark.parametrize("command", [*COMMANDS, "replay"])
def test_each_apis_live_calls_reach_its_own_upstream(
    command: str, mixed: tuple[Recording, Upstreams], tmp_path: Path
) -> None:
    recording, ups = mixed
    before, old = ups.snapshot(), branches(recording)
    result = run(
        command, recording, tmp_path,
        "--upstream", ups.openai.base_url,
        "--api-upstream", f"messages={ups.anthropic.base_url}",
    )  # fmt: skip
    assert_each_api_reached_its_own(result, recording, ups, before, old)


@pytest.mark.parametrize("command", [*COMMANDS, "replay"])
def test_trust_run_sends_each_api_to_its_recorded_upstream(
    command: str, mixed: tuple[Recording, Upstreams], tmp_path: Path
) -> None:
    """--trust-run alone: the recorded main upstream and the recorded Messages one."""
    recording, ups = mixed
    before, old = ups.snapshot(), branches(recording)
    result = run(command, recording, tmp_path, "--trust-run")
    assert_each_api_reached_its_own(result, recording, ups, before, old)
    (branch,) = branches(recording) - old
    meta = read_meta(branch)
    assert meta.upstream == ups.openai.base_url
    assert meta.upstreams == {"messages": ups.anthropic.base_url}


def test_trust_run_with_upstream_keeps_the_recorded_api_upstream(
    mixed: tuple[Recording, Upstreams], tmp_path: Path
) -> None:
    """--upstream replaces the recorded main upstream; --trust-run still sends the
    Messages calls to the one recorded for them."""
    recording, ups = mixed
    before, old = ups.snapshot(), branches(recording)
    result = run("replay", recording, tmp_path, "--trust-run", "--upstream", ups.openai.base_url)
    assert_each_api_reached_its_own(result, recording, ups, before, old)


def test_an_api_upstream_given_here_wins_over_the_recorded_one(
    mixed: tuple[Recording, Upstreams], tmp_path: Path
) -> None:
    """--api-upstream on the command line beats the recorded one under --trust-run: here it
    points Messages at the OpenAI fake, which answers 404, and the replay exits 4."""
    recording, ups = mixed
    before = ups.snapshot()
    result = run(
        "replay", recording, tmp_path,
        "--trust-run", "--api-upstream", f"messages={ups.openai.base_url}",
    )  # fmt: skip
    assert result.exit_code == 4, result.output
    to_openai, to_anthropic = ups.since(before)
    assert to_anthropic == []
    assert [r.path for r in to_openai if r.api is None] == ["/v1/messages"]
    assert f"used here: messages -> {ups.openai.base_url}" in result.stderr


@pytest.mark.parametrize("command", [*COMMANDS, "replay"])
def test_an_api_recorded_at_its_own_upstream_is_not_sent_to_another(
    command: str,
    mixed: tuple[Recording, Upstreams],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only --upstream (the OpenAI endpoint): the recording sent its Messages calls to an
    upstream of their own, so the replay is refused before anything runs; the program's
    Anthropic key reaches neither fake, and the user is told what to pass."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-never-forwarded-0123")
    recording, ups = mixed
    before, old = ups.snapshot(), branches(recording)
    result = run(command, recording, tmp_path, "--upstream", ups.openai.base_url)
    assert result.exit_code == 1, result.output
    assert ups.since(before) == ([], [])
    assert branches(recording) == old and not (tmp_path / "rows.jsonl").exists()
    said = " ".join(result.output.split())
    assert (
        "This replay would send the program's messages calls (and its key for them) to "
        f"--upstream {ups.openai.base_url!r}" in said
    )
    assert f"messages -> {ups.anthropic.base_url!r}" in said
    assert "pass --api-upstream messages=URL (or --trust-run" in said


@pytest.fixture(scope="module")
def old_mixed(
    mixed: tuple[Recording, Upstreams], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Recording, Upstreams]:
    """The three-API recording as a version that did not keep per-API upstreams wrote
    it: its meta.json has no 'upstreams'."""
    recording, ups = mixed
    copy = tmp_path_factory.mktemp("old") / recording.run_dir.name
    shutil.copytree(recording.run_dir, copy, ignore=shutil.ignore_patterns("branches"))
    meta = json.loads((copy / "meta.json").read_text(encoding="utf-8"))
    del meta["upstreams"]
    (copy / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return replace(recording, run_dir=copy), ups


@pytest.mark.parametrize("command", [*COMMANDS, "replay"])
def test_an_old_recording_loads_and_a_failed_live_call_is_named(
    command: str, old_mixed: tuple[Recording, Upstreams], tmp_path: Path
) -> None:
    """Without the recorded per-API upstream nothing tells the replay where Messages went:
    with only --upstream the Messages call reaches the OpenAI endpoint, which answers 404;
    the replayed program fails, so the command exits 4 and says which call failed where."""
    recording, ups = old_mixed
    assert read_meta(recording.run_dir).upstreams == {}
    before = ups.snapshot()
    result = run(command, recording, tmp_path, "--upstream", ups.openai.base_url)
    assert result.exit_code == 4, result.output
    to_openai, to_anthropic = ups.since(before)
    assert to_anthropic == []
    assert [r.path for r in to_openai if r.api is None] == ["/v1/messages"]
    assert "live calls answered with an error: POST /v1/messages (messages call) -> 404" in (
        result.stderr
    )
    assert "--api-upstream API=URL" in result.stderr and "used here: none" in result.stderr
    if command == "replay":
        assert "exit 4: the replayed program failed (exit status 1)" in result.stderr
    else:
        assert "exit 4: of 1 replays, 1 ran a program that failed (exit status 1" in result.stderr
    if command == "check":
        assert "the program FAILED (exit status 1)" in result.stdout


def test_the_confirmation_names_each_recorded_upstream(
    mixed: tuple[Recording, Upstreams], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At a terminal, without --upstream or --trust-run, the user is asked before any
    recorded upstream is used, and the question names the per-API ones too."""
    recording, ups = mixed
    asked: list[str] = []

    def confirm(text: str, **_: Any) -> bool:
        asked.append(text)
        return True

    monkeypatch.setattr(proxy_options.sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(proxy_options.sys.stderr, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(proxy_options.click, "confirm", confirm)
    assert proxy_options.choose_upstream(str(recording.run_dir), None, False) == (None, True)
    (question,) = asked
    assert (
        f"names the upstreams {ups.openai.base_url!r} "
        f"(messages: {ups.anthropic.base_url!r})" in question
    )


def test_no_key_is_written_into_meta(
    env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-API upstream is kept as a URL: no key of the program's, and no credential
    written into the URL itself, reaches meta.json (or any other file of the run); a URL
    whose credentials were cut out is not used by --trust-run as it stands."""
    secrets = {
        "ANTHROPIC_API_KEY": "sk-ant-test-kept-out-of-meta-4821",
        "OPENAI_API_KEY": "sk-test-kept-out-of-meta-9377",
    }
    password = "url-password-kept-out-9051"
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    ups = two_upstreams(scripts.mixed)
    with ups.openai, ups.anthropic:
        with_password = ups.anthropic.base_url.replace("://", f"://ff:{password}@")
        record(tmp_path, "keys", MIXED, "--upstream", ups.openai.base_url,
               "--api-upstream", f"messages={with_password}")  # fmt: skip
        recording = Recording(tmp_path / "keys", MIXED, 0, {"kind": "message", "text": "x"})
        # The fakes did receive the secrets: they were really sent (the URL's credentials
        # go as Basic authorization, in place of the program's Anthropic key).
        basic = base64.b64encode(f"ff:{password}".encode()).decode()
        assert [r.headers["authorization"] for r in ups.anthropic.requests] == [f"Basic {basic}"]
        assert secrets["OPENAI_API_KEY"] in json.dumps([r.headers for r in ups.openai.requests])
        before = ups.snapshot()
        refused = run("replay", recording, tmp_path, "--trust-run")
        assert refused.exit_code == 1, refused.output
        assert "whose credentials were not kept; pass --api-upstream messages=URL" in (
            " ".join(refused.output.split())
        )
        assert ups.since(before) == ([], [])
        replayed = run("replay", recording, tmp_path, "--trust-run",
                       "--api-upstream", f"messages={with_password}")  # fmt: skip
        assert replayed.exit_code == 0, replayed.output
        assert [r.api for r in ups.since(before)[1]] == ["messages"]
    meta = json.loads((recording.run_dir / "meta.json").read_text(encoding="utf-8"))
    assert meta["upstreams"] == {"messages": with_password.replace(f"ff:{password}", "[REDACTED]")}
    hits = [
        f"{path.relative_to(tmp_path)}: {secret}"
        for path in tmp_path.rglob("*")
        if path.is_file()
        for secret in [*secrets.values(), password]
        if secret.encode() in path.read_bytes()
    ]
    assert hits == []


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("routing", ["upstream", "api-upstream"])
def test_a_messages_program_goes_live_at_its_upstream(
    command: str, routing: str, claude: tuple[Recording, Upstreams], tmp_path: Path
) -> None:
    """The Claude program's live calls reach the Anthropic fake, named by --upstream or by
    --api-upstream messages=URL alongside an --upstream that does not speak Messages."""
    recording, ups = claude
    if routing == "upstream":
        args = ["--upstream", ups.anthropic.base_url]
    else:
        args = ["--upstream", ups.openai.base_url,
                "--api-upstream", f"messages={ups.anthropic.base_url}"]  # fmt: skip
    before, old = ups.snapshot(), branches(recording)
    result = run(command, recording, tmp_path, *args)
    assert result.exit_code == 0, result.output
    to_openai, to_anthropic = ups.since(before)
    assert to_openai == []
    assert to_anthropic and {r.api for r in to_anthropic} == {"messages"}
    (report,) = reports(branches(recording) - old)
    assert report["edit_applied"] and report["program_exit_code"] == 0
    assert report["live_calls"] == len(to_anthropic)
    if command == "verify-edit":
        assert "verdict: validated" in result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_a_bad_api_upstream_is_a_usage_error(
    command: str, claude: tuple[Recording, Upstreams], tmp_path: Path
) -> None:
    recording, ups = claude
    before, old = ups.snapshot(), branches(recording)
    result = run(command, recording, tmp_path, "--api-upstream", "claude=http://127.0.0.1:9/v1")
    assert result.exit_code == 2
    assert "give API=URL with API one of chat" in result.output
    assert ups.snapshot() == before and branches(recording) == old


@pytest.mark.parametrize("command", ["debug", "check"])
def test_no_upstream_for_the_live_part_is_refused_before_any_work(
    command: str, claude: tuple[Recording, Upstreams], tmp_path: Path
) -> None:
    """Every replay of `debug` (and of `check` without --check-below) goes live: with no
    --upstream (an --api-upstream alone does not name one for the other requests) and no
    --trust-run, the command stops at once. It used to run DoVer's model calls and then
    call every intervention `not_applied`, exiting 0."""
    recording, ups = claude
    before, old = ups.snapshot(), branches(recording)
    result = run(
        command, recording, tmp_path, "--api-upstream", f"messages={ups.anthropic.base_url}"
    )
    assert result.exit_code == 1, result.output
    assert "This replay makes live calls: pass --upstream URL" in result.output
    assert "--trust-run" in result.output
    assert ups.snapshot() == before and branches(recording) == old
    assert not (tmp_path / "rows.jsonl").exists()


def test_proxy_replay_refuses_to_send_an_api_to_another_providers_upstream(
    mixed: tuple[Recording, Upstreams], tmp_path: Path
) -> None:
    """`faultfinder proxy --replay` applies the same rule as replay: refused before the
    proxy starts, nothing sent, and the option to pass named."""
    recording, ups = mixed
    before, old = ups.snapshot(), branches(recording)
    result = CliRunner().invoke(
        main,
        ["proxy", "--replay", str(recording.run_dir), "--at", str(recording.at),
         "--upstream", ups.openai.base_url, "--port", "0"],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert ups.since(before) == ([], []) and branches(recording) == old
    assert "pass --api-upstream messages=URL" in " ".join(result.output.split())
