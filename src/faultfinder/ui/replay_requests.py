"""What a replay job started from the page is: the settings fixed on the command line,
the job record, the check of what a page may ask for, and the command lines that redo a
job from a shell. Running, watching and cancelling jobs is :mod:`.replay_jobs`.
"""

from __future__ import annotations

import asyncio
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from faultfinder.dover.edit_repeats import REPEAT_TEMPERATURE, Attempt, Program
from faultfinder.errors import FaultfinderError
from faultfinder.llm.client import LLM
from faultfinder.replay.edits import parse_edit_file
from faultfinder.replay.recorder import BRANCHES_DIR
from faultfinder.ui.catalog import Catalog, TraceEntry

JobState = Literal["queued", "running", "done", "failed", "cancelled"]
MAX_REPEATS = 10
"""Most replays one "Run N times" job may ask for."""
REQUEST_FIELDS = frozenset({"trace", "at", "edit", "repeats", "verdict"})
"""All a page may send: which trace, which step, the edit, how many times, verdict or not."""


@dataclass(frozen=True)
class ReplaySettings:
    """What a replay from the page runs and contacts: all of it from the command line."""

    program: Program
    """The program, the upstreams its live calls go to, its key, timeout and directory
    (what `verify-edit` runs too)."""
    check: str | None = None
    """Success checker command (``debug --check``); default: exact match."""
    judge: Callable[[], LLM] | None = None
    """Model judging whether a repeated edit was carried out (``debug``'s fulfilment
    judge); without it a failed repeat cannot be called refuted."""
    judge_args: tuple[str, ...] = ()
    """The judge's options as given on the command line (``--model X ...``), for the
    equivalent `faultfinder verify-edit` command."""

    def upstream_args(self) -> list[str]:
        """``--upstream``/``--trust-run`` and ``--api-upstream`` as the command lines
        that make the same branches take them."""
        p = self.program
        argv = ["--upstream", p.upstream] if p.upstream else []
        if not p.upstream and p.trust_run:
            argv.append("--trust-run")
        for api, url in p.upstreams.items():
            argv += ["--api-upstream", f"{api}={url}"]
        return argv


@dataclass
class ReplayJob:
    id: str
    trace_key: str
    base_dir: Path
    root_dir: Path
    """The recording the base belongs to (one job at a time per recording)."""
    at: int | None
    spec: dict[str, Any] | None
    """The edit as an edit-file object (None: replay without an edit)."""
    repeats: int
    verdict_wanted: bool
    session: str
    edit_file: Path | None = None
    command: str = ""
    """The one command line that does the whole job (`replay`, or `verify-edit`)."""
    state: JobState = "queued"
    message: str = ""
    attempts: list[Attempt] = field(default_factory=list)
    verdict: str | None = None
    verdict_reason: str = ""
    not_replayed: str | None = None
    """Why Run N times replayed nothing (the run already passes its check, the edit is
    what the step recorded): DoVer's rules, as `verify-edit` applies them."""
    flip_rate: float | None = None
    flip_rate_ci: tuple[float, float] | None = None
    dover_file: Path | None = None
    dover_key: str | None = None
    commands: list[str] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


