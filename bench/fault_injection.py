"""Labelled failures with no API: faults injected into successful runs and replayed forward.

Each base program is run once, recorded through faultfinder's proxy against the scripted
demo model on a loopback server (``faultfinder.demo_team.mock_model``: it follows
instructions faithfully, so an injected fault propagates the way a real one would). Every
successful base run is then replayed by the replay engine (``faultfinder.replay``,
``replay_run``) with **one** step edited — the fault — and the program runs on live from
there, so the visible symptom (a wrong final answer, a give-up) appears later. A branch
whose final answer is still right is dropped; every other one is a labelled trace whose
decisive step is the injected step (its agent the step's agent).

Faults (each where the base run has a step of that kind; the variant drawn with the seed):

* ``corrupted-number``: a worker's report with its number changed;
* ``wrong-tool-result``: the fact book's (or calculator's) result for a tool call changed;
* ``wrong-handoff``: the Orchestrator hands the instruction to the other worker;
* ``dropped-instruction``: one line of the Orchestrator's plan dropped;
* ``premature-stop``: the Orchestrator answers FINAL before the work is done;
* ``ignored-error``: a tool call fails (its result an error message) and the run goes on.

Base programs (``--program``):

* ``demo-team`` (default): the demo team (``python -m faultfinder.demo_team``) on the demo
  task that succeeds as scripted and on one-lookup tasks over each fact of its fact book;
* ``langgraph``: the LangGraph supervisor program of the framework tests
  (tests/fixtures/frameworks/langgraph_team.py, unmodified, LangGraph and
  langgraph-supervisor from the ``frameworks`` extra) on six population tasks, every agent
  played faithfully by a scripted model (``bench/_fault_langgraph.py``, with its own
  fault kinds: a wrong lookup argument instead of a dropped plan line).
* ``agents-sdk``: the OpenAI Agents SDK program at its default settings
  (tests/fixtures/frameworks/agents_sdk_default.py, unmodified: Responses API, a Triage
  agent handing off to a Researcher with a lookup tool) on eleven tasks of one, two or
  four lookups, played faithfully by a scripted model (``bench/_fault_agents_sdk.py``; no
  wrong handoff, as Triage has one agent to hand off to).
* ``crewai``: the CrewAI crew of the framework tests
  (tests/fixtures/frameworks/crewai_team.py, unmodified, in the tests' cached CrewAI
  environment: a Researcher with a lookup tool, then a Writer, run sequentially) on nine
  tasks of one, two or four lookups, both agents played faithfully by a scripted model
  (``bench/_fault_crewai.py``; no wrong handoff, as a sequential crew has none, and a
  wrong lookup argument instead of a dropped plan line).
* ``ag2``: the AG2 GroupChat of the framework tests
  (tests/fixtures/frameworks/ag2_groupchat.py, unmodified, in the tests' cached AG2 0.14
  environment: a Planner, a Researcher with a lookup tool and a Writer, the next speaker
  chosen by the model) on eleven tasks of one, two or four lookups, every agent and the
  speaker selection played faithfully by a scripted model (``bench/_fault_ag2.py``, with
  a wrong speaker for a wrong handoff; speaker selections named ``chat_manager``).
* ``swe-team``: a software team on LangGraph
  (tests/fixtures/frameworks/langgraph_swe_team.py, unmodified, from the ``frameworks``
  extra: a Supervisor routes a ticket through a ProductManager, an Architect, an Engineer
  with a ``write_code`` tool, QA with a ``run_tests`` tool and a Reviewer with an
  ``evaluate`` tool) on eighteen tickets of one to four functions, runs of 15 to 33
  steps, every agent played faithfully by a scripted model (``bench/_fault_swe_team.py``,
  at most three sites of each fault kind per run, drawn with the seed).
* ``support-desk``: a billing support desk on the OpenAI Agents SDK at its default
  settings (tests/fixtures/frameworks/agents_sdk_support_desk.py, unmodified: Responses
  API, a Triage agent that writes a case plan and hands the case off to Accounts with
  ``get_account`` / ``get_invoice``, Policy with ``lookup_policy`` and Refunds with
  ``compute_refund`` / ``apply_cap``, each handing it back) on eighteen refund cases of
  one to eight invoices, runs of 13 to 29 steps, every agent played faithfully by a
  scripted model (``bench/_fault_support_desk.py``, at most three sites of each fault kind
  per run, drawn with the seed).
* ``warehouse``: a warehouse replenishment team on LangGraph itself
  (tests/fixtures/frameworks/langgraph_warehouse.py, unmodified: a ``StateGraph`` wired
  by hand, a Coordinator routing by its own 'NEXT: <agent>' answer to a Planner, Inventory
  with ``check_stock``, a Forecaster with ``forecast_demand``, Purchasing with
  ``compute_order`` and a Reviewer with ``price_order``) on eighteen replenishment
  requests of one to seven items, runs of 15 to 33 steps, every agent played faithfully
  by a scripted model (``bench/_fault_warehouse.py``, at most three sites of each fault
  kind per run, drawn with the seed; its premature stop is a worker reporting before its
  work is done, so the wrong total comes later).
* ``expense-desk``: an expense-audit desk on the OpenAI Agents SDK at its default
  settings with agents as tools (tests/fixtures/frameworks/agents_sdk_expense_desk.py,
  unmodified: Responses API, a Manager that never hands off but calls four desks, each an
  ``Agent.as_tool`` running its own agent — Receipts with ``get_receipt``, Policy with
  ``lookup_limit``, Currency with ``convert`` and Audit with ``cap_receipt`` — giving
  each a numbered list and answering the audited total) on twenty expense claims of one
  to seven receipts, runs of 13 to 32 steps, the desks' own model calls steps under
  their own names, every agent played faithfully by a scripted model
  (``bench/_fault_expense_desk.py``, at most three sites of each fault kind per run,
  drawn with the seed; a wrong handoff is the Manager calling the wrong desk, a dropped
  instruction a line dropped from its list for a desk, a premature stop a desk reporting
  before its work is done). Held back unranked: no ranker or scorer has seen these
  traces, so they are the blind test of the next ranker change.

    python bench/fault_injection.py [--program NAME|all] [--out DIR] [--seed N]

Traces go to ``.faultfinder/generated/<program>/`` (git-ignored) as canonical JSON, with
``source.subset`` = ``generated:<program>``; ``python bench/transfer.py --also DIR ...``
adds each as a source to leave out. A program held back as a blind test (:data:`BLIND`)
goes to ``.faultfinder/blind/<program>/`` instead, out of reach of the benches' usual
``.faultfinder/generated/*``, so that no table ranks it by accident before the rule it
was generated for; once that rule has read it, it moves to ``generated``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _fault_ag2
import _fault_agents_sdk
import _fault_crewai
import _fault_expense_desk
import _fault_langgraph
import _fault_support_desk
import _fault_swe_team
import _fault_warehouse
from _fault_common import Injector, by_kind

from faultfinder.demo_team import TASKS, mock_model
from faultfinder.demo_team.tools import FACTS
from faultfinder.replay import Edit, ReplayOptions, SessionOptions, record_run, replay_run
from faultfinder.replay.edits import ToolResultChange
from faultfinder.testing import FakeOpenAIServer
from faultfinder.traces.io import write_trace
from faultfinder.traces.schema import GoldLabel, Trace

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ROOT / ".faultfinder" / "generated"
BLIND_DIR = ROOT / ".faultfinder" / "blind"
BLIND = frozenset({"expense-desk"})
"""Programs held back unranked as the blind test of the next change (``bench/_experts.py``
names the rule that may first rank the expense desk)."""
DEFAULT_OUT = GENERATED / "demo-team"
SOURCE = "generated:demo-team"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


@dataclass(frozen=True)
class Base:
    """A base program run: its id, the task text and the right answer."""

    id: str
    task: str
    answer: str


def bases() -> list[Base]:
    """The demo task that succeeds as scripted, and one lookup task per fact."""
    out = [Base(t.id, t.text, t.answer) for t in TASKS if t.mock_flaw is None]
    for n, (key, value) in enumerate(FACTS.items()):
        out.append(Base(f"fact-{n}", f"What is the {key}?", value))
    return out


def corrupt(number: str, rng: random.Random) -> str:
    """A plausible wrong number: off by a small factor or a digit."""
    value = float(number)
    wrong = value * rng.choice([0.5, 0.9, 1.1, 2, 3]) + rng.choice([0, 1, -1, 10])
    text = f"{wrong:.0f}" if float(wrong).is_integer() or "." not in number else f"{wrong:.2f}"
    return text if text != number else str(int(value) + 7)


def corrupted_number(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
    out = []
    for s in trace.steps:
        if s.agent != "Orchestrator" and not s.tool_calls and _NUMBER.search(s.content):
            numbers = _NUMBER.findall(s.content)
            last = numbers[-1]
            head, _, tail = s.content.rpartition(last)
            out.append((s.index, Edit(output=head + corrupt(last, rng) + tail)))
    return out


def wrong_tool_result(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
    out = []
    for s in trace.steps:
        for r in s.tool_results[:1]:
            numbers = _NUMBER.findall(r.content)
            if numbers:
                head, _, tail = r.content.rpartition(numbers[-1])
                wrong = head + corrupt(numbers[-1], rng) + tail
                out.append((s.index, Edit(tool_result=ToolResultChange(content=wrong))))
    return out


def wrong_handoff(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
    out = []
    for s in trace.steps:
        found = re.match(r"NEXT: (Researcher|Calculator) \| (.+)", s.content, re.S)
        if s.agent == "Orchestrator" and found:
            other = "Calculator" if found.group(1) == "Researcher" else "Researcher"
            out.append((s.index, Edit(output=f"NEXT: {other} | {found.group(2)}")))
    return out


def dropped_instruction(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
    out = []
    for s in trace.steps:
        if s.agent == "Orchestrator" and s.content.startswith("PLAN:"):
            lines = s.content.splitlines()
            plan = [n for n, line in enumerate(lines) if re.match(r"\s*\d+\.", line)]
            if plan:
                drop = rng.choice(plan)
                kept = [line for n, line in enumerate(lines) if n != drop]
                out.append((s.index, Edit(output="\n".join(kept))))
    return out


def premature_stop(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
    out = []
    seen: list[str] = []
    for s in trace.steps:
        if s.agent == "Orchestrator" and s.content.startswith("NEXT:"):
            guess = seen[-1] if seen else str(rng.randint(2, 999))
            out.append((s.index, Edit(output=f"FINAL: {guess}")))
        seen += _NUMBER.findall(s.content)
    return out


def ignored_error(trace: Trace, rng: random.Random) -> list[tuple[int, Edit]]:
    message = rng.choice(
        [
            "Error: the service timed out",
            "Traceback (most recent call last):\n  ValueError: bad input",
            "error: connection refused",
        ]
    )
    return [
        (s.index, Edit(tool_result=ToolResultChange(content=message)))
        for s in trace.steps
        if s.tool_calls
    ]


FAULTS: dict[str, Injector] = by_kind(
    corrupted_number,
    wrong_tool_result,
    wrong_handoff,
    dropped_instruction,
    premature_stop,
    ignored_error,
)


def final_answer(trace: Trace) -> str | None:
    for s in reversed(trace.steps):
        found = re.search(r"FINAL:\s*(.+)", s.content)
        if found:
            return found.group(1).strip()
    return None


def is_right(answer: str | None, truth: str) -> bool:
    if answer is None:
        return False
    numbers = _NUMBER.findall(answer.replace(",", ""))
    return bool(numbers) and abs(float(numbers[-1]) - float(truth)) < 1e-6


@dataclass(frozen=True)
class Program:
    """A base program: its runs, the scripted model that plays it and its fault kinds."""

    name: str
    bases: Callable[[], list[Base]]
    command: Callable[[Base], list[str]]
    reply: Callable[[dict[str, Any]], Any]
    """The scripted upstream model (a request body in, a reply out)."""
    faults: dict[str, Injector]
    final_answer: Callable[[Trace], str | None]
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment variables for the program (a framework's telemetry switches)."""
    agents: Callable[[Trace], Trace] | None = None
    """Names the agents of a recorded trace where the proxy's names are not the program's
    (AG2's speaker selections); None: the proxy's names stand."""

    @property
    def source(self) -> str:
        return f"generated:{self.name}"


