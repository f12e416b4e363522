"""DoVer: segmentation, hypotheses, interventions, judgements, verdicts, and the pipeline
end to end on the demo team (scripted team model, scripted debugging model, real replays)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from demo_recording import demo_command, record_demo
from faultfinder.demo_team import Team, TeamConfig, mock_debugger, mock_model
from faultfinder.demo_team.tasks import find_task
from faultfinder.dover.checker import ExactChecker, make_checker
from faultfinder.dover.hypothesis import hypothesise, trial_trace
from faultfinder.dover.intervene import leaks, target_step
from faultfinder.dover.models import (
    DoverConfig,
    DoverRow,
    Hypothesis,
    Intervention,
    MilestoneEvaluation,
    MilestoneStatus,
    RepeatResult,
    Trial,
)
from faultfinder.dover.pipeline import run_dover
from faultfinder.dover.replays import ReplayExecutor
from faultfinder.dover.report import aggregate, format_summary, read_rows
from faultfinder.dover.segment import segment, segment_by_pattern, trials_from
from faultfinder.dover.verdict import classify, threshold, wilson_interval
from faultfinder.llm.client import LLM
from faultfinder.llm.doubles import FunctionBackend, ScriptedBackend
from faultfinder.registry import create_method
from faultfinder.replay.child import ChildResult
from faultfinder.replay.proxy import ProxyConfig, RecordingProxy
from faultfinder.replay.recorder import (
    RunMeta,
    RunStore,
    load_calls,
    read_meta,
    rebuild_trace,
    write_meta,
)
from faultfinder.replay.replayer import Edit, ReplayOptions, ReplayPlan
from faultfinder.replay.report import ReplayReport
from faultfinder.replay.session import ReplayOutcome, SessionOptions
from faultfinder.testing import FakeOpenAIServer
from faultfinder.traces.schema import Step, Trace


def make_trace(outputs: list[tuple[str, str]], **extra: Any) -> Trace:
    steps = [Step(index=i, agent=agent, content=text) for i, (agent, text) in enumerate(outputs)]
    return Trace(id="t", task="the task", steps=steps, **extra)


LOG = make_trace(
    [
        ("Orchestrator", "PLAN: look it up"),
        ("Orchestrator", "NEXT: Researcher | look"),
        ("Researcher", "NOT FOUND"),
        ("Orchestrator", "PLAN: try again"),
        ("Orchestrator", "NEXT: Researcher | look harder"),
        ("Researcher", "found 7"),
        ("Orchestrator", "FINAL: 7"),
    ],
    ground_truth="8",
)


def repeat(
    success: bool | None,
    fulfilled: bool | None,
    progress: float | None = None,
    applied: bool = True,
) -> RepeatResult:
    return RepeatResult(
        repeat=0,
        branch="b",
        success=success,
        fulfilled=fulfilled,
        progress=progress,
        edit_applied=applied,
    )


# --- verdicts ---------------------------------------------------------------------------


def test_verdicts_follow_the_papers_rules() -> None:
    assert threshold(3) == 2 and threshold(1) == 1 and threshold(5) == 4
    assert (
        classify([repeat(True, True), repeat(True, False), repeat(False, True)])[0] == "validated"
    )
    partial = [repeat(False, True, 0.2), repeat(False, True, 0.4), repeat(True, True, 1.0)]
    assert classify(partial)[0] == "partially_validated"
    refuted = [repeat(False, True, 0.0), repeat(False, True, None), repeat(False, False, 0.5)]
    assert classify(refuted)[0] == "refuted"
    # Mostly not carried out: the hypothesis is untested.
    assert (
        classify([repeat(False, False), repeat(False, False), repeat(False, True)])[0]
        == "inconclusive"
    )
    # Unjudged runs cannot count for anything.
    verdict, reason = classify([repeat(False, None), repeat(False, None), repeat(False, True)])
    assert verdict == "inconclusive" and "2 unjudged" in reason
    # One progressing and one stalled run out of three: neither reaches two.
    assert (
        classify([repeat(False, True, 0.2), repeat(False, True, 0.0), repeat(False, False)])[0]
        == "inconclusive"
    )


def test_verdicts_for_the_cases_the_paper_does_not_meet() -> None:
    # An intervention identical to the original message changes nothing: never refuted.
    assert classify([], changed=False)[0] == "not_applied"
    assert classify([repeat(False, True)] * 3, changed=False)[0] == "not_applied"
    # The edit reached the program in fewer than 2 of 3 replays.
    verdict, reason = classify(
        [repeat(None, None, applied=False), repeat(None, None, applied=False), repeat(True, True)]
    )
    assert verdict == "not_applied" and "1/3" in reason
    # No reference and no checker: success unknown, so neither validated nor refuted.
    verdict, reason = classify([repeat(None, True), repeat(None, True), repeat(None, True)])
    assert verdict == "unverifiable" and "0/3" in reason
    # Runs whose success is unknown cannot make the failure look fixed either way...
    assert classify([repeat(True, True), repeat(None, True), repeat(None, True)])[0] == (
        "unverifiable"
    )
    # ...but two known successes of three still validate.
    assert classify([repeat(True, True), repeat(True, True), repeat(None, True)])[0] == (
        "validated"
    )


def crashed(success: bool | None = None, fulfilled: bool | None = None) -> RepeatResult:
    """A replay that got the edit and then failed on its own (exit status 1)."""
    result = repeat(success, fulfilled)
    result.program_failed, result.exit_code = True, 1
    return result


def test_replays_that_failed_on_their_own_are_no_evidence() -> None:
    # Three crashes: not refuted (nothing failed the task) and not validated, whatever
    # the answer of the last step that ran and whatever a judge said.
    verdict, reason = classify([crashed(False, True)] * 3)
    assert verdict == "inconclusive"
    assert reason.startswith("3/3 replays are no evidence either way (the program failed")
    assert "x3" in reason
    assert classify([crashed(True, True)] * 3)[0] == "inconclusive"
    # Two crashes of three leave one replay: below the 2-of-3 threshold for anything.
    mixed = [crashed(), crashed(), repeat(False, True)]
    assert classify(mixed)[0] == "inconclusive"
    # One crash of three: the other two still decide, and the reason counts the crash.
    verdict, reason = classify([crashed(), repeat(True, True), repeat(True, True)])
    assert verdict == "validated" and "; 1/3 replays are no evidence" in reason
    verdict, reason = classify([crashed(), repeat(False, True), repeat(False, True)])
    assert verdict == "refuted" and "; 1/3 replays are no evidence" in reason
    # A replay that never started is no evidence either, and says why.
    never = RepeatResult(repeat=0, branch="b", ran=False, error="the replay could not run: X")
    verdict, reason = classify([never] * 3)
    assert verdict == "inconclusive" and "(the replay could not run: X, x3)" in reason
    # A program refused a call it diverged on before the edit, then failed: the edit was
    # not applied, as before (that is what happened to it).
    diverged = repeat(None, None, applied=False)
    diverged.program_failed, diverged.exit_code, diverged.divergences = True, 1, 1
    assert classify([diverged] * 3)[0] == "not_applied"
    # A program that failed before the edit without diverging failed on its own.
    early = repeat(None, None, applied=False)
    early.program_failed, early.exit_code = True, 2
    assert classify([early] * 3)[0] == "inconclusive"


def test_report_counts_failed_replays_and_never_as_successes() -> None:
    """A row written before failed replays were set apart may rate one a success: the
    report counts it as failed, not as a flip."""
    intervention = Intervention(
        category="modified_instruction", replacement="x", step=1, agent="A", original="y"
    )
    row = DoverRow(
        run_dir="r",
        trace_id="t",
        task="q",
        original_success=False,
        trial=Trial(index=0, start=0, end=2),
        hypothesis=Hypothesis(trial=0, method="m", step=1),
        intervention=intervention,
        repeats=[crashed(True, True), crashed(True, True), repeat(False, True)],
        verdict="validated",
    )
    summary = aggregate([row])
    assert summary.failed_replays == 2 and summary.replays == 3
    assert summary.trial_success_rate == 0.0 and summary.runs_recovered == 0
    assert "2 failed on their own or could not run" in format_summary(summary)


def test_wilson_interval() -> None:
    assert wilson_interval(0, 0) is None
    low, high = wilson_interval(2, 3) or (0, 0)
    assert round(low, 3) == 0.208 and round(high, 3) == 0.939
    low, high = wilson_interval(0, 3) or (1, 1)
    assert low == 0.0 and round(high, 3) == 0.561
    low, high = wilson_interval(10, 10) or (0, 0)
    assert round(low, 3) == 0.722 and high == 1.0


def test_exact_checker_matches_after_normalisation_only() -> None:
    checker = ExactChecker()
    assert checker.check("144,630", "144630").passed is True
    assert checker.check("$144,630", "144630").passed is True
    assert checker.check("The Eiffel Tower.", "eiffel tower").passed is True
    # The old rule took the answer's last number: an answer merely ending with it fails now.
    assert checker.check("It was 3, so 144630", "144630").passed is False
    assert checker.check("144631", "144630").passed is False
    assert checker.check(None, "144630").passed is False
    assert checker.check("144630", None).passed is None


def test_command_checker_protocol(tmp_path: Path) -> None:
    judge = tmp_path / "judge.py"
    judge.write_text(
        "import json, sys\n"
        "data = json.load(sys.stdin)\n"
        "if data['final_answer'] == 'boom':\n"
        "    sys.exit(7)\n"
        "if data['final_answer'] == 'exit':\n"
        "    sys.exit(0 if data['reference'] is None else 1)\n"
        "print('PASS looks right' if 'fixed' in data['final_answer'] else 'fail: not fixed')\n",
        encoding="utf-8",
    )
    checker = make_checker(f"{sys.executable} {judge}")
    assert checker.name.startswith("command:")
    assert checker.check("fixed it", None).passed is True
    result = checker.check("broken", "x")
    assert result.passed is False and result.detail == "fail: not fixed"
    assert checker.check("exit", None).passed is True  # exit status 0, nothing on stdout
    assert checker.check("exit", "ref").passed is False  # exit status 1
    unknown = checker.check("boom", "x")
    assert unknown.passed is None and "exited 7" in unknown.detail
    assert isinstance(make_checker(None), ExactChecker)


def test_milestone_count_gives_partial_half_a_milestone() -> None:
    evaluation = MilestoneEvaluation(
        milestones=[
            MilestoneStatus(order=1, status="achieved"),
            MilestoneStatus(order=2, status="partial"),
            MilestoneStatus(order=3, status="missed"),
            MilestoneStatus(order=9, status="achieved"),
        ]
    )
    assert evaluation.achieved(3) == 1.5


# --- segmentation -----------------------------------------------------------------------


def test_pattern_segmentation_and_trial_spans() -> None:
    seg = segment_by_pattern(LOG, r"^PLAN")
    assert [(t.start, t.end, t.planning_step, t.kind) for t in seg.trials] == [
        (0, 2, 0, "initial"),
        (3, 6, 3, "update"),
    ]
    # Steps before the first plan belong to the first trial; no plan: one trial.
    assert [(t.start, t.end) for t in trials_from([], 4)] == [(0, 3)]
    assert segment_by_pattern(LOG, "nothing like this").status == "no-planning-steps"


def test_llm_segmentation_reads_json_and_records_unreadable_answers() -> None:
    answer = json.dumps(
        {
            "planning_steps": [
                {"step": 3, "type": "update", "criterion": "re-plan"},
                {"step": 0, "type": "initial", "criterion": "plan"},
            ]
        }
    )
    seg = asyncio.run(segment(LOG, LLM(ScriptedBackend([answer])), "llm"))
    assert seg.status == "ok" and [t.start for t in seg.trials] == [0, 3]
    bad = asyncio.run(
        segment(
            LOG,
            LLM(
                ScriptedBackend(
                    [
                        '{"planning_steps": [{"step": 99, "type": "initial", "criterion": "x"}]}',
                        "no json",
                        "still none",
                    ]
                )
            ),
            "llm",
        )
    )
    assert bad.status == "unparsed" and len(bad.trials) == 1
    assert "no valid JSON" in (bad.detail or "")
    magentic = asyncio.run(
        segment(
            make_trace(
                [("O", "We are working to address the following user request: x"), ("W", "ok")]
            ),
            LLM(ScriptedBackend([])),
            "magentic-one",
        )
    )
    assert [t.planning_step for t in magentic.trials] == [0]


# --- hypotheses and interventions -----------------------------------------------------


def test_hypothesis_is_made_on_the_trial_alone_and_mapped_back() -> None:
    trial = Trial(index=1, start=3, end=6, planning_step=3, kind="update")
    sub = trial_trace(LOG, trial)
    assert [s.index for s in sub.steps] == [0, 1, 2, 3] and sub.steps[
        0
    ].content == "PLAN: try again"
    seen: list[str] = []

    def judge(request: Any) -> str:
        seen.append(request.messages[-1]["content"])
        return "Agent Name: Researcher\nStep Number: 2\nReason for Mistake: wrong number"

    hypothesis = asyncio.run(
        hypothesise(
            LOG,
            trial,
            create_method("all-at-once:refined"),
            LLM(FunctionBackend(judge)),
            "all-at-once:refined",
        )
    )
    assert (hypothesis.agent, hypothesis.step, hypothesis.status) == ("Researcher", 5, "ok")
    assert "NOT FOUND" not in seen[0], "the method must see only its trial"


def test_orchestrator_level_target_and_answer_leaks() -> None:
    blame_worker = Hypothesis(trial=1, agent="Researcher", step=5, method="m")
    assert target_step(LOG, blame_worker, "Orchestrator", "orchestrator") == 4
    assert target_step(LOG, blame_worker, "Orchestrator", "hypothesis") == 5
    blame_orchestrator = Hypothesis(trial=1, agent="Orchestrator", step=4, method="m")
    assert target_step(LOG, blame_orchestrator, "Orchestrator", "orchestrator") == 4
    assert leaks("NEXT: Calculator | Compute 8", "8") and not leaks("Compute 18", "8")


# --- the pipeline -----------------------------------------------------------------------


class StubExecutor:
    """Returns a replay in which the program never reached the edited step."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.calls: list[Intervention] = []

    async def run(
        self, intervention: Intervention, branch_id: str, overrides: dict[str, Any]
    ) -> ReplayOutcome:
        self.calls.append(intervention)
        return ReplayOutcome(
            branch_dir=Path(branch_id),
            meta=RunMeta(run_id=branch_id),
            report=ReplayReport(recorded_steps=7, at=intervention.step, edit_applied=False),
            trace=self.trace,
            child=ChildResult(exit_code=3),
        )


