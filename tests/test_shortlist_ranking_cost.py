"""Ranking a trace once, and in time proportional to its length: the shortlist on long traces.

A trace of thousands of steps used to take tens of seconds: the near-duplicate column
compared every step with every earlier one as Python sets, and ``attribute`` ranked the
trace twice (once for the answer, once for its step set).
"""

from __future__ import annotations

import json
import os
import random
from importlib import resources
from pathlib import Path

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.shortlist import rank, sets
from faultfinder.shortlist.features import nearest_earlier
from faultfinder.shortlist.weights import shipped_weights
from faultfinder.traces.schema import Step, ToolCall, Trace


def _pairwise(word_sets: list[set[str]], window: int) -> list[float]:
    out = []
    for i, a in enumerate(word_sets):
        best = 0.0
        for b in word_sets[max(0, i - window) : i]:
            if a and b:
                best = max(best, len(a & b) / len(a | b))
        out.append(best)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_near_duplicate_is_the_largest_jaccard_to_an_earlier_step(seed: int) -> None:
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(rng.randint(3, 40))]
    word_sets = [
        set(rng.sample(vocabulary, rng.randint(0, len(vocabulary) // 2))) for _ in range(60)
    ]
    assert nearest_earlier(word_sets) == _pairwise(word_sets, 10**6)
    assert nearest_earlier(word_sets, window=7) == _pairwise(word_sets, 7)


def _trace(tag: str, steps: int, arguments: str | None = None) -> Trace:
    rng = random.Random(tag)
    out = []
    for i in range(steps):
        words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta", tag]) for _ in range(12))
        calls = [ToolCall(id=f"c{i}", name="lookup", arguments=arguments)] if arguments else []
        out.append(Step(index=i, agent=f"agent{i % 3}", content=words, tool_calls=calls))
    return Trace(id=tag, task=f"task {tag}", steps=out)


def test_attribute_ranks_a_trace_once_for_its_answer_and_its_step_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    real = rank.trace_features

    def counted(*args: object, **kwargs: object) -> list[list[float]]:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(rank, "trace_features", counted)
    path = tmp_path / "run.json"
    path.write_text(_trace(f"once-{os.getpid()}-{random.random()}", 40).model_dump_json())
    result = CliRunner().invoke(
        main, ["attribute", str(path), "--method", "shortlist", "--no-save"]
    )
    assert result.exit_code == 0, result.output
    assert "step set:" in result.output
    assert len(calls) == 1


def test_traces_differing_only_in_tool_call_arguments_are_ranked_apart() -> None:
    weights = shipped_weights()
    tag = f"args-{random.random()}"
    known = _trace(tag, 12, arguments=json.dumps({"q": "alpha"}))
    invented = _trace(tag, 12, arguments=json.dumps({"q": "zq-81734-unsourced"}))
    fresh = [rank.rank_trace(t, weights.choose(t).model).probs for t in (known, invented)]
    assert fresh[0] != fresh[1]  # the arguments group reads them: the rankings differ
    for trace, probs in zip((known, invented), fresh, strict=True):
        assert sets.step_set(trace, 0.9, weights=weights) is not None
        assert sets._ranked(trace, weights).probs == probs


def test_a_weights_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    shipped = resources.files("faultfinder.shortlist").joinpath("weights.json").read_text()
    path = tmp_path / "mine.weights.json"
    path.write_text(shipped)
    first = sets.weights_at(str(path))
    assert sets.weights_at(str(path)) is first
    path.write_text(shipped + "\n")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000_000))
    assert sets.weights_at(str(path)) is not first
