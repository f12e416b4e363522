"""The program a session runs, as a child process: the environment that points its SDKs
at the proxy, the secrets known before it starts, its output teed into the run directory
(scrubbed as it is written, and again whenever a secret is learned), and stopping it.

:mod:`faultfinder.replay.session` runs it through the proxy, for a recording or a replay;
``proxy`` prints the same environment for a program started by hand."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol

from pydantic import BaseModel

from faultfinder.errors import ConfigError
from faultfinder.loopback import past_http_proxy
from faultfinder.redact import Redactor
from faultfinder.replay.apis import ADAPTERS
from faultfinder.replay.capture import tee
from faultfinder.replay.output import (
    OUTPUT_FILES,
    rescrub_file,
    rescrub_while_running,
)

PLACEHOLDER_KEY = "faultfinder-placeholder-key"
"""Given to the program as OPENAI_API_KEY (and ANTHROPIC_API_KEY) when it has none: SDKs
insist on a key, and a local upstream ignores it."""
PLACEHOLDER_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")

STOP_GRACE_S = 5.0
"""Seconds a stopped program gets to exit after SIGTERM before it is killed."""


class ChildResult(BaseModel):
    """How the recorded program ended."""

    exit_code: int | None
    """Exit status (negative: killed by that signal); None if it could not start."""
    killed: bool = False
    """Stopped by faultfinder (live window used up, or timeout)."""
    timed_out: bool = False
    """Stopped because it ran past the timeout."""
    duration_s: float = 0.0
    """Wall time."""
    stdout: str = ""
    """Everything it printed on stdout."""
    stderr: str = ""
    """Everything it printed on stderr."""


class ChildOptions(Protocol):
    """How the program is run: what :func:`run_child` reads of a session's options
    (:class:`~faultfinder.replay.session.SessionOptions`)."""

    @property
    def echo(self) -> bool:
        """Pass the program's output through to this terminal as well as to the files."""

    @property
    def timeout(self) -> float | None:
        """Stop the program after this many seconds (None: wait for it)."""

    @property
    def cwd(self) -> str | None:
        """Working directory for the program (None: the current one)."""


def api_env(base_url: str, proxy_url: str) -> dict[str, str]:
    """The variables that point every API's SDKs at the proxy: each adapter's
    ``client_env`` (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``..., and those of the
    installed plugins' APIs), the built-ins first, with OpenAI's base URL last so no
    adapter moves it. ``record`` gives them to the program; ``proxy`` prints them."""
    env: dict[str, str] = {}
    for adapter in ADAPTERS:
        env.update(adapter.client_env(proxy_url))
    env["OPENAI_BASE_URL"] = base_url
    env["OPENAI_API_BASE"] = base_url
    return env


def run_env(proxy_url: str, run_dir: Path) -> dict[str, str]:
    """faultfinder's own variables for the program: the proxy's root URL (for requests
    on paths of its own choosing) and the run directory (a tool can tell it is recorded
    or replayed, and stay dry in a replay), absolute, since the program may run in another
    directory (``--cwd``). ``record`` gives them; ``proxy`` prints them."""
    return {"FAULTFINDER_PROXY_URL": proxy_url, "FAULTFINDER_RUN_DIR": str(run_dir.resolve())}


def child_env(
    base_url: str, proxy_url: str, run_dir: Path, extra: dict[str, str]
) -> dict[str, str]:
    """The program's environment: every API's SDK variables (:func:`api_env`) point at
    the proxy, and the SDKs that insist on a key get a placeholder when the program has
    none."""
    env = dict(os.environ)
    env.update(extra)
    env.update(api_env(base_url, proxy_url))
    env.update(run_env(proxy_url, run_dir))
    for key in PLACEHOLDER_KEYS:
        if not env.get(key):
            env[key] = PLACEHOLDER_KEY
    env.update(past_http_proxy(env))
    return env