def write_run(tmp_path: Path, trace: Trace) -> Path:
    """A minimal run directory whose steps.jsonl reproduces ``trace``'s outputs."""
    from datetime import UTC, datetime

    from faultfinder.replay.recorder import RecordedCall, RunStore, write_meta

    run = tmp_path / "run"
    store = RunStore(run)
    now = datetime.now(UTC)
    for step in trace.steps:
        store.append(
            RecordedCall(
                call=step.index,
                agent=step.agent,
                agent_source="header",
                request={"messages": [{"role": "user", "content": f"call {step.index}"}]},
                request_hash="x",
                response={
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": step.content}}
                    ]
                },
                started_at=now,
                ended_at=now,
            )
        )
    write_meta(
        run,
        RunMeta(run_id="run", task=trace.task, ground_truth=trace.ground_truth, final_answer="7"),
    )
    return run


def test_unapplied_edits_and_unreadable_interventions_are_recorded_not_guessed(
    tmp_path: Path,
) -> None:
    run = write_run(tmp_path, LOG)
    executor = StubExecutor(LOG)

    def scripted(request: Any) -> str:
        prompt = request.messages[-1]["content"]
        if "Agent Name: (Your prediction)" in prompt:
            return "Agent Name: Orchestrator\nStep Number: 1\nReason for Mistake: vague"
        if "Intervention categories:" in prompt:
            return (
                json.dumps(
                    {
                        "category": "modified_instruction",
                        "replacement": "NEXT: Researcher | look for 8",
                        "rationale": "r",
                    }
                )
                if "step 4" in prompt
                else "I would not change anything."
            )
        raise AssertionError(f"unexpected prompt: {prompt[:80]}")

    config = DoverConfig(segment=r"pattern:^PLAN", repeats=2)
    rows = asyncio.run(
        run_dover(
            run,
            LLM(FunctionBackend(scripted)),
            create_method("all-at-once:refined"),
            executor,
            config,
            out=tmp_path / "rows.jsonl",
        )
    )
    first, second = rows
    assert first.status == "no-intervention" and first.intervention is None and not first.repeats
    assert "unreadable intervention" in first.verdict_reason
    assert second.intervention is not None and second.intervention.step == 4
    assert second.intervention.leaks_answer  # '8' is the reference answer
    assert [r.error is not None and r.judge_status == "skipped" for r in second.repeats] == [
        True,
        True,
    ]
    # The edit never reached the program: the intervention was not applied, not refuted.
    assert second.verdict == "not_applied" and second.trial_success_rate is None
    assert [c.step for c in executor.calls] == [4, 4]
    assert [r.status for r in read_rows([tmp_path / "rows.jsonl"])] == ["no-intervention", "ok"]


