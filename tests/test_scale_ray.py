"""The Ray executor on a real local Ray cluster: same rows as local, shared limits, faults.

The cluster is started once for the module with two CPUs. Where Ray is not installed the
tests skip with the reason, except in CI, which installs the [ray] extra and must run them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from faultfinder.eval.cases import MethodPlan, plan_methods
from faultfinder.eval.datasets import DatasetOptions, load_dataset
from faultfinder.eval.rows import read_rows
from faultfinder.eval.runner import EvalOptions, run_eval
from faultfinder.llm.spec import LLMSpec
from faultfinder.usage import Budget

TESTS = Path(__file__).parent
FIXTURE = TESTS / "fixtures" / "eval" / "traces.jsonl"
PROBES = TESTS / "fixtures" / "replay"
MODEL = "function:ray_doubles:content_model"
VOLATILE = {"created_at", "wall_time_s"}


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    try:
        import ray
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("Ray is not installed: pip install 'faultfinder[ray]'")
    from faultfinder.scale.cluster import connect

    # Workers import the test doubles from tests/, as they would a user's model module.
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), previous) if p)
    try:
        connect(None, num_cpus=2)
    except Exception as exc:  # pragma: no cover - depends on the machine
        if os.environ.get("CI"):
            raise
        pytest.skip(f"a local Ray cluster could not start here: {exc}")
    finally:
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous
    yield ray
    ray.shutdown()


def pick(label: str = "pick", **config: Any) -> MethodPlan:
    from ray_doubles import PickConfig, PickMethod

    return MethodPlan(label=label, cls=PickMethod, config=PickConfig(**config))


def traces() -> list[Any]:
    return load_dataset(str(FIXTURE), DatasetOptions(labelled_only=False))


def stable(rows: list[Any]) -> dict[str, dict[str, Any]]:
    """Rows by key without the fields that differ between any two runs (time)."""
    return {
        row.key: {k: v for k, v in row.model_dump(mode="json").items() if k not in VOLATILE}
        for row in rows
    }


def ray_run(
    spec: LLMSpec, plans: list[MethodPlan], out: Path, concurrency: int = 4, **options: Any
) -> Any:
    from faultfinder.scale.ray_eval import RayExecutor

    executor = RayExecutor(spec, spec.build().name, concurrency=concurrency, workers=2)
    opts = EvalOptions(concurrency=concurrency, progress=False, **options)
    try:
        outcome = asyncio.run(run_eval(traces(), plans, None, out, opts, executor=executor))
        return outcome, executor.usage_snapshot()
    finally:
        executor.close()


def test_ray_rows_equal_local_rows(ray_cluster: Any, tmp_path: Path) -> None:
    spec = LLMSpec(model=MODEL)
    plans = [pick(calls=2), *plan_methods(["random"])]
    local = asyncio.run(
        run_eval(
            traces(),
            plans,
            spec.build(),
            tmp_path / "local.jsonl",
            EvalOptions(runs=2, concurrency=4, progress=False),
        )
    )
    remote, _ = ray_run(spec, plans, tmp_path / "ray.jsonl", runs=2)
    assert remote.planned == local.planned == 6 * 2 * 2
    assert remote.ran == local.ran == remote.planned
    assert stable(remote.rows) == stable(local.rows)
    # The model was really called on the workers: two calls per 'pick' case.
    assert sum(r.usage.calls for r in remote.rows if r.method == "pick") == 6 * 2 * 2


def test_shared_budget_holds_across_workers(ray_cluster: Any, tmp_path: Path) -> None:
    spec = LLMSpec(model=MODEL, budget=Budget(max_calls=5))
    outcome, ledger = ray_run(spec, [pick(calls=2)], tmp_path / "out.jsonl", concurrency=4)
    # Two workers, four cases at once, one budget: never more than five calls in all.
    assert ledger["calls"] <= 5
    assert sum(r.usage.calls for r in outcome.rows) == ledger["calls"]
    assert any(r.status == "budget-exceeded" for r in outcome.rows)
    assert outcome.stopped is not None


def test_shared_rate_limit_spaces_requests(ray_cluster: Any, tmp_path: Path) -> None:
    spec = LLMSpec(model=MODEL, rate_limit=10.0)
    started = time.perf_counter()
    outcome, ledger = ray_run(spec, [pick(calls=2)], tmp_path / "out.jsonl", concurrency=6)
    elapsed = time.perf_counter() - started
    assert ledger["calls"] == 12
    # Twelve requests at ten a second across both workers: at least 1.1 s of spacing.
    assert elapsed >= 1.1
    assert all(r.status == "ok" for r in outcome.rows)


def test_killed_worker_loses_and_duplicates_nothing(ray_cluster: Any, tmp_path: Path) -> None:
    from faultfinder.scale.ray_eval import RayExecutor

    spec = LLMSpec(model=MODEL)
    out = tmp_path / "out.jsonl"
    executor = RayExecutor(spec, spec.build().name, concurrency=4, workers=2)
    executor.start()
    victim = ray_cluster.get(executor.pool[0].pid.remote())

    async def main() -> Any:
        job = asyncio.ensure_future(
            run_eval(
                traces(),
                [pick(calls=1, delay=0.4)],
                None,
                out,
                EvalOptions(runs=3, concurrency=4, progress=False),
                executor=executor,
            )
        )
        await asyncio.sleep(0.6)  # cases are in flight on both workers
        os.kill(victim, signal.SIGKILL)
        return await job

    try:
        outcome = asyncio.run(main())
    finally:
        executor.close()
    keys = Counter(json.loads(line)["key"] for line in out.read_text().split("\n") if line)
    assert len(keys) == outcome.planned == 18
    assert set(keys.values()) == {1}
    assert all(r.status == "ok" for r in outcome.rows), [r.error for r in outcome.rows]


def cli_eval(out: Path, *extra: str, delay: float = 0.0) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), env.get("PYTHONPATH")) if p)
    env["FF_TEST_MODEL_DELAY"] = str(delay)
    command = [
        sys.executable, "-m", "faultfinder", "eval", str(FIXTURE),
        "--method", "all-at-once,random", "--model", "function:ray_doubles:first_speaker_model",
        "--cache", "none", "--out", str(out), "--executor", "ray", "--no-progress", *extra,
    ]  # fmt: skip
    # A session of its own: what a driver killed outright leaves behind (Ray's agents) is
    # found by it and stopped, not left running after the tests.
    return subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def slow_eval_with_rows(out: Path) -> subprocess.Popen[str]:
    """An eval on Ray with a slow model (30 cases), once it has written a few rows and
    has cases still to run."""
    driver = cli_eval(out, "--runs", "3", "--parallel-cases", "2", delay=0.3)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and driver.poll() is None:
        if out.exists() and len(out.read_text().split("\n")) > 3:
            break
        time.sleep(0.1)
    assert driver.poll() is None, driver.communicate()
    return driver


@pytest.mark.slow
def test_cli_eval_on_ray_then_resume_after_driver_kill(tmp_path: Path) -> None:
    pytest.importorskip("ray") if not os.environ.get("CI") else None
    out = tmp_path / "results.jsonl"
    # A slow model, so the driver is killed with cases still to run.
    driver = slow_eval_with_rows(out)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    time.sleep(1)  # Ray's own processes see their driver gone; its agents stay: stop them
    for pid in _session_processes(driver.pid):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    before = [r.key for r in read_rows(out, repair=True)]
    assert 0 < len(before) < 30  # 5 labelled traces × 2 methods × 3 runs

    resumed = cli_eval(out, "--runs", "3", "--resume")
    stdout, stderr = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, stderr
    keys = Counter(r.key for r in read_rows(out, repair=True))
    assert len(keys) == 30 and set(keys.values()) == {1}
    assert "all-at-once" in stdout and "random" in stdout


def test_debug_runs_each_replay_on_a_ray_worker(ray_cluster: Any, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from faultfinder.cli import main
    from faultfinder.demo_team import mock_model
    from faultfinder.testing import FakeOpenAIServer

    runner = CliRunner()
    team = [sys.executable, "-m", "faultfinder.demo_team", "--quiet", "--task-id", "avalon-2020"]
    debugger = [
        "--model",
        "function:faultfinder.demo_team.mock_debugger:respond",
        "--cache",
        "none",
    ]
    with FakeOpenAIServer(reply=mock_model.reply) as upstream:
        recorded = runner.invoke(
            main,
            [
                "record", "--upstream", upstream.base_url, "--out", str(tmp_path / "runs"),
                "--run-id", "avalon", "--ground-truth", "144630", "--quiet", "--", *team,
            ],
        )  # fmt: skip
        assert recorded.exit_code == 0, recorded.output
        run = tmp_path / "runs" / "avalon"
        out = tmp_path / "dover.jsonl"
        debugged = runner.invoke(
            main,
            [
                "debug", str(run), "--repeats", "2", "--segment", "pattern:^PLAN",
                "--upstream", upstream.base_url, "--out", str(out), "--executor", "ray",
                *debugger, "--", *team,
            ],
        )  # fmt: skip
        assert debugged.exit_code == 0, debugged.output
        assert "-> validated (2/2 runs succeeded)" in debugged.output

        # The same replay through the executor's API: it ran in another process.
        from faultfinder.dover.models import Intervention
        from faultfinder.dover.replays import ReplayExecutor
        from faultfinder.replay.session import SessionOptions
        from faultfinder.scale.ray_debug import RayReplayExecutor

        fix = "NEXT: Researcher | Look up the population of Avalon in 2020"
        on_ray = RayReplayExecutor(
            ReplayExecutor(
                run, team, upstream=upstream.base_url, options=SessionOptions(echo=False)
            )
        )
        intervention = Intervention(
            step=1,
            agent="Orchestrator",
            original="",
            replacement=fix,
            category="modified_instruction",
        )
        outcome = asyncio.run(on_ray.run(intervention, "api-branch", {}))
        assert outcome.report.edit_applied and outcome.trace.final_answer == "144630"
        assert on_ray.worker_pids and os.getpid() not in on_ray.worker_pids
    [row] = [json.loads(line) for line in out.read_text().split("\n") if line]
    branches = sorted(b for b in (run / "branches").iterdir() if b.name != "api-branch")
    assert sorted(Path(r["branch"]) for r in row["repeats"]) == branches
    for branch in branches:
        # Written here by the driver from what the worker sent back.
        meta = json.loads((branch / "meta.json").read_text())
        assert meta["parent"] == str(run) and (branch / "steps.jsonl").stat().st_size > 0
        assert json.loads((branch / "report.json").read_text())["edit_applied"] is True


def test_a_ray_replay_writes_no_secret_of_the_run_into_the_branch_meta(
    ray_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver writes the branch's meta.json again (its parent is this run, not the
    worker's scratch copy). Secrets of the run (values of its environment, which the
    command quotes under names that say nothing) must be scrubbed from it as a local
    replay scrubs them: those the worker knows (the replay's own environment), which must
    not come back through Ray in the outcome either, and those only the driver knows (its
    environment: the workers were started before it was set)."""
    from faultfinder.demo_team import mock_model
    from faultfinder.dover.models import Intervention
    from faultfinder.dover.replays import ReplayExecutor
    from faultfinder.replay.session import SessionOptions, record_run
    from faultfinder.scale.ray_debug import RayReplayExecutor
    from faultfinder.testing import FakeOpenAIServer

    secret, driver_secret = "q7Vd2kLm9XpR4tWz8NcB", "Hs3Kw8PzTq1Ye6RbVn0M"
    monkeypatch.setenv("DRIVER_ONLY_TOKEN", driver_secret)
    team = [sys.executable, "-m", "faultfinder.demo_team", "--quiet", "--task-id", "avalon-2020"]
    quoting = ["env", f"TEAM_SETTING={secret}", f"OTHER_SETTING={driver_secret}", *team]
    with FakeOpenAIServer(reply=mock_model.reply) as upstream:
        options = SessionOptions(echo=False)
        recorded = asyncio.run(
            record_run(team, upstream.base_url, tmp_path / "runs", run_id="avalon", options=options)
        )
        run = recorded.run_dir
        options = SessionOptions(echo=False, env={"TEAM_API_KEY": secret})
        on_ray = RayReplayExecutor(
            ReplayExecutor(run, quoting, upstream=upstream.base_url, options=options)
        )
        fix = "NEXT: Researcher | Look up the population of Avalon in 2020"
        intervention = Intervention(
            step=1,
            agent="Orchestrator",
            original="",
            replacement=fix,
            category="modified_instruction",
        )
        outcome = asyncio.run(on_ray.run(intervention, "quoting", {}))
    assert outcome.report.edit_applied
    text = (run / "branches" / "quoting" / "meta.json").read_text()
    assert json.loads(text)["parent"] == str(run) and "TEAM_SETTING=" in text
    assert secret not in text
    assert driver_secret not in text
    assert secret not in outcome.meta.model_dump_json()


