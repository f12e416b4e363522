"""Running a program through the proxy: one recording, or one replay branch of it.

The program itself, as a child process (its environment, its output, stopping it), is
:mod:`faultfinder.replay.child`'s. What a replay may take from the run directory (its
command, its upstreams) is decided in :mod:`faultfinder.replay.trust`."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from faultfinder.errors import ConfigError, FaultfinderError
from faultfinder.redact import Redactor
from faultfinder.replay.child import ChildResult, child_env, run_child, run_redactor
from faultfinder.replay.httpserver import LOOPBACK
from faultfinder.replay.output import rescrub_file
from faultfinder.replay.proxy import Passthrough, ProxyConfig, RecordingProxy
from faultfinder.replay.recorder import (
    BRANCHES_DIR,
    REPORT_FILE,
    STEPS_FILE,
    RunMeta,
    RunStore,
    finish_meta,
    load_calls,
    new_run_id,
    read_meta,
    rebuild_trace,
    safe_child,
    utcnow,
)
from faultfinder.replay.replayer import ReplayOptions, ReplayPlan
from faultfinder.replay.report import ReplayReport
from faultfinder.replay.run_scrub import rescrub_steps
from faultfinder.replay.trust import (
    replay_upstream,
    replay_upstreams,
    require_api_upstreams,
    require_upstream,
    stored_command_note,
)
from faultfinder.traces.schema import Trace


class SessionOptions(BaseModel):
    """How the program is run and where the proxy listens."""

    model_config = ConfigDict(extra="forbid")

    api_key_env: str | None = None
    """Environment variable with the upstream key (default: forward the program's key)."""
    host: str = LOOPBACK
    """Interface the proxy binds."""
    port: int = Field(default=0, ge=0, le=65535)
    """Port the proxy binds (0: any free port)."""
    stream_usage: bool = True
    """Ask streamed upstream replies for usage (see ProxyConfig.stream_usage)."""
    echo: bool = True
    """Pass the program's output through to this terminal as well as to the run files."""
    timeout: float | None = Field(default=None, gt=0)
    """Stop the program after this many seconds (None: wait for it)."""
    cwd: str | None = None
    """Working directory for the program (default: the current one)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables for the program."""
    upstreams: dict[str, str] = Field(default_factory=dict)
    """Per-API upstreams by adapter name (see ProxyConfig.upstreams)."""


class RunOutcome(BaseModel):
    """A finished recording; its meta as ``meta.json`` holds it, free of secrets."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    run_dir: Path
    meta: RunMeta
    trace: Trace
    child: ChildResult


class ReplayOutcome(BaseModel):
    """A finished replay branch; its meta and report as ``meta.json`` and ``report.json``
    hold them, free of secrets."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    branch_dir: Path
    meta: RunMeta
    report: ReplayReport
    trace: Trace
    child: ChildResult


def rescrub_run(directory: Path, redactor: Redactor) -> None:
    """Once a run has ended: scrub what the proxy wrote (the steps, the replay report)
    with everything the redactor learned during the run. The program's output is scrubbed
    again where it is written, by :func:`~faultfinder.replay.child.run_child`, as soon as
    the program ends."""
    rescrub_steps(directory / STEPS_FILE, redactor)
    rescrub_file(directory / REPORT_FILE, redactor)


async def record_run(
    command: list[str],
    upstream: str,
    out: str | Path,
    *,
    run_id: str | None = None,
    task: str | None = None,
    ground_truth: str | None = None,
    reference_steps: list[str] | None = None,
    system: str | None = None,
    options: SessionOptions | None = None,
) -> RunOutcome:
    """Run ``command`` with its model calls recorded into ``out/<run-id>/``.

    ``trace.json`` and ``meta.json`` are written even when the program fails.
    """
    if not command:
        raise ConfigError("Give the program to record after '--', e.g. -- python my_team.py")
    options = options or SessionOptions()
    try:
        run_dir = safe_child(Path(out), run_id or new_run_id())
    except ValueError as exc:
        raise ConfigError(f"--run-id: {exc}") from None
    if (run_dir / "steps.jsonl").exists():
        raise ConfigError(f"{run_dir} already holds a recording; choose another --run-id.")
    redactor = run_redactor(list(command), options.env)
    store = RunStore(run_dir, redactor)
    meta = RunMeta(
        run_id=run_dir.name,
        command=list(command),
        cwd=str(Path(options.cwd or os.getcwd()).resolve()),
        upstream=upstream,
        upstreams=dict(options.upstreams),
        started_at=utcnow(),
        task=task,
        ground_truth=ground_truth,
        reference_steps=list(reference_steps or []),
        system=system,
    )
    store.write_meta(meta)
    # Created up front: a program that makes no model call still leaves a recording
    # (of no step) that replay, the UI and the CLI recognise.
    store.steps_path.touch()
    config = ProxyConfig(
        upstream=upstream,
        upstreams=options.upstreams,
        api_key_env=options.api_key_env,
        host=options.host,
        port=options.port,
        stream_usage=options.stream_usage,
    )
    child = ChildResult(exit_code=None)
    proxy: RecordingProxy | None = None
    try:
        async with RecordingProxy(config, store) as proxy:
            meta.proxy_url = proxy.url
            store.write_meta(meta)
            env = child_env(proxy.base_url, proxy.url, run_dir, options.env)
            child = await run_child(
                command, env, run_dir, options, redactor=redactor, rescrub=store.rescrub
            )
    finally:
        meta.ended_at = utcnow()
        meta.exit_code = child.exit_code
        meta.killed = child.killed
        meta.timed_out = child.timed_out
        meta.failed_calls = store.failed
        if proxy is not None:
            meta.unrecorded = count_requests(proxy.passthrough)
        finish_meta(meta, child.stdout)
        store.write_meta(meta)
        rescrub_run(run_dir, redactor)
        trace = rebuild_trace(run_dir)
    # The meta as meta.json holds it: the one built here may quote a secret (a key in the
    # path of a request that is not a model call, learned from its headers).
    return RunOutcome(run_dir=run_dir, meta=read_meta(run_dir), trace=trace, child=child)


def count_requests(requests: list[Passthrough]) -> dict[str, int]:
    """'METHOD path' -> how many times, in first-seen order."""
    counts: dict[str, int] = {}
    for request in requests:
        key = f"{request.method} {request.path}"
        counts[key] = counts.get(key, 0) + 1
    return counts


async def replay_run(
    run_dir: str | Path,
    command: list[str] | None,
    replay: ReplayOptions,
    *,
    upstream: str | None = None,
    trust_run: bool = False,
    branch_id: str | None = None,
    options: SessionOptions | None = None,
) -> ReplayOutcome:
    """Re-run ``command`` against the recording of ``run_dir``.

    Nothing read from the run directory is executed or contacted: ``command`` must be
    given (the recorded one is shown in the error for reference), the program runs in
    ``options.cwd`` or the current directory, and live calls go to ``upstream`` and
    ``options.upstreams`` only (the recorded ones only with ``trust_run``); an API the
    recording sent to an upstream of its own is never sent to another one's instead.
    The branch is written to ``run_dir/branches/<branch-id>/`` with its own steps,
    trace, meta and ``report.json``.
    """
    run_dir = Path(run_dir)
    parent = read_meta(run_dir)
    calls = load_calls(run_dir, include_failed=True)  # the plan names failed ones
    if not command:
        raise ConfigError(
            f"{run_dir}: give the program to replay after '--' ({stored_command_note(parent)})."
        )
    command = list(command)
    upstream_named = bool(upstream)
    upstream = replay_upstream(parent, upstream, trust_run)
    options = options or SessionOptions()
    upstreams = replay_upstreams(parent, options.upstreams, trust_run)
    try:
        plan = ReplayPlan(calls, replay)
    except ValueError as exc:
        raise ConfigError(f"{run_dir}: {exc}") from None
    # From step ``at`` on the program runs live, and policy 'live' may go live anywhere.
    if replay.on_divergence == "live" or replay.at is not None:
        require_upstream(parent, upstream)
        require_api_upstreams(parent, upstream, upstreams)
    try:
        branch_dir = safe_child(run_dir / BRANCHES_DIR, branch_id or new_run_id("b"))
    except ValueError as exc:
        raise ConfigError(f"--branch-id: {exc}") from None
    if (branch_dir / "steps.jsonl").exists():
        raise ConfigError(f"{branch_dir} already exists; choose another --branch-id.")
    redactor = run_redactor(command, options.env)
    store = RunStore(branch_dir, redactor)
    meta = RunMeta(
        run_id=branch_dir.name,
        kind="branch",
        command=command,
        cwd=options.cwd,
        upstream=upstream,
        upstreams=upstreams,
        started_at=utcnow(),
        task=parent.task,
        ground_truth=parent.ground_truth,
        reference_steps=parent.reference_steps,
        system=parent.system,
        # Absolute, as FAULTFINDER_RUN_DIR is: the program may run in another directory.
        parent=str(run_dir.resolve()),
        replay=replay.model_dump(mode="json", exclude_none=True),
    )
    store.write_meta(meta)
    config = ProxyConfig(
        # With no upstream every call must come from the recording; a live call is refused
        # without any connection.
        upstream=upstream,
        upstreams=upstreams,
        # Requests that are not model calls go only to an upstream the user named.
        passthrough=upstream_named,
        api_key_env=options.api_key_env,
        host=options.host,
        port=options.port,
        stream_usage=options.stream_usage,
    )
    child = ChildResult(exit_code=None)
    try:
        async with RecordingProxy(config, store, plan) as proxy:
            meta.proxy_url = proxy.url
            env = child_env(proxy.base_url, proxy.url, branch_dir, options.env)
            child = await run_child(
                command, env, branch_dir, options, proxy.stop_requested, redactor, store.rescrub
            )
    finally:
        report = plan.finish()
        report.note_program(child.exit_code, child.killed, child.timed_out)
        clean = redactor.data(report.model_dump(mode="json"))
        (branch_dir / REPORT_FILE).write_text(
            json.dumps(clean, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        meta.ended_at = utcnow()
        meta.exit_code = child.exit_code
        meta.killed = child.killed
        meta.timed_out = child.timed_out
        finish_meta(meta, child.stdout)
        store.write_meta(meta)
        rescrub_run(branch_dir, redactor)
        trace = rebuild_trace(branch_dir)
    # What the replay's callers print and write: no secret it learned.
    return ReplayOutcome(
        branch_dir=branch_dir,
        meta=read_meta(branch_dir),
        report=read_report(branch_dir),
        trace=trace,
        child=child,
    )


def read_report(branch_dir: Path) -> ReplayReport:
    """A branch's report as its ``report.json`` holds it, scrubbed of every secret the
    replay learned. The report the replay built may quote one (a key the program put in a
    request's path, learned from that request's headers), and what a replay returns is
    written and printed by its callers (DoVer's rows, ``verify-edit``, the UI)."""
    text = (branch_dir / REPORT_FILE).read_text(encoding="utf-8")
    return ReplayReport.model_validate_json(text)


def run_sync(coro: Any) -> Any:
    """Run a session coroutine from synchronous code (the CLI)."""
    try:
        return asyncio.run(coro)
    except KeyboardInterrupt:
        raise FaultfinderError("Interrupted; what was recorded so far is in steps.jsonl.") from None