AVALON = find_task("avalon-2020")
CAMELOT = find_task("camelot")
assert AVALON is not None and CAMELOT is not None


async def team_through_proxy(
    run_dir: Path, upstream: str, task: str, plan: ReplayPlan | None, meta: RunMeta
) -> Trace:
    """Run the demo team in-process through a (recording or replaying) proxy."""
    async with RecordingProxy(ProxyConfig(upstream=upstream), RunStore(run_dir), plan) as proxy:
        os.environ["OPENAI_BASE_URL"] = proxy.base_url
        outcome = await asyncio.to_thread(Team(TeamConfig(verbose=False)).run, task)
    meta.final_answer = outcome.answer or "unknown"
    write_meta(run_dir, meta)
    return rebuild_trace(run_dir)


class InProcessExecutor:
    """Replays the demo team in-process (the Executor protocol; saves a process start)."""

    def __init__(self, run_dir: Path, upstream: str, task: str) -> None:
        self.run_dir, self.upstream, self.task = run_dir, upstream, task
        self.overrides: list[dict[str, Any]] = []

    async def run(
        self, intervention: Intervention, branch_id: str, overrides: dict[str, Any]
    ) -> ReplayOutcome:
        self.overrides.append(overrides)
        options = ReplayOptions(
            at=intervention.step,
            edit=Edit(output=intervention.replacement),
            live_overrides=overrides,
        )
        plan = ReplayPlan(load_calls(self.run_dir), options)
        branch = self.run_dir / "branches" / branch_id
        parent = read_meta(self.run_dir)
        meta = RunMeta(
            run_id=branch_id,
            kind="branch",
            parent=str(self.run_dir),
            ground_truth=parent.ground_truth,
        )
        trace = await team_through_proxy(branch, self.upstream, self.task, plan, meta)
        return ReplayOutcome(
            branch_dir=branch,
            meta=meta,
            report=plan.finish(),
            trace=trace,
            child=ChildResult(exit_code=0),
        )