def test_debug_on_ray_says_why_a_replay_could_not_run(ray_cluster: Any, tmp_path: Path) -> None:
    """A program that does not exist on the worker: the CLI output and the row give the
    reason the local executor gives, word for word (not the worker's traceback)."""
    from click.testing import CliRunner

    from faultfinder.cli import main
    from faultfinder.demo_team import mock_model
    from faultfinder.dover.models import DoverRow
    from faultfinder.testing import FakeOpenAIServer

    runner = CliRunner()
    team = [sys.executable, "-m", "faultfinder.demo_team", "--quiet", "--task-id", "avalon-2020"]
    missing = str(tmp_path / "no-such-program")
    debugger = ["--model", "function:faultfinder.demo_team.mock_debugger:respond"]
    with FakeOpenAIServer(reply=mock_model.reply) as upstream:
        recorded = runner.invoke(
            main,
            ["record", "--upstream", upstream.base_url, "--out", str(tmp_path / "runs"),
             "--run-id", "avalon", "--ground-truth", "144630", "--quiet", "--", *team],
        )  # fmt: skip
        assert recorded.exit_code == 0, recorded.output
        results = {}
        for executor in ("local", "ray"):
            out = tmp_path / f"{executor}.jsonl"
            result = runner.invoke(
                main,
                ["debug", str(tmp_path / "runs" / "avalon"), "--repeats", "2", "--segment",
                 "none", "--upstream", upstream.base_url, "--out", str(out), "--executor",
                 executor, *debugger, "--cache", "none", "--", missing],
            )  # fmt: skip
            (row,) = [DoverRow.model_validate_json(line) for line in out.read_text().splitlines()]
            results[executor] = (result, row)
    (local, local_row), (remote, remote_row) = results["local"], results["ray"]
    reason = f"the replay could not run: Cannot run '{missing}'"
    assert local.exit_code == remote.exit_code == 1, remote.output
    assert f"exit 1: of 2 replays, 2 could not run ({reason}" in remote.stderr
    assert remote.stderr.splitlines()[-1] == local.stderr.splitlines()[-1]
    assert "ray::" not in remote.output and "Traceback" not in remote.output
    for row in (local_row, remote_row):
        assert row.verdict == "inconclusive" and row.failed_replays == 2
        assert all(not r.ran and (r.error or "").startswith(reason) for r in row.repeats)
    assert [r.error for r in remote_row.repeats] == [r.error for r in local_row.repeats]
    assert remote_row.verdict_reason == local_row.verdict_reason


