"""Evaluation cases on a Ray cluster.

:class:`RayExecutor` is a :class:`~faultfinder.eval.runner.CaseExecutor`: the driver hands
cases to a pool of :class:`CaseWorker` actors and yields each finished row to
``run_eval``, which writes it, exactly as for a local run. Each worker builds its own LLM
from an :class:`~faultfinder.llm.spec.LLMSpec` (the key is read from the worker's own
environment, never shipped), with the run's budget and request rate held by one
:class:`~faultfinder.scale.limits.SharedLimits` actor.

Faults: a worker process that dies is restarted by Ray and the case it was running is
sent again (``max_task_retries``); the driver writes a row only when a case returns, so a
retried case is written once. A case that still fails after the retries becomes an
'error' row, which ``--resume`` runs again. A worker that cannot build its model (a model
module or key missing on that machine) stops the run with the error a local run would
give, before or after the rows already written.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from faultfinder.errors import ConfigError, EndpointSetupError, FaultfinderError
from faultfinder.eval.cases import Case, failed_row, run_case
from faultfinder.eval.rows import EvalRow
from faultfinder.eval.runner import stops_run
from faultfinder.llm.client import LLM
from faultfinder.llm.spec import LLMSpec
from faultfinder.scale.cluster import cluster_cpus, require_ray
from faultfinder.scale.limits import RayLedger, RayRateLimiter, SharedLimits

ray = require_ray()

WORKER_RESTARTS = 3
"""Times Ray restarts a worker that died (its process killed, its node lost)."""
CASE_RETRIES = 3
"""Times a case is sent again after the worker running it died."""
COULD_NOT_RUN = "could_not_run"
"""Key of a worker's answer when it could not build its model (the reason, as text)."""
SETUP_REFUSED = "setup_refused"
"""Key of a worker's answer when the endpoint refused the run's setup (the key, the model
name: :class:`~faultfinder.errors.EndpointSetupError`), with its message: the driver
stops the run as a local one stops."""


@ray.remote(num_cpus=1, max_restarts=WORKER_RESTARTS, max_task_retries=CASE_RETRIES)
class CaseWorker:
    """Runs cases with an LLM of its own (client, cache) and the run's shared limits."""

    def __init__(self, spec: dict[str, Any], limits_name: str) -> None:
        self.llm: LLM | None = None
        self.error: str | None = None
        """Why this worker could not build its model (then it runs no case)."""
        # The limits actor is found by name, not passed: an actor handle among a
        # restartable actor's constructor arguments makes Ray's core worker print an
        # error line for every worker (ray-project/ray#53727), on every run.
        limits = ray.get_actor(limits_name)
        try:
            self.llm = LLMSpec.model_validate(spec).build(
                ledger=RayLedger(limits), limiter=RayRateLimiter(limits)
            )
        except FaultfinderError as exc:
            # Kept and sent back with each case: raised here, Ray would only say that the
            # actor died in its creation task, and restart it to fail again.
            self.error = str(exc)

    async def run(self, case: Case) -> dict[str, Any]:
        if self.llm is None:
            return {COULD_NOT_RUN: self.error or "the worker has no model"}
        try:
            row = await run_case(case, self.llm)
        except EndpointSetupError as exc:
            # Sent back as data: raised, Ray would wrap it, and the driver could not tell
            # it from a lost worker.
            return {SETUP_REFUSED: str(exc)}
        return row.model_dump(mode="json")

    def pid(self) -> int:
        return os.getpid()


class RayExecutor:
    """Runs evaluation cases on Ray actors; rows come back to the driver to be written."""

    def __init__(
        self,
        spec: LLMSpec,
        model_name: str,
        *,
        concurrency: int = 8,
        workers: int | None = None,
    ) -> None:
        if spec.model.startswith("scripted:"):
            raise ConfigError(
                "scripted: replies are consumed in order, and each Ray worker would hold its "
                "own copy. Use a function:module:callable model (answers by content) or "
                "--executor local."
            )
        if concurrency < 1:
            raise ConfigError("--concurrency must be at least 1")
        self.spec = spec
        self._model_name = model_name
        self.concurrency = concurrency
        self.workers = workers
        self.pool: list[Any] = []
        self.limits: Any = None

    @property
    def model_name(self) -> str:
        return self._model_name

    def start(self) -> None:
        """Create the limits actor and the worker pool (once)."""
        if self.pool:
            return
        name = f"faultfinder-limits-{uuid.uuid4().hex}"
        self.limits = SharedLimits.options(name=name).remote(  # type: ignore[attr-defined]
            self.spec.budget.model_dump(), self.spec.rate_limit
        )
        size = max(1, min(self.workers or cluster_cpus(), self.concurrency))
        # Each worker runs its share of the cases at once (an async actor).
        per_worker = -(-self.concurrency // size)
        spec = self.spec.model_dump(mode="json")
        self.pool = [
            CaseWorker.options(max_concurrency=per_worker).remote(  # type: ignore[attr-defined]
                spec, name
            )
            for _ in range(size)
        ]

    def close(self) -> None:
        for actor in [*self.pool, self.limits]:
            if actor is not None:
                ray.kill(actor)
        self.pool = []
        self.limits = None

    async def run(self, cases: Sequence[Case], stop: asyncio.Event) -> AsyncIterator[EvalRow]:
        self.start()
        queue = list(reversed(cases))
        load = [0] * len(self.pool)
        in_flight: dict[asyncio.Future[Any], tuple[Case, int]] = {}

        def submit() -> None:
            case = queue.pop()
            worker = load.index(min(load))
            load[worker] += 1
            ref = self.pool[worker].run.remote(case)
            in_flight[asyncio.wrap_future(ref.future())] = (case, worker)

        try:
            while queue or in_flight:
                while queue and len(in_flight) < self.concurrency and not stop.is_set():
                    submit()
                if not in_flight:
                    break
                finished, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                refused: EndpointSetupError | None = None
                for future in finished:
                    case, worker = in_flight.pop(future)
                    load[worker] -= 1
                    try:
                        row = self._row(case, future)
                    except EndpointSetupError as exc:
                        # The cases that finished beside it keep their rows.
                        stop.set()
                        refused = refused or exc
                        continue
                    if stops_run(row):
                        stop.set()
                    yield row
                if refused is not None:
                    raise refused
        finally:
            for future in in_flight:
                future.cancel()

    def _row(self, case: Case, future: asyncio.Future[Any]) -> EvalRow:
        try:
            result = future.result()
            if COULD_NOT_RUN in result:
                # As a local run stops before any case when its model cannot be built: the
                # same message, exit 1; rows written so far stay (--resume continues).
                raise ConfigError(f"{result[COULD_NOT_RUN]} (on a Ray worker)")
            if SETUP_REFUSED in result:
                raise EndpointSetupError(str(result[SETUP_REFUSED]))
            return EvalRow.model_validate(result)
        except ray.exceptions.RayError as exc:
            # The case outlived every retry (its workers kept dying): a visible error row,
            # run again by --resume.
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return failed_row(
                case, self.model_name, f"Ray worker lost: {type(exc).__name__}: {message}"
            )

    def usage_snapshot(self) -> dict[str, int]:
        """Calls and tokens the shared ledger has seen (for tests and progress)."""
        if self.limits is None:
            return {}
        snapshot: dict[str, int] = ray.get(self.limits.snapshot.remote())
        return snapshot