PROGRAMS: dict[str, Program] = {
    "demo-team": Program(
        "demo-team",
        bases,
        lambda base: [sys.executable, "-m", "faultfinder.demo_team", "--quiet", base.task],
        mock_model.reply,
        FAULTS,
        final_answer,
    ),
    "langgraph": Program(
        "langgraph",
        lambda: [Base(*t) for t in _fault_langgraph.tasks()],
        lambda base: _fault_langgraph.command(base.task),
        _fault_langgraph.faithful,
        _fault_langgraph.injectors(corrupt),
        _fault_langgraph.final_answer,
    ),
    "agents-sdk": Program(
        "agents-sdk",
        lambda: [Base(*t) for t in _fault_agents_sdk.tasks()],
        lambda base: _fault_agents_sdk.command(base.task),
        _fault_agents_sdk.faithful,
        _fault_agents_sdk.injectors(corrupt),
        _fault_agents_sdk.final_answer,
        _fault_agents_sdk.ENV,
    ),
    "crewai": Program(
        "crewai",
        lambda: [Base(*t) for t in _fault_crewai.tasks()],
        lambda base: _fault_crewai.command(base.task),
        _fault_crewai.faithful,
        _fault_crewai.injectors(corrupt),
        _fault_crewai.final_answer,
        _fault_crewai.ENV,
    ),
    "ag2": Program(
        "ag2",
        lambda: [Base(*t) for t in _fault_ag2.tasks()],
        lambda base: _fault_ag2.command(base.task),
        _fault_ag2.faithful,
        _fault_ag2.injectors(corrupt),
        _fault_ag2.final_answer,
        _fault_ag2.ENV,
        _fault_ag2.name_agents,
    ),
    "swe-team": Program(
        "swe-team",
        lambda: [Base(*t) for t in _fault_swe_team.tasks()],
        lambda base: _fault_swe_team.command(base.task),
        _fault_swe_team.faithful,
        _fault_swe_team.injectors(corrupt),
        _fault_swe_team.final_answer,
    ),
    "support-desk": Program(
        "support-desk",
        lambda: [Base(*t) for t in _fault_support_desk.tasks()],
        lambda base: _fault_support_desk.command(base.task),
        _fault_support_desk.faithful,
        _fault_support_desk.injectors(corrupt),
        _fault_support_desk.final_answer,
        _fault_support_desk.ENV,
    ),
    "warehouse": Program(
        "warehouse",
        lambda: [Base(*t) for t in _fault_warehouse.tasks()],
        lambda base: _fault_warehouse.command(base.task),
        _fault_warehouse.faithful,
        _fault_warehouse.injectors(corrupt),
        _fault_warehouse.final_answer,
    ),
    "expense-desk": Program(
        "expense-desk",
        lambda: [Base(*t) for t in _fault_expense_desk.tasks()],
        lambda base: _fault_expense_desk.command(base.task),
        _fault_expense_desk.faithful,
        _fault_expense_desk.injectors(corrupt),
        _fault_expense_desk.final_answer,
        _fault_expense_desk.ENV,
    ),
}


