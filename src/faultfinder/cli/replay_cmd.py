"""`faultfinder record`, `proxy`, `replay` and `serve-local`: recording and replaying any
agent program's model calls (see docs/replay.md)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from pathlib import Path
from typing import Any

import click

from faultfinder.cli.common import (
    CONTEXT_BUDGET,
    COUNT,
    PORT,
    SECONDS,
    STEP,
    TEMPERATURE,
    build_llm,
    executor_options,
    model_options,
    pass_errors,
)
from faultfinder.errors import ConfigError
from faultfinder.replay.httpserver import LOOPBACK
from faultfinder.replay.outcome import answers_match
from faultfinder.replay.proxy import ProxyConfig, RecordingProxy
from faultfinder.replay.recorder import (
    RunMeta,
    RunStore,
    load_calls,
    new_run_id,
    read_meta,
    rebuild_trace,
    utcnow,
)
from faultfinder.replay.replayer import Edit, ReplayOptions, ReplayPlan, ReplayReport
from faultfinder.replay.session import (
    ReplayOutcome,
    SessionOptions,
    record_run,
    replay_run,
    run_sync,
)
from faultfinder.traces.io import split_lines

PASSTHROUGH = {"ignore_unknown_options": True, "allow_interspersed_args": False}


def _warn_if_exposed(host: str) -> None:
    if host not in (LOOPBACK, "localhost", "::1"):
        click.echo(
            f"warning: binding {host}: anyone who can reach it can use your upstream (and key).",
            err=True,
        )


def _session_options(
    api_key_env: str | None, host: str, port: int, quiet: bool, timeout: float | None
) -> SessionOptions:
    _warn_if_exposed(host)
    return SessionOptions(
        api_key_env=api_key_env, host=host, port=port, echo=not quiet, timeout=timeout
    )


def _proxy_options(fn: Any) -> Any:
    options = [
        click.option(
            "--api-key-env",
            default=None,
            help="Environment variable with the upstream's key (default: forward the "
            "program's own Authorization). Keys are never recorded.",
        ),
        click.option("--host", default=LOOPBACK, show_default=True, help="Interface to bind."),
        click.option(
            "--port", type=PORT, default=0, show_default=True, help="Port (0: any free port)."
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _read_lines(path: str | None) -> list[str]:
    if not path:
        return []
    return [
        line.strip() for line in split_lines(Path(path).read_text(encoding="utf-8")) if line.strip()
    ]


@click.command(context_settings=PASSTHROUGH)
@click.option(
    "--upstream", required=True, help="Model endpoint to forward to, e.g. http://127.0.0.1:8080/v1."
)
@click.option(
    "--out", default="runs", show_default=True, help="Directory that receives runs/<run-id>/."
)
@click.option("--run-id", default=None, help="Name of the run directory (default: timestamp).")
@click.option("--task", default=None, help="The task, if the first user message is not it.")
@click.option("--ground-truth", default=None, help="Reference answer (enables success checks).")
@click.option(
    "--reference-steps",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Text file with a reference solution, one step per line (DoVer milestones).",
)
@click.option("--system", "system_name", default=None, help="Name of the multi-agent system.")
@click.option(
    "--timeout", type=SECONDS, default=None, help="Stop the program after this many seconds."
)
@click.option("--quiet", is_flag=True, help="Do not echo the program's output.")
@_proxy_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
@pass_errors
def record(
    upstream: str,
    out: str,
    run_id: str | None,
    task: str | None,
    ground_truth: str | None,
    reference_steps: str | None,
    system_name: str | None,
    timeout: float | None,
    quiet: bool,
    api_key_env: str | None,
    host: str,
    port: int,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND with its model calls recorded through a proxy into OUT/<run-id>/.

    \b
    faultfinder record --upstream http://127.0.0.1:8080/v1 -- python my_team.py "task"

    The program gets OPENAI_BASE_URL (and OPENAI_API_BASE) pointing at the proxy. The
    run's trace.json is written even when the program fails; the exit status is the
    program's.
    """
    outcome = run_sync(
        record_run(
            list(command),
            upstream,
            out,
            run_id=run_id,
            task=task,
            ground_truth=ground_truth,
            reference_steps=_read_lines(reference_steps),
            system=system_name,
            options=_session_options(api_key_env, host, port, quiet, timeout),
        )
    )
    trace = outcome.trace
    click.echo(
        f"recorded {len(trace.steps)} steps from {len(trace.agents)} agents "
        f"(program exit status {outcome.child.exit_code}) -> {outcome.run_dir}",
        err=True,
    )
    if trace.metadata.get("outcome"):
        click.echo(f"final answer {trace.final_answer!r}: {trace.metadata['outcome']}", err=True)
    code = outcome.child.exit_code
    if code:
        sys.exit(code if code > 0 else 1)