def test_dover_end_to_end_on_the_demo_team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    debugger = LLM(FunctionBackend(mock_debugger.respond, model="mock-debugger"))
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    with FakeOpenAIServer(reply=mock_model.reply) as upstream:
        # The real thing: recorded and replayed as separate processes.
        recorded = record_demo(
            tmp_path,
            upstream.base_url,
            ground_truth=AVALON.answer,
            reference_steps=AVALON.reference_steps,
        )
        executor = ReplayExecutor(
            recorded.run_dir,
            demo_command("avalon-2020"),
            upstream=upstream.base_url,
            options=SessionOptions(echo=False),
        )
        rows = asyncio.run(
            run_dover(
                recorded.run_dir,
                debugger,
                create_method("all-at-once:refined"),
                executor,
                DoverConfig(repeats=2),
                out=tmp_path / "rows.jsonl",
            )
        )
        [row] = rows
        assert row.segmentation == "llm" and row.n_trials == 1
        assert (row.hypothesis.agent, row.hypothesis.step) == ("Orchestrator", 1)
        assert row.intervention is not None and row.intervention.category == "modified_instruction"
        assert (
            row.intervention.replacement
            == "NEXT: Researcher | Look up the population of Avalon in 2020"
        )
        assert len(row.repeats) == 2 and all(
            r.success and r.fulfilled and r.edit_applied for r in row.repeats
        )
        assert row.verdict == "validated" and row.trial_success_rate == 1.0
        assert row.flip_rate == 1.0 and row.flip_rate_ci is not None
        assert round(row.flip_rate_ci[0], 3) == 0.342 and row.flip_rate_ci[1] == 1.0
        # Repeats are independent samples: forced temperature, distinct seeds, recorded.
        assert [r.seed for r in row.repeats] == [0, 1] and row.independent_repeats is True
        assert all(r.temperatures and set(r.temperatures) == {0.7} for r in row.repeats)
        assert (
            row.milestones_total == 2
            and row.original_milestones == 0.0
            and row.progress_made == 1.0
        )
        assert all(Path(r.branch).is_dir() for r in row.repeats)

        # A task no intervention can fix, replayed in-process to keep the test quick.
        camelot_dir = tmp_path / "camelot"
        asyncio.run(
            team_through_proxy(
                camelot_dir,
                upstream.base_url,
                CAMELOT.text,
                None,
                RunMeta(run_id="camelot", ground_truth=CAMELOT.answer),
            )
        )
        rows += asyncio.run(
            run_dover(
                camelot_dir,
                debugger,
                create_method("all-at-once:refined"),
                InProcessExecutor(camelot_dir, upstream.base_url, CAMELOT.text),
                DoverConfig(repeats=1, segment="pattern:^PLAN"),
                out=tmp_path / "rows.jsonl",
            )
        )
    first, second = rows[1:]
    assert first.n_trials == 2 and first.segmentation == "pattern:^PLAN"
    assert [first.trial.start, second.trial.start] == [0, 4]
    # The debugger finds nothing to change in Camelot's messages: its "intervention" is
    # the original message, which tests nothing (it used to be counted as refuted).
    assert first.intervention is not None
    assert first.intervention.replacement == first.intervention.original
    assert first.verdict == second.verdict == "not_applied" and first.repeats == []
    assert first.progress_made is None and first.flip_rate is None
    summary = aggregate(read_rows([tmp_path / "rows.jsonl"]))
    assert summary.runs == 2 and summary.intervened_trials == 3 and summary.replays == 2
    assert summary.trial_success_rate == 1.0 and summary.runs_recovered == 1
    assert summary.verdicts == {
        "validated": 1,
        "partially_validated": 0,
        "refuted": 0,
        "inconclusive": 0,
        "not_applied": 2,
        "unverifiable": 0,
    }
    assert "trial success rate:  100.0% (95% CI 34.2%-100.0%)" in format_summary(summary)
    assert isinstance(rows[0], DoverRow)


