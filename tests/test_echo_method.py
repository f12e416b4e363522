"""ECHO end to end with function/scripted models: the default decoupled pipeline, the
I1–I3 ablations, malformed replies, observability, budgets, schemas and the CLI."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.errors import ConfigError
from faultfinder.judging.method import Attribution, run_method
from faultfinder.llm import LLM, ChatRequest, FunctionBackend, ParseError
from faultfinder.llm.base import messages_text
from faultfinder.methods.echo.panel import sample_panel, spread_temperatures
from faultfinder.methods.echo.prompts import ROLE_INSTRUCTIONS, ROLES
from faultfinder.methods.echo.schema import (
    analysis_json_schema,
    judge_json_schema,
    parse_analysis,
    parse_judge,
    parse_sections,
)
from faultfinder.registry import create_method
from faultfinder.traces.loader import load_trace
from faultfinder.traces.schema import Trace

FIXTURES = Path(__file__).parent / "fixtures" / "echo"
ROOMS = FIXTURES / "rooms_outputs_only.json"
RECORDED = FIXTURES / "recorded_with_inputs.json"
AGENTS = ["Planner", "Coder", "Computer_terminal", "Verifier"]


def analysis_json(
    agents: list[str] | None, step: int | None, confidence: float, kind: str = "single_agent"
) -> str:
    return json.dumps(
        {
            "analysis_summary": "checked every step",
            "agent_evaluations": [
                {
                    "agent_name": a,
                    "step_index": step,
                    "error_likelihood": 0.8,
                    "reasoning": "r",
                    "evidence": "e",
                }
                for a in agents or []
            ]
            + [
                {
                    "agent_name": "Verifier",
                    "step_index": 5,
                    "error_likelihood": 0.3,
                    "reasoning": "r",
                    "evidence": "e",
                }
            ],
            "primary_conclusion": {
                "type": kind,
                "attribution": agents,
                "mistake_step": step,
                "confidence": confidence,
                "reasoning": f"{agents} at step {step}",
            },
            "alternative_hypotheses": [
                {
                    "type": "single_agent",
                    "attribution": ["Verifier"],
                    "mistake_step": 5,
                    "confidence": 0.2,
                    "reasoning": "the verifier should have caught it",
                }
            ],
        }
    )


def role_of(request: ChatRequest) -> str:
    # The role is in the system prompt (paper layout) or at the end of the user message.
    text = messages_text(request.messages)
    return next(r for r in ROLES if ROLE_INSTRUCTIONS[r] in text)


def pass_of(request: ChatRequest) -> str:
    text = messages_text(request.messages)
    if "agent-level attribution" in text:
        return "agent"
    return "step" if "step-level attribution" in text else "unified"


class PanelModel:
    """Answers analysts by pass and role; remembers what each pass was shown."""

    def __init__(self, step_answers: dict[str, int] | None = None) -> None:
        self.step_answers = step_answers or {}
        self.prompts: dict[str, list[str]] = {"unified": [], "agent": [], "step": []}
        self.temperatures: list[float] = []

    def __call__(self, request: ChatRequest) -> str:
        user = request.messages[-1]["content"]
        role = role_of(request)
        kind = pass_of(request)
        self.temperatures.append(request.temperature)
        if kind == "agent":
            self.prompts["agent"].append(user)
            return analysis_json(["Coder"], None, 0.9 if role != "skeptical" else 0.4)
        if kind == "step":
            self.prompts["step"].append(user)
            step = self.step_answers.get(role, 3)
            return "<json>" + analysis_json(["Coder"], step, 0.8) + "</json>"
        self.prompts["unified"].append(user)
        return analysis_json(["Coder"], 3, 0.7)


def run(
    spec: str, trace: Trace, model: Any, **overrides: Any
) -> tuple[Attribution, FunctionBackend]:
    backend = FunctionBackend(model)
    method = create_method(spec, **overrides)
    return asyncio.run(run_method(method, trace, LLM(backend), label=spec)), backend


# --- default: decoupled (I4) ---------------------------------------------------------


def test_echo_default_runs_agent_then_step_pass_on_one_shared_prefix() -> None:
    trace = load_trace(ROOMS)
    model = PanelModel()
    result, backend = run("echo", trace, model)
    assert result.status == "ok"
    assert (result.agent, result.step) == ("Coder", 3)
    assert result.usage.calls == 6  # 3 analysts x 2 passes
    assert len(model.prompts["agent"]) == 3 and len(model.prompts["step"]) == 3
    assert sorted(set(model.temperatures)) == [0.3, 0.6, 0.9]
    # Agent-level pass: every step in full (outputs only here).
    agent_prompt = model.prompts["agent"][0]
    assert "print(len(df[df.capacity > 12]))" in agent_prompt
    assert "HIERARCHICAL CONTEXT EXAMPLE" in agent_prompt
    # Step-level pass: the same conversation, the focus stated after it.
    step_prompt = model.prompts["step"][0]
    assert "Attributed agent(s): Coder" in step_prompt
    assert "Steps taken by them: 1, 3, 8." in step_prompt
    assert step_prompt.index("Step 9 - Planner") < step_prompt.index("Attributed agent(s)")
    assert "[key decision]" not in step_prompt
    # Every call: the same system prompt and the same start of the user message, up to
    # the end of the conversation; the role comes last.
    systems = {r.messages[0]["content"] for r in backend.requests}
    assert len(systems) == 1
    shared = agent_prompt[: agent_prompt.rindex("Your task (agent-level attribution)")]
    assert "Step 9 - Planner" in shared and "ANALYST SPECIALIZATION" not in shared
    assert all(r.messages[-1]["content"].startswith(shared) for r in backend.requests)
    for request in backend.requests:
        tail = request.messages[-1]["content"].rsplit("ANALYST SPECIALIZATION: ", 1)[1]
        assert tail.startswith(ROLE_INSTRUCTIONS[role_of(request)])  # type: ignore[index]
    details = result.details
    assert details["variant"] == "I4" and details["focus"]["steps"] == [1, 3, 8]
    assert details["prompt_layout"] == "shared-prefix" and details["step_view"] == "conversation"
    assert len(details["panel"]) == 3
    agent_vote = details["agent_pass"]["consensus"]
    assert agent_vote["agents"] == ["Coder"]
    assert agent_vote["agent_evaluations"]["Coder"]["count"] == 3
    assert details["step_pass"]["consensus"]["step"] == 3
    assert details["consistency"]["step_taken_by_attributed_agent"] is True
    assert len(details["step_pass"]["consensus"]["alternatives"]) == 3
    assert result.prompt_version.startswith("echo-")


def test_paper_layout_uses_role_system_prompts_and_the_focused_view() -> None:
    trace = load_trace(ROOMS)
    model = PanelModel()
    result, backend = run("echo", trace, model, prompt_layout="paper")
    assert (result.agent, result.step) == ("Coder", 3)
    assert len({r.messages[0]["content"] for r in backend.requests}) == 6  # role x pass
    assert all(
        r.messages[0]["content"].count("ANALYST SPECIALIZATION") == 1 for r in backend.requests
    )
    # Step-level pass: focused on Coder's steps (1, 3, 8), compressed elsewhere.
    step_prompt = model.prompts["step"][0]
    assert "Attributed agent(s): Coder" in step_prompt
    assert "Steps taken by them: 1, 3, 8." in step_prompt
    assert "[full] Step 3 - Coder" in step_prompt
    assert "[key decision] Step 5 - Verifier" in step_prompt
    assert result.details["step_view"] == "focused"
    assert create_method("echo:paper").config.prompt_layout == "paper"  # type: ignore[attr-defined]


def test_step_vote_disagreement_is_reported() -> None:
    trace = load_trace(ROOMS)
    # Whoever is drawn as general/liberal/... votes step 3 except pattern_focused (1) and
    # conservative (8); we force the panel so the vote is known.
    model = PanelModel({"pattern_focused": 1, "conservative": 8})
    result, _ = run("echo", trace, model, roles=["pattern_focused", "general", "conservative"])
    scores = result.details["step_pass"]["consensus"]["step_scores"]
    assert scores == {"1": 0.8, "3": 0.8, "8": 0.8}
    assert result.step == 1  # three-way tie: first in analyst order
    assert result.details["requires_review"] is True
    assert any("step-level" in r for r in result.details["review_reasons"])


def test_skeptical_low_confidence_still_votes_above_threshold() -> None:
    trace = load_trace(ROOMS)
    result, _ = run("echo", trace, PanelModel(), roles=["skeptical", "general"])
    accepted = result.details["agent_pass"]["consensus"]["accepted"]
    assert [b["confidence"] for b in accepted] == [0.4, 0.9]
    assert result.confidence == pytest.approx(((0.4 + 0.9) / 2 + 0.8) / 2)


def test_window_context_with_the_panel_shows_only_neighbours() -> None:
    trace = load_trace(ROOMS)
    model = PanelModel()
    result, _ = run("echo", trace, model, context="window", prompt_layout="paper")
    assert (result.agent, result.step) == ("Coder", 3)
    view = model.prompts["step"][0]
    assert "[full] Step 3 - Coder" in view and "[full] Step 9 - Planner" in view
    assert "Step 6 - Planner" not in view and "[key decision]" not in view
    assert result.details["extractor"] is None


def test_panel_draw_is_seeded_and_covers_roles() -> None:
    a = sample_panel("t1", size=3, seed=1)
    assert a == sample_panel("t1", size=3, seed=1)
    draws = {tuple(x.role for x in sample_panel("t1", size=3, seed=s)) for s in range(20)}
    assert len(draws) > 3
    assert all(len(set(d)) == 3 for d in draws)
    six = sample_panel("t1", size=6, seed=0)
    assert sorted(x.role for x in six) == sorted(ROLES)
    assert spread_temperatures(3, 0.3, 0.9) == [0.3, 0.6, 0.9]
    assert spread_temperatures(1, 0.3, 0.9) == [0.6]
    assert len(spread_temperatures(6, 0.3, 0.9)) == 6


def test_panel6_preset_asks_all_six_roles() -> None:
    trace = load_trace(ROOMS)
    model = PanelModel()
    result, backend = run("echo:panel6", trace, model)
    assert result.usage.calls == 12
    assert {role_of(r) for r in backend.requests} == set(ROLES)


# --- malformed replies ---------------------------------------------------------------


def test_all_analysts_unparsed_gives_unparsed_not_a_guess() -> None:
    trace = load_trace(ROOMS)
    result, _ = run("echo", trace, lambda r: "The Coder did it, at step 3 I think.")
    assert result.status == "unparsed"
    assert result.agent is None and result.step is None
    assert result.usage.calls == 9  # 3 analysts x (1 + 2 parse retries); no step pass
    analysts = result.details["agent_pass"]["analysts"]
    assert all(a["status"] == "unparsed" and a["attempts"] == 3 for a in analysts)
    assert result.details["step_pass"]["status"].startswith("skipped")


def test_retry_repairs_and_failed_analyst_is_excluded() -> None:
    trace = load_trace(ROOMS)
    model = PanelModel()

    def flaky(request: ChatRequest) -> str:
        role = role_of(request)
        if role == "general":
            return '{"primary_conclusion": {"type": "single_agent"'  # never valid
        if role == "liberal" and request.sample < 1000:
            return "not json at all"  # first attempt only
        return model(request)

    result, _ = run("echo", trace, flaky, roles=["general", "liberal", "detail_focused"])
    assert result.status == "ok" and (result.agent, result.step) == ("Coder", 3)
    analysts = {a["analyst"].split("@")[0]: a for a in result.details["agent_pass"]["analysts"]}
    assert analysts["general"]["status"] == "unparsed"
    assert analysts["liberal"]["status"] == "ok" and analysts["liberal"]["attempts"] == 2
    voters = [b["analyst"] for b in result.details["agent_pass"]["consensus"]["accepted"]]
    assert not any(v.startswith("general") for v in voters) and len(voters) == 2


def test_low_confidence_everywhere_means_no_error_found() -> None:
    trace = load_trace(ROOMS)
    result, _ = run("echo", trace, lambda r: analysis_json(["Coder"], 3, 0.1))
    assert result.status == "no-error-found" and result.agent is None
    assert result.details["requires_review"] is True
    assert result.usage.calls == 3


def test_out_of_range_step_is_dropped_from_the_vote() -> None:
    trace = load_trace(ROOMS)

    def model(request: ChatRequest) -> str:
        if pass_of(request) == "step":
            return analysis_json(["Coder"], 42, 0.9)
        return analysis_json(["Coder"], None, 0.9)

    result, _ = run("echo", trace, model)
    assert result.status == "ok" and result.agent == "Coder" and result.step is None
    assert result.details["step_pass"]["consensus"]["rejected_steps"] == [42, 42, 42]


# --- unified and context-aware ablations ----------------------------------------------


def test_i3_is_one_unified_pass() -> None:
    trace = load_trace(ROOMS)
    model = PanelModel()
    result, _ = run("echo:I3", trace, model)
    assert (result.agent, result.step, result.usage.calls) == ("Coder", 3, 3)
    assert len(model.prompts["unified"]) == 3 and not model.prompts["step"]
    assert result.details["variant"] == "I3"
    assert result.details["unified_pass"]["consensus"]["confidence"] == pytest.approx(0.7)


def argue_and_judge(shown: dict[int, str]) -> Any:
    def model(request: ChatRequest) -> str:
        system = request.messages[0]["content"]
        user = request.messages[-1]["content"]
        if system.startswith("You are a Context-Aware Step Agent"):
            index = int(re.search(r"analyze this agent \(Step (\d+)", user).group(1))  # type: ignore[union-attr]
            shown[index] = user
            if index == 6:
                return "I refuse."  # never parseable: excluded from the judge
            return (
                f"## Purpose:\nstep {index}\n## Errors:\nmistake at {index}\n"
                "## Evidence:\nthe final answer is wrong"
            )
        assert "Final Judge Agent" in system
        arguments = json.loads(user.split("All Agent Arguments: ", 1)[1].split("\n\nPlease")[0])
        assert 6 not in [a["step_id"] for a in arguments]
        return (
            '<json>{"mistake_agent": "coder", "mistake_step": "step 3", '
            '"mistake_reason": "used > instead of >="}</json>'
        )

    return model


def test_i1_argues_every_step_with_a_window_then_judges() -> None:
    trace = load_trace(ROOMS)
    shown: dict[int, str] = {}
    result, backend = run("echo:I1", trace, argue_and_judge(shown))
    assert (result.agent, result.step) == ("Coder", 3)
    assert result.reason == "used > instead of >="
    assert result.usage.calls == 10 + 2 + 1  # 10 arguments, 2 retries for step 6, judge
    assert "Previous agent:\nStep 2 - Computer_terminal" in shown[3]
    assert "Next agent:\nStep 4 - Computer_terminal" in shown[3]
    assert "Step 0" not in shown[3] and "(none: this is the first step)" in shown[0]
    statuses = {a["step"]: a["status"] for a in result.details["arguments"]}
    assert statuses[6] == "unparsed" and statuses[3] == "ok"
    assert result.details["variant"] == "I1"
    temps = {r.temperature for r in backend.requests}
    assert temps == {1.0, 0.0}


def test_i2_argues_with_hierarchical_context() -> None:
    trace = load_trace(ROOMS)
    shown: dict[int, str] = {}
    result, _ = run("echo:I2", trace, argue_and_judge(shown))
    assert (result.agent, result.step) == ("Coder", 3)
    assert "NEARBY CONTEXT" in shown[0] and "MILESTONES" in shown[0]
    assert "hierarchical context of the entire conversation" in shown[0]
    assert result.details["variant"] == "I2"


def test_unreadable_judge_gives_unparsed() -> None:
    trace = load_trace(ROOMS)

    def model(request: ChatRequest) -> str:
        if request.messages[0]["content"].startswith("You are a Final Judge Agent"):
            return '{"mistake_agent": "Nobody", "mistake_step": 3}'
        return "## Errors:\nsomething\n## Evidence:\nsomething"

    result, _ = run("echo:I1", trace, model)
    assert result.status == "unparsed" and result.agent is None
    assert result.details["judge"]["status"] == "unparsed"


# --- observability, budgets, extractor -------------------------------------------------


def test_recorded_inputs_are_shown_only_when_observable() -> None:
    trace = load_trace(RECORDED)
    for observability, visible in (("full", True), ("outputs", False)):
        model = PanelModel()

        def answer(request: ChatRequest, model: PanelModel = model) -> str:
            model(request)
            return analysis_json(["Researcher"], 2, 0.9)

        result, backend = run("echo", trace, answer, observability=observability)
        assert (result.agent, result.step) == ("Researcher", 2)
        everything = "\n".join(messages_text(r.messages) for r in backend.requests)
        assert ("SECRET-INPUT-MARKER" in everything) is visible
        assert ("You look facts up with the search tool." in everything) is visible
        # Tool calls and results are outputs: always shown.
        assert "[tool call] search" in model.prompts["agent"][0]
        assert "31 March 1889" in model.prompts["agent"][0]


def test_ground_truth_only_with_the_flag() -> None:
    trace = load_trace(ROOMS)
    for flag in (False, True):
        model = PanelModel()
        run("echo", trace, model, with_ground_truth=flag)
        assert ("Ground Truth: 3" in model.prompts["agent"][0]) is flag


def test_context_budget_bounds_every_prompt() -> None:
    trace = load_trace(ROOMS)
    # Step 6 (Planner) is far from the Coder steps the step-level pass judges.
    long = trace.steps[6].content + "\n" + "x = 1  # filler\n" * 800
    steps = [s.model_copy(update={"content": long}) if s.index == 6 else s for s in trace.steps]
    trace = trace.model_copy(update={"steps": steps})
    for spec in ("echo", "echo:I2", "echo:llm-context"):
        model = PanelModel()

        def answer(request: ChatRequest, model: PanelModel = model) -> str:
            if request.messages[0]["content"].startswith("You compress"):
                return '{"key_decision": "k", "summary": "s", "milestone": "m"}'
            if request.messages[0]["content"].startswith("You are a Context-Aware"):
                return "## Errors:\nx\n## Evidence:\ny"
            if "Final Judge" in request.messages[0]["content"]:
                return '{"mistake_agent": "Coder", "mistake_step": 3, "mistake_reason": "r"}'
            return model(request)

        result, backend = run(spec, trace, answer, context_budget=2500)
        for request in backend.requests:
            assert backend.count_tokens(messages_text(request.messages)) <= 2500
        if spec == "echo:I2":
            # I2 judges every step in turn; step 6 alone is over the budget and is never cut.
            assert result.status == "error" and "the context of step 6" in (result.error or "")
            continue
        assert result.status == "ok"
        assert any(
            "truncated by faultfinder" in messages_text(r.messages) for r in backend.requests
        )


def test_llm_context_preset_compresses_with_the_model() -> None:
    trace = load_trace(ROOMS)
    model = PanelModel()

    def answer(request: ChatRequest) -> str:
        if "You compress one step" in request.messages[0]["content"]:
            index = re.match(r"Step (\d+)", request.messages[-1]["content"]).group(1)  # type: ignore[union-attr]
            return json.dumps(
                {"key_decision": f"KD{index}", "summary": f"SU{index}", "milestone": f"MI{index}"}
            )
        return model(request)

    result, _ = run("echo:llm-context", trace, answer)
    assert result.usage.calls == 10 + 6
    assert result.details["context_sources"] == {"llm": 10}
    # The Step 0 example shows step 2 as its key decision, step 5 as its summary.
    assert "Step 2 - Computer_terminal: KD2" in model.prompts["agent"][0]
    assert "Step 5 - Verifier: SU5" in model.prompts["agent"][0]
    run("echo:llm-context", trace, answer, prompt_layout="paper")
    step_prompt = model.prompts["step"][-1]
    assert "[key decision] Step 5 - Verifier: KD5" in step_prompt


def test_empty_trace_and_bad_config() -> None:
    trace = load_trace(ROOMS).model_copy(update={"steps": [], "label": None})
    result, backend = run("echo", trace, PanelModel())
    # Nothing to attribute: an error, not a verdict (run_method never runs the method).
    assert result.status == "error" and backend.requests == []
    with pytest.raises(ConfigError, match="panel_size"):
        create_method("echo", panel_size=7)
    with pytest.raises(ConfigError, match="temperature_min"):
        create_method("echo", temperature_min=0.9, temperature_max=0.3)


# --- schemas and parsers --------------------------------------------------------------


def test_parse_analysis_repairs_and_maps_names() -> None:
    text = (
        "Here you go:\n```json\n"
        '{"analysis_summary": "s", "agent_evaluations": [{"agent_name": "coder", '
        '"error_likelihood": 0.7}, {"agent_name": "Ghost", "error_likelihood": 0.1},], '
        '"primary_conclusion": {"type": "Single-Agent", "attribution": "coder", '
        '"mistake_step": "Step 3", "confidence": "0.8"}, "alternative_hypotheses": []}\n```'
    )
    analysis = parse_analysis(text, AGENTS)
    primary = analysis.primary_conclusion
    assert (primary.type, primary.attribution, primary.mistake_step) == (
        "single_agent",
        ["Coder"],
        3,
    )
    assert primary.confidence == 0.8
    assert [e.agent_name for e in analysis.agent_evaluations] == ["Coder"]
    assert analysis.dropped_names == ["Ghost"]


@pytest.mark.parametrize(
    "bad",
    [
        "no json",
        "[1, 2]",
        '{"primary_conclusion": {"type": "single_agent", "confidence": 1.7}}',
        '{"primary_conclusion": {"type": "blame", "confidence": 0.5}}',
        '{"primary_conclusion": {"type": "single_agent", "attribution": ["Ghost"], '
        '"confidence": 0.5}}',
        '{"analysis_summary": "missing the conclusion"}',
    ],
)
def test_parse_analysis_rejects(bad: str) -> None:
    with pytest.raises(ParseError):
        parse_analysis(bad, AGENTS)


def test_reply_cut_off_at_the_token_limit_is_named_as_such() -> None:
    # The outer object never closes; the complete inner evaluation must not be parsed instead.
    cut = (
        '{"analysis_summary": "s", "agent_evaluations": [{"agent_name": "Coder", '
        '"error_likelihood": 0.5}], "primary_conclusion": {"type": "single_agent", "reas'
    )
    with pytest.raises(ParseError, match="cut off"):
        parse_analysis(cut, AGENTS)


def test_judge_and_section_parsers() -> None:
    verdict = parse_judge('{"mistake_agent": "Coder", "mistake_step": "3"}', AGENTS, 10)
    assert (verdict.agent, verdict.step) == ("Coder", 3)
    # A step outside the trace is read as written; the agent/step rule marks it later.
    assert parse_judge('{"mistake_agent": "Coder", "mistake_step": 10}', AGENTS, 10).step == 10
    with pytest.raises(ParseError):
        parse_judge('{"mistake_agent": "Coder, Planner", "mistake_step": 1}', AGENTS, 10)
    sections = parse_sections("**Purpose:** load\n## Errors\nused > 12\n## Evidence:\nit is 2")
    assert sections == {"Purpose": "load", "Errors": "used > 12", "Evidence": "it is 2"}
    with pytest.raises(ParseError):
        parse_sections("## Purpose:\nonly a purpose")


def test_json_schemas_use_enums_and_convert_to_a_grammar() -> None:
    schema = analysis_json_schema(AGENTS, 4)
    primary = schema["properties"]["primary_conclusion"]["properties"]
    assert primary["mistake_step"] == {"enum": [0, 1, 2, 3, None]}
    assert primary["attribution"]["anyOf"][0]["items"] == {"enum": AGENTS}
    assert "$defs" not in json.dumps(schema) and "$ref" not in json.dumps(schema)
    assert judge_json_schema(AGENTS, 2)["properties"]["mistake_step"] == {"enum": [0, 1]}
    grammar = pytest.importorskip("llama_cpp.llama_grammar")
    gbnf = grammar.json_schema_to_gbnf(json.dumps(schema))
    assert '"\\"Coder\\""' in gbnf


def test_constraint_is_sent_with_every_analyst_call() -> None:
    trace = load_trace(ROOMS)
    _, backend = run("echo", trace, PanelModel())
    for request in backend.requests:
        assert request.constraint is not None
        enum = request.constraint.json_schema["properties"]["primary_conclusion"]  # type: ignore[index]
        assert enum["properties"]["attribution"]["anyOf"][0]["items"]["enum"] == AGENTS


# --- CLI ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "replies", "expected"),
    [
        ("echo", "decoupled_replies.json", "Coder"),
        ("echo:I3", "decoupled_replies.json", "Coder"),
        ("echo:I1", "i1_replies.json", "Verifier"),
    ],
)
def test_cli_runs_echo_and_its_ablations(spec: str, replies: str, expected: str) -> None:
    result = CliRunner().invoke(
        main,
        [
            "attribute",
            str(ROOMS),
            "--method",
            spec,
            "--model",
            f"scripted:{FIXTURES / replies}",
            "--cache",
            "none",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["status"] == "ok" and data["agent"] == expected
    assert data["method"] == spec
