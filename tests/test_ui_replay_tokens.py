"""The tokens a replay's live calls spent, as the UI shows them (the job page's progress
and the branch page), for every API a program speaks.

A team on Chat Completions, the Responses API and Anthropic's Messages API
(tests/fixtures/apis/mixed_apis.py, real openai and anthropic SDKs) is recorded through
the proxy against the loopback fake upstream and replayed from an edit of its first step,
so every later call goes live. A Messages reply has no ``usage.total_tokens`` (only
``input_tokens``, ``output_tokens`` and the cache counts): before, the job page read only
that total, so a live Claude call showed 0 tokens. Now each call is read as the branch's
trace reads it, and a live reply that reports no usage at all is "not reported", never 0.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="needs the 'ui' extra")
pytest.importorskip("anthropic", reason="needs the anthropic SDK (pip install -e '.[dev]')")
pytest.importorskip("faultfinder.testing.fake_messages")

from click.testing import CliRunner
from starlette.testclient import TestClient

import frameworks_scripts as scripts
from faultfinder.cli import main
from faultfinder.llm.usage import messages_usage
from faultfinder.replay.recorder import STEPS_FILE, TRACE_FILE
from faultfinder.testing import FakeOpenAIServer
from faultfinder.traces.loader import load_trace
from faultfinder.ui.app import create_app
from faultfinder.ui.job_progress import BranchWatch
from faultfinder.ui.replay_view import live_tokens
from faultfinder.ui.scan import build_catalog

MIXED = [
    sys.executable,
    str(Path(__file__).parent / "fixtures" / "apis" / "mixed_apis.py"),
    scripts.TASK,
    "--messages",
]
FIX = {"kind": "message", "text": "population of Avalon in 2020"}


def _silent(body: dict[str, Any]) -> Any:
    """The team's scripted model, from an upstream whose replies report no usage."""
    answer = scripts.mixed(body)
    spec = {"text": answer} if isinstance(answer, str) else dict(answer)
    return {**spec, "usage": None}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OTEL_SDK_DISABLED", "true")
        for key in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_URL"):
            patch.delenv(key, raising=False)
        root = tmp_path_factory.mktemp("runs")
        with FakeOpenAIServer(reply=scripts.mixed) as upstream:
            _invoke(["record", "--upstream", upstream.base_url, "--out", str(root),
                     "--run-id", "mixed", "--quiet", "--", *MIXED])  # fmt: skip
        yield root / "mixed"


def _invoke(args: list[str]) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output


def _replay(run_dir: Path, tmp_path: Path, reply: Any, branch: str) -> Path:
    """A branch replaying ``run_dir`` from an edit of step 0, its later calls live."""
    edit = tmp_path / "fix.json"
    edit.write_text(json.dumps(FIX), encoding="utf-8")
    with FakeOpenAIServer(reply=reply) as upstream:
        _invoke(["replay", str(run_dir), "--at", "0", "--edit-file", str(edit),
                 "--branch-id", branch, "--quiet", "--upstream", upstream.base_url,
                 "--", *MIXED])  # fmt: skip
    return run_dir / "branches" / branch


def _lines(branch: Path) -> list[dict[str, Any]]:
    text = (branch / STEPS_FILE).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def test_live_calls_count_the_tokens_each_api_reports(run_dir: Path, tmp_path: Path) -> None:
    branch = _replay(run_dir, tmp_path, scripts.mixed, "counted")
    lines = _lines(branch)
    live = [line for line in lines if line["origin"] == "live"]
    assert {line["api"] for line in live} == {"responses", "messages"}
    (claude,) = [line for line in live if line["api"] == "messages"]
    assert "total_tokens" not in claude["response"]["usage"]  # what Messages really sends

    watch = BranchWatch(branch)
    watch.poll()
    by_call = {c["call"]: c for c in watch.calls}
    # The Claude call: its prompt (input + cache reads + writes) and its output.
    said = messages_usage(claude["response"]["usage"])
    assert said.total_tokens > 0
    assert by_call[claude["call"]]["tokens"] == said.total_tokens
    # Every live call as the branch's own trace counts it, and only live ones.
    trace = load_trace(branch / TRACE_FILE)
    assert watch.tokens == live_tokens(trace) > said.total_tokens
    assert watch.unreported == 0
    assert [c["tokens"] for c in watch.calls if c["origin"] not in ("live", "edited-input")] == [
        0
    ] * (len(lines) - len(live))


def test_a_live_reply_without_usage_is_not_reported_rather_than_0(
    run_dir: Path, tmp_path: Path
) -> None:
    branch = _replay(run_dir, tmp_path, _silent, "silent")
    live = [line for line in _lines(branch) if line["origin"] == "live"]
    assert live and all(line["response"].get("usage") is None for line in live)

    watch = BranchWatch(branch)
    watch.poll()
    assert [c["tokens"] for c in watch.calls if c["origin"] == "live"] == [None] * len(live)
    assert (watch.tokens, watch.unreported) == (0, len(live))

    # The branch page says the same of its trace.
    catalog = build_catalog([run_dir])
    (key,) = [k for k, entry in catalog.replays.items() if entry.branch_dir.name == "silent"]
    page = TestClient(create_app(catalog), base_url="http://127.0.0.1").get(f"/replay/{key}")
    assert page.status_code == 200
    assert f"{len(live)} live calls did not report usage" in page.text
