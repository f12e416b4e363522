"""Exit codes a script can use: the same codes for attribute, eval and graph."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder import exitcodes
from faultfinder.cli import main
from faultfinder.errors import LLMCallError
from faultfinder.exitcodes import CaseCounts
from faultfinder.llm import ChatRequest

FIXTURES = Path(__file__).parent / "fixtures"
TINY = str(FIXTURES / "core" / "tiny_trace.json")
EVAL_SET = str(FIXTURES / "eval" / "traces.jsonl")
CHIEF_TRACE = str(FIXTURES / "chief" / "loop_trace.json")
GOOD = "Agent Name: Calculator\nStep Number: 2\nReason for Mistake: 17 * 3 is 51"


def endpoint_down(request: ChatRequest) -> str:
    """A function model whose endpoint always fails (`function:test_exit_codes:endpoint_down`)."""
    raise LLMCallError("endpoint down after 3 retries")


def replies(tmp_path: Path, *texts: str, repeat_last: bool = False) -> str:
    path = tmp_path / "replies.json"
    path.write_text(json.dumps({"replies": list(texts), "repeat_last": repeat_last}), "utf-8")
    return f"scripted:{path}"


def run(*args: str) -> Any:
    return CliRunner().invoke(main, [*args, "--cache", "none"])


@pytest.mark.parametrize(
    ("statuses", "code"),
    [
        ([], exitcodes.OK),
        (["ok", "no-error-found"], exitcodes.OK),
        (["ok", "unparsed"], exitcodes.UNPARSED),
        (["ok", "fallback"], exitcodes.UNPARSED),
        (["unparsed", "error"], exitcodes.ERRORED),
        (["unparsed", "error", "budget-exceeded"], exitcodes.BUDGET_EXCEEDED),
    ],
)
def test_precedence_budget_then_error_then_unparsed(statuses: list[str], code: int) -> None:
    assert CaseCounts.of(statuses).exit_code == code


def test_message_counts_each_condition() -> None:
    counts = CaseCounts.of(["ok", "error", "error", "unparsed", "budget-exceeded"])
    assert counts.message() == "exit 5: of 5 cases, 1 ran out of budget, 2 errored, 1 unparsed"
    assert CaseCounts.of(["unparsed"]).message("stage") == "exit 3: of 1 stage, 1 unparsed"


def test_attribute_ok_exits_0(tmp_path: Path) -> None:
    result = run("attribute", TINY, "--model", replies(tmp_path, GOOD))
    assert result.exit_code == 0, result.output
    # no counts line and no error: at most where the answer was saved (the results store)
    # and a hint (to calibrate the step set)
    said = [line for line in result.stderr.splitlines() if not line.startswith("saved to ")]
    assert [line for line in said if not line.startswith("hint: ")] == []


def test_attribute_unparsed_exits_3_with_the_count(tmp_path: Path) -> None:
    model = replies(tmp_path, "I cannot tell.", repeat_last=True)
    result = run("attribute", TINY, "--model", model)
    assert result.exit_code == exitcodes.UNPARSED
    assert "status:     unparsed" in result.stdout
    assert result.stderr.splitlines()[-1] == "exit 3: of 1 case, 1 unparsed"


def test_attribute_endpoint_error_exits_4() -> None:
    result = run("attribute", TINY, "--model", "function:test_exit_codes:endpoint_down")
    assert result.exit_code == exitcodes.ERRORED
    assert "status:     error" in result.stdout
    assert "1 errored" in result.stderr


def test_attribute_budget_exceeded_exits_5(tmp_path: Path) -> None:
    result = run("attribute", TINY, "--model", replies(tmp_path, GOOD), "--max-tokens", "1")
    assert result.exit_code == exitcodes.BUDGET_EXCEEDED
    assert "status:     budget-exceeded" in result.stdout
    assert "1 ran out of budget" in result.stderr


def test_eval_exits_4_when_every_case_errored(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    args = ["eval", EVAL_SET, "--out", str(out), "--no-progress"]
    result = run(*args, "--model", "function:test_exit_codes:endpoint_down")
    assert result.exit_code == exitcodes.ERRORED, result.output
    assert "exit 4: of 5 cases, 5 errored" in result.stderr


def test_eval_exits_5_when_the_budget_runs_out(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    model = replies(tmp_path, GOOD, repeat_last=True)
    args = ["eval", EVAL_SET, "--out", str(out), "--no-progress", "--parallel-cases", "1"]
    result = run(*args, "--model", model, "--max-calls", "2")
    assert result.exit_code == exitcodes.BUDGET_EXCEEDED, result.output
    assert "Stopped early" in result.stderr and "ran out of budget" in result.stderr


def test_eval_exits_0_when_every_case_answered(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    result = run("eval", EVAL_SET, "--out", str(out), "--no-progress", "--method", "random")
    assert result.exit_code == 0, result.output


def test_eval_exits_3_on_unparsed_cases(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    model = replies(tmp_path, "no idea", repeat_last=True)
    result = run("eval", EVAL_SET, "--out", str(out), "--no-progress", "--model", model)
    assert result.exit_code == exitcodes.UNPARSED, result.output
    assert "exit 3: of 5 cases, 5 unparsed" in result.stderr


def test_graph_exits_3_when_a_stage_stays_unparsed(tmp_path: Path) -> None:
    model = replies(tmp_path, "not JSON at all", repeat_last=True)
    result = run("graph", CHIEF_TRACE, "--model", model, "--out", str(tmp_path / "g.json"))
    assert result.exit_code == exitcodes.UNPARSED, result.output
    assert "unparsed" in result.stderr and "stage" in result.stderr


def test_graph_exits_5_on_budget_and_4_on_endpoint_failure(tmp_path: Path) -> None:
    budget = run("graph", CHIEF_TRACE, "--model", replies(tmp_path, "x"), "--max-calls", "1")
    assert budget.exit_code == exitcodes.BUDGET_EXCEEDED, budget.output
    assert "Call budget of 1" in budget.stderr
    down = run("graph", CHIEF_TRACE, "--model", "function:test_exit_codes:endpoint_down")
    assert down.exit_code == exitcodes.ERRORED, down.output
    assert down.stderr.count("\n") == 1 and "endpoint down" in down.stderr


def test_attribute_and_eval_say_why_a_case_is_unparsed(tmp_path: Path) -> None:
    """The reason is in the text output and eval's progress, not only in --json."""
    demo = tmp_path / "demo.json"
    from faultfinder.cli.demo import demo_trace_text

    demo.write_text(demo_trace_text(), encoding="utf-8")
    paired = "Agent Name: Verifier\nStep Number: 2\nReason for Mistake: checked badly"
    shown = run(
        "attribute", str(demo), "--method", "all-at-once", "--model", replies(tmp_path, paired)
    )
    assert shown.exit_code == exitcodes.UNPARSED
    reason = "step 2 was taken by WebSurfer, not by the named agent Verifier"
    assert f"status:     unparsed  ({reason})" in shown.stdout
    assert "gold agent: WebSurfer    (no match)" in shown.stdout  # the gold beside the answer
    out = tmp_path / "r.jsonl"
    model = replies(tmp_path, "I cannot tell.", repeat_last=True)
    ran = run("eval", str(demo), "--method", "all-at-once", "--model", model, "--out", str(out))
    assert ran.exit_code == exitcodes.UNPARSED
    assert (
        "demo-riverton-library-loans · all-at-once: unparsed: no 'Agent Name:' line" in ran.stderr
    )


