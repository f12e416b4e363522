"""`faultfinder replay --edit` (and a ``message`` edit file), `verify-edit` with a
``message`` edit file and `proxy --replay --edit` on a step whose recorded reply makes
tool calls serve the text alone: the calls are dropped, and each command says so on
stderr, naming them and the edit kind that keeps them. On the demo team's recording step 2
is the Researcher's ``lookup`` call and step 1 a plain message."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.demo_team import mock_model
from faultfinder.testing import FakeOpenAIServer
from faultfinder.traces.loader import load_traces
from ui_support import TEAM, record_team

WARNING = "warning: step 2's recorded reply makes tool call(s) lookup"


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(reply=mock_model.reply) as server:
        yield server


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, upstream: FakeOpenAIServer) -> Path:
    return record_team(tmp_path_factory.mktemp("recorded") / "runs", upstream.base_url)


def replay(run: Path, upstream: FakeOpenAIServer, branch: str, *edit: str) -> tuple[str, Path]:
    args = ["replay", str(run), *edit, "--upstream", upstream.base_url]
    result = CliRunner().invoke(main, [*args, "--branch-id", branch, "--quiet", "--", *TEAM])
    assert result.exit_code in (0, 1), result.output
    return result.stderr, run / "branches" / branch


def test_an_output_edit_of_a_tool_call_step_warns_that_its_calls_are_dropped(
    run: Path, upstream: FakeOpenAIServer, tmp_path: Path
) -> None:
    stderr, branch = replay(run, upstream, "text", "--at", "2", "--edit", "Looking it up.")
    (line,) = [x for x in stderr.splitlines() if x.startswith("warning:")]
    assert line.startswith(WARNING) and "'reply'" in line
    served = load_traces(branch / "trace.json", format="faultfinder")[0].steps[2]
    assert served.tool_calls == []  # what the warning says: the lookup was not made
    message = tmp_path / "message.json"
    message.write_text(json.dumps({"kind": "message", "text": "Looking it up."}))
    stderr, _ = replay(run, upstream, "file", "--at", "2", "--edit-file", str(message))
    assert WARNING in stderr
    # A reply edit with the recorded calls keeps them, and a step without calls loses
    # nothing: neither warns.
    step = load_traces(run / "trace.json", format="faultfinder")[0].steps[2]
    calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in step.tool_calls]
    reply = tmp_path / "reply.json"
    reply.write_text(json.dumps({"kind": "reply", "content": "Looking.", "tool_calls": calls}))
    stderr, branch = replay(run, upstream, "reply", "--at", "2", "--edit-file", str(reply))
    assert "warning:" not in stderr
    served = load_traces(branch / "trace.json", format="faultfinder")[0].steps[2]
    assert [c.name for c in served.tool_calls] == ["lookup"]
    stderr, _ = replay(run, upstream, "plain", "--at", "1", "--edit", "NEXT: Researcher | x")
    assert "warning:" not in stderr


def test_verify_edit_warns_that_a_message_edit_drops_the_calls(
    run: Path, upstream: FakeOpenAIServer, tmp_path: Path
) -> None:
    def verify(at: int, edit: dict[str, str], session: str) -> str:
        path = tmp_path / f"{session}.json"
        path.write_text(json.dumps(edit))
        result = CliRunner().invoke(
            main,
            ["verify-edit", str(run), "--at", str(at), "--edit-file", str(path),
             "--repeats", "1", "--session", session, "--upstream", upstream.base_url,
             "--", *TEAM],
        )  # fmt: skip
        assert result.exit_code in (0, 1), result.output
        return result.stderr

    stderr = verify(2, {"kind": "message", "text": "Looking it up."}, "dropped")
    (line,) = [x for x in stderr.splitlines() if x.startswith("warning:")]
    assert line.startswith(WARNING) and "'reply'" in line
    assert "warning:" not in verify(1, {"kind": "message", "text": "NEXT: Researcher | x"}, "ok")


def proxy_replay(run: Path, *edit: str) -> list[str]:
    """What `proxy --replay RUN ...` prints before it serves (then Ctrl-C)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "faultfinder", "proxy", "--replay", str(run), *edit,
         "--run-id", f"proxy-{len(edit)}-{edit[1]}", "--port", "0"],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    assert proc.stderr is not None
    lines: list[str] = []
    for line in proc.stderr:
        lines.append(line)
        if re.search(r"proxy on \S+ ->", line):
            break
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=30)
    assert proc.returncode == 0, "".join(lines) + rest
    return lines


def test_proxy_replay_warns_that_an_output_edit_drops_the_calls(run: Path) -> None:
    lines = proxy_replay(run, "--at", "2", "--edit", "Looking it up.")
    (line,) = [x for x in lines if x.startswith("warning:")]
    assert line.startswith(WARNING) and "'reply'" in line
    lines = proxy_replay(run, "--at", "1", "--edit", "NEXT: Researcher | x")
    assert any("proxy on" in x for x in lines)
    assert not [x for x in lines if x.startswith("warning:")]
