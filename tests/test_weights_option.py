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


def test_a_trace_given_as_weights_is_named_as_a_trace(tmp_path: Path) -> None:
    # It used to say "field 'format' is None", as if the file were a damaged weights file.
    for command in (
        ["attribute", TRACE, "--method", "shortlist", "--no-save"],
        ["eval", TRACE, "--include-unlabelled", "--method", "shortlist", "--out",
         str(tmp_path / "rows.jsonl"), "--no-progress"],
    ):  # fmt: skip
        result = CliRunner().invoke(main, [*command, "--shortlist-weights", TRACE])
        assert result.exit_code == 1, result.output
        text = " ".join(result.output.split())
        assert "is a canonical faultfinder trace" in text or "is a trace" in text, text
        assert "not a shortlist weights file" in text and "'format'" not in text


def test_a_weights_file_with_a_short_column_names_the_file(tmp_path: Path) -> None:
    import json

    from faultfinder.shortlist.weights import shipped_weights

    data = json.loads(shipped_weights().dumps())
    data["deploy"]["coef"] = data["deploy"]["coef"][:-1]
    bad = tmp_path / "short.weights.json"
    bad.write_text(json.dumps(data), encoding="utf-8")
    result = CliRunner().invoke(
        main, ["attribute", TRACE, "--method", "shortlist", "--no-save", "--shortlist-weights",
               str(bad)],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert f"{bad}: deploy: 'coef' has" in text, text
