"""`faultfinder proxy` and `faultfinder serve-local`: long-running servers on loopback
(see docs/replay.md and docs/security.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal
from pathlib import Path
from typing import Any

import click

from faultfinder.cli.common import PORT, STEP, URL, build_llm, model_options, pass_errors
from faultfinder.cli.handling import InputPath
from faultfinder.cli.proxy_options import (
    choose_upstream,
    proxy_options,
    run_dir_in,
    warn_if_exposed,
)
from faultfinder.cli.replay_cmd import replay_options, report_lines, warn_dropped_calls
from faultfinder.cli.terminal import plural, safe
from faultfinder.errors import ConfigError
from faultfinder.loopback import past_http_proxy
from faultfinder.replay.child import api_env, run_env, run_redactor
from faultfinder.replay.httpserver import LOOPBACK
from faultfinder.replay.proxy import ProxyConfig, RecordingProxy
from faultfinder.replay.recorder import (
    BRANCHES_DIR,
    REPORT_FILE,
    RunMeta,
    RunStore,
    load_calls,
    new_run_id,
    read_meta,
    rebuild_trace,
    utcnow,
)
from faultfinder.replay.replayer import ReplayPlan
from faultfinder.replay.session import rescrub_run, run_sync
from faultfinder.replay.trust import replay_upstream, replay_upstreams, require_api_upstreams


@click.command()
@click.option(
    "--upstream",
    default=None,
    type=URL,
    help="Model endpoint to forward to (recording mode: required).",
)
@click.option(
    "-o", "--out", default="runs", show_default=True, help="Directory for runs/<run-id>/."
)
@click.option("--run-id", default=None, help="Name of the run directory inside --out.")
@click.option(
    "--replay",
    "replay_dir",
    type=InputPath(file_okay=False),
    default=None,
    help="Serve a replay of this run instead of recording a new one.",
)
@click.option(
    "--trust-run",
    is_flag=True,
    help="Replay: send live calls (and your key) to the upstream named in the run directory.",
)
@click.option("--at", type=STEP, default=None, help="Replay: step from which to go live.")
@click.option(
    "--edit",
    default=None,
    help="Replay: replacement output of step --at (its recorded tool calls dropped).",
)
@click.option("--edit-input", default=None, help="Replay: replacement instruction for step --at.")
@proxy_options
@pass_errors
def proxy(
    upstream: str | None,
    out: str,
    run_id: str | None,
    replay_dir: str | None,
    trust_run: bool,
    at: int | None,
    edit: str | None,
    edit_input: str | None,
    api_key_env: str | None,
    api_upstream: dict[str, str],
    host: str,
    port: int,
) -> None:
    """Run the recording proxy until interrupted; point OPENAI_BASE_URL (and, for Claude
    programs, ANTHROPIC_BASE_URL) at it.

    It prints an `export` line for each variable `record` would set for the program: for
    every API it serves (the built-ins and those installed plugins add, docs/plugins.md,
    whose calls are recorded too), and FAULTFINDER_PROXY_URL and FAULTFINDER_RUN_DIR.

    Agents are told apart by the X-Faultfinder-Agent header, an /agent/<name>/v1 base
    URL, or their system prompt. On Ctrl-C the run's trace.json is written.
    """
    warn_if_exposed(host)
    plan: ReplayPlan | None = None
    # Requests that are not model calls go only to an upstream named on the command line.
    passthrough = bool(upstream)
    if replay_dir:
        parent = read_meta(replay_dir)
        given, trusted = choose_upstream(replay_dir, upstream, trust_run)
        upstream = replay_upstream(parent, given, trusted)
        # Each API to its own upstream, as replay does; never one provider's calls (and
        # key) to another's upstream.
        api_upstream = replay_upstreams(parent, api_upstream, trusted)
        if upstream:
            require_api_upstreams(parent, upstream, api_upstream)
        replay = replay_options(at, edit, None, edit_input, "replace-last-user", "fail")
        warn_dropped_calls(replay_dir, at, replay.edit)
        try:
            plan = ReplayPlan(load_calls(replay_dir, include_failed=True), replay)
        except ValueError as exc:
            raise ConfigError(f"{replay_dir}: {exc}") from None
        run_dir = run_dir_in(str(Path(replay_dir) / BRANCHES_DIR), run_id, new_run_id("b"))
        meta = RunMeta(
            run_id=run_dir.name,
            kind="branch",
            parent=str(Path(replay_dir).resolve()),
            upstream=upstream,
            upstreams=dict(api_upstream),
            task=parent.task,
            ground_truth=parent.ground_truth,
            replay=replay.model_dump(mode="json", exclude_none=True),
        )
        if not upstream:
            click.echo(
                "no upstream: every call is answered from the recording; pass --upstream "
                "for live calls.",
                err=True,
            )
    else:
        if not upstream:
            raise click.UsageError("--upstream is required when recording")
        run_dir = run_dir_in(out, run_id, new_run_id())
        meta = RunMeta(run_id=run_dir.name, upstream=upstream, upstreams=dict(api_upstream))
    config = ProxyConfig(
        upstream=upstream,
        upstreams=api_upstream,
        passthrough=passthrough,
        api_key_env=api_key_env,
        host=host,
        port=port,
    )
    run_sync(_serve_proxy(config, run_dir, meta, plan))


def _stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)


async def _serve_proxy(
    config: ProxyConfig, run_dir: Path, meta: RunMeta, plan: ReplayPlan | None
) -> None:
    store = RunStore(run_dir, run_redactor([]))
    meta.started_at = utcnow()
    stop = asyncio.Event()
    _stop_on_signals(stop)
    try:
        async with RecordingProxy(config, store, plan) as server:
            meta.proxy_url = server.url
            store.write_meta(meta)
            target = config.upstream or "(recording only: no upstream)"
            click.echo(f"faultfinder proxy on {server.base_url} -> {target}", err=True)
            # What `record` gives the program, for every API the proxy serves (a plugin's
            # too), and faultfinder's own variables, so a program started by hand finds
            # the proxy, and its tools the run directory, the same way; with an HTTP
            # proxy in the environment, the NO_PROXY that keeps its calls off it.
            exports = {
                **api_env(server.base_url, server.url),
                **run_env(server.url, run_dir),
                **past_http_proxy(dict(os.environ)),
            }
            for key, value in exports.items():
                click.echo(f"  export {key}={shlex.quote(value)}", err=True)
            click.echo(f"  recording into {run_dir} (Ctrl-C to stop)", err=True)
            await stop.wait()
    finally:
        meta.ended_at = utcnow()
        store.write_meta(meta)
        report = plan.finish() if plan is not None else None
        if report is not None:
            clean = store.redactor.data(report.model_dump(mode="json"))
            (run_dir / REPORT_FILE).write_text(
                json.dumps(clean, indent=2, ensure_ascii=False), encoding="utf-8"
            )
        rescrub_run(run_dir, store.redactor)
        if store.steps_path.exists():
            trace = rebuild_trace(run_dir)
            if report is not None:
                # What the replay did, as `replay` says it: live calls, blocked requests,
                # divergences, the edit.
                for line in report_lines(report, run_dir, trace):
                    click.echo(safe(store.redactor.text(line)), err=True)
            steps = plural(len(trace.steps), "step")
            click.echo(f"wrote {run_dir / 'trace.json'} ({steps})", err=True)
        else:
            click.echo(f"no model call was recorded, so {run_dir} has no trace.json", err=True)


@click.command("serve-local")
@click.option(
    "--host",
    default=LOOPBACK,
    show_default=True,
    help="Interface to bind (anything but loopback prints a warning).",
)
@click.option("--port", type=PORT, default=8080, show_default=True, help="Port (0: any free port).")
@click.option("--model-name", default=None, help="Model id reported to clients.")
@model_options
@pass_errors
def serve_local(host: str, port: int, model_name: str | None, **llm_options: Any) -> None:
    """Serve a faultfinder model (default: the embedded one) as an OpenAI-compatible
    endpoint, so unmodified agent programs run offline.

    \b
    faultfinder serve-local --port 8080 &
    OPENAI_BASE_URL=http://127.0.0.1:8080/v1 python -m faultfinder.demo_team "task"
    """
    warn_if_exposed(host)
    # A server answers like a model: a response cache would hide sampling differences.
    llm_options["cache_path"] = "none"
    # Here the model plays the agents, it judges nothing: no note about judging.
    llm = build_llm(**llm_options, judging=False)
    run_sync(_serve_local(llm, host, port, model_name))


async def _serve_local(llm: Any, host: str, port: int, model_name: str | None) -> None:
    from faultfinder.replay.local_server import LocalModelServer

    stop = asyncio.Event()
    _stop_on_signals(stop)
    try:
        server = await LocalModelServer(llm, host=host, port=port, model_name=model_name).start()
    except OSError as exc:
        raise ConfigError(
            f"Cannot listen on {host}:{port}: {exc}. Choose another --port."
        ) from None
    click.echo(f"serving {llm.name} on {server.base_url} (Ctrl-C to stop)", err=True)
    try:
        await stop.wait()
    finally:
        await server.close()