def test_eval_on_ray_says_why_a_worker_could_not_run_a_case(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """A model module missing on the workers: the run stops with the error a local run
    gives (not 'the actor died in its creation task', restarted to fail again, written as
    'Ray worker lost' rows)."""
    from faultfinder.errors import ConfigError
    from faultfinder.scale.ray_eval import RayExecutor

    spec = LLMSpec(model="function:no_such_module_on_workers:respond")
    with pytest.raises(ConfigError) as local:
        spec.build()
    executor = RayExecutor(spec, "function:no_such_module_on_workers:respond", workers=1)
    out = tmp_path / "out.jsonl"
    try:
        with pytest.raises(ConfigError) as remote:
            asyncio.run(
                run_eval(
                    traces(),
                    [pick()],
                    None,
                    out,
                    EvalOptions(concurrency=2, progress=False),
                    executor=executor,
                )
            )
    finally:
        executor.close()
    assert str(remote.value) == f"{local.value} (on a Ray worker)"
    assert "no module named 'no_such_module_on_workers'" in str(remote.value)
    assert read_rows(out, repair=True) == []


def test_eval_on_ray_stops_at_the_first_refused_key(ray_cluster: Any, tmp_path: Path) -> None:
    """A 401 on a worker stops the run as a local run stops (a ConfigError saying what to
    fix, no row for the refused case), not as one 'Ray worker lost' row per case."""
    from faultfinder.errors import ConfigError
    from faultfinder.scale.ray_eval import RayExecutor
    from faultfinder.testing.fake_openai import FakeOpenAIServer, ReplyError

    refused: list[int] = []

    def refuse(body: dict[str, Any]) -> str:
        refused.append(401)
        raise ReplyError(401, "Incorrect API key provided")

    out = tmp_path / "out.jsonl"
    with FakeOpenAIServer(refuse) as upstream:
        spec = LLMSpec(model="openai:m", base_url=upstream.base_url)
        executor = RayExecutor(spec, spec.build().name, concurrency=1, workers=1)
        try:
            with pytest.raises(ConfigError, match="HTTP 401") as stopped:
                asyncio.run(
                    run_eval(
                        traces(),
                        plan_methods(["all-at-once"]),
                        None,
                        out,
                        EvalOptions(concurrency=1, progress=False),
                        executor=executor,
                    )
                )
        finally:
            executor.close()
    assert "Check the API key" in str(stopped.value) and "--resume" in str(stopped.value)
    assert refused == [401]
    assert read_rows(out, repair=True) == []


def test_a_ray_replay_sends_back_no_secret_of_the_run_in_its_report(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """The replay's report comes back through Ray in the outcome, which DoVer reads (the
    live calls a failed program made go into its rows and output): it must be scrubbed of
    every secret the worker's replay learned, as the branch's report.json is. Here the
    program reads a key from a file the driver never sees and sends it in a request's
    headers and path: only the worker's proxy learns it."""
    from faultfinder.demo_team import mock_model
    from faultfinder.dover.models import Intervention
    from faultfinder.dover.replays import ReplayExecutor
    from faultfinder.dover.verdict import program_failure
    from faultfinder.replay.session import SessionOptions, record_run
    from faultfinder.scale.ray_debug import RayReplayExecutor
    from faultfinder.testing import FakeOpenAIServer

    secret = "Zp4Lx9Qe2Wm7Tc5Rv8Hn"
    (tmp_path / "key.txt").write_text(secret)
    program = [sys.executable, str(PROBES / "keyed_client.py"), str(tmp_path / "key.txt")]
    team = [sys.executable, "-m", "faultfinder.demo_team", "--quiet", "--task-id", "avalon-2020"]
    with FakeOpenAIServer(reply=mock_model.reply) as upstream:
        options = SessionOptions(echo=False)
        recorded = asyncio.run(
            record_run(team, upstream.base_url, tmp_path / "runs", run_id="avalon", options=options)
        )
        run = recorded.run_dir
        on_ray = RayReplayExecutor(
            ReplayExecutor(run, program, upstream=upstream.base_url, options=options)
        )
        intervention = Intervention(
            step=1,
            agent="Orchestrator",
            original="",
            replacement="NEXT: Researcher | Look up the population of Avalon in 2020",
            category="modified_instruction",
        )
        outcome = asyncio.run(on_ray.run(intervention, "keyed", {}))
    report = outcome.report
    assert report.program_failed and [c.method for c in report.live + report.blocked] == ["GET"]
    assert secret not in (run / "branches" / "keyed" / "report.json").read_text()
    assert secret not in report.model_dump_json()
    assert secret not in program_failure(report)


def test_a_ray_replay_writes_no_secret_of_the_driver_into_any_branch_file(
    ray_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A secret only the driver's environment holds (set after the workers started),
    which the program quotes under a name that says nothing, is scrubbed from every file
    of the branch and from the outcome, as a local replay scrubs it: the program prints
    it, sends it to the model and in the path of a request that is not a model call."""
    from faultfinder.dover.models import Intervention
    from faultfinder.dover.replays import ReplayExecutor
    from faultfinder.replay.session import SessionOptions, record_run
    from faultfinder.scale.ray_debug import RayReplayExecutor
    from faultfinder.testing import FakeOpenAIServer

    driver_secret = "Wd5Nq2Xc8Lp3Kt7Hy1Gv"
    monkeypatch.setenv("DRIVER_ONLY_TOKEN", driver_secret)
    program = [sys.executable, str(PROBES / "quoting_client.py")]
    quoting = ["env", f"OTHER_SETTING={driver_secret}", *program]
    options = SessionOptions(echo=False)
    with FakeOpenAIServer(reply="4") as upstream:
        recorded = asyncio.run(
            record_run(program, upstream.base_url, tmp_path / "runs", options=options)
        )
        on_ray = RayReplayExecutor(
            ReplayExecutor(recorded.run_dir, quoting, upstream=upstream.base_url, options=options)
        )
        edit = Intervention(
            step=0, agent="assistant", original="", replacement="5", category="plan_update"
        )
        outcome = asyncio.run(on_ray.run(edit, "quoted", {}))
        sent = [r.path for r in upstream.requests] + [json.dumps(r.body) for r in upstream.requests]
    assert sum(driver_secret in s for s in sent) == 2  # the program really quoted it
    assert outcome.report.edit_applied and outcome.trace.final_answer == "5"
    branch = recorded.run_dir / "branches" / "quoted"
    names = sorted(p.name for p in branch.iterdir())
    assert names == [
        "meta.json", "report.json", "stderr.txt", "stdout.txt", "steps.jsonl", "trace.json"
    ]  # fmt: skip
    for name in names:
        text = (branch / name).read_text()
        assert driver_secret not in text, name
        if name != "meta.json":  # the command is cut at the program's secret arguments
            assert "[REDACTED]" in text, name
    assert json.loads((branch / "trace.json").read_text())["metadata"]["run_dir"] == str(branch)
    assert driver_secret not in outcome.model_dump_json()


def _session_processes(sid: int, name: str | None = None) -> list[int]:
    """Live (not zombie) processes of session ``sid`` (named ``name``, if given)."""
    found: list[int] = []
    if not Path("/proc").is_dir():  # no /proc to look in (macOS): nothing found
        return found
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[3]) == sid and name in (None, comm):
            found.append(int(entry.name))
    return found


def assert_no_ray_process_outlives(driver: subprocess.Popen[str]) -> None:
    """Within 15 s of the driver's exit, no process of its session is left."""
    deadline = time.monotonic() + 15
    while _session_processes(driver.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _session_processes(driver.pid) == [], "Ray processes outlived the eval"


def stop_session(driver: subprocess.Popen[str]) -> None:
    """Whatever a failed test left of the driver's session, killed."""
    for pid in _session_processes(driver.pid):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if driver.poll() is None:
        driver.kill()
        driver.wait()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads processes from /proc")
def test_sigterm_on_ray_exits_143_leaves_no_ray_process_and_resumes(tmp_path: Path) -> None:
    """Ray's own SIGTERM handler made eval exit 15 (a code with no meaning in
    docs/exit-codes.md) after its core worker printed a stack dump; a script stopping a
    batch with SIGTERM (a scheduler, `timeout`) now sees 143, as without Ray."""
    pytest.importorskip("ray") if not os.environ.get("CI") else None
    out = tmp_path / "results.jsonl"
    driver = slow_eval_with_rows(out)
    try:
        driver.send_signal(signal.SIGTERM)
        stderr = driver.communicate(timeout=120)[1]
        assert driver.returncode == 143, stderr
        assert "SIGTERM received" not in stderr and "Traceback" not in stderr, stderr
        # Said as without Ray, once the cluster is shut down: the rows stay, --resume.
        assert f"Terminated (SIGTERM). Finished cases are saved in {out}" in stderr, stderr
        assert_no_ray_process_outlives(driver)
    finally:
        stop_session(driver)
    before = [r.key for r in read_rows(out)]
    assert 0 < len(before) < 30

    resumed = cli_eval(out, "--runs", "3", "--resume")
    stderr = resumed.communicate(timeout=300)[1]
    assert resumed.returncode == 0, stderr
    # No error line from Ray's core worker on a run that went well (an actor handle among
    # the workers' constructor arguments printed one per worker: ray-project/ray#53727).
    assert "core_worker" not in stderr, stderr
    keys = Counter(r.key for r in read_rows(out))
    assert len(keys) == 30 and set(keys.values()) == {1}


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads processes from /proc")
def test_ctrl_c_while_the_local_cluster_starts_leaves_no_ray_process(tmp_path: Path) -> None:
    """Ctrl-C inside ray.init used to leave Ray's dashboard and runtime-env agents running
    after eval exited (docs/scale.md: Ctrl-C shuts the cluster down cleanly)."""
    pytest.importorskip("ray") if not os.environ.get("CI") else None
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p
    ))  # fmt: skip
    command = [
        sys.executable, "-m", "faultfinder", "eval", str(FIXTURE), "--method", "random",
        "--out", str(tmp_path / "r.jsonl"), "--executor", "ray", "--no-progress",
    ]  # fmt: skip
    driver = subprocess.Popen(
        command, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while not _session_processes(driver.pid, "raylet") and driver.poll() is None:
            assert time.monotonic() < deadline, "the local cluster did not start"
            time.sleep(0.05)
        time.sleep(0.3)  # ray.init is still starting the node (its agents come next)
        driver.send_signal(signal.SIGINT)
        rest = driver.communicate(timeout=120)[1]
        assert driver.returncode == 1, rest
        assert "Interrupted" in rest
        assert_no_ray_process_outlives(driver)
    finally:
        stop_session(driver)
