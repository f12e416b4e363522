"""Connecting to Ray: an existing cluster named on the command line, or a local one."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from faultfinder.errors import ConfigError

NAMESPACE = "faultfinder"
"""Ray namespace of faultfinder's actors."""


def require_ray() -> ModuleType:
    """The ``ray`` module, or a one-line error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "--executor ray needs Ray: pip install 'faultfinder[ray]' (or use --executor local)."
        ) from None
    return ray


def connect(address: str | None, *, num_cpus: int | None = None) -> bool:
    """Join the cluster at ``address`` ('auto', 'ray://host:10001', host:port), or start a
    local one when ``address`` is None. Returns True when this call started Ray (so the
    caller shuts it down), False when Ray was already initialised in this process.

    Only an address given by the user is contacted: without one a new local cluster is
    started (``address='local'``), never one found in a file on this machine. Ray's usage
    statistics are switched off for clusters faultfinder starts.
    """
    ray = require_ray()
    if ray.is_initialized():
        return False
    options: dict[str, Any] = {
        "namespace": NAMESPACE,
        "include_dashboard": False,
        "log_to_driver": False,
        "ignore_reinit_error": True,
    }
    if address:
        try:
            ray.init(address=address, **options)
        except ConnectionError as exc:
            raise ConfigError(
                f"Could not reach the Ray cluster at {address}: {exc}. Check --ray-address "
                "(use 'auto' on a cluster node) or drop it to start a local cluster."
            ) from None
        return True
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Workers of a local cluster import what the driver can: its working directory (where
    # a function:module:callable model usually lives) and its PYTHONPATH.
    path = os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH", "")) if p)
    with _sigint_deferred() as interrupted:
        ray.init(
            address="local",
            num_cpus=num_cpus,
            object_store_memory=256 * 1024 * 1024,
            runtime_env={"env_vars": {"PYTHONPATH": path}},
            **options,
        )
    if interrupted:
        # Ctrl-C came while the cluster was starting: shut down all it started, then stop.
        ray.shutdown()
        raise KeyboardInterrupt
    return True


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[list[int]]:
    """Hold Ctrl-C back for the duration, noting it in the list yielded.

    A KeyboardInterrupt raised inside ``ray.init`` leaves the processes it had started
    (its dashboard and runtime-env agents) running with nobody to stop them, and can
    crash its core worker half built. Where SIGINT is ignored, or off the main thread
    (where no handler can be set), nothing changes.
    """
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN or previous is None:
        yield received
        return
    signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield received
    finally:
        signal.signal(signal.SIGINT, previous)


def cluster_cpus() -> int:
    """CPUs the connected cluster offers (at least 1)."""
    ray = require_ray()
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


@contextlib.contextmanager
def ray_session(address: str | None) -> Iterator[ModuleType]:
    """Ray, connected for the duration; shut down afterwards if this started it."""
    ray = require_ray()
    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    started = connect(address)
    if main:
        signal.signal(signal.SIGTERM, _terminated)
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()
        if main and before is not None:
            signal.signal(signal.SIGTERM, before)


def _terminated(signum: int, frame: Any) -> None:
    """SIGTERM while on Ray: end as the command ends without Ray, with 143 (128 + 15, what
    a shell reports for a process SIGTERM killed), once the ``finally`` blocks have shut
    down what it started. ``ray.init`` installs a handler that exits 15, a code
    docs/exit-codes.md gives no meaning, and its core worker one that prints a stack dump
    first; this replaces both for the session (the one before it is put back after)."""
    raise SystemExit(128 + signum)
