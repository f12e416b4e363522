"""DoVer as the tests of framework programs drive it: a CrewAI crew recorded in CrewAI's own
environment, and ``faultfinder debug`` run once (one repeat, the whole run as one trial, no
cache) on a recording, through click's runner, against the loopback fake upstream.

Shared by tests/test_dover_crewai.py, tests/test_dover_crewai_paths.py,
tests/test_dover_handoffs.py, tests/test_dover_messages.py and tests/test_replay_apis.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import frameworks_scripts as scripts
from faultfinder.cli import main
from faultfinder.replay.session import SessionOptions, record_run
from faultfinder.testing import FakeOpenAIServer
from faultfinder.traces.schema import Trace
from framework_env import CREWAI, NO_TELEMETRY, framework_python

FRAMEWORKS = Path(__file__).parent / "fixtures" / "frameworks"
DEBUGGER = "function:frameworks_scripts:debugger"
"""The scripted debugger model of tests/frameworks_scripts.py."""

Recorded = tuple[Path, Trace, list[str], str]
"""A crew recorded once: its run directory, trace, command and the upstream's URL."""


@contextmanager
def recorded_crew(
    program: str, reply: Callable[[dict[str, Any]], Any], out: Path
) -> Iterator[Recorded]:
    """Record ``program`` (a CrewAI program of tests/fixtures/frameworks) asking
    ``scripts.TASK`` into ``out``, its upstream scripted by ``reply``; the recording, while
    the upstream still serves and CrewAI's telemetry stays off."""
    with pytest.MonkeyPatch.context() as env:
        for key, value in NO_TELEMETRY.items():
            env.setenv(key, value)
        env.delenv("OPENAI_BASE_URL", raising=False)
        command = [str(framework_python("crewai", CREWAI)), str(FRAMEWORKS / program), scripts.TASK]
        with FakeOpenAIServer(reply=reply) as upstream:
            recorded = asyncio.run(
                record_run(
                    command,
                    upstream.base_url,
                    out,
                    run_id="run",
                    ground_truth=scripts.ANSWER,
                    options=SessionOptions(echo=False, timeout=240),
                )
            )
            assert recorded.child.exit_code == 0, recorded.child.stderr[-3000:]
            yield recorded.run_dir, recorded.trace, command, upstream.base_url


def debug_once(
    run_dir: Path,
    upstream: str,
    command: list[str],
    out: Path,
    *options: str,
    model: str = DEBUGGER,
) -> tuple[list[dict[str, Any]], str]:
    """``faultfinder debug`` of ``run_dir`` (one repeat, ``--segment none``, no cache, with
    ``options``) replaying ``command`` against ``upstream``, its rows written to ``out``;
    asserts it exits 0 and returns the rows and the command's output."""
    result = CliRunner().invoke(
        main,
        [
            "debug", str(run_dir), "--repeats", "1", "--segment", "none", *options,
            "--out", str(out), "--upstream", upstream, "--model", model, "--cache", "none",
            "--", *command,
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return rows, result.output
