"""`report`'s cached share is shown only where an endpoint measured it: against one that
never says how many prompt tokens its cache served, the share is unknown ('–', null in
json), not 0%; an endpoint that says 0 shows 0%."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.eval.prompt_cost import render
from faultfinder.eval.report import records, summarise
from faultfinder.eval.rows import EvalRow, read_rows
from faultfinder.llm import base
from faultfinder.testing.fake_openai import FakeOpenAIServer
from faultfinder.testing.prefix_cache import PrefixCache
from faultfinder.usage import Usage
from test_prompt_cost import _row

FIXTURE = Path(__file__).parent / "fixtures" / "eval" / "traces.jsonl"
ANSWER = "Agent Name: Planner\nStep Number: 0\nReason: it started there"


def _line(section: str, method: str) -> list[str]:
    line = next(x for x in section.splitlines() if f" {method} " in x)
    return line.split()


def _report(out: Path, fmt: str = "text") -> str:
    result = CliRunner().invoke(main, ["report", str(out), "--format", fmt])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize(
    ("prefix_cache", "shown", "stored"),
    [(None, "–", None), (PrefixCache(), "0%", 0.0)],
)
def test_the_cached_share_is_unknown_unless_the_endpoint_reports_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    prefix_cache: PrefixCache | None,
    shown: str,
    stored: float | None,
) -> None:
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)  # a loopback fake, not a model
    out = tmp_path / "results.jsonl"
    # Without a prefix cache the fake reports no `prompt_tokens_details` (as many
    # endpoints do); with one it reports `cached_tokens`, 0 for these one-call cases.
    with FakeOpenAIServer(ANSWER, prefix_cache=prefix_cache) as upstream:
        result = CliRunner().invoke(
            main,
            ["eval", str(FIXTURE), "--method", "all-at-once", "--model", "openai:m",
             "--base-url", upstream.base_url, "--cache", "none", "--no-progress",
             "--subset", "Alpha", "--out", str(out)],
        )  # fmt: skip
    assert result.exit_code in (0, 3), result.output
    rows = read_rows(out)
    assert rows and all(row.usage.cached_prompt_tokens == 0 for row in rows)

    section = _report(out).split("Prompt tokens and the prefix cache:", 1)[1]
    cells = _line(section, "all-at-once")
    cases = cells.index(str(len(rows)))
    assert cells[cases + 2] == shown  # after "cases" and "prompt tok/case"
    assert "no call of the line said how many prompt tokens came from a cache" in section
    (record,) = json.loads(_report(out, "json"))
    assert record["cached_prompt_tokens_per_case"] == stored


def test_a_row_written_before_usages_said_so_counts_as_measured_when_it_cached() -> None:
    old = _row("a", 3000, 1500, 1000)  # no cache_reported: an older row
    unknown = _row("b", 3000, 0, 1000, method="step-by-step")
    measured = _row("c", 3000, 0, 1000, method="chief")
    measured.usage = Usage(prompt_tokens=3000, calls=1, cache_reported=True)
    section = render(summarise([old, unknown, measured]))
    assert "50%" in _line(section, "all-at-once")
    assert "–" in _line(section, "step-by-step") and "0%" not in _line(section, "step-by-step")
    assert "0%" in _line(section, "chief")
    by_method = {r["method"]: r for r in records(summarise([old, unknown, measured]))}
    assert by_method["all-at-once"]["cached_prompt_tokens_per_case"] == 1500
    assert by_method["step-by-step"]["cached_prompt_tokens_per_case"] is None
    assert by_method["chief"]["cached_prompt_tokens_per_case"] == 0


def test_a_usage_that_never_heard_of_a_cache_is_written_as_before() -> None:
    assert "cache_reported" not in Usage(prompt_tokens=3).model_dump()
    reported = Usage(prompt_tokens=3, cache_reported=True)
    assert Usage.model_validate_json(reported.model_dump_json()) == reported
    assert (Usage() + reported).cache_reported
    row: EvalRow = _row("a", 3000, 0, 1000)
    assert "cache_reported" not in row.model_dump_json()