def labelled(
    branch: Trace, base: Base, fault: str, step: int, seed: int, source_name: str = SOURCE
) -> Trace:
    agent = branch.steps[step].agent
    source = branch.source.model_copy(update={"subset": source_name})
    label = GoldLabel(agent=agent, step=step, reason=f"injected fault: {fault}")
    metadata = {**branch.metadata, "fault": fault, "injected_step": step, "seed": seed}
    return branch.model_copy(
        update={
            # Programs share task names: the program keeps ids unique across sources.
            "id": f"{source_name.removeprefix('generated:')}-{base.id}-{fault}-{step}",
            "task": base.task,
            "label": label,
            "source": source,
            "metadata": metadata,
        }
    )


async def generate(
    out: Path,
    seed: int,
    only: Sequence[str] | None = None,
    faults: Sequence[str] | None = None,
    program: str = "demo-team",
) -> Counter[str]:
    """Write the labelled traces of ``program`` into ``out``; counts of what was kept and
    dropped. ``only`` / ``faults`` restrict the base runs (by id) and the fault kinds."""
    prog = PROGRAMS[program]
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    quiet = SessionOptions(echo=False, timeout=120, env=prog.env)
    out.mkdir(parents=True, exist_ok=True)
    with FakeOpenAIServer(reply=prog.reply) as upstream, tempfile.TemporaryDirectory() as tmp:
        for base in prog.bases():
            if only is not None and base.id not in only:
                continue
            command = prog.command(base)
            recorded = await record_run(
                command, upstream.base_url, Path(tmp), run_id=base.id, options=quiet
            )
            base_trace = prog.agents(recorded.trace) if prog.agents else recorded.trace
            if not is_right(prog.final_answer(base_trace), base.answer):
                counts["base runs that fail (skipped)"] += 1
                continue
            counts["successful base runs"] += 1
            for fault, inject in prog.faults.items():
                if faults is not None and fault not in faults:
                    continue
                for step, edit in inject(base_trace, rng):
                    replay = ReplayOptions(at=step, edit=edit, on_divergence="live")
                    try:
                        branch = await replay_run(
                            recorded.run_dir,
                            command,
                            replay,
                            upstream=upstream.base_url,
                            branch_id=f"{fault}-{step}",
                            options=quiet,
                        )
                    except Exception as exc:  # a replay that cannot run is reported, not kept
                        counts[f"replay errors ({type(exc).__name__})"] += 1
                        continue
                    trace = prog.agents(branch.trace) if prog.agents else branch.trace
                    answer = prog.final_answer(trace)
                    if len(trace.steps) <= step or is_right(answer, base.answer):
                        counts[f"{fault}: recovered (dropped)"] += 1
                        continue
                    trace = labelled(trace, base, fault, step, seed, prog.source)
                    write_trace(trace, out / f"{trace.id}.json")
                    counts[fault] += 1
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--program",
        choices=[*sorted(PROGRAMS), "all"],
        default="demo-team",
        help="a base program, or 'all' (each in turn, into its own directory)",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="default: .faultfinder/generated/<program>"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", nargs="*", default=None, help="base run ids (default: all)")
    parser.add_argument("--faults", nargs="*", default=None, help="fault kinds (default: all)")
    args = parser.parse_args()
    programs = sorted(PROGRAMS) if args.program == "all" else [args.program]
    if len(programs) > 1 and (args.out or args.only or args.faults):
        parser.error("--out, --only and --faults name one program's runs: use them without 'all'")
    status = 0
    for program in programs:
        kinds = PROGRAMS[program].faults
        unknown = sorted(set(args.faults or []) - set(kinds))
        if unknown:
            parser.error(f"{program} has no fault kind {unknown}; it has {sorted(kinds)}")
        out = args.out or (BLIND_DIR if program in BLIND else GENERATED) / program
        started = time.perf_counter()
        counts = asyncio.run(generate(out, args.seed, args.only, args.faults, program))
        print(f"== {program}")
        for key, value in sorted(counts.items()):
            print(f"{key}: {value}")
        kept = sum(v for k, v in counts.items() if k in kinds)
        print(f"{kept} labelled traces in {out} ({time.perf_counter() - started:.0f} s)")
        status = status or (0 if kept else 1)
    return status


if __name__ == "__main__":
    sys.exit(main())
