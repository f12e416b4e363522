"""The public trace samples run end to end as a new user runs them: import, attribute,
label, and what the step set says about traces unlike the shortlist's calibration data
(issue 26, part 4). Samples are shared data, not part of the repository: the tests skip
when they are absent (FAULTFINDER_TRACE_SAMPLES names another copy)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.errors import TraceFormatError
from faultfinder.shortlist.sets import describe
from faultfinder.traces.loader import load_traces

_DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "trace-samples"
SAMPLES = Path(os.environ.get("FAULTFINDER_TRACE_SAMPLES", str(_DEFAULT)))
LANGFUSE = ["crewai-2025-07-11", "koog-2025-08-26", "langgraph-python-2025-08-22"]
LANGFUSE += ["openai-agents-2025-09-30"]


def sample(relative: str) -> Path:
    path = SAMPLES / relative
    if not path.exists():
        pytest.skip(f"sample not present: {path} (shared data is not part of the repository)")
    return path


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("name", LANGFUSE)
def test_a_sample_unlike_the_calibration_data_says_why_no_level_is_claimed(name: str) -> None:
    """Each sample is past the shift limit: the set line names the score and the limit,
    the hint says what the score measures, and the JSON carries the limit."""
    path = sample(f"langfuse/{name}.trace.json")
    code, out, err = run("attribute", str(path), "--method", "shortlist", "--no-save")
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("step set:"))
    found = re.search(
        r"90% NOT claimed \(trace unlike the calibration data, shift "
        r"(\d\.\d\d) over the limit (\d\.\d\d)\)",
        line,
    )
    assert found, line
    assert float(found[1]) > float(found[2])
    assert "at 90%" not in out
    assert "no 90% coverage is claimed" in err and "shift score is " + found[1] in err
    assert "the traces the sets were calibrated on" in err

    code, out, _ = run("attribute", str(path), "--method", "shortlist", "--no-save", "--json")
    result = json.loads(out)
    assert code == 0 and result["step_set_calibrated"] is False
    assert result["step_set_shift"] > result["step_set_shift_limit"] > 0


def test_a_claim_withdrawn_within_the_limit_is_not_blamed_on_the_shift() -> None:
    """The other reason a level is withdrawn (the ranking model trained on the trace) is
    not reported as the trace being unlike the calibration data."""
    text = describe([0, 1], 0.9, 4, "shipped:deploy", False, 0.31, 0.5)
    assert "unlike the calibration data" not in text
    assert "90% NOT claimed (the ranking model trained on this trace" in text
    past = describe([0, 1], 0.9, 4, "shipped:deploy", False, 0.93, 0.5)
    assert "NOT claimed (trace unlike the calibration data, shift 0.93 over the limit 0.50)" in past


def test_the_ui_trace_page_shows_the_shift_and_its_limit(tmp_path: Path) -> None:
    pytest.importorskip("starlette", reason="needs the 'ui' extra")
    from starlette.testclient import TestClient

    from faultfinder.ui.app import create_app
    from faultfinder.ui.scan import build_catalog

    path = sample("langfuse/openai-agents-2025-09-30.trace.json")
    (tmp_path / path.name).write_bytes(path.read_bytes())
    code, out, _ = run("attribute", str(path), "--method", "shortlist", "--no-save", "--json")
    assert code == 0
    (tmp_path / "answer.json").write_text(out, "utf-8")
    client = TestClient(create_app(build_catalog([tmp_path])), base_url="http://127.0.0.1")
    key = re.search(r'href="/trace/([^"]+)"', client.get("/").text)
    assert key is not None
    page = client.get(f"/trace/{key[1]}").text
    shown = r"90% NOT claimed \(trace unlike the calibration data, shift \d\.\d\d over the limit "
    assert re.search(shown + r"\d\.\d\d\)", page), page
    assert "at 90%" not in page


def test_a_folder_of_sample_folders_says_to_give_one_of_them() -> None:
    """The samples' root holds folders only: the error names them, not --format. One of
    them holds a file called trace.json, an OTLP export: that does not make the root a
    folder of recordings (a run directory has the meta.json `record` writes)."""
    sample("langfuse")
    with pytest.raises(TraceFormatError) as caught:
        load_traces(SAMPLES)
    message = str(caught.value)
    assert "only folders (langfuse/, opentelemetry-proto/)" in message
    assert "--format" not in message and "no reader recognises" not in message
    code, _, err = run("import", str(SAMPLES))
    assert code == 1 and "give one of them instead" in err
    # Named format: it was 0 traces and exit 0 ("wrote 0 trace file(s)").
    code, _, err = run("import", str(SAMPLES), "--format", "langfuse")
    assert code == 1 and "only folders (langfuse/, opentelemetry-proto/)" in err


def test_labelling_a_trace_with_no_steps_is_an_input_error() -> None:
    """OTLP's own example has no step: `label` exits 1 naming the file, as `attribute`
    does, not 2 (a malformed command line)."""
    path = sample("opentelemetry-proto/trace.json")
    code, _, err = run("label", str(path), "--step", "0", "--out", os.devnull)
    assert code == 1, err
    assert "has no steps: there is no step to label" in err and str(path) in err
    assert "Usage:" not in err
    code, _, err = run("attribute", str(path), "--method", "shortlist", "--no-save")
    assert code == 1 and "has no steps" in err


def test_a_step_outside_a_sample_names_the_option() -> None:
    path = sample("langfuse/koog-2025-08-26.trace.json")
    code, _, err = run("label", str(path), "--step", "5", "--out", os.devnull)
    assert code == 2 and "Invalid value for '--step': step 5 is outside the trace" in err