def run_redactor(command: list[str], extra_env: dict[str, str] | None = None) -> Redactor:
    """A redactor that knows this run's secrets before anything is written: the values
    of secret-named environment variables (ours and the program's) and of secret-named
    arguments in the command line."""
    redactor = Redactor()
    redactor.learn_env(os.environ)
    redactor.learn_env(extra_env or {})
    redactor.learn_argv(command)
    return redactor


async def run_child(
    command: list[str],
    env: dict[str, str],
    out_dir: Path,
    options: ChildOptions,
    stop: asyncio.Event | None = None,
    redactor: Redactor | None = None,
    rescrub: Callable[[], None] | None = None,
) -> ChildResult:
    """Run ``command``, teeing its output (secrets scrubbed) into ``out_dir``; stop it
    when ``stop`` is set. ``rescrub`` (the run's ``RunStore.rescrub``) is called, like the
    output files are scrubbed again, whenever ``redactor`` learns a secret mid-run."""
    redactor = redactor or run_redactor(command, env)
    started = time.perf_counter()
    try:
        process = await asyncio.create_subprocess_exec(
            *command,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=options.cwd,
        )
    except (FileNotFoundError, PermissionError) as exc:
        raise ConfigError(
            f"Cannot run {command[0]!r}: {exc}. Check the command after '--'."
        ) from None
    echo_out = sys.stdout.buffer if options.echo else None
    echo_err = sys.stderr.buffer if options.echo else None
    try:
        stdout, stderr, killed, timed_out = await _watch(
            process, out_dir, options, stop, redactor, echo_out, echo_err, rescrub
        )
    finally:
        # Secrets learned after a line was written (a key printed before the first model
        # call is learned from that call's headers) are scrubbed from the files now.
        for name in OUTPUT_FILES:
            rescrub_file(out_dir / name, redactor)
    return ChildResult(
        exit_code=process.returncode,
        killed=killed,
        timed_out=timed_out,
        duration_s=round(time.perf_counter() - started, 3),
        stdout=redactor.text(stdout.decode("utf-8", errors="replace")),
        stderr=redactor.text(stderr.decode("utf-8", errors="replace")),
    )


async def _watch(
    process: asyncio.subprocess.Process,
    out_dir: Path,
    options: ChildOptions,
    stop: asyncio.Event | None,
    redactor: Redactor,
    echo_out: IO[bytes] | None,
    echo_err: IO[bytes] | None,
    rescrub: Callable[[], None] | None,
) -> tuple[bytes, bytes, bool, bool]:
    """Tee the program's output into ``out_dir`` until it exits, is stopped or times out:
    (stdout, stderr, killed, timed out)."""
    with (out_dir / "stdout.txt").open("w+b") as out, (out_dir / "stderr.txt").open("w+b") as err:
        readers = asyncio.gather(
            tee(process.stdout, out, echo_out, redactor),
            tee(process.stderr, err, echo_err, redactor),
        )
        # A secret learned mid-run is scrubbed from what was written (the output, the
        # steps) as soon as it is learned, not when the program ends.
        rescrubber = asyncio.ensure_future(rescrub_while_running((out, err), redactor, rescrub))
        waiters: list[asyncio.Future[Any]] = [asyncio.ensure_future(process.wait())]
        if stop is not None:
            waiters.append(asyncio.ensure_future(stop.wait()))
        killed = timed_out = False
        try:
            done, _ = await asyncio.wait(
                waiters, timeout=options.timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if waiters[0] not in done:
                killed = True
                timed_out = not done
                await _terminate(process)
        except BaseException:
            await _terminate(process)
            # Cancelled (a job stopped from `faultfinder ui`, Ctrl-C): collect the output
            # readers too, so no "exception was never retrieved" is logged.
            readers.cancel()
            with contextlib.suppress(BaseException):
                await readers
            raise
        finally:
            for waiter in waiters[1:]:
                waiter.cancel()
            rescrubber.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await rescrubber
        stdout, stderr = await readers
    return stdout, stderr, killed, timed_out


async def _terminate(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    try:
        await asyncio.wait_for(process.wait(), STOP_GRACE_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
