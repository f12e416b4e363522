"""DoVer's replays on a Ray cluster.

:class:`RayReplayExecutor` is a DoVer replay executor: each replay runs on a worker, which
receives the recording's files, materialises them in a scratch directory, runs the
user's program there through a proxy of its own, and sends the branch's files back. The
driver writes them under ``run_dir/branches/``, so it stays the only writer of the run
directory, whether or not the workers share its filesystem.

The program command is the one the user gave after ``--``; it must exist on the workers
(the same checkout or image), and the upstream URL must be reachable from them.

The worker scrubs the branch of every secret its replay learned; the driver scrubs the
files again with the run's redactor, as a local replay would (a secret of the driver's
environment may be unknown on the worker). Only faultfinder's own files of a run travel
(:data:`RUN_FILES`): files the program wrote into the run or branch directory are its
own, unscrubbed, and stay where it wrote them.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

from faultfinder.dover.models import Intervention
from faultfinder.dover.replays import ReplayExecutor
from faultfinder.errors import FaultfinderError
from faultfinder.redact import Redactor
from faultfinder.replay.child import run_redactor
from faultfinder.replay.output import OUTPUT_FILES
from faultfinder.replay.recorder import (
    META_FILE,
    REPORT_FILE,
    STEPS_FILE,
    TRACE_FILE,
    read_meta,
    rebuild_trace,
    write_meta,
)
from faultfinder.replay.run_scrub import scrub_steps
from faultfinder.replay.session import ReplayOutcome, read_report
from faultfinder.scale.cluster import cluster_cpus, require_ray

ray = require_ray()

REPLAY_RETRIES = 2
"""Times a replay is run again when the worker running it died."""

Files = dict[str, bytes]


RUN_FILES = (META_FILE, STEPS_FILE, TRACE_FILE, REPORT_FILE, *OUTPUT_FILES)
"""The files faultfinder writes in a run or branch directory, each scrubbed of the run's
secrets. Only these travel between the driver and the workers: whatever else is there
the recorded program wrote itself (it is told the directory, ``FAULTFINDER_RUN_DIR``),
unscrubbed, and faultfinder copies none of it (docs/security.md)."""


def run_files(directory: Path) -> Files:
    """Faultfinder's own files of a run or branch directory (:data:`RUN_FILES`)."""
    return {
        name: (directory / name).read_bytes() for name in RUN_FILES if (directory / name).is_file()
    }


def recording_files(run_dir: Path) -> Files:
    """What a worker needs of a recording: its own files, without the branches, the DoVer
    outputs and anything the program wrote there."""
    return run_files(run_dir)


def write_files(root: Path, files: Files) -> None:
    """Write ``files`` under ``root``, refusing any name that would leave it."""
    base = root.resolve()
    for name, data in files.items():
        target = (base / name).resolve()
        if not target.is_relative_to(base):
            raise ValueError(f"refusing to write {name!r} outside {root}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


@ray.remote(num_cpus=1, max_retries=REPLAY_RETRIES)  # type: ignore[untyped-decorator]
def replay_on_worker(
    files: Files,
    executor: ReplayExecutor,
    intervention: Intervention,
    branch_id: str,
    overrides: dict[str, Any],
) -> tuple[dict[str, Any], Files]:
    """Replay in a scratch copy of the recording; return the outcome and the branch files,
    or, when the replay could not run, why (``error``: the message the local executor
    would raise). The outcome's meta and report are, as a replay returns them, those its
    meta.json and report.json hold, scrubbed of every secret its redactor learned: some
    are known only here (a key first seen in a request's headers), so the driver could not
    scrub them itself, and nothing sent back may hold them."""
    with tempfile.TemporaryDirectory(prefix="faultfinder-replay-") as scratch:
        run_dir = Path(scratch) / "run"
        write_files(run_dir, files)
        executor.run_dir = run_dir
        try:
            outcome = asyncio.run(executor.run(intervention, branch_id, overrides))
        except FaultfinderError as exc:
            # Sent back as data: raised here, Ray would wrap it in its worker's traceback.
            return {"error": str(exc), "pid": os.getpid()}, {}
        branch = outcome.branch_dir
        out = run_files(branch)  # not what the program wrote beside them
        data = outcome.model_dump(mode="json")
        data["branch_dir"] = branch.relative_to(run_dir).as_posix()
    return {"outcome": data, "pid": os.getpid()}, out


class RayReplayExecutor:
    """Runs each DoVer replay on a Ray worker; the branch is written here by the driver."""

    def __init__(self, local: ReplayExecutor, *, parallel: int | None = None) -> None:
        # The program runs in the user's working directory on the worker, as it would here.
        if local.options.cwd is None:
            local.options = local.options.model_copy(update={"cwd": os.getcwd()})
        self.local = local
        self.parallel = parallel or cluster_cpus()
        """Replays in flight at once (DoVer runs this many of them concurrently)."""
        self.worker_pids: list[int] = []
        """The process of each replay run so far (they are not this one)."""

    async def run(
        self, intervention: Intervention, branch_id: str, overrides: dict[str, Any]
    ) -> ReplayOutcome:
        run_dir = self.local.run_dir
        ref = replay_on_worker.remote(
            recording_files(run_dir), self.local, intervention, branch_id, overrides
        )
        result, files = await asyncio.wrap_future(ref.future())
        self.worker_pids.append(result["pid"])
        if "error" in result:
            # The replay could not run on the worker (a command that does not exist there...):
            # the same error, with the same message, as the local executor raises.
            raise FaultfinderError(result["error"])
        data = result["outcome"]
        branch_dir = run_dir / data["branch_dir"]
        if branch_dir.exists():
            raise FileExistsError(f"{branch_dir} already exists")
        # The worker's copy was a scratch directory: the branch belongs to this run.
        data["branch_dir"] = str(branch_dir)
        data["meta"]["parent"] = str(run_dir.resolve())
        outcome = ReplayOutcome.model_validate(data)
        # The run's redactor (the secrets of its command and of this environment, which
        # the worker may not share) scrubs the branch again before it is written, as a
        # local replay scrubs it; meta.json is written and trace.json rebuilt here.
        redactor = run_redactor(list(self.local.command or ()), self.local.options.env)
        write_files(branch_dir, scrub_branch_files(files, redactor))
        write_meta(branch_dir, outcome.meta, redactor)
        child = outcome.child
        return outcome.model_copy(
            update={
                "meta": read_meta(branch_dir),
                "report": read_report(branch_dir),
                "trace": rebuild_trace(branch_dir),
                "child": child.model_copy(
                    update={
                        "stdout": redactor.text(child.stdout),
                        "stderr": redactor.text(child.stderr),
                    }
                ),
            }
        )


def scrub_branch_files(files: Files, redactor: Redactor) -> Files:
    """The branch's files as a worker sent them, scrubbed with ``redactor`` as a local
    replay scrubs its branch when it ends (``session.rescrub_run`` and the program's output
    files): the steps first (a secret-named field they hold is learned), then the report
    and the output. ``meta.json`` and ``trace.json`` are left out: the driver writes the
    one and rebuilds the other from the scrubbed steps."""
    out = {name: data for name, data in files.items() if name not in (META_FILE, TRACE_FILE)}
    for name in (STEPS_FILE, REPORT_FILE, *OUTPUT_FILES):
        if name in out:
            text = out[name].decode("utf-8", errors="replace")
            clean = scrub_steps(text, redactor) if name == STEPS_FILE else redactor.text(text)
            out[name] = clean.encode("utf-8")
    return out