class JobRequestError(ValueError):
    """A job request the server refuses (the message says why)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def root_of(run_dir: Path) -> Path:
    """The recording a run or branch directory belongs to (branches nest as
    ``<run>/branches/<id>/branches/<id>/...``)."""
    path = run_dir
    while path.parent.name == BRANCHES_DIR:
        path = path.parent.parent
    return path


def _check_target(spec: dict[str, Any], calls: int) -> None:
    """A tool call or tool result edit must name a call the step made (by index)."""
    if spec.get("kind") not in ("tool_call", "tool_result") or spec.get("tool_call_id"):
        return
    index = spec.get("index", 0)
    if not isinstance(index, int) or not 0 <= index < calls:
        raise JobRequestError(
            f"this step made {calls} tool call(s); {spec['kind']} index {index} names none"
        )


def _shown(path: Path) -> str:
    """A path as the user would type it in the server's directory (relative when it lies
    below it)."""
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if relative.startswith("..") else relative


def replayable_entry(catalog: Catalog, trace_key: str) -> TraceEntry:
    """The catalog entry a job may replay: a recording or one of its branches."""
    entry = catalog.traces.get(trace_key)
    if entry is None:
        raise JobRequestError("no such trace", 404)
    if entry.kind not in ("recording", "replay") or entry.run_dir is None:
        raise JobRequestError(
            "only a recording (faultfinder record) or one of its branches can be replayed"
        )
    return entry


def parse_request(
    catalog: Catalog, body: Any
) -> tuple[str, int | None, dict[str, Any] | None, int, bool]:
    """(trace key, step, edit-file object, repeats, verdict?) from a request body."""
    if not isinstance(body, dict):
        raise JobRequestError("the request is a JSON object")
    unknown = sorted(set(body) - REQUEST_FIELDS)
    if unknown:
        raise JobRequestError(
            f"the page cannot choose {', '.join(unknown)}: the program, the upstream and "
            "everything else but the step, the edit and the repeats come from the "
            "command line"
        )
    trace_key = body.get("trace")
    if not isinstance(trace_key, str):
        raise JobRequestError("'trace' names the recording or branch to replay")
    entry = replayable_entry(catalog, trace_key)
    at = body.get("at")
    if at is not None and (not isinstance(at, int) or isinstance(at, bool)):
        raise JobRequestError("'at' is a step number")
    if at is not None and not 0 <= at < len(entry.trace.steps):
        raise JobRequestError(f"step {at} is not in this trace")
    spec = body.get("edit")
    if spec is not None:
        if at is None:
            raise JobRequestError("an edit needs the step it changes ('at')")
        try:
            parse_edit_file(spec, "edit")
        except FaultfinderError as exc:
            raise JobRequestError(str(exc)) from None
        _check_target(spec, len(entry.trace.steps[at].tool_calls))
    repeats = body.get("repeats", 1)
    if not isinstance(repeats, int) or isinstance(repeats, bool):
        raise JobRequestError("'repeats' is a whole number")
    if not 1 <= repeats <= MAX_REPEATS:
        raise JobRequestError(f"'repeats' is between 1 and {MAX_REPEATS}")
    verdict = bool(body.get("verdict", False))
    if verdict and spec is None:
        raise JobRequestError("a verdict needs an edit")
    return trace_key, at, spec, repeats, verdict


def replay_command(settings: ReplaySettings, job: ReplayJob, branch_id: str) -> str:
    """The `faultfinder replay` command that makes the same branch."""
    s = settings.program
    argv = ["faultfinder", "replay", _shown(job.base_dir)]
    if job.at is not None:
        argv += ["--at", str(job.at)]
    if job.edit_file is not None:
        argv += ["--edit-file", _shown(job.edit_file)]
    if job.verdict_wanted and REPEAT_TEMPERATURE is not None:
        argv += ["--live-temperature", str(REPEAT_TEMPERATURE)]
    argv += settings.upstream_args()
    if s.api_key_env:
        argv += ["--api-key-env", s.api_key_env]
    if s.timeout is not None:
        argv += ["--timeout", f"{s.timeout:g}"]
    if s.cwd:
        argv += ["--cwd", s.cwd]
    argv += ["--branch-id", branch_id, "--quiet", "--", *s.command]
    return shlex.join(argv)


def verify_command(settings: ReplaySettings, job: ReplayJob) -> str:
    """The `faultfinder verify-edit` command that makes the same branches and row."""
    s = settings.program
    assert job.edit_file is not None and job.at is not None
    argv = ["faultfinder", "verify-edit", _shown(job.base_dir), "--at", str(job.at)]
    argv += ["--edit-file", _shown(job.edit_file), "--repeats", str(job.repeats)]
    argv += ["--session", job.session]
    argv += settings.upstream_args()
    if s.api_key_env:
        argv += ["--upstream-key-env", s.api_key_env]
    if s.timeout is not None:
        argv += ["--replay-timeout", f"{s.timeout:g}"]
    if s.cwd:
        argv += ["--cwd", s.cwd]
    if settings.check:
        argv += ["--check", settings.check]
    argv += [*settings.judge_args, "--", *s.command]
    return shlex.join(argv)


def verdict_command(job: ReplayJob) -> str | None:
    """The `faultfinder debug-report` command that shows the job's DoVer row."""
    if job.dover_file is None:
        return None
    return shlex.join(["faultfinder", "debug-report", _shown(job.dover_file)])
