"""`--shortlist-weights` is read before any case runs: a missing file is exit 1 naming the
option, and a malformed one is exit 1 with its reason before a single model call is made
(eval used to run every case, pay for its calls, then record an error row)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from faultfinder.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
TRACE = str(FIXTURES / "core" / "tiny_trace.json")

calls: list[object] = []


def judge(request: object) -> str:
    calls.append(request)
    return "Agent Name: Calculator\nStep Number: 2\nReason for Mistake: r"


def test_a_missing_weights_file_is_exit_1_naming_the_option(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["attribute", TRACE, "--method", "shortlist", "--shortlist-weights",
               str(tmp_path / "none.json")],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "--shortlist-weights:" in result.output and "does not exist" in result.output


def test_eval_refuses_bad_weights_before_any_model_call(tmp_path: Path) -> None:
    bad = tmp_path / "bad.weights.json"
    bad.write_text('{"format": "x"}', encoding="utf-8")
    calls.clear()
    out = tmp_path / "rows.jsonl"
    result = CliRunner().invoke(
        main,
        ["eval", TRACE, "--include-unlabelled", "--method", "all-at-once", "--model",
         "function:test_weights_option:judge", "--cache", "none", "--shortlist-weights",
         str(bad), "--out", str(out), "--no-progress"],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "field 'format' is 'x'" in result.output
    assert calls == [] and not out.exists()