@click.command()
@click.option(
    "--upstream", default=None, help="Model endpoint to forward to (recording mode: required)."
)
@click.option("--out", default="runs", show_default=True, help="Directory for runs/<run-id>/.")
@click.option("--run-id", default=None, help="Name of the run directory.")
@click.option(
    "--replay",
    "replay_dir",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="Serve a replay of this run instead of recording a new one.",
)
@click.option("--at", type=STEP, default=None, help="Replay: step from which to go live.")
@click.option("--edit", default=None, help="Replay: replacement output of step --at.")
@click.option("--edit-input", default=None, help="Replay: replacement instruction for step --at.")
@_proxy_options
@pass_errors
def proxy(
    upstream: str | None,
    out: str,
    run_id: str | None,
    replay_dir: str | None,
    at: int | None,
    edit: str | None,
    edit_input: str | None,
    api_key_env: str | None,
    host: str,
    port: int,
) -> None:
    """Run the recording proxy until interrupted; point OPENAI_BASE_URL at it.

    Agents are told apart by the X-Faultfinder-Agent header, an /agent/<name>/v1 base
    URL, or their system prompt. On Ctrl-C the run's trace.json is written.
    """
    _warn_if_exposed(host)
    plan: ReplayPlan | None = None
    if replay_dir:
        parent = read_meta(replay_dir)
        upstream = upstream or parent.upstream
        replay = _replay_options(
            at, edit, None, edit_input, "replace-last-user", "fail", (), None, None
        )
        plan = ReplayPlan(load_calls(replay_dir), replay)
        run_dir = Path(replay_dir) / "branches" / (run_id or new_run_id("b"))
        meta = RunMeta(
            run_id=run_dir.name,
            kind="branch",
            parent=str(replay_dir),
            upstream=upstream,
            task=parent.task,
            ground_truth=parent.ground_truth,
            replay=replay.model_dump(mode="json", exclude_none=True),
        )
    else:
        if not upstream:
            raise click.UsageError("--upstream is required when recording")
        run_dir = Path(out) / (run_id or new_run_id())
        meta = RunMeta(run_id=run_dir.name, upstream=upstream)
    if not upstream:
        raise click.UsageError("--upstream is required (the run names none)")
    config = ProxyConfig(upstream=upstream, api_key_env=api_key_env, host=host, port=port)
    run_sync(_serve_proxy(config, run_dir, meta, plan))


async def _serve_proxy(
    config: ProxyConfig, run_dir: Path, meta: RunMeta, plan: ReplayPlan | None
) -> None:
    store = RunStore(run_dir)
    meta.started_at = utcnow()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        async with RecordingProxy(config, store, plan) as server:
            meta.proxy_url = server.url
            store.write_meta(meta)
            click.echo(f"faultfinder proxy on {server.base_url} -> {config.upstream}", err=True)
            click.echo(f"  export OPENAI_BASE_URL={server.base_url}", err=True)
            click.echo(f"  recording into {run_dir} (Ctrl-C to stop)", err=True)
            await stop.wait()
    finally:
        meta.ended_at = utcnow()
        store.write_meta(meta)
        if plan is not None:
            (run_dir / "report.json").write_text(
                plan.finish().model_dump_json(indent=2), encoding="utf-8"
            )
        if store.steps_path.exists():
            trace = rebuild_trace(run_dir)
            click.echo(f"wrote {run_dir / 'trace.json'} ({len(trace.steps)} steps)", err=True)


