"""Replays from the page (`faultfinder ui --allow-replay -- COMMAND`), without a browser:
what the page may choose (and what it may not), the files a job writes (those of
`replay` and `debug`), the equivalent command line, verdicts, one job per recording,
cancelling, branches of branches, and a planted recording that must run and contact
nothing."""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="needs the 'ui' extra")

from dataclasses import fields

from click.testing import CliRunner
from starlette.testclient import TestClient

from faultfinder.cli import main
from faultfinder.demo_team import mock_debugger, mock_model
from faultfinder.dover.edit_repeats import Program
from faultfinder.dover.report import read_rows
from faultfinder.llm.client import LLM
from faultfinder.llm.doubles import FunctionBackend
from faultfinder.testing import FakeOpenAIServer
from faultfinder.ui.app import create_app
from faultfinder.ui.catalog import Catalog
from faultfinder.ui.replay_jobs import ReplayRunner
from faultfinder.ui.replay_requests import ReplaySettings
from faultfinder.ui.scan import build_catalog
from ui_support import FIX, TEAM, plant_hostile_recording, record_team

HOST = "http://127.0.0.1"
PROGRAM_FIELDS = {f.name for f in fields(Program)}
"""The settings `app_for` passes to the program rather than to the page's job settings."""
JUDGE = ["--model", "function:faultfinder.demo_team.mock_debugger:respond", "--cache", "none"]
_OPEN: list[TestClient] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    """Clients run the app's event loop for as long as the test needs its jobs; closing
    one cancels what still runs."""
    yield
    while _OPEN:
        _OPEN.pop().__exit__(None, None, None)


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(reply=mock_model.reply) as server:
        yield server


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, upstream: FakeOpenAIServer) -> Path:
    return record_team(tmp_path_factory.mktemp("recorded") / "runs", upstream.base_url).parent


@pytest.fixture
def runs(recorded: Path, tmp_path: Path) -> Path:
    """A fresh copy of the recording per test (jobs write branches into it)."""
    import shutil

    target = tmp_path / "runs"
    shutil.copytree(recorded, target)
    return target


def app_for(
    runs: Path, upstream: FakeOpenAIServer | None, **settings: Any
) -> tuple[TestClient, Catalog, ReplayRunner]:
    catalog = build_catalog([runs])
    runner = ReplayRunner(
        catalog,
        ReplaySettings(
            Program(
                tuple(settings.pop("command", TEAM)),
                upstream.base_url if upstream is not None else None,
                **{k: settings.pop(k) for k in PROGRAM_FIELDS if k in settings},
            ),
            **settings,
        ),
    )
    client = TestClient(create_app(catalog, replays=runner), base_url=HOST)
    client.__enter__()  # keep the event loop (and the jobs in it) running between requests
    _OPEN.append(client)
    return client, catalog, runner


def token_of(client: TestClient) -> str:
    page = client.get("/").text
    return page.split('name="ff-token" content="', 1)[1].split('"', 1)[0]


def recording_key(catalog: Catalog) -> str:
    return next(k for k, t in catalog.traces.items() if t.kind == "recording")


def start(client: TestClient, body: dict[str, Any], token: str | None = None) -> Any:
    headers = {"X-Faultfinder-Token": token if token is not None else token_of(client)}
    return client.post("/replay-jobs", json=body, headers=headers)


