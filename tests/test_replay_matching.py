"""Replay of programs shaped like real ones: concurrent fan-outs and interleaved threads
match by content, volatile prompts are normalised (matching and agent identity), and a
divergence is refused in a way the real OpenAI SDK does not retry past."""

from __future__ import annotations

import asyncio
import itertools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.replay.matching import Matcher, agent_from_system_prompt
from faultfinder.replay.recorder import load_calls
from faultfinder.replay.replayer import REFUSAL_STATUS, ReplayOptions
from faultfinder.replay.session import RunOutcome, SessionOptions, record_run, replay_run
from faultfinder.testing import FakeOpenAIServer

PROBES = Path(__file__).parent / "fixtures" / "replay"
QUIET = SessionOptions(echo=False)


@pytest.fixture
def upstream() -> Iterator[FakeOpenAIServer]:
    counter = itertools.count()

    def reply(body: dict[str, Any]) -> str:
        # A distinct answer per call, so a replay serving the wrong recorded call shows.
        return f"answer-{next(counter):03d}"

    with FakeOpenAIServer(reply=reply) as server:
        yield server


def probe(name: str, *args: str) -> list[str]:
    return [sys.executable, str(PROBES / name), *args]


def record(upstream: FakeOpenAIServer, tmp_path: Path, command: list[str]) -> RunOutcome:
    outcome: RunOutcome = asyncio.run(
        record_run(command, upstream.base_url, tmp_path, run_id="run", options=QUIET)
    )
    assert outcome.child.exit_code == 0, outcome.child.stderr
    return outcome


@pytest.mark.parametrize(
    ("name", "args", "steps"),
    [("probe_fanout.py", ("12",), 12), ("probe_threads.py", ("4",), 12)],
)
def test_concurrent_and_interleaved_programs_replay_with_full_fidelity(
    upstream: FakeOpenAIServer, tmp_path: Path, name: str, args: tuple[str, ...], steps: int
) -> None:
    recorded = record(upstream, tmp_path, probe(name, *args))
    assert len(recorded.trace.steps) == steps
    before = len(upstream.chat_requests)
    for _ in range(2):  # two replays: two more random arrival orders
        outcome = asyncio.run(replay_run(recorded.run_dir, probe(name, *args), ReplayOptions()))
        report = outcome.report
        assert report.faithful and report.fidelity == 1.0, report
        assert report.reproduced == steps and report.live_calls == 0
        assert sorted(report.served_steps) == list(range(steps))
        # Every call got the reply recorded for that very request.
        assert outcome.child.stdout == recorded.child.stdout
    assert len(upstream.chat_requests) == before, "a faithful replay never calls the upstream"


def test_volatile_prompts_are_normalised_for_matching_and_identity(
    upstream: FakeOpenAIServer, tmp_path: Path
) -> None:
    recorded = record(upstream, tmp_path, probe("probe_volatile.py"))
    outcome = asyncio.run(
        replay_run(recorded.run_dir, probe("probe_volatile.py"), ReplayOptions(), options=QUIET)
    )
    report = outcome.report
    assert report.faithful and report.reproduced == 2
    assert report.normalised_fields["messages[0].content"] == [
        "pids",
        "temp-paths",
        "timestamps",
        "uuids",
    ]
    # The agent, known only by its volatile system prompt, keeps its identity.
    assert [a.name for a in outcome.trace.agents] == [a.name for a in recorded.trace.agents]

    strict = ReplayOptions(normalisers=[])
    raw = asyncio.run(
        replay_run(recorded.run_dir, probe("probe_volatile.py"), strict, options=QUIET)
    )
    assert raw.report.divergences and not raw.report.faithful


def test_masks_reach_agent_identity() -> None:
    one = "Ticket AB-1041. Handle it."
    two = "Ticket AB-2207. Handle it."
    assert agent_from_system_prompt(one) != agent_from_system_prompt(two)
    masked = Matcher(masks=(r"AB-\d+",))
    assert agent_from_system_prompt(one, masked) == agent_from_system_prompt(two, masked)
    body = {"messages": [{"role": "system", "content": one}]}
    other = {"messages": [{"role": "system", "content": two}]}
    assert masked.agent(None, None, body) == masked.agent(None, None, other)


def test_unknown_normaliser_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="available: temp-paths, uuids, timestamps, pids"):
        ReplayOptions(normalisers=["dates"])


def test_divergence_is_not_retried_by_the_real_sdk_and_goes_nowhere_live(
    upstream: FakeOpenAIServer, tmp_path: Path
) -> None:
    recorded = record(upstream, tmp_path, probe("probe_volatile.py"))
    before = len(upstream.chat_requests)
    outcome = asyncio.run(
        replay_run(
            recorded.run_dir,
            probe("probe_volatile.py", "--changed"),  # default SDK retries (max_retries=2)
            ReplayOptions(),
            upstream=upstream.base_url,  # reachable, yet a divergence must not go there
            options=QUIET,
        )
    )
    assert len(upstream.chat_requests) == before
    everything = load_calls(outcome.branch_dir, include_failed=True)
    assert [c.status for c in everything] == [REFUSAL_STATUS], "the SDK retried the refusal"
    assert outcome.child.exit_code not in (0, None)
    assert "UnprocessableEntityError" in outcome.child.stderr
    [divergence] = outcome.report.divergences
    assert divergence.step == 0 and divergence.action == "refused"
    assert divergence.diff is not None
    assert '-   "content": "What is 6 times 7? (turn 0)"' in divergence.diff
    assert '+   "content": "What is 6 times 8? (turn 0)"' in divergence.diff


def test_replay_cli_exits_non_zero_and_shows_the_diff(
    upstream: FakeOpenAIServer, tmp_path: Path
) -> None:
    recorded = record(upstream, tmp_path, probe("probe_volatile.py"))
    result = CliRunner().invoke(
        main,
        [
            "replay",
            str(recorded.run_dir),
            "--quiet",
            "--",
            *probe("probe_volatile.py", "--changed"),
        ],
    )
    assert result.exit_code == 3, result.output
    assert "DIVERGED:" in result.output
    assert "--- recorded" in result.output and "+++ replayed" in result.output
    assert "normalised:  messages[0].content" in result.output