def _replay_options(
    at: int | None,
    edit: str | None,
    edit_file: str | None,
    edit_input: str | None,
    edit_input_mode: str,
    on_divergence: str,
    masks: tuple[str, ...],
    window: int | None,
    live_temperature: float | None,
) -> ReplayOptions:
    if edit_file:
        if edit is not None:
            raise click.UsageError("give --edit or --edit-file, not both")
        edit = Path(edit_file).read_text(encoding="utf-8")
    if edit is not None and edit_input is not None:
        raise click.UsageError(
            "give --edit (the step's output) or --edit-input (its instruction), not both"
        )
    if (edit is not None or edit_input is not None) and at is None:
        raise click.UsageError("an edit needs --at STEP")
    change: Edit | None = None
    if edit is not None:
        change = Edit(output=edit)
    elif edit_input is not None:
        change = Edit(input=edit_input, input_mode=edit_input_mode)  # type: ignore[arg-type]
    overrides: dict[str, Any] = {}
    if live_temperature is not None:
        overrides["temperature"] = live_temperature
    return ReplayOptions(
        at=at,
        edit=change,
        on_divergence=on_divergence,  # type: ignore[arg-type]
        masks=list(masks),
        stop_after_live=window,
        live_overrides=overrides,
    )


def format_report(outcome: ReplayOutcome) -> str:
    """The human-readable summary `replay` prints."""
    report: ReplayReport = outcome.report
    lines = [f"branch:      {outcome.branch_dir}"]
    if report.at is None:
        lines.append(
            f"replayed:    {report.reproduced}/{report.recorded_steps} recorded steps reproduced "
            f"(fidelity {report.fidelity:.0%})"
        )
    else:
        lines.append(
            f"replayed:    {report.reproduced}/{report.prefix_steps} steps before step {report.at} "
            "reproduced from the recording"
        )
        if report.edit:
            state = (
                "applied" if report.edit_applied else "NOT applied (the program never reached it)"
            )
            lines.append(f"edit:        {state} at step {report.at}")
    for divergence in report.divergences:
        lines.append(
            f"DIVERGED:    step {divergence.step} ({divergence.agent}): {divergence.difference} "
            f"-> {divergence.action}"
        )
    if report.missing_steps:
        lines.append(f"missing:     recorded steps never asked for: {report.missing_steps}")
    lines.append(f"live calls:  {report.live_calls} (beyond the recording: {report.extra_calls})")
    if report.window_reached:
        lines.append("window:      live window used up; the program was stopped")
    trace = outcome.trace
    lines.append(f"steps:       {len(trace.steps)} in the branch trace")
    verdict = ""
    if trace.ground_truth is not None and trace.final_answer is not None:
        verdict = (
            " (matches the reference)"
            if answers_match(trace.final_answer, trace.ground_truth)
            else " (does not match the reference)"
        )
    lines.append(f"answer:      {trace.final_answer!r}{verdict}")
    lines.append(f"exit status: {outcome.child.exit_code}")
    return "\n".join(lines)


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--at", type=STEP, default=None, help="Step (0-based, as in trace.json) from which to go live."
)
@click.option("--edit", default=None, help="Replacement text for step --at's output.")
@click.option(
    "--edit-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Read --edit from a file.",
)
@click.option(
    "--edit-input", default=None, help="Replacement instruction in step --at's request (sent live)."
)
@click.option(
    "--edit-input-mode",
    type=click.Choice(["replace-last-user", "append-user"]),
    default="replace-last-user",
    show_default=True,
    help="How --edit-input changes the request.",
)
@click.option(
    "--on-divergence",
    type=click.Choice(["fail", "live"]),
    default="fail",
    show_default=True,
    help="A replayed request that differs from the recording: refuse it, or go live.",
)
@click.option(
    "--mask",
    "masks",
    multiple=True,
    metavar="REGEX",
    help="Ignore matches of REGEX when comparing requests.",
)
@click.option(
    "--window", type=COUNT, default=None, help="Stop the program after this many steps from --at."
)
@click.option(
    "--live-temperature",
    type=TEMPERATURE,
    default=None,
    help="Force this temperature on live calls.",
)
@click.option(
    "--upstream", default=None, help="Endpoint for live calls (default: the recorded one)."
)
@click.option("--branch-id", default=None, help="Name of the branch directory.")
@click.option(
    "--timeout", type=SECONDS, default=None, help="Stop the program after this many seconds."
)
@click.option("--quiet", is_flag=True, help="Do not echo the program's output.")
@click.option("--json", "as_json", is_flag=True, help="Print the replay report as JSON.")
@_proxy_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@pass_errors
def replay(
    run_dir: str,
    at: int | None,
    edit: str | None,
    edit_file: str | None,
    edit_input: str | None,
    edit_input_mode: str,
    on_divergence: str,
    masks: tuple[str, ...],
    window: int | None,
    live_temperature: float | None,
    upstream: str | None,
    branch_id: str | None,
    timeout: float | None,
    quiet: bool,
    as_json: bool,
    api_key_env: str | None,
    host: str,
    port: int,
    command: tuple[str, ...],
) -> None:
    """Re-run a recorded program, answering from the recording up to --at, applying the
    edit there, and going live after; the result is a branch of the run.

    \b
    faultfinder replay runs/RUN --at 7 --edit "new message" -- python my_team.py "task"

    Without a command the recorded one is run again (put the command after '--'). Without
    --at every recorded call is replayed (a fidelity check).
    """
    options = _replay_options(
        at,
        edit,
        edit_file,
        edit_input,
        edit_input_mode,
        on_divergence,
        masks,
        window,
        live_temperature,
    )
    outcome = run_sync(
        replay_run(
            run_dir,
            list(command) or None,
            options,
            upstream=upstream,
            branch_id=branch_id,
            options=_session_options(api_key_env, host, port, quiet, timeout),
        )
    )
    if as_json:
        click.echo(outcome.report.model_dump_json(indent=2))
    else:
        click.echo(format_report(outcome))
    if outcome.report.divergences and on_divergence == "fail":
        sys.exit(3)


