"""DoVer on a step whose Anthropic Messages reply makes tool calls: the real Anthropic SDK
program (tests/fixtures/frameworks/anthropic_sdk_team.py), unmodified, against the
loopback fake upstream, with and without streaming.

The intervention gives the Researcher's ``lookup`` step new text; the replay serves that
text with the recorded ``tool_use`` block (same id, name, input), so the program's
``tool_result`` still answers a call its conversation holds.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path

import pytest

import claude_scripts
import frameworks_scripts as scripts
from dover_cli import debug_once
from faultfinder.replay.session import SessionOptions, record_run
from faultfinder.testing import FakeOpenAIServer

TEAM = Path(__file__).parent / "fixtures" / "frameworks" / "anthropic_sdk_team.py"


@pytest.fixture(autouse=True)
def no_anthropic_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    for key in ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(key, raising=False)


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_an_intervention_on_a_tool_use_step_keeps_its_tool_use(
    stream: bool, tmp_path: Path
) -> None:
    if importlib.util.find_spec("anthropic") is None:
        pytest.skip("anthropic is not installed")
    command = [sys.executable, str(TEAM), scripts.TASK, *(["--stream"] if stream else [])]
    with FakeOpenAIServer(reply=claude_scripts.anthropic_sdk) as upstream:
        recorded = asyncio.run(
            record_run(
                command, upstream.base_url, tmp_path, run_id="run",
                ground_truth=scripts.ANSWER, options=SessionOptions(echo=False, timeout=120),
            )
        )  # fmt: skip
        assert recorded.child.exit_code == 0, recorded.child.stderr[-3000:]
        (call,) = recorded.trace.steps[0].tool_calls
        (row,), _ = debug_once(
            recorded.run_dir,
            upstream.base_url,
            command,
            tmp_path / "dover.jsonl",
            "--scope",
            "hypothesis",
            model="function:claude_scripts:debugger",
        )
        live = [r.body or {} for r in upstream.requests_of("messages")][3:]
    intervention = row["intervention"]
    assert intervention["step"] == 0 and intervention["replacement"] == claude_scripts.NOTE
    assert [c["id"] for c in intervention["tool_calls"]] == [call.id]
    (repeat,) = row["repeats"]
    steps = json.loads((Path(repeat["branch"]) / "trace.json").read_text())["steps"]
    edited = steps[0]
    assert edited["metadata"]["origin"] == "edited" and edited["content"] == claude_scripts.NOTE
    assert [(c["id"], c["name"], json.loads(c["arguments"])) for c in edited["tool_calls"]] == [
        (call.id, call.name, json.loads(call.arguments))
    ]
    # The Researcher's next request, sent upstream: the SDK read the served reply as the
    # new text and the recorded tool_use block, and the tool_result answers that block.
    assert [s["agent"] for s in steps] == ["Researcher", "Researcher", "Writer"]
    assert live, "no live call after the edited step"
    assistant, results = live[0]["messages"][-2:]
    assert assistant["role"] == "assistant" and results["role"] == "user"
    assert [b["type"] for b in assistant["content"]] == ["text", "tool_use"]
    text, use = assistant["content"]
    assert text["text"] == claude_scripts.NOTE
    assert (use["id"], use["name"], use["input"]) == (
        call.id, call.name, json.loads(call.arguments)
    )  # fmt: skip
    assert [b["tool_use_id"] for b in results["content"]] == [call.id]
