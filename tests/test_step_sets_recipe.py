"""docs/step-sets.md's recipe runs as written: `label` a few dozen runs of your own
framework, `calibrate` on them, then `attribute` and `eval` with `--shortlist-weights`.

The runs here are alike on one of the shift score's descriptors (two steps in three change
the speaker, whatever the run's length), as the runs of one framework often are. That
descriptor's spread is then zero up to rounding error; it used to be written to the weights
file as 0.0 and every later `attribute` died dividing by it.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.shortlist.shift import ShiftReference, build_reference
from faultfinder.traces.io import write_trace
from faultfinder.traces.schema import Step, Trace

WORDS = ["plan", "search", "report", "table", "column", "total", "check", "answer", "year"]


def _run(rng: random.Random, n: int, name: str) -> Trace:
    steps = [
        Step(
            index=i,
            agent=("Planner", "Worker", "Worker")[i % 3],
            content=" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 60)))
            + (" Error: lookup failed" if rng.random() < 0.2 else ""),
        )
        for i in range(n)
    ]
    return Trace(id=f"my-team/{name}", task=f"task {name}", steps=steps)


def _runs(tmp: Path, count: int = 20) -> list[Path]:
    rng = random.Random(5)
    paths = []
    for i in range(count):
        path = tmp / "runs" / f"run-{i}.json"
        write_trace(_run(rng, rng.choice([4, 7, 10, 13]), f"run-{i}"), path)
        paths.append(path)
    return paths


def test_a_constant_descriptor_survives_the_weights_file() -> None:
    rng = random.Random(1)
    traces = [_run(rng, rng.choice([4, 7, 10, 13]), f"r{i}") for i in range(21)]
    ref = build_reference(traces)
    again = ShiftReference.from_json(json.loads(json.dumps(ref.to_json())))
    assert all(s > 0 for s in again.scale)
    assert math.isfinite(again.score(traces[0]))
    # A file written before the fix (a spread saved as 0.0) loads as well.
    old = ref.to_json() | {"scale": [0.0] * len(ref.scale)}
    assert math.isfinite(ShiftReference.from_json(old).score(traces[0]))


def test_label_calibrate_then_attribute_and_eval(tmp_path: Path) -> None:
    runner = CliRunner()
    runs = _runs(tmp_path)
    for path in runs:
        result = runner.invoke(main, ["label", str(path), "--step", "1"])
        assert result.exit_code == 0, result.output
    weights = tmp_path / "my-team.weights.json"
    result = runner.invoke(
        main,
        ["calibrate", str(tmp_path / "runs"), "--source", "my-team", "--out", str(weights)],
    )
    assert result.exit_code == 0, result.output
    assert "calibrated on" in result.output and weights.exists()

    result = runner.invoke(
        main,
        [
            "attribute",
            str(runs[0]),
            "--method",
            "shortlist",
            "--shortlist-weights",
            str(weights),
            "--no-save",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "(calibrated on my-team)" in result.output

    rows = tmp_path / "rows.jsonl"
    result = runner.invoke(
        main,
        [
            "eval",
            str(tmp_path / "runs"),
            "--method",
            "shortlist",
            "--shortlist-weights",
            str(weights),
            "--out",
            str(rows),
        ],
    )
    assert result.exit_code == 0, result.output
    statuses = [json.loads(line)["status"] for line in rows.read_text().splitlines()]
    assert statuses == ["ok"] * len(runs)
