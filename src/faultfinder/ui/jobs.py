"""Attributions started from the trace page (only with `faultfinder ui --allow-run`).

The method and the model are fixed when the server starts; the page can only say *which
trace*. Jobs run one at a time in the server's event loop; each finished result is
appended to the results file (one Attribution JSON object per line, the format of
`faultfinder attribute --json`, compacted) and added to the catalog, so it shows on the
trace at once and again after a restart.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from faultfinder.errors import FaultfinderError
from faultfinder.judging.method import run_method
from faultfinder.llm.client import LLM
from faultfinder.llm.scopes import track_usage
from faultfinder.registry import create_method, with_shortlist_weights
from faultfinder.ui.catalog import AttributionEntry, Catalog

JobState = Literal["queued", "running", "done", "failed"]
MAX_JOBS = 200
"""Jobs remembered (oldest finished ones are forgotten first)."""


@dataclass
class Job:
    id: str
    trace_key: str
    state: JobState = "queued"
    calls: int = 0
    """Model calls made so far."""
    tokens: int = 0
    message: str = ""
    answer_id: int | None = None
    """Position of the result in the catalog's attribution list."""


class JobRunner:
    """Runs ``method_spec`` with an LLM from ``make_llm`` on traces of ``catalog``."""

    def __init__(
        self,
        catalog: Catalog,
        method_spec: str,
        make_llm: Callable[[], LLM],
        results: Path,
        shortlist_weights: str | None = None,
    ) -> None:
        self.settings = with_shortlist_weights(method_spec, {}, shortlist_weights)
        create_method(method_spec, **self.settings)  # fail at start-up on an unknown method
        self.shortlist_weights = shortlist_weights
        """Weights file of the step sets (and of shortlist/compose); None: the shipped one."""
        self.catalog = catalog
        self.method_spec = method_spec
        self.make_llm = make_llm
        self.results = results
        self.jobs: dict[str, Job] = {}
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, trace_key: str) -> Job:
        job = Job(id=secrets.token_hex(6), trace_key=trace_key)
        if len(self.jobs) >= MAX_JOBS:
            finished = [j.id for j in self.jobs.values() if j.state in ("done", "failed")]
            for old in finished[: len(self.jobs) - MAX_JOBS + 1]:
                del self.jobs[old]
        self.jobs[job.id] = job
        task = asyncio.get_running_loop().create_task(self._run(job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job

    async def _run(self, job: Job) -> None:
        entry = self.catalog.traces[job.trace_key]
        async with self._lock:
            job.state = "running"
            with track_usage() as scope:
                watcher = asyncio.get_running_loop().create_task(self._watch(job, scope))
                try:
                    method = create_method(self.method_spec, **self.settings)
                    result = await run_method(
                        method,
                        entry.trace,
                        self.make_llm(),
                        label=self.method_spec,
                        step_set_weights=self.shortlist_weights,
                    )
                except FaultfinderError as exc:
                    job.state, job.message = "failed", _first_line(exc)
                    return
                except Exception as exc:  # a background job must never die silently
                    job.state, job.message = "failed", f"{type(exc).__name__}: {_first_line(exc)}"
                    return
                finally:
                    watcher.cancel()
            job.calls, job.tokens = scope.usage.calls, scope.usage.total_tokens
            self.results.parent.mkdir(parents=True, exist_ok=True)
            with self.results.open("a", encoding="utf-8") as handle:
                handle.write(result.model_dump_json() + "\n")
            self.catalog.attributions.append(AttributionEntry(result, "ui", self.results))
            job.answer_id = len(self.catalog.attributions) - 1
            job.state = "done"
            job.message = f"{result.status}: {result.agent or '-'} @ step {result.step}"

    @staticmethod
    async def _watch(job: Job, scope: object) -> None:
        while True:
            usage = getattr(scope, "usage", None)
            if usage is not None:
                job.calls, job.tokens = usage.calls, usage.total_tokens
            await asyncio.sleep(0.2)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
