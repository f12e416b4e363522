"""Replays started from the page (only with `faultfinder ui --allow-replay -- COMMAND`).

Everything that decides *what runs and what is contacted* is fixed when the server starts:
the program (the command after '--', never one read from a run directory), where live
calls go (``--upstream``, or a recording's own upstream only with ``--trust-run``), the key
(``--api-key-env``: a variable of the server's environment), the success checker and the
judge model. The page chooses only which recording or branch, which step, the edit (one
object of the edit-file format of ``faultfinder replay --edit-file``) and how many times.

Each replay is :func:`faultfinder.replay.session.replay_run`, the function behind
``faultfinder replay``, so it writes the same branch directory
(``<base>/branches/<id>/``); the edit is kept as the edit file the command would read
(``<base>/edits/<session>.json``). "Run N times" replays the edit N times and writes one
DoVer row (``<base>/dover/<session>.jsonl``, the row ``faultfinder debug`` writes) whose
flip rate, interval and verdict come from DoVer's own code
(:func:`faultfinder.dover.verdict.classify`, :func:`wilson_interval`).

One job runs at a time per recording (its branches included); a job can be cancelled,
which stops the program (SIGTERM, then SIGKILL) and keeps what the branch recorded.

This module runs, watches and cancels jobs; what a job is, what a page may ask for and the
command lines that redo a job are in :mod:`.replay_requests`.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path
from typing import Any

from faultfinder.dover.checker import CheckResult, check_recorded, make_checker
from faultfinder.dover.edit_repeats import (
    REPEAT_TEMPERATURE,
    Attempt,
    judge_repeats,
    run_attempt,
    verify_config,
    why_not_replayed,
    write_row,
)
from faultfinder.errors import FaultfinderError
from faultfinder.replay.edits import Edit, read_edit_file
from faultfinder.replay.recorder import (
    BRANCHES_DIR,
    REPORT_FILE,
    TRACE_FILE,
    new_run_id,
    read_meta,
)
from faultfinder.replay.report import ReplayReport
from faultfinder.replay.session import ReplayOutcome
from faultfinder.shown import safe
from faultfinder.traces.loader import load_traces
from faultfinder.ui.catalog import Catalog, DoverEntry, ReplayEntry, make_key
from faultfinder.ui.job_progress import BranchWatch, tail
from faultfinder.ui.replay_requests import (
    JobRequestError,
    ReplayJob,
    ReplaySettings,
    parse_request,
    replay_command,
    replayable_entry,
    root_of,
    verdict_command,
    verify_command,
)

MAX_JOBS = 100
"""Jobs remembered (the oldest finished ones are forgotten first)."""


class ReplayRunner:
    """Starts, watches and cancels replays of the recordings in ``catalog``."""

    def __init__(self, catalog: Catalog, settings: ReplaySettings) -> None:
        if not settings.program.command:
            raise ValueError("replays need the program to run (the command after '--')")
        self.catalog = catalog
        self.settings = settings
        self.checker = make_checker(settings.check)
        self.jobs: dict[str, ReplayJob] = {}
        self._watches: dict[tuple[str, int], BranchWatch] = {}
        self._busy: dict[Path, str] = {}

    # --- starting -------------------------------------------------------------------

    def start(self, body: Any) -> ReplayJob:
        trace_key, at, spec, repeats, verdict = parse_request(self.catalog, body)
        entry = replayable_entry(self.catalog, trace_key)
        assert entry.run_dir is not None
        root = root_of(entry.run_dir)
        running = self._busy.get(root)
        if running is not None:
            raise JobRequestError(
                f"a job is already running on this recording ({running}); wait or cancel it",
                409,
            )
        session = new_run_id("ui-")
        job = ReplayJob(
            id=secrets.token_hex(6),
            trace_key=trace_key,
            base_dir=entry.run_dir,
            root_dir=root,
            at=at,
            spec=spec,
            repeats=repeats,
            verdict_wanted=verdict,
            session=session,
        )
        if spec is not None:
            job.edit_file = entry.run_dir / "edits" / f"{session}.json"
        for number in range(repeats):
            branch_id = f"{session}-r{number}" if verdict else session
            job.attempts.append(
                Attempt(
                    number,
                    branch_id,
                    entry.run_dir / BRANCHES_DIR / branch_id,
                    replay_command(self.settings, job, branch_id),
                )
            )
        job.commands = [a.command for a in job.attempts]
        job.command = verify_command(self.settings, job) if verdict else job.commands[0]
        self._forget_old()
        self.jobs[job.id] = job
        self._busy[root] = job.id
        job.task = asyncio.get_running_loop().create_task(self._run(job))
        return job

    def cancel(self, job: ReplayJob) -> None:
        if job.task is not None and not job.task.done():
            job.task.cancel()

    def _forget_old(self) -> None:
        if len(self.jobs) < MAX_JOBS:
            return
        finished = [j.id for j in self.jobs.values() if j.task is None or j.task.done()]
        for old in finished[: len(self.jobs) - MAX_JOBS + 1]:
            del self.jobs[old]
            for key in [k for k in self._watches if k[0] == old]:
                del self._watches[key]

    # --- running --------------------------------------------------------------------

    async def _run(self, job: ReplayJob) -> None:
        job.state = "running"
        try:
            edit = None
            if job.spec is not None and job.edit_file is not None:
                job.edit_file.parent.mkdir(parents=True, exist_ok=True)
                job.edit_file.write_text(
                    json.dumps(job.spec, ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
                )
                edit = read_edit_file(job.edit_file)  # what `replay --edit-file` reads
            check = None
            if job.verdict_wanted and job.spec is not None and job.at is not None:
                # DoVer's rules before any replay, as `verify-edit` applies them: a run that
                # already passes its check, or an edit equal to the recording, tells nothing.
                trace = self.catalog.traces[job.trace_key].trace
                check = await asyncio.to_thread(
                    check_recorded, self.checker, trace, str(job.base_dir)
                )
                job.not_replayed = why_not_replayed(check, trace.steps[job.at], job.spec)
                if job.not_replayed is not None:
                    job.attempts = []
            for attempt in job.attempts:
                await self._attempt(job, attempt, edit)
            if job.verdict_wanted:
                await self._verdict(job, check)
            job.state = "done"
            job.message = self._summary(job)
        except asyncio.CancelledError:
            job.state = "cancelled"
            job.message = "cancelled: the program was stopped; what it recorded is kept"
            for attempt in job.attempts:
                if attempt.state in ("waiting", "running"):
                    attempt.state = "cancelled"
        except Exception as exc:  # a background job must never die silently
            job.state = "failed"
            job.message = _first_line(exc)
        finally:
            self._busy.pop(job.root_dir, None)

    async def _attempt(self, job: ReplayJob, attempt: Attempt, edit: Edit | None) -> None:
        temperature = REPEAT_TEMPERATURE if job.verdict_wanted else None
        try:
            outcome = await run_attempt(
                attempt,
                job.base_dir,
                job.at,
                edit,
                self.settings.program,
                self.checker,
                temperature=temperature,
            )
        except asyncio.CancelledError:
            attempt.state = "cancelled"
            self._register_partial(job, attempt)
            raise
        if outcome is None:  # could not run at all (no upstream...): the job stops, as
            raise FaultfinderError(attempt.error or "the replay did not run")  # the CLI does
        self._register(job, attempt, outcome)

    def _register(self, job: ReplayJob, attempt: Attempt, outcome: ReplayOutcome) -> None:
        """Add the new branch to the catalog, as `faultfinder ui` would find it at start."""
        branch = outcome.branch_dir
        trace_key = self.catalog.add_trace(outcome.trace, branch / TRACE_FILE, "replay", branch)
        key = make_key("replay", str(branch))
        self.catalog.replays[key] = ReplayEntry(
            key, branch, job.base_dir, outcome.meta, outcome.report, trace_key, job.trace_key
        )
        attempt.replay_key, attempt.trace = key, outcome.trace

    def _register_partial(self, job: ReplayJob, attempt: Attempt) -> None:
        """A cancelled branch is listed too (its trace and report were written)."""
        branch = attempt.branch_dir
        try:
            trace = load_traces(branch / TRACE_FILE, format="faultfinder")[0]
            report_path = branch / REPORT_FILE
            report = (
                ReplayReport.model_validate_json(report_path.read_text(encoding="utf-8"))
                if report_path.is_file()
                else None
            )
            meta = read_meta(branch)
        except (FaultfinderError, OSError, ValueError, IndexError):
            return
        trace_key = self.catalog.add_trace(trace, branch / TRACE_FILE, "replay", branch)
        key = make_key("replay", str(branch))
        self.catalog.replays[key] = ReplayEntry(
            key, branch, job.base_dir, meta, report, trace_key, job.trace_key
        )
        attempt.replay_key, attempt.trace = key, trace

    async def _verdict(self, job: ReplayJob, check: CheckResult | None = None) -> None:
        """Flip rate, interval and DoVer's verdict over the replays: one DoVer row, in
        ``<base>/dover/<session>.jsonl`` (where `debug` writes its rows by default)."""
        assert job.spec is not None and job.at is not None
        judge = self.settings.judge() if self.settings.judge is not None else None
        config = verify_config("faultfinder ui", job.at, job.spec, job.repeats, REPEAT_TEMPERATURE)
        config["commands"] = [job.command] if job.command else job.commands
        verdict = await judge_repeats(
            self.catalog.traces[job.trace_key].trace,
            job.at,
            job.spec,
            job.attempts,
            run_dir=job.base_dir,
            checker=self.checker,
            judge=judge,
            config=config,
            check=check,
        )
        row = verdict.row
        job.verdict, job.verdict_reason = row.verdict, row.verdict_reason
        job.flip_rate, job.flip_rate_ci = verdict.flip_rate, verdict.interval
        path = write_row(job.base_dir, job.session, row)
        job.dover_file = path
        key = make_key("dover", str(path))
        self.catalog.dovers[key] = DoverEntry(key, path, [row])
        job.dover_key = key

    def _summary(self, job: ReplayJob) -> str:
        if job.verdict is not None:
            rate = "-" if job.flip_rate is None else f"{job.flip_rate:.0%}"
            return f"{job.verdict}: flip rate {rate} ({job.verdict_reason})"
        if job.not_replayed is not None:
            return f"not replayed, no verdict: {job.not_replayed}"
        attempt = job.attempts[-1]
        if attempt.program_failed:  # its answer is the last step that ran: not rated
            return f"answer {attempt.answer!r}, not rated: {attempt.error or 'the program failed'}"
        if attempt.edit_applied is False:  # the edit never went out: nothing was tested
            return f"answer {attempt.answer!r}, not rated: the edit was {attempt.edit_state}"
        if attempt.success is None:
            return f"answer {attempt.answer!r}"
        said = "matches" if attempt.success else "does not match"
        return f"answer {attempt.answer!r} {said} the reference"

    # --- watching -------------------------------------------------------------------

    def status(self, job: ReplayJob) -> dict[str, Any]:
        """What the job page shows: state, per replay its calls and output, the verdict."""
        attempts = []
        for attempt in job.attempts:
            watch = self._watches.setdefault(
                (job.id, attempt.number), BranchWatch(attempt.branch_dir)
            )
            if attempt.state != "waiting":
                watch.poll()
            attempts.append(
                {
                    "number": attempt.number,
                    "branch": attempt.branch_id,
                    "state": attempt.state,
                    "command": attempt.command,
                    "calls": watch.calls,
                    "counts": watch.counts(),
                    "tokens": watch.tokens,
                    "unreported": watch.unreported,
                    "stdout": tail(attempt.branch_dir / "stdout.txt"),
                    "stderr": tail(attempt.branch_dir / "stderr.txt"),
                    "replay": f"/replay/{attempt.replay_key}" if attempt.replay_key else None,
                    "answer": _shown(attempt.answer),
                    "success": attempt.success,
                    "edit_applied": attempt.edit_applied,
                    "edit_state": attempt.edit_state,
                    "exit_code": attempt.exit_code,
                    "program_failed": attempt.program_failed,
                    "error": _shown(attempt.error),
                }
            )
        return {
            "id": job.id,
            "state": job.state,
            "message": _shown(job.message),
            "attempts": attempts,
            "verdict": job.verdict,
            "verdict_reason": _shown(job.verdict_reason),
            "not_replayed": job.not_replayed,
            "flip_rate": job.flip_rate,
            "flip_rate_ci": list(job.flip_rate_ci) if job.flip_rate_ci else None,
            "dover": f"/dover/{job.dover_key}" if job.dover_key else None,
            "verdict_command": verdict_command(job),
            "command": job.command,
        }


def _shown(text: str | None) -> str | None:
    """Text the job page's script shows (with textContent, past the templates), its
    direction and control characters escaped as the templates escape them."""
    return None if text is None else safe(text)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
