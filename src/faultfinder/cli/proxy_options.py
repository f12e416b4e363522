"""Options and helpers shared by the commands that run a program through the proxy
(`record`, `proxy`, `replay`, `debug`, `check`, `verify-edit`, `serve-local`)."""

from __future__ import annotations

import ipaddress
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from faultfinder import exitcodes
from faultfinder.cli.common import PORT, URL, LazyHelpOption
from faultfinder.loopback import URL_FORM, url_problem
from faultfinder.replay.apis import ADAPTERS
from faultfinder.replay.httpserver import LOOPBACK, is_loopback
from faultfinder.replay.recorder import REPORT_FILE, read_meta, safe_child
from faultfinder.replay.report import ReplayReport
from faultfinder.replay.session import SessionOptions
from faultfinder.replay.trust import (
    describe_upstreams,
    replay_upstream,
    replay_upstreams,
    require_api_upstreams,
    require_upstream,
    stored_command_note,
)
from faultfinder.traces.io import split_lines

PASSTHROUGH = {"ignore_unknown_options": True, "allow_interspersed_args": False}
"""Everything after the command's own options (and '--') is the program's argv."""


def check_host(host: str) -> None:
    """Refuse a ``--host`` a server should not bind: an empty one (it would listen on every
    interface while the URL printed says ``http://:PORT``) and an IPv4-mapped IPv6 address
    (``::ffff:127.0.0.1``, which a socket cannot bind)."""
    if not host.strip():
        raise click.BadParameter(
            "empty; give an address (127.0.0.1 for this machine only, 0.0.0.0 for every interface)",
            param_hint="'--host'",
        )
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise click.BadParameter(
            f"{host} is an IPv4 address written as IPv6, which cannot be bound; give "
            f"{address.ipv4_mapped}",
            param_hint="'--host'",
        )


def warn_if_exposed(host: str) -> None:
    """Refuse a host no server can sensibly bind (:func:`check_host`); say so when it is
    anything but loopback."""
    check_host(host)
    if not is_loopback(host):
        click.echo(
            f"warning: binding {host}: anyone who can reach it can use your upstream (and key).",
            err=True,
        )


def session_options(
    api_key_env: str | None,
    host: str,
    port: int,
    quiet: bool,
    timeout: float | None,
    cwd: str | None = None,
    upstreams: dict[str, str] | None = None,
) -> SessionOptions:
    warn_if_exposed(host)
    return SessionOptions(
        api_key_env=api_key_env,
        host=host,
        port=port,
        echo=not quiet,
        timeout=timeout,
        cwd=cwd,
        upstreams=dict(upstreams or {}),
    )


_NAME = re.compile(r"[A-Za-z0-9_.-]{1,40}")
"""What an API's name may be shown as in an error: a plain word, never part of a URL."""


def _api_upstreams(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, str]:
    """``--api-upstream messages=https://api.anthropic.com/v1`` (repeatable) as a dict."""
    known = [a.name for a in ADAPTERS]
    out: dict[str, str] = {}
    for value in values:
        name, sep, url = value.partition("=")
        if not sep or not url or name not in known:
            # The value is never repeated: its URL may hold a key (a password, ?api-key=),
            # and so may what stands before its first '=' when API= was left out.
            shown = f"'{name}'" if _NAME.fullmatch(name) else "what comes before '='"
            why = (
                "it has no API= before the URL"
                if not sep
                else f"{shown} is not an API"
                if name not in known
                else f"no URL follows {name}="
            )
            raise click.BadParameter(
                f"{why}; give API=URL with API one of {', '.join(known)}",
                ctx=ctx,
                param=param,
            )
        if problem := url_problem(url):
            raise click.BadParameter(
                f"the URL of {name} is {problem}; give {URL_FORM}", ctx=ctx, param=param
            )
        out[name] = url
    return out