@click.command("serve-local")
@click.option("--host", default=LOOPBACK, show_default=True, help="Interface to bind.")
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
    _warn_if_exposed(host)
    # A server answers like a model: a response cache would hide sampling differences.
    llm_options["cache_path"] = "none"
    llm = build_llm(**llm_options)
    run_sync(_serve_local(llm, host, port, model_name))


async def _serve_local(llm: Any, host: str, port: int, model_name: str | None) -> None:
    from faultfinder.replay.local_server import LocalModelServer

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
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


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--method",
    "method_spec",
    default="all-at-once:dover",
    show_default=True,
    help="Attribution method proposing one hypothesis per trial (name or name:preset).",
)
@click.option(
    "--segment",
    default="llm",
    show_default=True,
    help="Trial segmentation: llm, magentic-one, pattern:REGEX (planning steps' output), none.",
)
@click.option(
    "--repeats", type=COUNT, default=3, show_default=True, help="Replays per intervention."
)
@click.option(
    "--orchestrator",
    default=None,
    help="Agent whose messages are rewritten (default: each trial's planner).",
)
@click.option(
    "--scope",
    type=click.Choice(["orchestrator", "hypothesis"]),
    default="orchestrator",
    show_default=True,
    help="Rewrite the orchestrator's message at/before the failure step, or that step itself.",
)
@click.option(
    "--max-trials", type=COUNT, default=None, help="Intervene on at most this many trials."
)
@click.option(
    "--no-ground-truth", is_flag=True, help="Hide the reference answer from DoVer's prompts."
)
@click.option("--no-milestones", is_flag=True, help="Skip milestone progress.")
@click.option(
    "--context-budget",
    type=CONTEXT_BUDGET,
    default=None,
    help="Max prompt tokens of DoVer's prompts.",
)
@click.option(
    "--live-temperature",
    type=TEMPERATURE,
    default=None,
    help="Temperature forced on live replay calls.",
)
@click.option(
    "--upstream", default=None, help="Endpoint for live calls (default: the recorded one)."
)
@click.option(
    "--out",
    "out_path",
    default=None,
    help="JSONL file for result rows (default: RUN_DIR/dover/<session>.jsonl).",
)
@click.option(
    "--timeout", type=SECONDS, default=None, help="Stop each replay after this many seconds."
)
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON lines.")
@executor_options
@model_options(timeout_flag="--call-timeout")  # --timeout here bounds each replay
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@pass_errors
def debug(
    run_dir: str,
    method_spec: str,
    segment: str,
    repeats: int,
    orchestrator: str | None,
    scope: str,
    max_trials: int | None,
    no_ground_truth: bool,
    no_milestones: bool,
    context_budget: int | None,
    live_temperature: float | None,
    upstream: str | None,
    out_path: str | None,
    timeout: float | None,
    as_json: bool,
    executor: str,
    ray_address: str | None,
    command: tuple[str, ...],
    **llm_options: Any,
) -> None:
    """DoVer: segment the recorded run into trials, hypothesise a failure per trial,
    generate an intervention, replay it (--repeats times) and give each hypothesis a
    verdict: validated, partially validated, refuted or inconclusive.

    \b
    faultfinder debug runs/RUN --model openai:gpt-4o -- python my_team.py "task"
    """
    from faultfinder.dover.pipeline import DoverConfig, ReplayExecutor, run_dover
    from faultfinder.dover.report import aggregate, format_summary
    from faultfinder.methods import create_method

    config = DoverConfig(
        method=method_spec,
        segment=segment,
        repeats=repeats,
        orchestrator=orchestrator,
        scope=scope,  # type: ignore[arg-type]
        with_ground_truth=not no_ground_truth,
        max_trials=max_trials,
        milestones=not no_milestones,
        context_budget=context_budget,
        live_temperature=live_temperature,
    )
    overrides: dict[str, Any] = {"with_ground_truth": config.with_ground_truth}
    if context_budget is not None:
        overrides["context_budget"] = context_budget
    method = create_method(method_spec, **overrides)
    llm = build_llm(**llm_options)
    session = new_run_id("dover-")
    out = Path(out_path) if out_path else Path(run_dir) / "dover" / f"{session}.jsonl"
    replays = ReplayExecutor(
        run_dir,
        list(command) or None,
        upstream=upstream,
        options=SessionOptions(echo=False, timeout=timeout),
        live_temperature=live_temperature,
    )
    if executor == "ray":
        from faultfinder.scale.cluster import ray_session

        with ray_session(ray_address):
            from faultfinder.scale.ray_debug import RayReplayExecutor

            on_ray = RayReplayExecutor(replays)
            rows = run_sync(
                run_dover(run_dir, llm, method, on_ray, config, out=out, session=session)
            )
    else:
        if ray_address:
            raise click.UsageError("--ray-address goes with --executor ray.")
        rows = run_sync(run_dover(run_dir, llm, method, replays, config, out=out, session=session))
    if as_json:
        for row in rows:
            click.echo(row.model_dump_json())
        return
    for row in rows:
        trial = row.trial
        head = f"trial {trial.index} (steps {trial.start}-{trial.end})"
        hyp = row.hypothesis
        if row.intervention is None:
            click.echo(f"{head}: {row.status} - {row.verdict_reason or row.error}")
            continue
        iv = row.intervention
        click.echo(
            f"{head}: hypothesis {hyp.agent} @ step {hyp.step}; {iv.category} at step {iv.step} "
            f"-> {row.verdict} ({row.verdict_reason})"
        )
        click.echo(f"    replacement: {iv.replacement[:160]!r}")
    click.echo(format_summary(aggregate(rows)))
    click.echo(f"rows: {out}")