def test_eval_says_why_without_its_progress_bar(tmp_path: Path) -> None:
    """Scripts and CI run with --no-progress: the reason lines are theirs too."""
    demo = tmp_path / "demo.json"
    from faultfinder.cli.demo import demo_trace_text

    demo.write_text(demo_trace_text(), encoding="utf-8")
    out = tmp_path / "r.jsonl"
    model = replies(tmp_path, "I cannot tell.", repeat_last=True)
    ran = run(
        "eval", str(demo), "--method", "all-at-once", "--model", model, "--out", str(out),
        "--no-progress",
    )  # fmt: skip
    assert ran.exit_code == exitcodes.UNPARSED
    assert (
        "demo-riverton-library-loans · all-at-once: unparsed: no 'Agent Name:' line" in ran.stderr
    )


def test_runs_warn_only_about_methods_that_call_a_model(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    ran = run(
        "eval", EVAL_SET, "--method", "random,shortlist,baseline:position", "--runs", "2",
        "--out", str(out), "--no-progress",
    )  # fmt: skip
    assert ran.exit_code == exitcodes.OK, ran.output
    assert "not independent runs" not in ran.stderr
    model = replies(tmp_path, GOOD, repeat_last=True)
    ran = run(
        "eval", EVAL_SET, "--method", "all-at-once,random", "--model", model, "--runs", "2",
        "--out", str(tmp_path / "s.jsonl"), "--no-progress",
    )  # fmt: skip
    assert "the repeats of all-at-once are not independent runs" in ran.stderr
