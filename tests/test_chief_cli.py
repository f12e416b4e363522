"""`faultfinder graph` and `attribute --method chief` from the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.llm import ChatRequest
from faultfinder.methods.chief import CausalGraph
from faultfinder.methods.chief.prompts import stage_of

FIXTURES = Path(__file__).parent / "fixtures" / "chief"
TRACE = str(FIXTURES / "loop_trace.json")
REPLIES: dict[str, Any] = json.loads((FIXTURES / "replies_loop.json").read_text("utf-8"))
calls_seen: list[str] = []


def route(request: ChatRequest) -> str:
    """A function model for `--model function:test_chief_cli:route`."""
    text = next(m["content"] for m in reversed(request.messages) if m["role"] == "user")
    stage = stage_of(text)
    calls_seen.append(stage)
    reply = REPLIES[stage]
    return reply if isinstance(reply, str) else json.dumps(reply)


def scripted(tmp: Path, *stages: str) -> str:
    path = tmp / "replies.json"
    replies = [r if isinstance(r := REPLIES[s], str) else json.dumps(r) for s in stages]
    path.write_text(json.dumps(replies), encoding="utf-8")
    return f"scripted:{path}"


GRAPH_STAGES = ("decompose", "otar", "edges", "step-edges")


def test_graph_writes_json_dot_and_mermaid(tmp_path: Path) -> None:
    model = scripted(tmp_path, *GRAPH_STAGES, "oracles", "backtrack")
    out, dot, mmd = tmp_path / "g.json", tmp_path / "g.dot", tmp_path / "g.mmd"
    result = CliRunner().invoke(
        main,
        [
            "graph",
            TRACE,
            "--out",
            str(out),
            "--dot",
            str(dot),
            "--mermaid",
            str(mmd),
            "--oracles",
            "--model",
            model,
            "--cache",
            "none",
            "--stage-cache",
            "none",
        ],
    )
    assert result.exit_code == 0, result.output
    graph = CausalGraph.model_validate_json(out.read_text("utf-8"))
    assert [s.id for s in graph.subtasks] == ["S1", "S2", "S3"]
    assert len(graph.oracles) == 3 and graph.candidates is not None
    assert graph.candidates.steps == [6, 9]
    assert dot.read_text("utf-8").startswith("digraph")
    assert mmd.read_text("utf-8").startswith("flowchart TB")
    assert "S2   steps   2-7" in result.output
    assert "loop L1:   Orchestrator repeats at steps [2, 4, 6]" in result.output
    assert "6 calls" in result.output


def test_graph_without_outputs_prints_the_json(tmp_path: Path) -> None:
    model = scripted(tmp_path, *GRAPH_STAGES)
    result = CliRunner().invoke(
        main, ["graph", TRACE, "--model", model, "--cache", "none", "--stage-cache", "none"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["format"] == "faultfinder-chief-graph"


def test_attribute_runs_chief_presets(tmp_path: Path) -> None:
    model = scripted(tmp_path, *GRAPH_STAGES, "direct")
    result = CliRunner().invoke(
        main,
        [
            "attribute",
            TRACE,
            "--method",
            "chief:M1",
            "--model",
            model,
            "--cache",
            "none",
            "--set",
            "stage_cache=none",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "agent:      Assistant" in result.output
    assert "step:       9" in result.output


def test_attribute_reuses_the_graph_command_output_through_the_stage_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    model = "function:test_chief_cli:route"
    monkeypatch.chdir(tmp_path)  # the default stage cache lives under the working directory
    calls_seen.clear()
    built = runner.invoke(main, ["graph", TRACE, "--out", "g.json", "--oracles", "--model", model])
    assert built.exit_code == 0, built.output
    assert calls_seen == [*GRAPH_STAGES, "oracles", "backtrack"]
    calls_seen.clear()
    result = runner.invoke(
        main,
        [
            "attribute",
            TRACE,
            "--method",
            "chief",
            "--model",
            model,
            "--json",
            "--cache",
            "none",
            "--set",
            "graph_out=final.json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert calls_seen == ["attribution"]
    verdict = json.loads(result.output)
    assert (verdict["agent"], verdict["step"]) == ("Assistant", 9)
    assert verdict["details"]["stage_cache"] == {"graph": "hit", "m2": "hit"}
    assert verdict["details"]["graph"]["path"] == "final.json"
    assert Path("final.json").exists()


def test_bad_chief_option_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["graph", TRACE, "--model", scripted(tmp_path), "--set", "modules=M9"]
    )
    assert result.exit_code != 0
    assert "modules" in result.output


def test_graph_holds_budget_tokens(tmp_path: Path) -> None:
    model = scripted(tmp_path, *GRAPH_STAGES)
    args = ["graph", TRACE, "--out", str(tmp_path / "g.json"), "--model", model]
    args += ["--cache", "none", "--stage-cache", "none"]
    over = CliRunner().invoke(main, [*args, "--budget-tokens", "500"])
    assert over.exit_code == 5, over.output
    assert "Per-case token budget of 500" in over.output
    assert not (tmp_path / "g.json").exists()
    fits = CliRunner().invoke(main, [*args, "--budget-tokens", "10000000"])
    assert fits.exit_code == 0, fits.output
    assert (tmp_path / "g.json").exists()