@click.command("debug-report")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@pass_errors
def debug_report(paths: tuple[str, ...], as_json: bool) -> None:
    """Aggregate DoVer result rows: trial success rate, progress made, verdicts."""
    from faultfinder.dover.report import aggregate, format_summary, read_rows

    summary = aggregate(read_rows(paths))
    click.echo(summary.model_dump_json(indent=2) if as_json else format_summary(summary))


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--method",
    "method_spec",
    default="agentic",
    show_default=True,
    help="Static method whose attribution seeds the candidates (TraceElephant: Static Agentic).",
)
@click.option(
    "--candidates",
    "n_candidates",
    type=COUNT,
    default=3,
    show_default=True,
    help="Candidates to check.",
)
@click.option(
    "--window",
    type=COUNT,
    default=5,
    show_default=True,
    help="Steps observed after the correction (k).",
)
@click.option(
    "--live-temperature",
    type=TEMPERATURE,
    default=0.3,
    show_default=True,
    help="Temperature of the replayed steps.",
)
@click.option("--no-ground-truth", is_flag=True, help="Hide the reference answer from the prompts.")
@click.option("--context-budget", type=CONTEXT_BUDGET, default=None, help="Max prompt tokens.")
@click.option(
    "--upstream", default=None, help="Endpoint for live calls (default: the recorded one)."
)
@click.option("--out", "out_path", default=None, help="Append the result row to this JSONL file.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@model_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@pass_errors
def check(
    run_dir: str,
    method_spec: str,
    n_candidates: int,
    window: int,
    live_temperature: float,
    no_ground_truth: bool,
    context_budget: int | None,
    upstream: str | None,
    out_path: str | None,
    as_json: bool,
    command: tuple[str, ...],
    **llm_options: Any,
) -> None:
    """TraceElephant's dynamic agentic check: replay each candidate step with a correction,
    watch the next --window steps, and re-rank the candidates.

    \b
    faultfinder check runs/RUN --model openai:gpt-4o -- python my_team.py "task"
    """
    from faultfinder.dover.dynamic import dynamic_check
    from faultfinder.methods import create_method

    overrides: dict[str, Any] = {"with_ground_truth": not no_ground_truth}
    if context_budget is not None:
        overrides["context_budget"] = context_budget
    method = create_method(method_spec, **overrides)
    llm = build_llm(**llm_options)
    result = run_sync(
        dynamic_check(
            run_dir,
            llm,
            method,
            method_label=method_spec,
            command=list(command) or None,
            upstream=upstream,
            candidates=n_candidates,
            window=window,
            live_temperature=live_temperature,
            with_ground_truth=not no_ground_truth,
            budget=context_budget,
        )
    )
    if out_path:
        with Path(out_path).open("a", encoding="utf-8") as handle:
            handle.write(result.model_dump_json() + "\n")
    if as_json:
        click.echo(result.model_dump_json(indent=2))
        return
    static = result.static
    click.echo(f"static ({result.method}): {static.get('agent')} @ step {static.get('step')}")

    def yes(flag: bool) -> str:
        return "yes" if flag else "no"

    for position, item in enumerate(result.candidates):
        seen = item.observation
        state = (
            item.error
            if seen is None
            else f"expected={yes(seen.satisfies_expected)} recurs={yes(seen.failure_recurs)} "
            f"deviates={yes(seen.deviates)}"
        )
        head = f"{position + 1}. {item.agent} @ step {item.step}"
        click.echo(f"{head} (was #{item.rank + 1}, score {item.score}): {state}")
    click.echo(f"verdict: {result.agent} @ step {result.step}")
