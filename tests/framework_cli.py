"""The CLI as a user drives it on a framework program: ``faultfinder record``, ``replay
--json`` and ``attribute``, each through click's runner, against the loopback fake
upstream. Shared by the tests of frameworks the project does not depend on
(tests/test_frameworks_autogen.py, tests/test_frameworks_pydantic_ai.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from faultfinder.cli import main

ENV_KEY = {"OPENAI_API_KEY": "sk-test-not-a-real-key"}
"""What a user's program has in its environment besides the base URL the recorder sets."""


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), env=ENV_KEY)


def record(command: list[str], upstream: str, out: Path, answer: str) -> Path:
    """``faultfinder record`` of ``command`` into ``out/run``; the run directory."""
    result = invoke(
        "record", "--upstream", upstream, "-o", str(out), "--run-id", "run",
        "--ground-truth", answer, "--quiet", "--timeout", "240", "--", *command,
    )  # fmt: skip
    run = out / "run"
    assert result.exit_code == 0, (result.output, (run / "stderr.txt").read_text()[-3000:])
    return run


def replay(
    run: Path, upstream: str, command: list[str], branch: str, *edit: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``faultfinder replay --json`` of ``run`` (with ``edit``'s options) into the branch
    ``branch``: its report and the branch's trace."""
    result = invoke(
        "replay", str(run), *edit, "--upstream", upstream, "--branch-id", branch,
        "--json", "--", *command,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report, trace(run / "branches" / branch)


def trace(run: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((run / "trace.json").read_text())
    return loaded


def edit_file(path: Path, edit: dict[str, Any]) -> str:
    path.write_text(json.dumps(edit), encoding="utf-8")
    return str(path)