def api_upstream_help() -> str:
    """--api-upstream's help: the built-in APIs, then those installed plugins declare (read
    from their entry points' names, as --model's help reads backend kinds: no plugin is
    imported by a --help)."""
    from faultfinder.registry import APIS, BUILTIN

    entries = APIS.entries()
    names = [name for name, entry in entries.items() if entry.origin == BUILTIN]
    plugins = [f"{name} ({entry.origin})" for name, entry in entries.items() if name not in names]
    accepted = ", ".join(names) + (
        "; installed plugins: " + ", ".join(plugins)
        if plugins
        else "; or the name of a model API an installed plugin adds"
    )
    return (
        f"Send one API's model calls to an upstream of its own ({accepted}), e.g. "
        "messages=https://api.anthropic.com/v1 for a program that also talks to Claude; "
        "the others go to --upstream. Repeatable."
    )


api_upstream_option = click.option(
    "--api-upstream",
    "api_upstream",
    multiple=True,
    metavar="API=URL",
    callback=_api_upstreams,
    cls=LazyHelpOption,
    help_text=api_upstream_help,
)
"""--api-upstream API=URL (repeatable), as a dict by API name: every command that runs a
program through the proxy takes it, so each API's live calls reach their own endpoint."""


def proxy_options(fn: Any) -> Any:
    """--api-key-env, --api-upstream, --host and --port."""
    options = [
        api_upstream_option,
        click.option(
            "--api-key-env",
            default=None,
            help="Environment variable with the upstream's key (default: forward the "
            "program's own Authorization). Keys are never recorded.",
        ),
        click.option(
            "--host",
            default=LOOPBACK,
            show_default=True,
            help="Interface to bind (anything but loopback prints a warning).",
        ),
        click.option(
            "--port", type=PORT, default=0, show_default=True, help="Port (0: any free port)."
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def trust_options(fn: Any) -> Any:
    """--upstream and --trust-run for commands that replay a run directory."""
    options = [
        click.option(
            "--upstream",
            default=None,
            type=URL,
            help="Endpoint for live calls. Without it, the run's recorded upstream is used "
            "only with --trust-run or after you confirm it.",
        ),
        click.option(
            "--trust-run",
            is_flag=True,
            help="Send live calls (and your key) to the upstreams named in the run directory: "
            "its main one and any per-API ones (--upstream and --api-upstream given here win).",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def choose_upstream(run_dir: str, upstream: str | None, trust_run: bool) -> tuple[str | None, bool]:
    """(upstream, trusted) for a replay of ``run_dir``.

    An upstream given on the command line wins. Otherwise the recorded ones (the main
    upstream and any per-API ones) are used with --trust-run, or when the user confirms
    them at a terminal; else none (a replay that needs live calls then stops with an
    error naming --upstream).
    """
    if upstream or trust_run:
        return upstream, trust_run
    meta = read_meta(run_dir)
    if meta.upstream and sys.stdin.isatty() and sys.stderr.isatty():
        named = "upstreams" if meta.upstreams else "upstream"
        trusted = click.confirm(
            f"{run_dir} names the {named} {describe_upstreams(meta)}. "
            "Send live calls (and your keys) there?",
            default=False,
            err=True,
        )
        return None, trusted
    return None, False


def live_upstreams(
    run_dir: str,
    upstream: str | None,
    trust_run: bool,
    api_upstream: dict[str, str],
    required: bool,
) -> tuple[str | None, dict[str, str]]:
    """Where the replays' live calls go (the main upstream, and the per-API ones); with
    ``required`` (every replay goes live), an error now rather than one per replay after
    the model calls were spent."""
    given, trusted = choose_upstream(run_dir, upstream, trust_run)
    meta = read_meta(run_dir)
    live = replay_upstream(meta, given, trusted)
    upstreams = replay_upstreams(meta, api_upstream, trusted)
    if required:
        require_upstream(meta, live)
        require_api_upstreams(meta, live, upstreams)
    return live, upstreams


def require_command(run_dir: str, command: tuple[str, ...]) -> list[str]:
    """The program to run, given after '--'; never the one stored in the run directory."""
    if not command:
        raise click.UsageError(
            f"give the program to run after '--' ({stored_command_note(read_meta(run_dir))})"
        )
    return list(command)


def read_lines(path: str | None) -> list[str]:
    """Non-empty stripped lines of a text file (none for no file)."""
    if not path:
        return []
    text = Path(path).read_text(encoding="utf-8")
    return [line.strip() for line in split_lines(text) if line.strip()]


def run_dir_in(out: str, run_id: str | None, default: str) -> Path:
    """``out/<run-id>``, refusing a run id that names a path outside ``out``."""
    try:
        return safe_child(Path(out), run_id or default)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--run-id") from None


def branch_report(branch: str | Path) -> ReplayReport | None:
    """The report.json of a replay branch (None: missing or unreadable)."""
    try:
        text = (Path(branch) / REPORT_FILE).read_text(encoding="utf-8")
        return ReplayReport.model_validate_json(text)
    except (OSError, ValueError):
        return None


def live_errors(branches: Iterable[str | Path]) -> list[str]:
    """The live calls of these replay branches that the upstream answered with an error or
    never answered, one line per kind with its count (from each branch's report.json;
    a branch without a readable report adds nothing)."""
    counts: dict[str, int] = {}
    for branch in branches:
        report = branch_report(branch)
        for live in report.live if report is not None else []:
            if live.status is not None and live.status < 400:
                continue
            what = live.model_copy(update={"agent": None}).described()
            answer = "no answer" if live.status is None else str(live.status)
            key = f"{live.method} {live.path} ({what}) -> {answer}"
            counts[key] = counts.get(key, 0) + 1
    return [key if n == 1 else f"{key} (x{n})" for key, n in counts.items()]


WRONG_ENDPOINT = frozenset({401, 403, 404, 405})
"""Statuses a model call gets from an endpoint that is not its API's (a Messages call at
an OpenAI endpoint: no such path, or a key that provider does not know)."""


def misrouted(branches: Iterable[str | Path]) -> bool:
    """Did a live model call of these branches get an answer that says it reached an
    endpoint that is not its API's (:data:`WRONG_ENDPOINT`)?"""
    for branch in branches:
        report = branch_report(branch)
        for live in report.live if report is not None else []:
            # A poll of a call its endpoint answered is not the call misrouted.
            if live.api is not None and live.background is None and live.status in WRONG_ENDPOINT:
                return True
    return False


def note_live_errors(branches: Iterable[str | Path], upstreams: Mapping[str, str]) -> None:
    """Say on stderr which live calls of the replays failed and, when one was answered as
    by an endpoint that is not its API's, that an API with no --api-upstream of its own
    sent its live calls to --upstream: a replay whose Messages calls reached an OpenAI
    endpoint fails for that reason, not because of its edit."""
    errors = live_errors(branches)
    if not errors:
        return
    click.echo(f"live calls answered with an error: {'; '.join(errors)}", err=True)
    if not misrouted(branches):
        return  # a transient error (429, 5xx, 529) or an unreachable upstream: not routing
    named = ", ".join(f"{api} -> {url}" for api, url in upstreams.items())
    click.echo(
        "    each API's live calls go to --upstream unless --api-upstream API=URL names its "
        f"own endpoint (used here: {named or 'none'})",
        err=True,
    )


def exit_if_replays_failed(
    total: int,
    failed: Sequence[int | None],
    branches: Iterable[str | Path],
    upstreams: Mapping[str, str],
) -> None:
    """After ``total`` replays: name the live calls that failed, and exit 4 when a replayed
    program failed (``failed``: their exit statuses), as `replay` does: a replay used as a
    check never passes a crash (docs/exit-codes.md)."""
    note_live_errors(branches, upstreams)
    if not failed:
        return
    codes = ", ".join(sorted({str(code) for code in failed}))
    click.echo(
        f"exit {exitcodes.ERRORED}: of {total} replays, {len(failed)} ran a program that "
        f"failed (exit status {codes}; see each branch's stderr.txt)",
        err=True,
    )
    click.get_current_context().exit(exitcodes.ERRORED)
