"""Issue 26 part 4: a withdrawn coverage claim is visible wherever rows are shown. Rows of
unlabelled cases (`eval --include-unlabelled`) carry step sets that claim their level or
not; `report` and the UI's evaluation page say how many do, and that coverage needs a
label."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.eval import step_sets
from faultfinder.eval.rows import EvalRow
from faultfinder.traces.schema import GoldLabel

PLANTED = "<script>alert('set')</script>"


def row(
    trace: str, *, gold: bool, claimed: bool | None, method: str = "m1", **extra: Any
) -> EvalRow:
    values: dict[str, Any] = {
        "trace_id": trace,
        "method": method,
        "config": {},
        "model": "none",
        "prompt_version": "t",
        "with_ground_truth": False,
        "observability": "outputs",
        "agent": "Coder",
        "step": 2,
        "key": f"{trace}|{method}|cfg0000000|none|run0",
        "config_id": "cfg0000000",
        "run": 0,
        "subset": "Alpha",
        "gold": GoldLabel(agent="Coder", step=2) if gold else None,
        "n_steps": 4,
    }
    if claimed is not None:
        values.update(
            step_set=[1, 2],
            step_set_level=0.9,
            step_set_source="shipped:deploy",
            step_set_calibrated=claimed,
            step_set_shift=0.2 if claimed else 0.9,
            step_set_shift_limit=0.5,
        )
    values.update(extra)
    return EvalRow(**values)


UNLABELLED = [
    row("u1", gold=False, claimed=True),
    row("u2", gold=False, claimed=False),
    row("u3", gold=False, claimed=False),
    row("u4", gold=False, claimed=None),  # --step-set off, or failed before its set
]


def write(rows: list[EvalRow], path: Path) -> Path:
    path.write_text("".join(r.model_dump_json() + "\n" for r in rows), encoding="utf-8")
    return path


def test_report_counts_claims_of_unlabelled_rows_and_says_coverage_needs_labels(
    tmp_path: Path,
) -> None:
    results = write(UNLABELLED, tmp_path / "r.jsonl")
    result = CliRunner().invoke(main, ["report", str(results)])
    assert result.exit_code == 0, result.output
    section = result.output.split("Step sets: how often the set holds the decisive step", 1)[1]
    line = next(x for x in section.splitlines() if x.startswith("Alpha"))
    assert "0 (+3 unlabelled)" in line and "1/3" in line
    assert "coverage needs one" in section and "over the labelled cases only" in section
    assert "carry no coverage claim" in section
    assert "in no line here: m1 1 of 4" in section


def test_claims_count_labelled_and_unlabelled_cases_coverage_only_labelled() -> None:
    rows = [*UNLABELLED, row("l1", gold=True, claimed=True), row("l2", gold=True, claimed=False)]
    (figure,) = step_sets.coverage(rows)
    assert (figure.cases, figure.unlabelled) == (2, 3)
    assert (figure.claimed, figure.all_claimed, figure.all_cases) == (1, 2, 5)
    assert figure.rate == 1.0  # both labelled sets hold step 2
    cells = step_sets.cells(figure)
    assert cells[3] == "2 (+3 unlabelled)" and cells[7] == "2/5"


def test_the_eval_page_shows_step_sets_and_claims_escaped(tmp_path: Path) -> None:
    pytest.importorskip("starlette", reason="needs the 'ui' extra")
    from starlette.testclient import TestClient

    from faultfinder.ui.app import create_app
    from faultfinder.ui.scan import build_catalog

    planted = [r.model_copy(update={"method": PLANTED, "subset": PLANTED}) for r in UNLABELLED]
    planted += [row("l1", gold=True, claimed=True, method=PLANTED, subset=PLANTED)]
    planted = [r.model_copy(update={"key": r.key.replace("m1", "x")}) for r in planted]
    write(planted, tmp_path / "evaluation.jsonl")
    catalog = build_catalog([tmp_path])
    (key,) = catalog.evals
    client = TestClient(create_app(catalog), base_url="http://127.0.0.1")
    page = client.get(f"/eval/{key}").text
    assert 'id="sets-0"' in page
    table = page.split('id="sets-0"', 1)[1].split("</table>", 1)[0]
    assert "<th>claimed</th>" in table and "<th>coverage where claimed %</th>" in table
    assert "1 (+3 unlabelled)" in table and "2/4" in table
    assert "coverage needs one" in page
    assert PLANTED not in page and "&lt;script&gt;alert(" in table