def test_dover_skips_a_run_that_already_succeeded_and_cannot_verify_without_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    debugger = LLM(FunctionBackend(mock_debugger.respond, model="mock-debugger"))
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    round_trip = find_task("round-trip")
    assert round_trip is not None and AVALON is not None
    with FakeOpenAIServer(reply=mock_model.reply) as upstream:
        done = tmp_path / "done"
        meta = RunMeta(run_id="done", ground_truth=round_trip.answer)
        asyncio.run(team_through_proxy(done, upstream.base_url, round_trip.text, None, meta))
        executor = InProcessExecutor(done, upstream.base_url, round_trip.text)
        [row] = asyncio.run(
            run_dover(
                done,
                debugger,
                create_method("all-at-once:refined"),
                executor,
                DoverConfig(segment="pattern:^PLAN"),
            )
        )
        assert row.status == "already-succeeded" and row.verdict is None
        assert row.original_success is True and executor.overrides == []

        # The same fixable failure as above, but recorded without a reference answer and
        # judged by nobody: the fix cannot be seen, so the verdict is unverifiable.
        blind = tmp_path / "blind"
        meta = RunMeta(run_id="blind")
        asyncio.run(team_through_proxy(blind, upstream.base_url, AVALON.text, None, meta))
        executor = InProcessExecutor(blind, upstream.base_url, AVALON.text)
        [row] = asyncio.run(
            run_dover(
                blind,
                debugger,
                create_method("all-at-once:refined"),
                executor,
                DoverConfig(segment="none", repeats=3, live_temperature=None, seed=None),
            )
        )
        assert row.verdict == "unverifiable" and row.trial_success_rate is None
        assert all(r.edit_applied and r.success is None for r in row.repeats)
        assert executor.overrides == [{}, {}, {}]
        # Program temperature 0 and no seeds: the row says the repeats were not independent.
        assert row.independent_repeats is False and "not independent" in row.verdict_reason

        # A user-given checker judges the same replays without a reference.
        judge = tmp_path / "judge.py"
        judge.write_text(
            "import json, sys\n"
            "answer = json.load(sys.stdin)['final_answer'] or ''\n"
            "sys.exit(0 if answer.replace(',', '') == '144630' else 1)\n",
            encoding="utf-8",
        )
        [row] = asyncio.run(
            run_dover(
                blind,
                debugger,
                create_method("all-at-once:refined"),
                executor,
                DoverConfig(segment="none", repeats=3),
                checker=make_checker(f"{sys.executable} {judge}"),
            )
        )
        assert row.verdict == "validated" and row.original_success is False
        assert row.checker.startswith("command:") and row.flip_rate == 1.0