def wait(client: TestClient, url: str, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status: dict[str, Any] = client.get(url + "/status").json()
        if status["state"] not in ("queued", "running"):
            return status
        time.sleep(0.2)
    raise AssertionError(f"job did not finish: {status}")


def test_read_only_without_allow_replay(runs: Path) -> None:
    client = TestClient(create_app(build_catalog([runs])), base_url=HOST)
    key = recording_key(build_catalog([runs]))
    page = client.get(f"/trace/{key}").text
    assert "change this step" not in page and 'id="edit-panel"' not in page
    body = {"trace": key, "at": 1, "edit": {"kind": "message", "text": FIX}}
    response = client.post("/replay-jobs", json=body, headers={"X-Faultfinder-Token": "x"})
    assert response.status_code in (404, 405)
    assert not (runs / "avalon" / "branches").exists()


def test_the_form_is_prefilled_with_the_recorded_step(
    runs: Path, upstream: FakeOpenAIServer
) -> None:
    client, catalog, _ = app_for(runs, upstream)
    key = recording_key(catalog)
    trace = catalog.traces[key].trace
    page = client.get(f"/trace/{key}").text
    assert page.count('class="change-step"') == len(trace.steps)
    parts = client.get(f"/trace/{key}/step/1/edit").json()
    assert parts["output"] == trace.steps[1].content and parts["agent"] == trace.steps[1].agent
    assert parts["instruction"]  # the last user message of the step's request
    with_call = next(s for s in trace.steps if s.tool_calls)
    parts = client.get(f"/trace/{key}/step/{with_call.index}/edit").json()
    assert parts["tool_calls"][0]["name"] == with_call.tool_calls[0].name
    assert parts["tool_calls"][0]["arguments"] == with_call.tool_calls[0].arguments


def test_a_job_needs_the_token_and_a_valid_edit(runs: Path, upstream: FakeOpenAIServer) -> None:
    client, catalog, _ = app_for(runs, upstream)
    key = recording_key(catalog)
    good = {"trace": key, "at": 1, "edit": {"kind": "message", "text": FIX}}
    assert start(client, good, token="wrong").status_code == 403
    bad = [
        {**good, "edit": {"kind": "shell", "text": "rm -rf /"}},
        {**good, "edit": {"kind": "message"}},
        {**good, "at": 999},
        {**good, "repeats": 0},
        {**good, "repeats": 11},
        {**good, "command": ["sh", "-c", "touch pwned"]},
        {**good, "upstream": "http://evil.example/v1"},
        {**good, "edit": {"kind": "tool_call", "index": 0, "name": "lookup"}},  # step 1: none
        {**good, "at": 2, "edit": {"kind": "tool_result", "index": 3, "content": "x"}},
        {"trace": "nope", "at": 1},
    ]
    for body in bad:
        response = start(client, body)
        assert response.status_code in (400, 404), (body, response.text)
    assert not (runs / "avalon" / "branches").exists()
    assert not Path("pwned").exists()


def test_edit_replay_writes_the_replay_files_and_the_command_reproduces_them(
    runs: Path, upstream: FakeOpenAIServer, tmp_path: Path
) -> None:
    client, catalog, _ = app_for(runs, upstream)
    key = recording_key(catalog)
    response = start(client, {"trace": key, "at": 1, "edit": {"kind": "message", "text": FIX}})
    assert response.status_code == 202, response.text
    url = response.json()["url"]
    assert "Cancel" in client.get(url).text
    status = wait(client, url)
    assert status["state"] == "done", status
    (attempt,) = status["attempts"]
    assert attempt["success"] is True and attempt["answer"] == "144630"
    assert attempt["counts"]["replayed"] == 1 and attempt["counts"]["edited"] == 1
    assert attempt["counts"]["live"] >= 1 and attempt["tokens"] > 0
    assert attempt["unreported"] == 0  # the fake reports usage on every reply
    assert "FINAL ANSWER: 144630" in attempt["stdout"]
    branch = runs / "avalon" / "branches" / attempt["branch"]
    for name in ("steps.jsonl", "trace.json", "meta.json", "report.json", "stdout.txt"):
        assert (branch / name).is_file(), name
    report = json.loads((branch / "report.json").read_text())
    assert report["edit_applied"] and report["at"] == 1
    # The page's branch page compares it with the original.
    page = client.get(attempt["replay"]).text
    assert 'id="compare"' in page and "matches the reference" in page
    # The command line shown makes the same branch.
    argv = shlex.split(attempt["command"])
    assert argv[:2] == ["faultfinder", "replay"] and argv[argv.index("--") + 1 :] == TEAM
    argv[argv.index("--branch-id") + 1] = "again"
    result = CliRunner().invoke(main, argv[1:])
    assert result.exit_code == 0, result.output
    again = json.loads((runs / "avalon" / "branches" / "again" / "report.json").read_text())
    assert again["edit"] == report["edit"] and again["edit_applied"]
    assert "matches the reference" in result.output


@pytest.mark.slow
def test_run_n_times_gives_the_flip_rate_and_debug_s_verdict(
    runs: Path, upstream: FakeOpenAIServer
) -> None:
    client, catalog, _ = app_for(
        runs,
        upstream,
        judge=lambda: LLM(FunctionBackend(mock_debugger.respond)),
        judge_args=tuple(JUDGE),
    )
    key = recording_key(catalog)
    body = {"trace": key, "at": 1, "edit": {"kind": "message", "text": FIX}, "repeats": 3}
    status = wait(client, start(client, {**body, "verdict": True}).json()["url"])
    assert status["state"] == "done", status
    assert status["verdict"] == "validated" and status["flip_rate"] == 1.0
    low, high = status["flip_rate_ci"]
    assert 0.4 < low < 0.6 and high == 1.0  # Wilson 95% for 3/3
    (rows_file,) = (runs / "avalon" / "dover").glob("ui-*.jsonl")
    (row,) = read_rows([rows_file])
    assert row.verdict == "validated" and len(row.repeats) == 3
    assert all(r.temperatures and all(t == 0.7 for t in r.temperatures) for r in row.repeats)
    assert status["verdict_command"].startswith("faultfinder debug-report ")
    dover_page = client.get(status["dover"])
    assert dover_page.status_code == 200 and "validated" in dover_page.text
    report = CliRunner().invoke(main, ["debug-report", str(rows_file)])
    assert report.exit_code == 0 and "validated" in report.output
    # The job's one command line does the same: 3 branches and a row with the same verdict.
    argv = shlex.split(status["command"])
    assert argv[:2] == ["faultfinder", "verify-edit"] and argv[argv.index("--") + 1 :] == TEAM
    argv[argv.index("--session") + 1] = "again"
    result = CliRunner().invoke(main, argv[1:])
    assert result.exit_code == 0, result.output
    assert "verdict: validated" in result.output and "flip rate 100%" in result.output
    (again,) = read_rows([runs / "avalon" / "dover" / "again.jsonl"])
    assert again.verdict == row.verdict and again.flip_rate_ci == row.flip_rate_ci
    assert again.config["edit"] == row.config["edit"]
    for n in range(3):
        assert (runs / "avalon" / "branches" / f"again-r{n}" / "report.json").is_file()
    # An edit that keeps the mistake (reworded, so it is a change): carried out, still
    # failing -> refuted. The recorded text itself would be not_applied (DoVer's rule 1).
    wrong = {
        **body,
        "edit": {"kind": "message", "text": "NEXT: Researcher | Look up Avalon's population"},
    }
    status = wait(client, start(client, {**wrong, "verdict": True}).json()["url"])
    assert status["verdict"] == "refuted" and status["flip_rate"] == 0.0, status
    # Without a judge the same repeats cannot be called refuted.
    client, catalog, _ = app_for(runs, upstream)
    status = wait(client, start(client, {**wrong, "verdict": True}).json()["url"])
    assert status["verdict"] == "inconclusive" and "no judge model" in status["verdict_reason"]


def test_run_n_times_sends_each_apis_live_calls_to_its_own_upstream(
    runs: Path, upstream: FakeOpenAIServer
) -> None:
    """``ReplaySettings.upstreams`` (``--api-upstream``) reaches the replays: with every
    call of --upstream answered 404, the Chat Completions calls still reach the working
    fake named for them, and the equivalent command line names it too. Without it the
    replays fail, and a failed replay is no evidence: not validated."""
    from faultfinder.testing.fake_openai import ReplyError

    def not_here(body: dict[str, Any]) -> Any:
        raise ReplyError(404, "no route for this model here")

    with FakeOpenAIServer(reply=not_here) as failing:
        body = {"trace": "", "at": 1, "edit": {"kind": "message", "text": FIX}, "repeats": 2}
        client, catalog, _ = app_for(runs, failing, upstreams={"chat": upstream.base_url})
        body["trace"] = recording_key(catalog)
        before = len(upstream.requests)
        status = wait(client, start(client, {**body, "verdict": True}).json()["url"])
        assert status["verdict"] == "validated", status
        assert len(upstream.requests) > before and failing.requests == []
        assert f"--api-upstream chat={upstream.base_url}" in status["command"]

        client, catalog, _ = app_for(runs, failing)
        status = wait(client, start(client, {**body, "verdict": True}).json()["url"])
        assert status["verdict"] == "inconclusive", status
        assert "2/2 replays are no evidence" in status["verdict_reason"]
        assert all(
            a["program_failed"] and a["success"] is None and "404" in a["error"]
            for a in status["attempts"]
        )
        assert failing.requests
        # One replay without a verdict: its answer is shown, not rated.
        status = wait(client, start(client, {**body, "repeats": 1}).json()["url"])
        assert "not rated: the program failed on its own" in status["message"], status


def test_one_job_per_recording_and_cancel_stops_the_program(
    runs: Path, upstream: FakeOpenAIServer, tmp_path: Path
) -> None:
    marker = tmp_path / "still-running"
    slow = [
        sys.executable,
        "-c",
        f"import time, pathlib\ntime.sleep(60)\npathlib.Path({str(marker)!r}).write_text('x')",
    ]
    client, catalog, _ = app_for(runs, upstream, command=slow)
    key = recording_key(catalog)
    first = start(client, {"trace": key})
    assert first.status_code == 202, first.text
    second = start(client, {"trace": key})
    assert second.status_code == 409 and "already running" in second.json()["error"]
    url = first.json()["url"]
    time.sleep(0.5)
    token = token_of(client)
    assert client.post(url + "/cancel", headers={"X-Faultfinder-Token": "no"}).status_code == 403
    assert client.post(url + "/cancel", headers={"X-Faultfinder-Token": token}).status_code == 202
    status = wait(client, url, timeout=20)
    assert status["state"] == "cancelled"
    time.sleep(0.5)
    assert not marker.exists()
    assert start(client, {"trace": key}).status_code == 202  # free again


def test_a_branch_is_the_base_of_the_next_edit(runs: Path, upstream: FakeOpenAIServer) -> None:
    client, catalog, _ = app_for(runs, upstream)
    key = recording_key(catalog)
    wrong = {"kind": "message", "text": "NEXT: Researcher | Look up the population of Avalon"}
    status = wait(client, start(client, {"trace": key, "at": 1, "edit": wrong}).json()["url"])
    first = catalog.traces[next(k for k, t in catalog.traces.items() if t.kind == "replay")]
    assert status["attempts"][0]["success"] is False
    fix = {"kind": "message", "text": FIX}
    status = wait(client, start(client, {"trace": first.key, "at": 1, "edit": fix}).json()["url"])
    assert status["state"] == "done" and status["attempts"][0]["success"] is True
    assert first.run_dir is not None
    assert (first.run_dir / "branches" / status["attempts"][0]["branch"] / "report.json").is_file()
    # Read again from disk (a restart), the tree is there.
    fresh = build_catalog([runs])
    assert len(fresh.replays) == 2
    page = TestClient(create_app(fresh), base_url=HOST).get(f"/trace/{recording_key(fresh)}").text
    tree = page.split('id="branches"', 1)[1].split("</section>", 1)[0]
    assert tree.count("<ul") == 2 and "matches the reference" in tree
    assert "its trace" in tree and "edit from here" not in tree  # read-only
    live = client.get(f"/trace/{key}").text.split('id="branches"', 1)[1]
    assert "edit from here" in live.split("</section>", 1)[0]


def test_a_planted_recording_runs_and_contacts_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    with FakeOpenAIServer(reply="planted") as canary:
        run = plant_hostile_recording(tmp_path / "runs", canary.base_url, marker)
        client, catalog, _ = app_for(run.parent, None)
        key = recording_key(catalog)
        page = client.get(f"/trace/{key}").text
        assert "<script>window.__pwned" not in page
        # The stored command is shown for reference, never as what replays run.
        note = page.split('id="recorded-command">', 1)[1].split("</p>", 1)[0]
        assert "shown for reference and never run" in note and str(marker) in note
        assert str(marker) not in page.split('id="replay-program"', 1)[1].split("</span>", 1)[0]
        status = wait(
            client,
            start(client, {"trace": key, "at": 0, "edit": {"kind": "message", "text": "x"}}).json()[
                "url"
            ],
        )
        assert status["state"] == "failed" and "--upstream" in status["message"]
        # A replay without live calls runs the program from the command line, not the
        # recorded one.
        status = wait(client, start(client, {"trace": key}).json()["url"])
        assert status["state"] == "done", status
        assert not marker.exists()
        assert canary.requests == []


def test_the_ui_command_takes_the_program_only_after_dashes(runs: Path) -> None:
    runner = CliRunner()
    cases = [
        (["ui", str(runs), "--allow-replay"], "needs the program to replay after '--'"),
        (["ui", str(runs), "--", *TEAM], "only run with --allow-replay"),
        (["ui", str(runs), "--upstream", "http://127.0.0.1:9/v1"], "--upstream only make"),
        (["ui", str(runs), "--trust-run"], "--trust-run only make"),
        (["ui", str(runs), "--api-upstream", "messages=http://127.0.0.1:9/v1"], "--api-upstream"),
        (
            ["ui", str(runs), "--host", "0.0.0.0", "--allow-replay", "--", *TEAM],
            "loopback only",
        ),
    ]
    for args, message in cases:
        result = runner.invoke(main, args)
        assert result.exit_code == 2 and message in result.output, (args, result.output)


def test_every_edit_kind_the_form_sends_is_replayed(runs: Path, upstream: FakeOpenAIServer) -> None:
    """The bodies the page's script builds for a tool call, a tool result and an
    instruction, on the Researcher's lookup (step 2) and the Orchestrator's step 1."""
    client, catalog, _ = app_for(runs, upstream)
    key = recording_key(catalog)
    lookup = client.get(f"/trace/{key}/step/2/edit").json()
    assert lookup["tool_calls"][0]["name"] == "lookup"
    assert "2023" in lookup["tool_results"][0]["content"]
    cases: list[tuple[dict[str, Any], int, bool | None]] = [
        (
            {
                "kind": "tool_call",
                "index": 0,
                "name": "lookup",
                "arguments": {"query": "the population of Avalon in 2020"},
            },
            2,
            True,
        ),
        (
            {"kind": "tool_result", "index": 0, "content": "population of Avalon in 2020: 48210"},
            2,
            True,
        ),
        ({"kind": "input", "text": "Say hello.", "mode": "append-user"}, 1, None),
    ]
    for edit, at, succeeds in cases:
        status = wait(client, start(client, {"trace": key, "at": at, "edit": edit}).json()["url"])
        assert status["state"] == "done", (edit, status)
        (attempt,) = status["attempts"]
        assert attempt["edit_applied"] is True, (edit, attempt)
        if succeeds is not None:
            assert attempt["success"] is succeeds, (edit, attempt["answer"])
        report = json.loads(
            (runs / "avalon" / "branches" / attempt["branch"] / "report.json").read_text()
        )
        assert report["edit_applied"] and report["at"] == at


def test_without_a_reference_the_verdict_is_unverifiable(
    runs: Path, upstream: FakeOpenAIServer
) -> None:
    meta_path = runs / "avalon" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["ground_truth"] = None
    meta_path.write_text(json.dumps(meta))
    client, catalog, _ = app_for(runs, upstream)
    body = {"trace": recording_key(catalog), "at": 1, "edit": {"kind": "message", "text": FIX}}
    status = wait(client, start(client, {**body, "repeats": 2, "verdict": True}).json()["url"])
    assert status["verdict"] == "unverifiable" and status["flip_rate"] is None, status
    assert status["flip_rate_ci"] is None


def test_run_n_times_replays_nothing_when_the_run_already_succeeded(
    runs: Path, upstream: FakeOpenAIServer, tmp_path: Path
) -> None:
    """DoVer's rules hold in the UI as in `verify-edit`: a recorded run that already
    passes its check has nothing to flip, so no replay runs, and the check runs once."""
    marker = tmp_path / "checks.log"
    script = tmp_path / "check.py"
    script.write_text(
        "import json, sys\n"
        f"open({str(marker)!r}, 'a').write(json.load(sys.stdin)['run_dir'] + '\\n')\n"
        "print('pass')\n"
    )
    client, catalog, _ = app_for(runs, upstream, check=f"{sys.executable} {script}")
    before = len(upstream.requests)
    body = {"trace": recording_key(catalog), "at": 1, "edit": {"kind": "message", "text": FIX}}
    status = wait(client, start(client, {**body, "repeats": 3, "verdict": True}).json()["url"])
    assert status["state"] == "done", status
    assert status["attempts"] == [] and status["verdict"] is None
    assert "already passes the success check" in status["not_replayed"]
    assert status["message"].startswith("not replayed, no verdict")
    assert len(upstream.requests) == before and not (runs / "avalon" / "branches").exists()
    # Once, and given the recording's directory, as `debug` gives it (it got '').
    (checked,) = marker.read_text().splitlines()
    assert Path(checked).resolve() == (runs / "avalon").resolve()
    (rows_file,) = (runs / "avalon" / "dover").glob("ui-*.jsonl")
    (row,) = read_rows([rows_file])
    assert row.status == "already-succeeded" and row.repeats == []


def test_progress_reads_only_complete_new_lines(tmp_path: Path) -> None:
    from faultfinder.ui.job_progress import BranchWatch

    def line(call: int, origin: str, tokens: int) -> str:
        usage = {"prompt_tokens": tokens, "completion_tokens": 0, "total_tokens": tokens}
        return json.dumps(
            {"call": call, "agent": "A", "origin": origin, "response": {"usage": usage}}
        )

    steps = tmp_path / "steps.jsonl"
    watch = BranchWatch(tmp_path)
    watch.poll()  # nothing written yet
    steps.write_text(line(0, "cached", 50) + "\n" + line(1, "edited", 0) + "\n")
    watch.poll()
    half = line(2, "live", 30)
    with steps.open("a") as handle:
        handle.write(half[:10])
    watch.poll()
    assert watch.counts() == {"replayed": 1, "edited": 1, "live": 0}
    with steps.open("a") as handle:
        handle.write(half[10:] + "\n")
    watch.poll()
    assert watch.counts() == {"replayed": 1, "edited": 1, "live": 1}
    assert watch.tokens == 30  # replayed calls cost nothing


def test_verify_edit_exits_4_when_a_replayed_program_fails(
    runs: Path, upstream: FakeOpenAIServer, tmp_path: Path
) -> None:
    edit = tmp_path / "fix.json"
    edit.write_text(json.dumps({"kind": "message", "text": FIX}))
    failing = ["sh", "-c", shlex.join(TEAM) + "; exit 1"]
    args = ["verify-edit", str(runs / "avalon"), "--at", "1", "--edit-file", str(edit)]
    args += ["--repeats", "1", "--session", "crash", "--upstream", upstream.base_url]
    result = CliRunner().invoke(main, [*args, "--", *failing])
    assert result.exit_code == 4, result.output
    assert "ran a program that failed (exit status 1" in result.output
    (row,) = read_rows([runs / "avalon" / "dover" / "crash.jsonl"])
    # The program printed the right answer and then failed: no evidence either way.
    assert row.repeats[0].program_failed and row.repeats[0].success is None
    assert row.verdict == "inconclusive" and row.failed_replays == 1
