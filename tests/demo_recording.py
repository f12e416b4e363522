"""The demo team recorded through the proxy, the way most replay and DoVer tests start.

One call instead of the same `record_run(...)` in every test file: the offline demo team
(`python -m faultfinder.demo_team --quiet --task-id TASK`), its model the scripted one on
a loopback fake upstream, nothing echoed. On ``avalon-2020`` it answers 154131 where the
reference is 144630 (it drops the year), so its recording is a failing run.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from faultfinder.demo_team import mock_model
from faultfinder.replay.session import RunOutcome, SessionOptions, record_run
from faultfinder.testing import FakeOpenAIServer

AVALON_ANSWER = "144630"
"""The reference answer of ``avalon-2020`` (the team answers 154131)."""


def demo_command(task_id: str = "avalon-2020", *extra: str) -> list[str]:
    """The demo team's command line on ``task_id``."""
    return [sys.executable, "-m", "faultfinder.demo_team", "--quiet", "--task-id", task_id, *extra]


TEAM = demo_command()
"""The team on the task its recording fails."""


def record_demo(
    root: Path,
    upstream: str | None = None,
    *,
    task_id: str = "avalon-2020",
    run_id: str | None = "avalon",
    ground_truth: str | None = AVALON_ANSWER,
    reference_steps: list[str] | None = None,
) -> RunOutcome:
    """Record the demo team on ``task_id`` into ``root/<run_id>``.

    ``upstream``: the endpoint its model calls go to, kept by the caller (for tests that
    replay against it later); None: a fake upstream answering as the demo model is
    started for the recording only and closed after it.
    """
    if upstream is None:
        with FakeOpenAIServer(reply=mock_model.reply) as server:
            return record_demo(
                root,
                server.base_url,
                task_id=task_id,
                run_id=run_id,
                ground_truth=ground_truth,
                reference_steps=reference_steps,
            )
    return asyncio.run(
        record_run(
            demo_command(task_id),
            upstream,
            root,
            run_id=run_id,
            ground_truth=ground_truth,
            reference_steps=reference_steps,
            options=SessionOptions(echo=False),
        )
    )
