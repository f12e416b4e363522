"""DoVer on a CrewAI crew (tests/fixtures/frameworks/crewai_team.py), run unmodified in its
own environment against the loopback fake upstream.

CrewAI 1.x calls tools natively (Chat Completions ``tools``/``tool_calls``, no ReAct text
when the model supports function calling), and when a reply makes tool calls it sends the
reply back as ``{"content": null, "tool_calls": [...]}``: the text is dropped. An
intervention on such a step (new text, the recorded calls kept) is served, the call is
made, and no agent ever reads the text. Before, that replay was judged as if the agent
had ignored the instruction (``inconclusive``, and ``refuted`` with a judge that calls
it fulfilled); now the replay is no evidence and the verdict is ``not_applied``, saying
why.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import frameworks_scripts as scripts
from dover_cli import debug_once, recorded_crew
from faultfinder.cli import main


@pytest.fixture(scope="module")
def crew(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[str], str]]:
    """The crew recorded once: its run directory, command and the upstream's URL."""
    out = tmp_path_factory.mktemp("crew")
    with recorded_crew("crewai_team.py", scripts.crewai, out) as (run_dir, trace, command, url):
        first = trace.steps[0]
        assert first.agent == "Researcher" and not first.content
        assert [c.name for c in first.tool_calls] == ["lookup"]
        yield run_dir, command, url


def steps(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]


def row_of(out: Path) -> dict[str, Any]:
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    return row


@pytest.mark.slow
@pytest.mark.frameworks_env
def test_a_crewai_tool_call_steps_text_that_no_agent_reads_is_not_applied(
    crew: tuple[Path, list[str], str], tmp_path: Path
) -> None:
    run_dir, command, upstream = crew
    (row,), _ = debug_once(run_dir, upstream, command, tmp_path / "dover.jsonl")
    intervention = row["intervention"]
    assert intervention["step"] == 0 and intervention["replacement"] == scripts.FIX
    assert intervention["tool_calls"] == intervention["original_tool_calls"]
    (repeat,) = row["repeats"]
    branch = steps(Path(repeat["branch"]))
    # Served as text with the recorded call (a tool call CrewAI makes, not a final answer)...
    served = branch[0]["response"]["choices"][0]["message"]
    assert branch[0]["origin"] == "edited" and served["content"] == scripts.FIX
    assert served["tool_calls"][0]["id"] == intervention["tool_calls"][0]["id"]
    # ...and CrewAI sends the reply back without its text: nobody reads the intervention.
    echoed = [m for m in branch[1]["request"]["messages"] if m["role"] == "assistant"]
    assert [m["content"] for m in echoed] == [None] and echoed[0]["tool_calls"]
    assert repeat["final_answer"] == scripts.WRONG != intervention["replacement"]
    assert not repeat["edit_applied"] and repeat["at_reached"]
    assert "no later request carried it" in repeat["error"]
    assert repeat["fulfilled"] is None and repeat["success"] is None
    assert row["verdict"] == "not_applied", row["verdict_reason"]
    assert "no agent read it" in row["verdict_reason"]


@pytest.mark.slow
@pytest.mark.frameworks_env
def test_verify_edit_of_a_crewai_tool_call_steps_text_is_not_applied(
    crew: tuple[Path, list[str], str], tmp_path: Path
) -> None:
    """A ``reply`` edit with the recorded call and new text: the same text, dropped."""
    run_dir, command, upstream = crew
    (call,) = json.loads((run_dir / "trace.json").read_text())["steps"][0]["tool_calls"]
    edit = tmp_path / "reply.json"
    edit.write_text(json.dumps({"kind": "reply", "content": scripts.FIX, "tool_calls": [call]}))
    result = CliRunner().invoke(
        main,
        [
            "verify-edit", str(run_dir), "--at", "0", "--edit-file", str(edit),
            "--repeats", "1", "--session", "reply", "--upstream", upstream,
            "--", *command,
        ],
    )  # fmt: skip
    assert result.exit_code in (0, 1), result.output
    row = row_of(run_dir / "dover" / "reply.jsonl")
    (repeat,) = row["repeats"]
    assert row["intervention"]["tool_calls"] == row["intervention"]["original_tool_calls"]
    assert repeat["final_answer"] == scripts.WRONG and repeat["at_reached"]
    assert not repeat["edit_applied"] and "no later request carried it" in repeat["error"]
    assert row["verdict"] == "not_applied", row["verdict_reason"]
    # The replay's own line says so too, not "success False" before the row disagrees.
    (line,) = [ln for ln in result.output.splitlines() if ln.startswith("replay 1/1")]
    assert "no later request carried it" in line and "not judged" in line, line
    assert "success" not in line
