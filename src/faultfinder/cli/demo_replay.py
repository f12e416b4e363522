"""The second half of `faultfinder demo`: the demo team fails, a replay with its decisive
step fixed succeeds — recorded and replayed offline, on loopback.

The team (``python -m faultfinder.demo_team``, plain OpenAI SDK calls) runs unmodified as a
subprocess against the scripted demo model (``demo_team.mock_model``, a rule-following test
double, not a model) served by the same endpoint as ``faultfinder serve-local``. Its
plan for the task carries a deliberate slip; the recording fails. The fix is the demo's
scripted correction of the first instruction that carries the slip
(``demo_team.mock_debugger.fix_instruction``); the replay answers every call before that
step from the recording, serves the edit, runs the rest live, and the outcome flips.
``faultfinder debug`` finds and tests such fixes with a model: this only shows the
machinery, end to end.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from faultfinder.demo_team import find_task, mock_debugger, mock_model
from faultfinder.errors import ConfigError
from faultfinder.llm.client import LLM
from faultfinder.llm.doubles import FunctionBackend
from faultfinder.replay.edits import Edit
from faultfinder.replay.local_server import LocalModelServer
from faultfinder.replay.replayer import ReplayOptions
from faultfinder.replay.session import SessionOptions, record_run, replay_run
from faultfinder.traces.schema import Trace

DEMO_TASK = "avalon-2020"
"""The demo task whose scripted plan drops the year the task asks about."""
MODEL_NAME = "demo-team-scripted"
TIMEOUT_S = 120.0
"""A demo team run that takes longer than this is stopped (it takes about a second)."""


@dataclass
class Flip:
    """What the replay half of the demo found."""

    run_dir: Path
    task: str
    recorded: Trace
    step: int
    agent: str
    original: str
    fixed: str
    replayed: Trace
    origins: list[str]

    @property
    def before(self) -> str:
        return str(self.recorded.metadata.get("outcome", "unknown"))

    @property
    def after(self) -> str:
        return str(self.replayed.metadata.get("outcome", "unknown"))

    @property
    def flipped(self) -> bool:
        return self.before == "failure" and self.after == "success"


def team_command(task_id: str) -> list[str]:
    """The demo team on one task, as a program run by ``record`` and ``replay``."""
    return [sys.executable, "-m", "faultfinder.demo_team", "--quiet", "--task-id", task_id]


def fix_of(trace: Trace, task: str) -> tuple[int, str]:
    """The first step with an instruction the demo's scripted correction changes, and the
    step's text with every such line corrected."""
    for step in trace.steps:
        lines = step.content.split("\n")
        fixed = "\n".join(mock_debugger.fix_instruction(task, line) for line in lines)
        if fixed != step.content:
            return step.index, fixed
    raise ConfigError(f"{trace.id}: no step of the recording carries the demo's scripted slip.")


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    """The (was, now) pairs of the lines an edit changed."""
    return [
        (old, new)
        for old, new in zip(before.split("\n"), after.split("\n"), strict=False)
        if old != new
    ]


async def record_and_fix(run_dir: Path, task_id: str = DEMO_TASK) -> Flip:
    """Record the demo team on ``task_id`` into ``run_dir`` (replacing an earlier demo
    recording there), then replay it with the slip fixed."""
    task = find_task(task_id)
    if task is None:
        raise ConfigError(f"Unknown demo task '{task_id}'.")
    if run_dir.exists():
        if not (run_dir / "meta.json").exists():
            raise ConfigError(f"{run_dir} exists and is not a recording; choose another path.")
        shutil.rmtree(run_dir)
    command = team_command(task.id)
    options = SessionOptions(echo=False, timeout=TIMEOUT_S)
    llm = LLM(FunctionBackend(mock_model.respond, model=MODEL_NAME))
    async with LocalModelServer(llm, model_name=MODEL_NAME) as upstream:
        recorded = await record_run(
            command,
            upstream.base_url,
            run_dir.parent,
            run_id=run_dir.name,
            ground_truth=task.answer,
            reference_steps=task.reference_steps,
            options=options,
        )
        step, fixed = fix_of(recorded.trace, task.text)
        replayed = await replay_run(
            recorded.run_dir,
            command,
            ReplayOptions(at=step, edit=Edit(output=fixed)),
            upstream=upstream.base_url,
            branch_id="fixed",
            options=options,
        )
    original = recorded.trace.steps[step]
    return Flip(
        run_dir=recorded.run_dir,
        task=task.text,
        recorded=recorded.trace,
        step=step,
        agent=original.agent,
        original=original.content,
        fixed=fixed,
        replayed=replayed.trace,
        origins=[str(s.metadata.get("origin", "?")) for s in replayed.trace.steps],
    )


def describe_origins(origins: list[str]) -> str:
    """'steps 0 from the recording, 1 edited, 2-7 live'."""
    names = {"cached": "from the recording", "edited": "edited", "live": "live"}
    parts: list[str] = []
    start = 0
    for i in range(1, len(origins) + 1):
        if i == len(origins) or origins[i] != origins[start]:
            span = str(start) if i - 1 == start else f"{start}-{i - 1}"
            parts.append(f"{span} {names.get(origins[start], origins[start])}")
            start = i
    return "steps " + ", ".join(parts) if parts else "no steps"
